//! Two limiters that split the HTTP layer's cost from its store's, for
//! `http_in_process.rs`: [`AnswerOnly`] answers every request with one
//! stored decision (the layer's own work, no store), and
//! [`GovernorStore`] decides by governor's keyed rate limiter (the layer
//! around tower_governor's store instead of limiter-memory's).

use std::fmt;
use std::num::NonZeroU32;

use async_trait::async_trait;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use limiter_core::{Decision, Error, Limiter, Policies, Policy};
use limiter_memory::MemoryLimiter;

/// The longest key [`GovernorStore`] holds: an address key is 5 or 17 bytes.
const KEY_BYTES: usize = 24;

/// An admitted decision of `policy`, as limiter-memory answers a fresh key.
fn admitted(policy: &Policy) -> Decision {
    let decision = MemoryLimiter::new(policy.clone())
        .try_acquire(b"any", 1)
        .expect("a valid request");
    assert!(decision.allowed, "a fresh key admits one unit");
    decision
}

/// Answers every request with one admitted decision, from no store.
#[derive(Debug)]
pub(crate) struct AnswerOnly {
    policies: Policies,
    answer: Decision,
}

impl AnswerOnly {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            answer: admitted(&policy),
            policies: policy.into(),
        }
    }
}

#[async_trait]
impl Limiter for AnswerOnly {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Ok(self.answer.clone())
    }

    async fn peek(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Ok(self.answer.clone())
    }

    async fn reset(&self, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    fn acquire_now(&self, _: &[u8], _: u64) -> Option<Result<Decision, Error>> {
        Some(Ok(self.answer.clone()))
    }
}

/// Decides by governor's keyed rate limiter with its defaults (a dashmap
/// with SipHash, a quanta clock), keyed by the key's bytes in a fixed
/// array, a billion a second with a burst of a billion, as
/// tower_governor's in the bench; answers [`AnswerOnly`]'s decision with
/// governor's verdict.
pub(crate) struct GovernorStore {
    policies: Policies,
    answer: Decision,
    governor: DefaultKeyedRateLimiter<[u8; KEY_BYTES]>,
}

impl GovernorStore {
    pub(crate) fn new(policy: Policy) -> Self {
        let billion = NonZeroU32::new(1_000_000_000).expect("non-zero");
        Self {
            answer: admitted(&policy),
            policies: policy.into(),
            governor: RateLimiter::keyed(Quota::per_second(billion).allow_burst(billion)),
        }
    }
}

impl fmt::Debug for GovernorStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernorStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl Limiter for GovernorStore {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.acquire_now(key, cost).expect("decided at once")
    }

    async fn peek(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Ok(self.answer.clone())
    }

    async fn reset(&self, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    fn acquire_now(&self, key: &[u8], _: u64) -> Option<Result<Decision, Error>> {
        let mut fixed = [0; KEY_BYTES];
        fixed[..key.len()].copy_from_slice(key);
        let mut decision = self.answer.clone();
        decision.allowed = self.governor.check_key(&fixed).is_ok();
        Some(Ok(decision))
    }
}
