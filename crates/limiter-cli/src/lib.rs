//! The `limiter` command: `limiter replay` prints every decision of one
//! policy (or a tiered set) on a trace (docs/spec.md section 6), `limiter compare` runs every
//! algorithm on built-in scenarios or a trace and tabulates, plots or
//! exports what each admitted, `limiter bench` measures a deployment's
//! decisions per second and latency beside its Redis server's ceiling.
//!
//! The binary is a thin wrapper over [`run`]: the library exports what a
//! user runs, the parsed command line ([`cli::Cli`]) and [`run`].

mod backend;
mod bench;
pub mod cli;
mod compare;
mod epoch;
mod failure;
mod input;
mod json_string;
mod policy_change;
mod progress;
mod replay;
mod step_back;

pub use self::failure::Failure;

use self::cli::{Cli, Command};

/// Runs a parsed command line to completion on a single-threaded runtime
/// (every request is decided in order, one after the other); `bench` on a
/// multi-threaded one (its tasks run on every core, as a service's would).
pub fn run(cli: Cli) -> Result<(), Failure> {
    let mut runtime = match cli.command {
        Command::Bench(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = runtime
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime("cannot start the async runtime").with_source(e))?;
    runtime.block_on(async {
        match cli.command {
            Command::Replay(args) => replay::run(&args).await,
            Command::Compare(args) => compare::run(&args).await,
            Command::Bench(args) => bench::run(&args).await,
        }
    })
}
