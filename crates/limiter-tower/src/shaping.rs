//! [`Shaping`]: what an admitted request does about a leaky bucket's wait.

use std::time::Duration;

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
    /// answered 429, with `Retry-After` the wait beyond this maximum. Its
    /// place in the bucket's queue stays taken (the limiter has no refund),
    /// which can only space later requests further, never bunch them.
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
    /// Answer 429, to be retried after this long.
    Deny(Duration),
}

impl Shaping {
    pub(crate) fn plan(self, wait: Duration) -> Plan {
        match self {
            _ if wait.is_zero() => Plan::Pass,
            Self::PassAtOnce => Plan::Pass,
            Self::Wait => Plan::Sleep(wait),
            Self::WaitAtMost(max) if wait <= max => Plan::Sleep(wait),
            Self::WaitAtMost(max) => Plan::Deny(wait - max),
        }
    }
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
        assert_eq!(capped.plan(ms(300)), Plan::Deny(ms(50)));
        assert_eq!(capped.plan(Duration::ZERO), Plan::Pass);
    }
}
