//! Errors: what cannot succeed (a bad policy, a cost that can never fit) or
//! what broke (a backend). A denial is not an error: it is a [`Decision`](crate::Decision).

use std::fmt;

use crate::algorithm::Algorithm;
use crate::backend_failure::{BackendFailure, FailureReach};

/// Why a [`Policy`](crate::Policy), a rate string or a duration was rejected.
///
/// Each variant names the field at fault, so a user can fix the input
/// without reading the source.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// `limit` was 0: nothing could ever be admitted.
    ZeroLimit,
    /// `window` was 0 µs.
    ZeroWindow,
    /// The window is not a whole number of microseconds (the unit of time).
    WindowNotWholeMicros {
        /// The window as given, in nanoseconds.
        nanos: u128,
    },
    /// A token bucket's `capacity` was 0.
    ZeroCapacity,
    /// A leaky bucket's `queue` was 0.
    ZeroQueue,
    /// An option was given to an algorithm that has no such option
    /// (`capacity` is for the token bucket, `queue` for the leaky bucket).
    NotApplicable {
        /// The option, e.g. `"capacity"`.
        option: &'static str,
        /// The policy's algorithm.
        algorithm: Algorithm,
    },
    /// No tick exists that keeps every intermediate value exact
    /// (docs/spec.md section 5): the window is not a multiple of a power of ten large
    /// enough, or the largest of limit, capacity and queue is too large.
    OutOfRange {
        /// The largest of limit, capacity and queue.
        units: u64,
        /// The window in microseconds.
        window_us: u64,
    },
    /// A backend cannot serve this policy (e.g. a Redis sliding log above
    /// the configured maximum limit).
    Unsupported {
        /// What the backend refused and why.
        reason: String,
    },
    /// An algorithm name that is not one of [`Algorithm::ALL`].
    UnknownAlgorithm {
        /// The name as given.
        input: String,
    },
    /// A duration string such as `10s` that could not be parsed.
    InvalidDuration {
        /// The string as given.
        input: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// A rate string such as `100/10s` that could not be parsed.
    InvalidRate {
        /// The string as given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A policy string such as `sliding-log:100/1h` (docs/spec.md section 7)
    /// that could not be parsed. An unknown algorithm, a bad rate or an
    /// option that does not apply have their own variants.
    InvalidPolicyString {
        /// The string as given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A policy string named an option no algorithm has (the options are
    /// `capacity` and `queue`).
    UnknownOption {
        /// The option as given.
        option: String,
    },
    /// A policy set ([`Policies`](crate::Policies)) with no policy.
    NoPolicies,
    /// A policy set with more than [`Policies::MAX_PARTS`](crate::Policies::MAX_PARTS)
    /// policies.
    TooManyPolicies {
        /// The policies given.
        count: usize,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLimit => f.write_str("limit must be at least 1, got 0"),
            Self::ZeroWindow => f.write_str("window must be at least 1µs, got 0"),
            Self::WindowNotWholeMicros { nanos } => write!(
                f,
                "window must be a whole number of microseconds, got {nanos}ns"
            ),
            Self::ZeroCapacity => f.write_str("capacity must be at least 1, got 0"),
            Self::ZeroQueue => f.write_str("queue must be at least 1, got 0"),
            Self::NotApplicable { option, algorithm } => write!(
                f,
                "{option} does not apply to {algorithm} (capacity is for token-bucket, queue for leaky-bucket)"
            ),
            Self::OutOfRange { units, window_us } => write!(
                f,
                "policy out of exact range: {units} units per {window_us}µs window needs \
                 4 * units * (window / tick) <= 2^53 for a tick that is a power of ten dividing the window; \
                 use a smaller limit or a window that is a multiple of a larger power of ten"
            ),
            Self::Unsupported { reason } => write!(f, "policy not supported by this backend: {reason}"),
            Self::UnknownAlgorithm { input } => write!(
                f,
                "unknown algorithm {input:?}; expected one of: {}",
                Algorithm::ALL.map(Algorithm::name).join(", ")
            ),
            Self::InvalidDuration { input, reason } => {
                write!(f, "invalid duration {input:?}: {reason} (examples: 500ms, 10s, 1m, 1h, 1d)")
            }
            Self::InvalidRate { input, reason } => {
                write!(f, "invalid rate {input:?}: {reason} (examples: 100/10s, 10/minute, 1000/1d)")
            }
            Self::InvalidPolicyString { input, reason } => write!(
                f,
                "invalid policy {input:?}: {reason} (examples: sliding-log:100/1h, \
                 token-bucket:2/1s,capacity=10, leaky-bucket:10/250ms,queue=20)"
            ),
            Self::UnknownOption { option } => write!(
                f,
                "unknown option {option:?} (capacity is for token-bucket, queue for leaky-bucket)"
            ),
            Self::NoPolicies => f.write_str(
                "a policy set needs at least one policy, got none \
                 (example: sliding-log:5/1s;sliding-log:100/1m)",
            ),
            Self::TooManyPolicies { count } => write!(
                f,
                "a policy set has at most {} policies, got {count}",
                crate::Policies::MAX_PARTS
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

/// The error of every limiter operation.
///
/// Ask it what it is with [`kind`](Self::kind) rather than reading its
/// message. Its `Display` is its own message only; the cause, if any, is its
/// [`source`](std::error::Error::source), so a reporter that walks the
/// chain ([`Error::chain`]) prints each cause once.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The policy is invalid (see [`PolicyError`]).
    InvalidPolicy(PolicyError),
    /// A request's cost was 0; every request costs at least one unit.
    ZeroCost,
    /// The cost is above the policy's [max cost](crate::Policy::max_cost)
    /// (the limit, capacity or queue): the request could never be admitted,
    /// so it is an error rather than a denial with a `retry_after`
    /// (docs/spec.md rule 2.2).
    CostExceedsCapacity {
        /// The cost asked for.
        cost: u64,
        /// The most one request may cost under this policy.
        max_cost: u64,
    },
    /// The request time is beyond 2^53 µs, the exact range of every backend.
    TimeOutOfRange {
        /// The time given, in µs since the Unix epoch.
        time_us: u64,
    },
    /// A backend's configuration, or the way it is called, is invalid (a
    /// malformed URL, a pool of zero connections…: found before any
    /// request; or a Redis backend called from outside any Tokio runtime
    /// with none to run on): fixed by changing the configuration or the
    /// caller, never retried, never answered by a failure policy. The
    /// source says what and why.
    InvalidConfig(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A backend failed (connection, timeout, an error reply); the source
    /// says how, and [`reach`](Self::reach) how far it reaches. The only
    /// error a [`FailurePolicy`](crate::FailurePolicy) handles.
    Backend(BackendFailure),
}

/// What an [`Error`] is about, to act on without reading its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request can never succeed as asked (cost 0, cost above the
    /// max cost, time out of range): fix the request; retrying is useless.
    /// Nothing was written.
    Request,
    /// The policy or the backend's configuration is invalid: found before
    /// any request, fixed by changing the configuration.
    Config,
    /// The backend failed: the request may succeed later. A
    /// [`FailurePolicy`](crate::FailurePolicy) decides what to answer
    /// meanwhile.
    Backend,
}

impl Error {
    /// What this error is about.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::ZeroCost | Self::CostExceedsCapacity { .. } | Self::TimeOutOfRange { .. } => {
                ErrorKind::Request
            }
            Self::InvalidPolicy(_) | Self::InvalidConfig(_) => ErrorKind::Config,
            Self::Backend(_) => ErrorKind::Backend,
        }
    }

    /// Whether the request itself is at fault ([`ErrorKind::Request`]).
    pub fn is_request(&self) -> bool {
        self.kind() == ErrorKind::Request
    }

    /// Whether the configuration is at fault ([`ErrorKind::Config`]).
    pub fn is_config(&self) -> bool {
        self.kind() == ErrorKind::Config
    }

    /// Whether the backend failed ([`ErrorKind::Backend`]).
    pub fn is_backend(&self) -> bool {
        self.kind() == ErrorKind::Backend
    }

    /// A backend failure of `error` that reaches as far as `reach` says.
    pub fn backend(
        reach: FailureReach,
        error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self::Backend(BackendFailure::new(reach, error))
    }

    /// How far a backend failure reaches (`None` for any other error): a
    /// [`Resilient`](crate::Resilient) limiter starts an outage only for
    /// [`FailureReach::Backend`], and answers the others per request.
    pub fn reach(&self) -> Option<FailureReach> {
        match self {
            Self::Backend(failure) => Some(failure.reach()),
            _ => None,
        }
    }

    /// Whether a new key was refused because the backend holds as many
    /// keys as it may ([`KeyLimitReached`](crate::KeyLimitReached)): a
    /// backend failure for this request only, not an outage.
    pub fn is_key_limit(&self) -> bool {
        matches!(self, Self::Backend(e) if e.is::<crate::KeyLimitReached>())
    }

    /// Whether the backend answers but could not take this request in
    /// time ([`Overloaded`](crate::Overloaded), the error or one of its
    /// causes): a backend failure for this request only, not an outage.
    pub fn is_overloaded(&self) -> bool {
        let Self::Backend(failure) = self else {
            return false;
        };
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(failure.get_ref());
        while let Some(error) = next {
            if error.is::<crate::Overloaded>() {
                return true;
            }
            next = error.source();
        }
        false
    }

    /// The message and every cause after it, each once: `a: b: c`.
    ///
    /// ```
    /// use limiter_core::{Error, PolicyError};
    ///
    /// let error = Error::from(PolicyError::ZeroLimit);
    /// assert_eq!(error.to_string(), "invalid policy");
    /// assert_eq!(error.chain().to_string(), "invalid policy: limit must be at least 1, got 0");
    /// ```
    pub fn chain(&self) -> ErrorChain<'_> {
        ErrorChain(self)
    }
}

/// Any error and its sources, written separated by `: `, each once: a
/// source that reads as the one before it is written once (redis-rs gives
/// a server's error as both the error and its source). [`Error::chain`]
/// for this crate's errors.
///
/// ```
/// use limiter_core::ErrorChain;
///
/// let error = std::io::Error::other("connection refused");
/// assert_eq!(ErrorChain(&error).to_string(), "connection refused");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if text != last {
                write!(f, ": {text}")?;
                last = text;
            }
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The cause is the source, never part of the message.
            Self::InvalidPolicy(_) => f.write_str("invalid policy"),
            Self::ZeroCost => f.write_str("cost must be at least 1, got 0"),
            Self::CostExceedsCapacity { cost, max_cost } => write!(
                f,
                "cost {cost} exceeds the policy's max cost of {max_cost}: such a request can never be admitted"
            ),
            Self::TimeOutOfRange { time_us } => {
                write!(f, "time {time_us}µs is beyond the supported range of 2^53µs")
            }
            Self::InvalidConfig(_) => f.write_str("invalid configuration"),
            Self::Backend(_) => f.write_str("rate limiter backend failed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidPolicy(e) => Some(e),
            Self::InvalidConfig(e) => Some(e.as_ref()),
            // The backend's error itself, not its wrapper, which reads the same.
            Self::Backend(failure) => Some(failure.get_ref()),
            Self::ZeroCost | Self::CostExceedsCapacity { .. } | Self::TimeOutOfRange { .. } => None,
        }
    }
}

impl From<PolicyError> for Error {
    fn from(e: PolicyError) -> Self {
        Self::InvalidPolicy(e)
    }
}

impl From<crate::KeyLimitReached> for Error {
    /// A backend failure for this request alone ([`FailureReach::Request`]).
    fn from(e: crate::KeyLimitReached) -> Self {
        Self::backend(FailureReach::Request, e)
    }
}

impl From<crate::Overloaded> for Error {
    /// A backend failure for this request alone ([`FailureReach::Request`]).
    fn from(e: crate::Overloaded) -> Self {
        Self::backend(FailureReach::Request, e)
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// A cause with a cause of its own, to see the chain go two deep.
    #[derive(Debug)]
    struct Outer(io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Redis at 127.0.0.1:6379: connection lost")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// A cause that reads as its own source, as redis-rs gives a server's
    /// error (`NoPerm: …` over the same `NoPerm: …`).
    #[derive(Debug)]
    struct Echo(io::Error);

    impl fmt::Display for Echo {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.fmt(f)
        }
    }

    impl std::error::Error for Echo {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_source_that_reads_as_the_error_before_it_is_written_once() {
        let denied = io::Error::new(io::ErrorKind::PermissionDenied, "NoPerm: no FUNCTION");
        let error = Error::backend(FailureReach::Request, Echo(denied));
        assert_eq!(
            error.chain().to_string(),
            "rate limiter backend failed: NoPerm: no FUNCTION"
        );
    }

    #[test]
    fn a_chain_reporter_prints_each_cause_once() {
        let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        let cases = [
            (Error::from(PolicyError::ZeroLimit), ErrorKind::Config),
            (Error::InvalidConfig(Box::new(refused())), ErrorKind::Config),
            (
                Error::backend(FailureReach::Backend, Outer(refused())),
                ErrorKind::Backend,
            ),
            (Error::ZeroCost, ErrorKind::Request),
            (
                Error::CostExceedsCapacity {
                    cost: 4,
                    max_cost: 3,
                },
                ErrorKind::Request,
            ),
            (
                Error::TimeOutOfRange { time_us: u64::MAX },
                ErrorKind::Request,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
            let report = error.chain().to_string();
            let mut messages = vec![error.to_string()];
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                messages.push(cause.to_string());
                source = cause.source();
            }
            assert_eq!(report, messages.join(": "));
            for message in &messages {
                assert_eq!(report.matches(message.as_str()).count(), 1, "{report}");
            }
            // No message repeats the one after it.
            for pair in messages.windows(2) {
                assert!(
                    !pair[0].contains(&pair[1]),
                    "{:?} repeats its cause",
                    pair[0]
                );
            }
        }
        let backend = Error::backend(FailureReach::Node, Outer(refused()));
        assert_eq!(backend.reach(), Some(FailureReach::Node));
        assert!(backend.is_backend() && !backend.is_request() && !backend.is_config());
        assert_eq!(
            backend.chain().to_string(),
            "rate limiter backend failed: Redis at 127.0.0.1:6379: connection lost: connection refused"
        );
    }
}
