//! The decision protocol: what state a policy keeps (`state`) and where it
//! lives (`keys`), the Lua program Redis runs (`scripts`), what a call of
//! it sends and its reply holds (`wire`), and how decisions share calls
//! (`batch`). It sends its calls through the connection layer
//! (`crate::connection`), which never reads a decision.
//!
//! # The route of an exact decision
//!
//! The functions an acquire crosses on the common path (one server, the
//! Lua library, Redis `TIME`, a connected backend, no call of the limiter
//! in flight, one policy), in order, and why each is a step of its own;
//! every other case leaves the route where it is decided:
//!
//! 1. `RedisLimiter::acquire` and `decide` (`limiter.rs`): the decider of
//!    the policies in force (`PolicyHistory::in_force`, so a request is
//!    decided wholly under the policies in force when it began), the
//!    request checked by limiter-core's `check_policies` before anything
//!    is sent, and a `wire::Request` built.
//! 2. `Decider::decide` (`batch.rs`): the request's lane (`lane`, under
//!    `lock`); with a call of the lane in flight it waits for the next
//!    batch, else a task of its own sends it (`RedisBackend::runtime`,
//!    `Runtime::spawn`), so a caller that gives up holds up no one.
//! 3. `Turn::serve`, `call_alone`, `call_declared`: the call task decides
//!    the first request alone, then the lane's waiting batches.
//!    `call_declared` is where a server that lost the module is left for
//!    the library.
//! 4. `LuaFunction::decide` (`scripts.rs`) picks the target (the library's
//!    function, or the module's command, `module`) and `wire::call`
//!    (`wire.rs`) writes the `FCALL`: each part's state key and the
//!    record's (`KeyLayout::len`, `arg`, written into the command by
//!    `StateKey::write_redis_args`, no `String` per key) and the packed
//!    arguments (`Request::arguments`), sized up front.
//! 5. `RedisBackend::query_here` and `attempt` (`connection/backend/
//!    query.rs`): the command's deadline, the circuit (`Circuit::is_open`),
//!    a connection (`Shared::pick`, `ConnectionSlot::live`), then
//!    `Connection::send` (`connection_slot.rs`), on the server's
//!    multiplexed connection. Each failure is classified there; a lost connection or a
//!    missing library goes on in `finish`, within the deadline.
//! 6. On the server, the library's function (`scripts/generated/`):
//!    `decide` reads every key in one `MGET` (`start`) and, per request,
//!    its arguments and the server's `TIME` (`begin`); a record of other
//!    policies beside the state takes it over first (`take_over`,
//!    `policy_change.lua`, section 9 of docs/spec.md); the algorithm's
//!    function decides (`token_bucket.lua` and the others, `ttl_ms`), an
//!    admission writes (`save`: in place while the key's deadline covers
//!    its TTL, else `SET … PX` and the record's TTL, `note_record`); the
//!    reply is packed and a repeated key's writes go once (`flush`). With
//!    the module, `LIMITER.DECIDE` (limiter-redis-module) decides with
//!    limiter-core's own states, the same keys, arguments and reply.
//! 7. Back in the call task, `Decider::answers` splits the reply
//!    (`wire::split_reply`) and `read` converts each record
//!    (`wire::holds_another_type`, `wire::read_reply`, with limiter-core's
//!    `TickDecision::into_decision`, the one place ticks become µs).
//!    `Turn::serve` answers the caller on its channel, then takes the
//!    lane's next batch (`Turn::next`, `Decider::next`, `take`) and, none
//!    waiting, gives the lane up.
//! 8. The caller's `Decider::decide` wakes with its `Decision`, which
//!    `RedisLimiter::decide` returns (an error becomes limiter-core's
//!    `Error` by `From<BackendError>`, `error.rs`).
//!
//! On a cluster, step 2 finds the lane by the key's slot
//! (`KeyLayout::slot`) or its node, a waiting batch of several slots goes
//! as one call across them (`Decider::answer`, `call`,
//! `Keys::AcrossSlots`), and step 5's `Connection::send` routes the call
//! by slot (`connection/cluster/`).

pub(crate) mod batch;
pub(crate) mod keys;
pub(crate) mod scripts;
pub(crate) mod state;
pub(crate) mod wire;
