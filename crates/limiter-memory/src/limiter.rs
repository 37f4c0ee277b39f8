//! [`MemoryLimiter`]: the API. The map and the decisions in it are in
//! `map.rs`, the cap on keys in `key_cap.rs`, eviction in `sweep.rs`.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{Decision, Error, Limiter, Policies, Policy};

use crate::builder::MemoryLimiterBuilder;
use crate::clock::ClockSource;
use crate::map::{with_map, with_single_map, Keys};
use crate::sweep::Sweep;

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
    pub(crate) policies: Policies,
    /// The first (under one policy, the only) part, read on the hot path.
    pub(crate) policy: Policy,
    pub(crate) clock: ClockSource,
    pub(crate) keys: Keys,
    pub(crate) max_keys: Option<usize>,
    pub(crate) max_key_bytes: usize,
    pub(crate) eviction_delay_us: u64,
    /// Keys held, counted when a slot is reserved (just before its insert).
    pub(crate) held: AtomicUsize,
    pub(crate) sweep: Sweep,
}

impl MemoryLimiter {
    /// A limiter for `policies` (a [`Policy`], or a tiered set of
    /// [`Policies`]) on the [`AnchoredClock`](crate::AnchoredClock), with no
    /// cap on keys and the default eviction delay (see
    /// [`MemoryLimiterBuilder`]).
    pub fn new(policies: impl Into<Policies>) -> Self {
        Self::builder(policies).build()
    }

    /// A builder for a limiter of `policies` (a [`Policy`], or a tiered set
    /// of [`Policies`]), to set the clock, a cap on keys or the eviction
    /// delay.
    pub fn builder(policies: impl Into<Policies>) -> MemoryLimiterBuilder {
        MemoryLimiterBuilder::new(policies.into())
    }

    pub(crate) fn from_builder(builder: MemoryLimiterBuilder) -> Self {
        let MemoryLimiterBuilder {
            policies,
            clock,
            max_keys,
            max_key_bytes,
            eviction_delay_us,
        } = builder;
        Self {
            keys: Keys::new(&policies),
            policy: policies[0].clone(),
            policies,
            clock,
            max_keys,
            max_key_bytes,
            eviction_delay_us,
            held: AtomicUsize::new(0),
            sweep: Sweep::new(),
        }
    }

    /// The policies every key is limited by: one, or a tiered set whose
    /// parts must all admit a request (docs/spec.md section 7).
    pub fn policies(&self) -> &Policies {
        &self.policies
    }

    /// The cap on keys held, if any (see [`MemoryLimiterBuilder::max_keys`]).
    pub fn max_keys(&self) -> Option<usize> {
        self.max_keys
    }

    /// The longest key stored as it is; a longer one is stored as its
    /// digest (see [`MemoryLimiterBuilder::max_key_bytes`]).
    pub fn max_key_bytes(&self) -> usize {
        self.max_key_bytes
    }

    /// How long past its reset time a key is kept before it may be evicted
    /// (see [`MemoryLimiterBuilder::eviction_delay`]).
    pub fn eviction_delay(&self) -> Duration {
        Duration::from_micros(self.eviction_delay_us)
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
    /// [`max_keys`](MemoryLimiterBuilder::max_keys) keys are held (live,
    /// or expired and awaiting a sweep: see `max_keys`).
    #[inline]
    pub fn try_acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        with_single_map!(&self.keys,
            map => self.try_acquire_in(map, key, cost),
            set => self.try_acquire_in(set, key, cost)
        )
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
        let now_us = self.clock.now_us();
        with_map!(&self.keys, map => self.acquire_allowed_in(map, key, now_us, cost))
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
        let now_us = self.clock.now_us();
        with_single_map!(&self.keys,
            map => self.peek_in(map, key, now_us, cost),
            set => self.peek_in(set, key, now_us, cost)
        )
    }

    /// Drops `key`'s state, so it starts again with a full quota; returns
    /// whether it was held. The synchronous form of [`Limiter::reset`].
    pub fn remove(&self, key: &[u8]) -> bool {
        let key = self.stored_key(key);
        let removed = with_map!(&self.keys, map => map.remove(key.as_bytes()).is_some());
        if removed {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// Drops every key's state.
    pub fn clear(&self) {
        let mut removed = 0;
        with_map!(&self.keys, map => map.retain(|_, _| {
            removed += 1;
            false
        }));
        self.held.fetch_sub(removed, Ordering::AcqRel);
    }

    /// The number of keys held (expired keys count until a sweep drops them).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
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
        let _guard = self.sweep_lock();
        let removed = self.sweep_locked(self.clock.now_us());
        self.reschedule();
        removed
    }
}

impl fmt::Debug for MemoryLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLimiter")
            .field("policies", &self.policies)
            .field("clock", &self.clock)
            .field("keys_held", &self.len())
            .field("max_keys", &self.max_keys)
            .field("max_key_bytes", &self.max_key_bytes)
            .field("eviction_delay", &self.eviction_delay())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Limiter for MemoryLimiter {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.try_acquire(key, cost)
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.try_peek(key, cost)
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
    use std::sync::Arc;

    use limiter_core::{ManualClock, Rate};

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
    fn the_count_of_keys_held_matches_the_map_after_concurrent_churn() {
        let clock = ManualClock::new(0);
        let policy = Policy::fixed_window(Rate::per_second(3)).unwrap();
        let limiter = Arc::new(
            MemoryLimiter::builder(policy)
                .clock(clock.clone())
                .eviction_delay(Duration::ZERO)
                .build(),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let limiter = Arc::clone(&limiter);
                let clock = clock.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let key = format!("k{}", (i * 7 + thread) % 3_000);
                        limiter.try_acquire(key.as_bytes(), 1).unwrap();
                        if i % 97 == 0 {
                            limiter.remove(key.as_bytes());
                        }
                        if thread == 0 && i % 1_000 == 0 {
                            clock.advance(Duration::from_millis(700));
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let map_len = || with_map!(&limiter.keys, map => map.len());
        assert_eq!(limiter.len(), map_len());
        clock.advance(Duration::from_secs(2));
        limiter.sweep_expired();
        assert_eq!(limiter.len(), 0);
        assert_eq!(map_len(), 0);
    }
}
