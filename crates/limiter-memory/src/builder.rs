//! Building a [`MemoryLimiter`]: [`MemoryLimiter::new`] and
//! [`MemoryLimiter::builder`], and the [`MemoryLimiterBuilder`]'s knobs
//! and their defaults.

use std::time::Duration;

use limiter_core::{Clock, Policies};

use crate::limiter::MemoryLimiter;
use crate::store::Store;
use limiter_core::backend::ClockSource;
use limiter_core::AnchoredClock;

impl MemoryLimiter {
    /// A limiter for `policies` (a [`Policy`](limiter_core::Policy), or a
    /// tiered set of [`Policies`]) on the [`AnchoredClock`], with no cap
    /// on keys and the default eviction delay (see
    /// [`MemoryLimiterBuilder`]).
    pub fn new(policies: impl Into<Policies>) -> Self {
        Self::builder(policies).build()
    }

    /// A builder for a limiter of `policies` (a
    /// [`Policy`](limiter_core::Policy), or a tiered set of [`Policies`]),
    /// to set the clock, a cap on keys or the eviction delay.
    pub fn builder(policies: impl Into<Policies>) -> MemoryLimiterBuilder {
        MemoryLimiterBuilder::new(policies.into())
    }
}

/// Builds a [`MemoryLimiter`]; every option has a default, so
/// `MemoryLimiter::builder(policy).build()` equals `MemoryLimiter::new(policy)`.
///
/// ```
/// use std::time::Duration;
/// use limiter_core::{ManualClock, Policy, Rate};
/// use limiter_memory::MemoryLimiter;
///
/// let clock = ManualClock::new(0);
/// let limiter = MemoryLimiter::builder(Policy::sliding_log(Rate::per_minute(10))?)
///     .clock(clock.clone())
///     .max_keys(100_000)
///     .eviction_delay(Duration::ZERO)
///     .build();
/// assert!(limiter.try_acquire(b"sms:+8613800000000", 1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct MemoryLimiterBuilder {
    policies: Policies,
    clock: ClockSource,
    max_keys: Option<usize>,
    max_key_bytes: usize,
    eviction_delay_us: u64,
}

impl MemoryLimiterBuilder {
    /// How long past its reset a key's state is kept before it may be
    /// evicted, unless [`eviction_delay`](Self::eviction_delay) says
    /// otherwise: one second.
    pub const DEFAULT_EVICTION_DELAY: Duration = Duration::from_secs(1);

    /// The longest key stored as it is unless
    /// [`max_key_bytes`](Self::max_key_bytes) says otherwise: 256 bytes (an
    /// IPv6 key, a UUID, a JWT's subject, most API keys and session ids
    /// fit). A longer key is stored as its SHA-256.
    pub const DEFAULT_MAX_KEY_BYTES: usize = 256;

    fn new(policies: Policies) -> Self {
        Self {
            policies,
            clock: ClockSource::Anchored(AnchoredClock::new()),
            max_keys: None,
            max_key_bytes: Self::DEFAULT_MAX_KEY_BYTES,
            eviction_delay_us: duration_us(Self::DEFAULT_EVICTION_DELAY),
        }
    }

    /// Where the limiter reads the time of each request. Defaults to
    /// [`AnchoredClock`] (wall-clock µs since the epoch, read once and then
    /// advanced by the CPU's counter: a few ns a read); give
    /// [`SystemClock`](limiter_core::SystemClock) to follow every wall-clock
    /// adjustment, or a [`ManualClock`](limiter_core::ManualClock) in tests
    /// and replays.
    ///
    /// Eviction reads the same clock: a key is dropped once this clock has
    /// passed its reset time (plus the [eviction delay](Self::eviction_delay)).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = ClockSource::Custom(Box::new(clock));
        self
    }

    /// The most keys held at once. Defaults to no cap: memory is then bounded
    /// by the keys active within their reset time (see the crate docs).
    /// With a cap, memory is bounded outright, whatever keys clients choose:
    /// at most [`max_bytes`](MemoryLimiter::max_bytes), the cap times
    /// [`max_bytes_per_key`](MemoryLimiter::max_bytes_per_key). Set one
    /// whenever clients choose the keys (an API key header, IPv6 addresses
    /// without a prefix).
    ///
    /// When the cap is reached, a request on a key not held first sweeps the
    /// keys whose state has expired, once a sweep frees a batch: a sweep
    /// scans every key, so after one the next waits until a 64th of the
    /// keys it kept have expired (a flood of new keys at one time scans at
    /// most once, and steady churn at the cap costs a new key about 64
    /// entries scanned, not the whole map). So a new key may be refused
    /// while expired keys wait for that sweep, which `max_keys / 64`
    /// refusals also make due. If no room is made,
    /// the request fails with
    /// [`Error::Backend`](limiter_core::Error::Backend) wrapping
    /// [`KeyLimitReached`](crate::KeyLimitReached) — the failure path of
    /// an unreachable Redis, so the caller's fail-open or fail-closed choice
    /// covers both; but under [`on_failure`](limiter_core::LimiterExt::on_failure)
    /// it starts no outage: the policy answers that request alone, and keys
    /// already held are still decided exactly.
    ///
    /// A live key is never evicted to make room: that would hand it a fresh
    /// quota and admit more than the policy allows (docs/spec.md rule 2.5).
    ///
    /// ```
    /// use limiter_core::{Error, Policy, Rate};
    /// use limiter_memory::{KeyLimitReached, MemoryLimiter};
    ///
    /// let limiter = MemoryLimiter::builder(Policy::fixed_window(Rate::per_hour(5))?)
    ///     .max_keys(1)
    ///     .build();
    /// limiter.try_acquire(b"alice", 1)?;
    /// match limiter.try_acquire(b"bob", 1) {
    ///     Err(Error::Backend(e)) => assert!(e.is::<KeyLimitReached>()),
    ///     other => panic!("expected KeyLimitReached, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// The longest key, in bytes, stored as it is. Defaults to
    /// [`DEFAULT_MAX_KEY_BYTES`](Self::DEFAULT_MAX_KEY_BYTES) (256).
    ///
    /// A longer key is stored as its SHA-256 digest (33 bytes with a
    /// marker), so what one key costs is bounded however long a client
    /// makes it, and long keys keep working: two keys share a state only if
    /// they are equal (a digest never equals a key stored whole, and two
    /// SHA-256 digests collide for no one). Decisions are exactly those of
    /// the keys themselves. Hashing costs a long key's request a pass over
    /// its bytes; a key up to the bound pays one length comparison.
    /// `usize::MAX` stores every key whole, its cost unbounded.
    ///
    /// ```
    /// use limiter_core::{Policy, Rate};
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let limiter = MemoryLimiter::builder(Policy::fixed_window(Rate::per_hour(1))?)
    ///     .max_key_bytes(64)
    ///     .build();
    /// let long = "k".repeat(100_000);
    /// assert!(limiter.try_acquire(long.as_bytes(), 1)?.allowed);
    /// assert!(!limiter.try_acquire(long.as_bytes(), 1)?.allowed);
    /// assert!(limiter.try_acquire("k".repeat(100_001).as_bytes(), 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_key_bytes(mut self, max_key_bytes: usize) -> Self {
        self.max_key_bytes = max_key_bytes;
        self
    }

    /// How long past its reset time (the admitting decision's
    /// `time_us + reset_after`) a key is kept before it may be evicted.
    /// Defaults to [`DEFAULT_EVICTION_DELAY`](Self::DEFAULT_EVICTION_DELAY)
    /// (one second); sub-microsecond
    /// parts are ignored.
    ///
    /// Evicting exactly at the reset time never changes a decision while
    /// time moves forward (docs/spec.md rule 2.5), but a request is stamped before it
    /// reaches its key, so under contention a request stamped a little
    /// earlier can arrive after a sweep; the delay keeps such stragglers,
    /// and a clock stepping back by less than the delay, exact. It costs
    /// only memory: keys live that much longer.
    pub fn eviction_delay(mut self, delay: Duration) -> Self {
        self.eviction_delay_us = duration_us(delay);
        self
    }

    /// The limiter.
    pub fn build(self) -> MemoryLimiter {
        MemoryLimiter::from_store(Store::new(
            self.policies,
            self.clock,
            self.max_keys,
            self.max_key_bytes,
            self.eviction_delay_us,
        ))
    }
}

fn duration_us(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
