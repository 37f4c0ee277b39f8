//! [`LeasedBuilder`]: the knobs of a [`Leased`] limiter, their defaults
//! (the builder's associated constants), and how a `Leased` is built from
//! them: its sizing follows from the policies and the options.

use std::time::Duration;

use limiter_core::backend::ClockSource;
use limiter_core::{Algorithm, Clock, Limiter, Policies, Policy};

use crate::key_lease::{Sizing, MAX_UNITS};
use crate::leased::Leased;
use crate::leases::Leases;
use crate::stats::Counters;

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
    /// The default lease [lifetime](Self::lifetime): 250 ms.
    pub const DEFAULT_LIFETIME: Duration = Duration::from_millis(250);
    /// The default [over-admission
    /// budget](Self::over_admission_budget): 1% of the policy's
    /// limit per instance, the default maximum lease (100 units on a limit
    /// of 10,000). A limit below 200 is then leased one unit at a time.
    pub const DEFAULT_OVER_ADMISSION_BUDGET: f64 = 1.0;
    /// The default [refill threshold](Self::refill_percent): 25% of
    /// the last lease left in hand.
    pub const DEFAULT_REFILL_PERCENT: u8 = 25;
    /// The default [most keys leased](Self::max_keys): 10,000.
    pub const DEFAULT_MAX_KEYS: usize = 10_000;
    /// The default [longest key held whole](Self::max_key_bytes):
    /// 256 bytes, the memory backend's.
    pub const DEFAULT_MAX_KEY_BYTES: usize = 256;

    pub(crate) fn new(inner: L) -> Self {
        Self {
            inner,
            lifetime: Self::DEFAULT_LIFETIME,
            min_lease: None,
            max_lease: None,
            over_admission_budget: Self::DEFAULT_OVER_ADMISSION_BUDGET,
            refill_percent: Self::DEFAULT_REFILL_PERCENT,
            max_keys: Self::DEFAULT_MAX_KEYS,
            max_key_bytes: Self::DEFAULT_MAX_KEY_BYTES,
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
    /// Whole microseconds; defaults to [`Self::DEFAULT_LIFETIME`].
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
    /// [`Self::DEFAULT_OVER_ADMISSION_BUDGET`].
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
    /// [`Self::DEFAULT_REFILL_PERCENT`].
    pub fn refill_percent(mut self, percent: u8) -> Self {
        self.refill_percent = percent.min(100);
        self
    }

    /// The most keys this instance holds leases for: a key beyond them is
    /// decided by the wrapped limiter, at its own cost, until an idle key
    /// (no units in hand, no lease in flight) is dropped to make room;
    /// idle keys are also dropped within about a second without it
    /// ([`Leased::max_bytes`]). Zero leases nothing. Defaults to
    /// [`Self::DEFAULT_MAX_KEYS`].
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
    /// its cost unbounded. Defaults to [`Self::DEFAULT_MAX_KEY_BYTES`].
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
        let LeasedBuilder {
            inner,
            lifetime,
            min_lease,
            max_lease,
            over_admission_budget,
            refill_percent,
            max_keys,
            max_key_bytes,
            clock,
        } = self;
        let policies = inner.policies();
        let max_lease = max_lease
            .unwrap_or_else(|| budgeted_max_lease(policies, over_admission_budget))
            .clamp(1, policies.max_cost().min(MAX_UNITS));
        let sizing = Sizing {
            lifetime_us: u64::try_from(lifetime.as_micros()).unwrap_or(u64::MAX),
            min_lease: min_lease
                .unwrap_or_else(|| lifetime_share(policies, max_lease, lifetime))
                .clamp(1, max_lease),
            max_lease,
            refill_percent: u64::from(refill_percent.min(100)),
        };
        warn_of_lifetime_beyond_windows(policies, sizing.lifetime_us);
        let fixed_windows = policies
            .iter()
            .enumerate()
            .filter(|(_, policy)| policy.algorithm() == Algorithm::FixedWindow)
            .map(|(i, _)| i)
            .collect();
        let spacing = policies
            .iter()
            .filter(|policy| policy.algorithm() == Algorithm::LeakyBucket)
            .map(|policy| (policy.window_ticks(), policy.limit(), policy.tick_us()))
            .max_by_key(|&(window, limit, tick)| {
                // µs per unit, as a fraction compared without division.
                Slowness(u128::from(window) * u128::from(tick), u128::from(limit))
            });
        Leased {
            leases: Leases::new(max_keys, max_key_bytes, sizing.lifetime_us),
            max_cost: policies.max_cost(),
            part_limits: policies.iter().map(|policy| policy.max_cost()).collect(),
            inner,
            sizing,
            max_keys,
            max_key_bytes,
            clock,
            fixed_windows,
            spacing,
            counters: Counters::default(),
        }
    }
}

impl<L: Limiter> Leased<L> {
    /// `inner` leased with the default options.
    pub fn new(inner: L) -> Self {
        Self::builder(inner).build()
    }

    /// A builder for `inner` leased, to set the options.
    pub fn builder(inner: L) -> LeasedBuilder<L> {
        LeasedBuilder::new(inner)
    }
}

/// Warns of each part whose window the lease lifetime outlasts: the
/// over-admission bound `min(B(d + tau), B(d) + N*M)` (docs/spec.md
/// section 8.2) is then `N * M` in every window whatever the demand, not
/// about `rate * T`. A fixed-window part ends each lease with its window,
/// so its lifetime does not matter.
fn warn_of_lifetime_beyond_windows(policies: &Policies, lifetime_us: u64) {
    for policy in policies.iter() {
        if policy.algorithm() != Algorithm::FixedWindow && lifetime_us > policy.window_us() {
            tracing::warn!(
                target: "limiter_lease",
                lifetime_us,
                policy = %policy,
                "the lease lifetime is longer than the policy's window: the over-admission \
                 is up to N*M units (instances times maximum lease) in every window, not \
                 about rate*T"
            );
        }
    }
}

/// The maximum lease an over-admission budget of `percent` of the limit
/// gives: that share of every part's limit, the smallest (0 to 100, in
/// steps of a millionth of the limit).
fn budgeted_max_lease(policies: &Policies, percent: f64) -> u64 {
    // NaN is cast to 0: no budget.
    let per_million = (percent.clamp(0.0, 100.0) * 10_000.0).round() as u128;
    policies
        .iter()
        .map(|policy| u128::from(policy.limit()) * per_million / 1_000_000)
        .min()
        .map_or(0, |units| u64::try_from(units).unwrap_or(u64::MAX))
}

/// The default minimum lease: `max_lease`'s share of one `lifetime` of
/// the policies' longest window, `floor(M * T / W)` (at most `M`, at
/// least 1 where the builder clamps it).
fn lifetime_share(policies: &Policies, max_lease: u64, lifetime: Duration) -> u64 {
    let longest_us = policies.iter().map(Policy::window_us).max().unwrap_or(1);
    let share = u128::from(max_lease) * lifetime.as_micros() / u128::from(longest_us.max(1));
    u64::try_from(share).unwrap_or(u64::MAX).min(max_lease)
}

/// `µs per unit` as the fraction `(µs, units)`, ordered by value.
#[derive(PartialEq, Eq)]
struct Slowness(u128, u128);

impl PartialOrd for Slowness {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slowness {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0 * other.1).cmp(&(other.0 * self.1))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::Policies;
    use limiter_memory::MemoryLimiter;

    use crate::Leased;

    /// `m` and `M` of `policies` leased at the defaults but `lifetime`.
    fn sizes(policies: &str, lifetime_ms: u64) -> (u64, u64) {
        let policies: Policies = policies.parse().unwrap();
        let leased = Leased::builder(MemoryLimiter::new(policies))
            .lifetime(Duration::from_millis(lifetime_ms))
            .build();
        (leased.min_lease(), leased.max_lease())
    }

    #[test]
    fn the_default_minimum_lease_is_the_maximum_leases_share_of_a_lifetime() {
        assert_eq!(sizes("token-bucket:10000/1s", 250), (25, 100));
        assert_eq!(sizes("token-bucket:1000000/1s", 250), (2_500, 10_000));
        // A limit per minute: a lease of one unit, exact, below 48,000.
        assert_eq!(sizes("sliding-log:47999/1m", 250), (1, 479));
        assert_eq!(sizes("sliding-log:48000/1m", 250), (2, 480));
        // The longest window of a set: its units lapse over the longest.
        assert_eq!(
            sizes("token-bucket:10000/1s;sliding-log:600000/1m", 250),
            (1, 100)
        );
        // A lifetime beyond the window: the whole maximum lease.
        assert_eq!(sizes("sliding-counter:10000/100ms", 250), (100, 100));
        assert_eq!(sizes("token-bucket:10000/1s", 0), (1, 100));
    }
}
