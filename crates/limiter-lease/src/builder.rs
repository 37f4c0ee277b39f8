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
///     .over_admission_budget(0.5) // at most 50 units over the limit a window
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
    /// `None`: the maximum lease's share of a lifetime.
    pub(crate) min_lease: Option<u64>,
    /// `None`: the over-admission budget's.
    pub(crate) max_lease: Option<u64>,
    pub(crate) over_admission_budget: f64,
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
            min_lease: None,
            max_lease: None,
            over_admission_budget: Leased::<L>::DEFAULT_OVER_ADMISSION_BUDGET,
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
    /// key's counts of units are 32 bits); at least 1. Set, it replaces the
    /// [over-admission budget](Self::over_admission_budget)'s.
    pub fn max_lease(mut self, units: u64) -> Self {
        self.max_lease = Some(units);
        self
    }

    /// The over-admission budget, in percent of the policy's limit `L`:
    /// the most this instance's leases may add to a window above the exact
    /// algorithm's own bound (docs/spec.md section 8.2). It sets the
    /// maximum lease, `M = floor(L * percent / 100)` (with a tiered set,
    /// the smallest over its parts), at least one unit, unless
    /// [`max_lease`](Self::max_lease) sets `M` itself.
    ///
    /// The budget is per instance: `N` instances leasing a key add at most
    /// `N` times it (and, on the sliding counter and the buckets, never more
    /// than about `T` worth of the rate, whatever `N`). A fleet-wide budget
    /// would need `N`, which no operation of a [`Limiter`] can count; per
    /// instance, each bound holds for the instances running at the time,
    /// as the fleet grows or shrinks. Between 0 and 100, in steps of a
    /// millionth of the limit; defaults to
    /// [`Leased::DEFAULT_OVER_ADMISSION_BUDGET`].
    pub fn over_admission_budget(mut self, percent: f64) -> Self {
        self.over_admission_budget = percent;
        self
    }

    /// `m`: the smallest lease asked, on need or ahead of it when some
    /// demand is due (a lease still shrinks below it to what the key has
    /// left). A lease of more than one unit lets a key whose callers wait
    /// for each answer be decided from leases, and its arrivals then grow
    /// with that speed (docs/spec.md section 8.5); its units a quiet key
    /// does not use lapse. At least 1, at most the maximum lease.
    ///
    /// Defaults to the maximum lease's share of one lifetime of the
    /// policies' longest window, `floor(M * T / W)`, at least 1: a key
    /// asked more rarely than the budget's rate lapses at most `m` units a
    /// lifetime, about `M` a window, so the units that quiet keys let lapse
    /// stay within the over-admission budget too (docs/spec.md section
    /// 8.6). That is 25 units for `M = 100` on a window of a second and
    /// the default lifetime, and 1, every lease exact, for a limit per
    /// minute below 48,000.
    pub fn min_lease(mut self, units: u64) -> Self {
        self.min_lease = Some(units);
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
