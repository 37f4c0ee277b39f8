//! [`LeasedBuilder`]: the knobs of a [`Leased`] limiter; their defaults
//! are `Leased`'s associated constants.

use std::time::Duration;

use limiter_core::backend::ClockSource;
use limiter_core::{Clock, Limiter};

use crate::leased::Leased;

/// Builds a [`Leased`] limiter; every option has a default, so
/// `Leased::builder(inner).build()` equals `Leased::new(inner)`.
///
/// ```
/// use std::time::Duration;
/// use limiter_core::{Policy, Rate};
/// use limiter_lease::Leased;
/// use limiter_memory::MemoryLimiter;
///
/// let global = MemoryLimiter::new(Policy::token_bucket(Rate::per_second(10_000))?);
/// let leased = Leased::builder(global)
///     .lifetime(Duration::from_millis(100))
///     .max_lease(50)
///     .refill_percent(25)
///     .max_keys(100_000)
///     .build();
/// assert_eq!(leased.max_lease(), 50);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct LeasedBuilder<L> {
    pub(crate) inner: L,
    pub(crate) lifetime: Duration,
    pub(crate) min_lease: u64,
    pub(crate) max_lease: u64,
    pub(crate) refill_percent: u8,
    pub(crate) max_keys: usize,
    pub(crate) max_key_bytes: usize,
    pub(crate) clock: ClockSource,
}

impl<L: Limiter> LeasedBuilder<L> {
    pub(crate) fn new(inner: L) -> Self {
        Self {
            inner,
            lifetime: Leased::<L>::DEFAULT_LIFETIME,
            min_lease: Leased::<L>::DEFAULT_MIN_LEASE,
            max_lease: Leased::<L>::DEFAULT_MAX_LEASE,
            refill_percent: Leased::<L>::DEFAULT_REFILL_PERCENT,
            max_keys: Leased::<L>::DEFAULT_MAX_KEYS,
            max_key_bytes: Leased::<L>::DEFAULT_MAX_KEY_BYTES,
            clock: ClockSource::default(),
        }
    }

    /// `T`: how long a lease's units may be used, from the moment its
    /// request is sent (docs/spec.md section 8.1). The over-admission of the
    /// windowed algorithms and the buckets grows with it (about `L * T / W`);
    /// zero leases nothing, and every request goes to the wrapped limiter.
    /// Longer than the window of a part (a fixed window aside, which ends
    /// each lease), the bound is `N * M` in every window whatever the
    /// demand: [`build`](Self::build) warns of it through `tracing`.
    /// Whole microseconds; defaults to [`Leased::DEFAULT_LIFETIME`].
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// `M`: the most units of one key this instance holds at once, the lease
    /// in flight included; the over-admission is at most `N * M` for `N`
    /// instances. Capped at the policies' maximum cost and at 2^32 - 1 (a
    /// key's counts of units are 32 bits); at least 1. Defaults
    /// to [`Leased::DEFAULT_MAX_LEASE`].
    pub fn max_lease(mut self, units: u64) -> Self {
        self.max_lease = units;
        self
    }

    /// `m`: the smallest lease asked on demand alone (a lease still shrinks
    /// below it to what the key has left). At least 1, at most the maximum
    /// lease. Defaults to [`Leased::DEFAULT_MIN_LEASE`].
    pub fn min_lease(mut self, units: u64) -> Self {
        self.min_lease = units;
        self
    }

    /// The refill threshold: a request that leaves this percentage of the
    /// last lease's size or less in hand fetches the next lease (0: only
    /// when none is left; at most 100). Defaults to
    /// [`Leased::DEFAULT_REFILL_PERCENT`].
    pub fn refill_percent(mut self, percent: u8) -> Self {
        self.refill_percent = percent.min(100);
        self
    }

    /// The most keys this instance holds leases for: a key beyond them is
    /// decided by the wrapped limiter, at its own cost, until an idle key
    /// (no units in hand, no lease in flight) is dropped to make room;
    /// idle keys are also dropped within about a second without it
    /// ([`Leased::max_bytes`]). Zero leases nothing. Defaults to
    /// [`Leased::DEFAULT_MAX_KEYS`].
    pub fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys;
        self
    }

    /// The longest key held as it is: a longer one is held as its SHA-256
    /// digest (33 bytes with a marker), as the memory backend does, so
    /// that what one key costs is bounded however long a client makes it
    /// ([`Leased::max_bytes`]). Decisions are those of the keys themselves:
    /// two keys share leases only if they are equal, and the wrapped
    /// limiter is asked about the key itself. Hashing costs a long key's
    /// request a pass over its bytes. `usize::MAX` holds every key whole,
    /// its cost unbounded. Defaults to [`Leased::DEFAULT_MAX_KEY_BYTES`].
    pub fn max_key_bytes(mut self, bytes: usize) -> Self {
        self.max_key_bytes = bytes;
        self
    }

    /// The clock of the local decisions and of lease lifetimes. Defaults to
    /// [`AnchoredClock`](limiter_core::AnchoredClock): the wall clock read
    /// once and advanced by the CPU's monotonic counter, which never steps
    /// back and costs a counter read (the memory backend's default too);
    /// a [`ManualClock`](limiter_core::ManualClock) in tests. A clock
    /// stepped back stretches the leases in hand.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = ClockSource::Custom(Box::new(clock));
        self
    }

    /// The limiter.
    pub fn build(self) -> Leased<L> {
        Leased::from_builder(self)
    }
}
