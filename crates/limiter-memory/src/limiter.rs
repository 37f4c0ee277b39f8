//! [`MemoryLimiter`]: the API, a face over the [`Store`] (`store.rs`),
//! which holds the keys and decides and evicts them; `builder.rs` builds
//! one.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{Decision, Error, Limiter, Policies};

use crate::store::Store;

/// A keyed in-process rate limiter: one algorithm state per key in a
/// sharded [`DashMap`](dashmap::DashMap), every decision made by `limiter-core` under the
/// key's shard lock, so concurrent requests on one key never over-admit.
///
/// Build one with [`MemoryLimiter::new`] or [`MemoryLimiter::builder`]; use
/// it through the [`Limiter`] trait (`Arc<dyn Limiter>`) or through the
/// synchronous [`try_acquire`](Self::try_acquire) and
/// [`try_peek`](Self::try_peek), which never block on I/O.
///
/// ```
/// use limiter_core::{Policy, Rate};
/// use limiter_memory::MemoryLimiter;
///
/// let limiter = MemoryLimiter::new(Policy::fixed_window(Rate::per_second(2))?);
/// assert!(limiter.try_acquire(b"ip:10.0.0.1", 1)?.allowed);
/// assert_eq!(limiter.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLimiter {
    store: Store,
}

impl MemoryLimiter {
    /// The limiter over `store`.
    pub(crate) fn from_store(store: Store) -> Self {
        Self { store }
    }

    /// The policies every key is limited by: one, or a tiered set whose
    /// parts must all admit a request (docs/spec.md section 7). Those in
    /// force now (see [`set_policies`](Self::set_policies)).
    pub fn policies(&self) -> &Policies {
        self.store.policies()
    }

    /// Puts `policies` in force for every request that begins from now on,
    /// while the limiter serves: each request is decided entirely under the
    /// policies in force when it began, and each key keeps what it used
    /// (docs/spec.md section 9). A key's state is taken over by the new
    /// policies at its first request under them (a key that sees none
    /// expires under the old ones), so the change itself touches no key;
    /// it waits for the requests being decided to finish. A change to the
    /// policies in force changes nothing.
    ///
    /// ```
    /// use limiter_core::Policy;
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let limiter = MemoryLimiter::new("sliding-log:100/1m".parse::<Policy>()?);
    /// assert!(limiter.try_acquire(b"client", 90)?.allowed);
    /// limiter.set_policies("sliding-log:1000/1m".parse::<Policy>()?);
    /// assert_eq!(limiter.try_peek(b"client", 1)?.remaining, 909); // 910 left
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_policies(&self, policies: impl Into<Policies>) {
        self.store.set_policies(policies.into());
    }

    /// Another limiter on this limiter's keys, deciding under `policies`:
    /// one per plan a service sells. A key decided by one and then by the
    /// other keeps what it used, taken over by the core's rule
    /// (docs/spec.md section 9) as for [`set_policies`](Self::set_policies),
    /// so a client moved to a bigger plan gets only the difference and one
    /// moved to a smaller plan is refused until its window allows it. The
    /// two share the clock, the key bounds and the cap on keys (a key
    /// counts once, under whichever decided it last); each may change its
    /// own policies.
    ///
    /// ```
    /// use limiter_core::Policy;
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let free = MemoryLimiter::new("sliding-log:100/1m".parse::<Policy>()?);
    /// let pro = free.plan("sliding-log:1000/1m".parse::<Policy>()?);
    /// assert!(free.try_acquire(b"acme", 90)?.allowed);
    /// assert_eq!(pro.try_acquire(b"acme", 1)?.remaining, 909); // upgraded
    /// assert!(!free.try_peek(b"acme", 10)?.allowed); // and back: 91 used
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn plan(&self, policies: impl Into<Policies>) -> Self {
        Self::from_store(self.store.plan(policies.into()))
    }

    /// The cap on keys held, if any (see [`MemoryLimiterBuilder::max_keys`](crate::MemoryLimiterBuilder::max_keys)).
    pub fn max_keys(&self) -> Option<usize> {
        self.store.max_keys()
    }

    /// The longest key stored as it is; a longer one is stored as its
    /// digest (see [`MemoryLimiterBuilder::max_key_bytes`](crate::MemoryLimiterBuilder::max_key_bytes)).
    pub fn max_key_bytes(&self) -> usize {
        self.store.max_key_bytes()
    }

    /// How long past its reset time a key is kept before it may be evicted
    /// (see [`MemoryLimiterBuilder::eviction_delay`](crate::MemoryLimiterBuilder::eviction_delay)).
    pub fn eviction_delay(&self) -> Duration {
        self.store.eviction_delay()
    }

    /// The most bytes one key holds under the policies in force (and
    /// earlier ones, while keys made under them are held), all counted:
    /// its share of the hash
    /// table, its bytes on the heap (at most
    /// [`max_key_bytes`](Self::max_key_bytes), or a 33-byte digest of a
    /// longer key; a key up to 22 bytes is held in the entry) and its
    /// state's heap (a sliding log's entries, a tiered set's parts), each
    /// allocation counted with 32 bytes of allocator overhead.
    ///
    /// A sliding log holds at most one entry per distinct tick in its
    /// window and one per unit admitted: at most the smaller of its limit
    /// `L` and its window in ticks, 16 bytes each, in a deque whose
    /// capacity doubles (so up to the next power of two, at least 4). The
    /// other algorithms hold a fixed state in the entry (16 to 24 bytes).
    /// So a `sliding-log:100/10s` key holds at most 128 entries, 2 KiB,
    /// where a `fixed-window:100/10s` key holds no state on the heap.
    ///
    /// ```
    /// use limiter_core::{Policy, Rate};
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let limiter = MemoryLimiter::builder(Policy::fixed_window(Rate::per_hour(100))?)
    ///     .max_keys(100_000)
    ///     .build();
    /// // The key (256 bytes at most) and its share of the table.
    /// assert!(limiter.max_bytes_per_key() < 600);
    /// assert_eq!(limiter.max_bytes(), Some(100_000 * limiter.max_bytes_per_key()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_bytes_per_key(&self) -> usize {
        self.store.max_bytes_per_key()
    }

    /// The most bytes the limiter's keys hold:
    /// [`max_keys`](Self::max_keys) times
    /// [`max_bytes_per_key`](Self::max_bytes_per_key), beyond the empty
    /// limiter's own (a few KiB); `None` without a cap on keys, when it is
    /// bounded by the keys active within their reset time alone.
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_keys()
            .map(|max_keys| max_keys.saturating_mul(self.max_bytes_per_key()))
    }

    /// Asks to admit a request of `cost` units on `key` now (by the
    /// limiter's clock), and commits it if admitted: the synchronous form of
    /// [`Limiter::acquire`], which it backs.
    ///
    /// On a key already held this is one clock read, one hash, the shard's
    /// write lock and the core's decision: no allocation. A key not held is
    /// allocated only when its first request is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`], [`Error::CostExceedsCapacity`] and
    /// [`Error::TimeOutOfRange`] as in the core, none of which writes; and
    /// [`Error::Backend`] wrapping [`KeyLimitReached`](crate::KeyLimitReached) for a new key when
    /// [`max_keys`](crate::MemoryLimiterBuilder::max_keys) keys are held (live,
    /// or expired and awaiting a sweep: see `max_keys`).
    #[inline]
    pub fn try_acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.store.try_acquire(key, cost)
    }

    /// [`try_acquire`](Self::try_acquire), answering only whether the
    /// request was admitted: the same decision, committed the same way,
    /// without the [`Decision`]'s numbers (`remaining`, and the durations
    /// converted from ticks to µs), for callers that send no headers.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    #[inline]
    pub fn try_acquire_allowed(&self, key: &[u8], cost: u64) -> Result<bool, Error> {
        self.store.try_acquire_allowed(key, cost)
    }

    /// Answers what [`try_acquire`](Self::try_acquire) would, now, without
    /// writing anything (docs/spec.md rule 2.6); never allocates. The
    /// synchronous form of [`Limiter::peek`].
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), except that a full map is no
    /// error: a peek stores nothing.
    pub fn try_peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.store.try_peek(key, cost)
    }

    /// Counts `units` against `key` now, after the fact: what a response
    /// turned out to use beyond what its request was admitted for (tokens
    /// generated, bytes sent). Never refused, whatever the key has left: a
    /// window algorithm counts them in the current window up to its limit,
    /// a bucket goes into debt (at most one full bucket) and refuses every
    /// request until its rate has paid it back (docs/spec.md section 10).
    ///
    /// ```
    /// use limiter_core::Policy;
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let tokens = MemoryLimiter::new("token-bucket:1000/1m".parse::<Policy>()?);
    /// assert!(tokens.try_acquire(b"client", 100)?.allowed); // an estimate
    /// tokens.charge(b"client", 1_400)?; // the response used 1,500
    /// assert!(!tokens.try_peek(b"client", 1)?.allowed); // 500 owed
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`] for 0 units and [`Error::TimeOutOfRange`], which
    /// change nothing; [`Error::Backend`] wrapping
    /// [`KeyLimitReached`](crate::KeyLimitReached) for a key not held when
    /// [`max_keys`](crate::MemoryLimiterBuilder::max_keys) keys are.
    pub fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        self.store.charge(key, units)
    }

    /// Drops `key`'s state, so it starts again with a full quota; returns
    /// whether it was held. The synchronous form of [`Limiter::reset`].
    pub fn remove(&self, key: &[u8]) -> bool {
        self.store.remove(key)
    }

    /// Drops every key's state.
    pub fn clear(&self) {
        self.store.clear();
    }

    /// The number of keys held (expired keys count until a sweep drops them).
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops now every key whose state has been back to its initial state
    /// for at least the eviction delay, and returns how many were dropped.
    ///
    /// The limiter already does this by itself, amortised over requests on
    /// new keys; call it to release memory at a moment of your choosing
    /// (say, from a periodic task after a burst of one-off keys). Dropping
    /// never changes a decision while the clock moves forward (docs/spec.md rule 2.5).
    pub fn sweep_expired(&self) -> usize {
        self.store.sweep_expired()
    }
}

impl fmt::Debug for MemoryLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLimiter")
            .field("policies", self.policies())
            .field("clock", self.store.clock())
            .field("keys_held", &self.len())
            .field("max_keys", &self.max_keys())
            .field("max_key_bytes", &self.max_key_bytes())
            .field("eviction_delay", &self.eviction_delay())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Limiter for MemoryLimiter {
    fn policies(&self) -> &Policies {
        self.store.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.try_acquire(key, cost)
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.try_peek(key, cost)
    }

    async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        MemoryLimiter::charge(self, key, units)
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.remove(key);
        Ok(())
    }

    /// Always `Some`: [`try_acquire`](Self::try_acquire), without a future.
    #[inline]
    fn acquire_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        Some(self.try_acquire(key, cost))
    }

    /// Always `Some`: [`try_peek`](Self::try_peek), without a future.
    #[inline]
    fn peek_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        Some(self.try_peek(key, cost))
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use limiter_core::{ManualClock, Policy, Rate};

    use super::*;

    #[test]
    fn acquiring_for_allowed_only_decides_and_commits_as_a_full_acquire() {
        use limiter_core::Algorithm;
        let sets = Algorithm::ALL
            .into_iter()
            .map(|algorithm| Policies::from(Policy::new(algorithm, Rate::per_second(3)).unwrap()));
        let tiered = Policies::new([
            Policy::token_bucket(Rate::per_second(3)).unwrap(),
            Policy::sliding_log(Rate::per_minute(5)).unwrap(),
        ])
        .unwrap();
        for policies in sets.chain([tiered]) {
            let clock = ManualClock::new(1_000_000);
            let build = || {
                MemoryLimiter::builder(policies.clone())
                    .clock(clock.clone())
                    .eviction_delay(Duration::ZERO)
                    .build()
            };
            let (full, allowed_only) = (build(), build());
            for step in 0..40u64 {
                let (key, cost) = ([&b"a"[..], b"b"][(step % 2) as usize], 1 + step % 3);
                let decision = full.try_acquire(key, cost).unwrap();
                assert_eq!(
                    allowed_only.try_acquire_allowed(key, cost).unwrap(),
                    decision.allowed,
                    "{policies} step {step}"
                );
                assert_eq!(
                    allowed_only.try_peek(key, 1).unwrap(),
                    full.try_peek(key, 1).unwrap()
                );
                clock.advance(Duration::from_millis(97 * (step % 5)));
            }
            // The same eviction times: both drop the same keys.
            clock.advance(Duration::from_millis(700));
            assert_eq!(allowed_only.sweep_expired(), full.sweep_expired());
            assert_eq!(allowed_only.len(), full.len());
            assert!(allowed_only.try_acquire_allowed(b"a", 0).is_err());
        }
    }

    #[test]
    fn the_bound_grows_with_the_key_bound_and_is_capped_by_the_count() {
        let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
        let short = MemoryLimiter::builder(policy.clone())
            .max_key_bytes(16)
            .build();
        let long = MemoryLimiter::builder(policy.clone())
            .max_key_bytes(1_000)
            .build();
        // Below the digest's 33 bytes, the digest is the longest key held.
        assert_eq!(short.max_bytes_per_key(), 4 * 41 + 33 + 32);
        assert_eq!(long.max_bytes_per_key(), 4 * 41 + 1_000 + 32);
        assert_eq!(long.max_bytes(), None);
        let capped = MemoryLimiter::builder(policy).max_keys(10).build();
        assert_eq!(capped.max_bytes(), Some(10 * (4 * 41 + 256 + 32)));
        let tiered = Policies::new([
            Policy::token_bucket(Rate::per_second(5)).unwrap(),
            Policy::sliding_log(Rate::per_minute(100)).unwrap(),
        ])
        .unwrap();
        let set = MemoryLimiter::new(tiered);
        assert_eq!(
            set.max_bytes_per_key(),
            4 * 49
                + 256
                + 32
                + (2 * size_of::<limiter_core::backend::KeyState>() + 32)
                + (128 * 16 + 32)
        );
    }
}
