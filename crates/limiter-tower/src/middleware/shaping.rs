//! [`Shaping`]: what an admitted request does about a leaky bucket's wait.

use std::time::Duration;

use limiter_core::Decision;

/// What a request admitted with a [`wait`](limiter_core::Decision::wait)
/// (a leaky bucket's; zero for every other algorithm) does before the
/// inner service runs. Set with
/// [`LimiterLayer::shaping`](crate::LimiterLayer::shaping).
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
    /// a retry would wait this maximum; in a tiered set its headers name
    /// the leaky bucket that waits longest. Its place in the bucket's queue
    /// stays taken (the limiter has no refund), so that time also drains
    /// the refused request's own unit: the wait beyond the maximum plus one
    /// unit's interval (window / limit). Later requests can only be spaced
    /// further, never bunched. In a tiered set every part counted the
    /// refused request (a set commits in all its parts or none): it costs
    /// each window part a unit too.
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

/// Makes `set`, admitted with a wait beyond `max`, the denial the layer
/// answers: nothing left (`remaining` 0), bound by the queue that waits
/// longest (its limit and reset in the headers, not those of a part that
/// had room), and a `retry_after` after which a retry waits at most `max`.
pub(crate) fn refuse(max: Duration, set: &mut Decision) {
    let retry_after = retry_after(max, set);
    let longest = (0u8..)
        .zip(set.parts())
        .max_by_key(|(_, part)| part.wait)
        .map(|(index, part)| (index, part.limit));
    let decision = set;
    decision.allowed = false;
    decision.remaining = 0;
    decision.retry_after = retry_after;
    if let Some((index, limit)) = longest {
        decision.bound_by = index;
        decision.limit = limit;
    }
}

/// When a request admitted into `set` but refused for a wait beyond `max`
/// may retry: once every queue holding it back has drained to within
/// `max` of empty, so the retry waits at most `max`. The queues are the
/// answer's own parts with a wait (only a leaky bucket waits); their
/// `reset_after`, the time each is empty, counts the refused unit. The
/// parts are the answer's, not the configured set's: a degraded answer
/// (a fallback's, say) is a single decision for a tiered set.
fn retry_after(max: Duration, set: &Decision) -> Duration {
    set.parts()
        .iter()
        .filter(|part| !part.wait.is_zero())
        .map(|part| part.reset_after)
        .max()
        .unwrap_or(set.reset_after)
        .saturating_sub(max)
}

#[cfg(test)]
mod tests {
    use limiter_core::backend::SetState;
    use limiter_core::{Decision, DecisionSource, Policies};

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

    #[test]
    fn a_retry_waits_for_the_queue_that_held_the_request_back() {
        let tiers: Policies = "fixed-window:100/1m;leaky-bucket:1/1s,queue=10"
            .parse()
            .unwrap();
        let mut key = SetState::fresh(&tiers);
        key.acquire(&tiers, 0, 1).unwrap();
        let set = key.acquire(&tiers, 0, 1).unwrap();
        // Waits 1 s; the queue is empty at 2 s, the window resets at 1 min.
        assert_eq!(set.wait, Duration::from_secs(1));
        let max = Duration::from_millis(500);
        assert_eq!(retry_after(max, &set), Duration::from_millis(1_500));
    }

    #[test]
    fn a_refusal_is_bound_by_the_queue_that_waits() {
        let tiers: Policies = "fixed-window:5/1m;leaky-bucket:10/1s,queue=20"
            .parse()
            .unwrap();
        let mut key = SetState::fresh(&tiers);
        key.acquire(&tiers, 0, 1).unwrap();
        key.acquire(&tiers, 0, 1).unwrap();
        let mut set = key.acquire(&tiers, 0, 1).unwrap();
        // The window has 2 left, the queue 17: the window binds the
        // admission, but the queue's 200 ms wait is what is refused.
        assert_eq!(set.bound_by, 0);
        refuse(Duration::from_millis(150), &mut set);
        let refused = set.clone();
        assert!(!refused.allowed);
        assert_eq!(
            (refused.bound_by, refused.limit, refused.remaining),
            (1, 20, 0)
        );
        assert_eq!(set.bound().reset_after, Duration::from_millis(300));
        assert_eq!(refused.retry_after, Duration::from_millis(150));
    }

    #[test]
    fn a_degraded_answer_for_a_tiered_set_still_gives_a_retry() {
        // A fallback answers a tiered set with one decision of its own.
        let decision = Decision::admit(1, 0, 0)
            .with_wait(Duration::from_secs(1))
            .with_reset_after(Duration::from_secs(2))
            .with_source(DecisionSource::Fallback);
        let set = decision;
        let max = Duration::from_millis(500);
        assert_eq!(retry_after(max, &set), Duration::from_millis(1_500));
    }
}
