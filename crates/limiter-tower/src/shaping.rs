//! [`Shaping`]: what an admitted request does about a leaky bucket's wait.

use std::time::Duration;

use limiter_core::{Algorithm, Policies, SetDecision};

/// What a request admitted with a [`wait`](limiter_core::Decision::wait)
/// (a leaky bucket's; zero for every other algorithm) does before the
/// inner service runs. Set with
/// [`RateLimitLayer::shaping`](crate::RateLimitLayer::shaping).
///
/// Waiting is what makes a leaky bucket's output smooth: requests reach
/// the inner service one interval apart however they arrive. The request
/// holds its connection (and the inner service it was given) meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Shaping {
    /// Wait the whole `wait` (`tokio::time::sleep`), which the policy's
    /// queue bounds. The default.
    #[default]
    Wait,
    /// Wait at most this long: a request admitted with a longer wait is
    /// answered 429, with `remaining` 0 and `Retry-After` the time until
    /// a retry would wait this maximum. Its place in the bucket's queue
    /// stays taken (the limiter has no refund), so that time also drains
    /// the refused request's own unit: the wait beyond the maximum plus one
    /// unit's interval (window / limit). Later requests can only be spaced
    /// further, never bunched.
    WaitAtMost(Duration),
    /// Pass at once, whatever the wait: no smoothing.
    PassAtOnce,
}

/// What to do with an admitted request's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Call the inner service now.
    Pass,
    /// Sleep this long, then call it.
    Sleep(Duration),
    /// Answer 429: the wait is longer than this maximum.
    Deny(Duration),
}

impl Shaping {
    pub(crate) fn plan(self, wait: Duration) -> Plan {
        match self {
            _ if wait.is_zero() => Plan::Pass,
            Self::PassAtOnce => Plan::Pass,
            Self::Wait => Plan::Sleep(wait),
            Self::WaitAtMost(max) if wait <= max => Plan::Sleep(wait),
            Self::WaitAtMost(max) => Plan::Deny(max),
        }
    }
}

/// When a request admitted into `set` but refused for a wait beyond `max`
/// may retry: once the queue its unit stays in has drained to within
/// `max` of empty (a leaky bucket's `reset_after`, the time it is empty,
/// counts that unit), so the retry waits at most `max`.
pub(crate) fn retry_after(max: Duration, policies: &Policies, set: &SetDecision) -> Duration {
    policies
        .iter()
        .zip(set.parts())
        .filter(|(policy, _)| policy.algorithm() == Algorithm::LeakyBucket)
        .map(|(_, part)| part.reset_after)
        .max()
        .unwrap_or_default()
        .saturating_sub(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_slept_up_to_the_maximum() {
        let ms = Duration::from_millis;
        assert_eq!(Shaping::Wait.plan(Duration::ZERO), Plan::Pass);
        assert_eq!(Shaping::Wait.plan(ms(900)), Plan::Sleep(ms(900)));
        assert_eq!(Shaping::PassAtOnce.plan(ms(900)), Plan::Pass);
        let capped = Shaping::WaitAtMost(ms(250));
        assert_eq!(capped.plan(ms(250)), Plan::Sleep(ms(250)));
        assert_eq!(capped.plan(ms(300)), Plan::Deny(ms(250)));
        assert_eq!(capped.plan(Duration::ZERO), Plan::Pass);
    }
}
