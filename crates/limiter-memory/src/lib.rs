//! The in-process backend of limiter: a keyed [`MemoryLimiter`] on
//! [`dashmap`], deciding every request with `limiter-core`'s exact
//! algorithms, so it gives the same decisions as the Redis backend for the
//! same policy and the same request times.
//!
//! ```
//! use limiter_core::{Policy, Rate};
//! use limiter_memory::MemoryLimiter;
//!
//! let sms = MemoryLimiter::new(Policy::sliding_log(Rate::per_minute(10))?);
//! let decision = sms.try_acquire(b"sms:+8613800000000", 1)?;
//! assert!(decision.allowed && decision.remaining == 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! It implements [`Limiter`](limiter_core::Limiter), so application code
//! can hold an `Arc<dyn Limiter>` and be given this backend in tests (with a
//! [`ManualClock`](limiter_core::ManualClock)) and Redis in production. The
//! synchronous [`MemoryLimiter::try_acquire`] and [`MemoryLimiter::try_peek`]
//! are the same decisions without a future.
//!
//! # Exactness under contention
//!
//! A key's state is read, decided and written under its DashMap shard's
//! write lock, so concurrent requests on one key are serialised: eight
//! threads racing for a limit of 1,000 admit exactly 1,000. Each request is
//! stamped by one clock read before it takes the lock; a request stamped
//! before the key's last admission is decided at that admission's time
//! (docs/spec.md rule 2.3).
//!
//! # Changing the policies while serving
//!
//! [`MemoryLimiter::set_policies`] puts other policies in force (another
//! plan, an edited limit) without a fresh budget for every key: each key
//! keeps what it used, by the core's rule (docs/spec.md section 9), taken
//! over at its first request under the new policies. Every request is
//! decided entirely under the policies in force when it began: it holds a
//! read lock of its thread's (one of sixteen, each on its own cache line)
//! for its whole decision, and a change takes them all for writing.
//!
//! # Memory
//!
//! A key's state tells when it will be back to its initial state (its last
//! admission's `time_us + reset_after`). Once the limiter's clock has
//! passed that time plus the [eviction delay](MemoryLimiterBuilder::eviction_delay) (1 s by
//! default), the key may be dropped: a dropped key and a kept one decide
//! every later request identically while time moves forward (docs/spec.md rule 2.5).
//! Sweeps are amortised over requests on keys not held: after as many new
//! keys as are held (at least 1,024), one pass drops the expired keys,
//! skipped outright while no key can have expired yet (a lower bound of
//! every key's eviction time). So the map holds at most the keys active
//! within their reset time plus the delay, plus as many again (at least
//! 1,024), however many distinct keys arrive; a sliding log keeps at most `L`
//! entries per key. [`MemoryLimiterBuilder::max_keys`] caps the count
//! outright; a live key is never evicted to make room, a new key is refused
//! with [`KeyLimitReached`] instead.
//!
//! If the clock is set back after a key was dropped, to before that key's
//! reset time, the dropped key decides as new where the kept one would
//! have decided at its last admission's time: the same is true of Redis
//! keys whose TTL ran out. The eviction delay absorbs steps back shorter
//! than itself.
//!
//! Each map is typed by the policy's algorithm, so a key stores only its
//! algorithm's state, and no more (when a key may be dropped is read from
//! its state): an entry is 40 bytes (fixed window, token and leaky
//! bucket, and a sliding counter whose limit fits in 32 bits; 48 for a
//! larger one) or 64 (sliding log), the key included:
//! a key of up to 22 bytes is stored in the entry, with no allocation, a
//! longer one on the heap. The resident memory this makes per key, as
//! measured, is in `docs/benchmarks.md` ("Memory per key").
//!
//! # What clients' keys can cost
//!
//! A key longer than [`max_key_bytes`](MemoryLimiterBuilder::max_key_bytes)
//! (256 bytes by default) is stored as its SHA-256 digest, so one key
//! costs at most [`MemoryLimiter::max_bytes_per_key`] however long a
//! client makes it (the key's bytes, its state, a sliding log's at most
//! `min(L, window ticks)` entries, its share of the table), and decisions
//! are the keys' own. With [`max_keys`](MemoryLimiterBuilder::max_keys),
//! the limiter holds at most [`MemoryLimiter::max_bytes`], `max_keys ×
//! max_bytes_per_key`, whatever keys clients choose: set a cap whenever
//! they choose the keys (an API key header, IPv6 addresses without a
//! prefix).

mod builder;
mod compact_counter;
mod generations;
mod key_cap;
mod key_space;
mod limiter;
mod map;
mod memory_bound;
mod store;
mod sweep;

pub use self::{builder::MemoryLimiterBuilder, limiter::MemoryLimiter};
/// The default clock, defined in limiter-core and shared by every in-process store.
pub use limiter_core::AnchoredClock;
/// The error of a new key refused at [`max_keys`](MemoryLimiterBuilder::max_keys).
pub use limiter_core::KeyLimitReached;
