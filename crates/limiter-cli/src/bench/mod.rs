//! `limiter bench`: how many decisions per second a deployment gives, at
//! what latency, beside what the same Redis server gives a trivial script
//! in the same run (the ceiling).
//!
//! `N` tokio tasks on a multi-threaded runtime decide in a loop until the
//! deadline, one unit at a time, spreading their requests over `K` keys.
//! Every call's latency goes into a per-task log-bucketed `Histogram`
//! (bounded memory, percentiles within 1.6 %), merged at the end. On Redis
//! the same `N` tasks also run for the same duration through the client the
//! limiter's calls use (a shared multiplexed redis-rs connection; on a
//! cluster, the backend's own routing), each call an `EVALSHA` of
//! `return 1` on a key of the same slot as a decision's: the most this
//! client and server can do per call, against which the limiter's figure
//! is a ratio. The two alternate in five slices each,
//! so that a change in the machine's load weighs on both alike.
//!
//! On one Redis server the run also reads the server's own CPU over the
//! limiter's slices (`INFO cpu`): the server CPU per decision, what a fleet
//! pays in Redis cores.
//!
//! `args` holds the flags, `run` the whole run, `phase` one phase's tasks
//! and their tally (latencies in a `histogram`), `ceiling` the Redis
//! ceiling's calls, `lease` what `--lease` adds, `server_stats` what the
//! server reports, and `report` the table or JSON printed.

mod args;
mod ceiling;
mod histogram;
mod lease;
mod phase;
mod report;
mod run;
mod server_stats;

pub use self::args::BenchArgs;
pub(crate) use self::args::AFTER_HELP;
pub(crate) use self::run::run;
