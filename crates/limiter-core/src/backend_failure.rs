//! [`BackendFailure`]: a backend's error and how far it reaches
//! ([`FailureReach`]), which decides what a failure policy answers.

use std::fmt;

/// How far a backend failure reaches: whether the next request, on another
/// key, can expect the same.
///
/// The backend knows this where the failure happens (a refused connection
/// is not an error reply), so it says it; [`Resilient`](crate::Resilient)
/// acts on it: only [`Backend`](Self::Backend) starts an outage, in which
/// every key is answered by the failure policy without asking the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureReach {
    /// The backend cannot be reached or does not answer (connection
    /// refused or lost, no answer in time, known down): every key fails
    /// alike until it answers again.
    Backend,
    /// One node of a cluster cannot be reached or does not answer: the
    /// keys it serves fail, the other nodes' keys are decided as usual.
    /// The backend keeps its own per-node circuit, so it answers that
    /// node's keys at once while the node is down.
    Node,
    /// The backend answered this request with an error, or refused it
    /// while answering others (an error reply such as `WRONGTYPE` or
    /// `OOM`, a full key map, a request queued past its timeout): the next
    /// request is asked as usual.
    Request,
}

impl FailureReach {
    /// `"backend"`, `"node"` or `"request"`: a label for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Backend => "backend",
            Self::Node => "node",
            Self::Request => "request",
        }
    }
}

impl fmt::Display for FailureReach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend's error, as [`Error::Backend`](crate::Error::Backend) carries
/// it: the error itself and its [`FailureReach`].
///
/// It reads as the error it carries: its `Display` and `source` are the
/// error's, so an error chain prints the backend's error once.
///
/// ```
/// use limiter_core::{BackendFailure, Error, FailureReach};
///
/// let refused = std::io::Error::other("connection refused");
/// let error = Error::Backend(BackendFailure::new(FailureReach::Backend, refused));
/// assert_eq!(error.reach(), Some(FailureReach::Backend));
/// assert_eq!(error.chain().to_string(), "rate limiter backend failed: connection refused");
/// ```
#[derive(Debug)]
pub struct BackendFailure {
    reach: FailureReach,
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl BackendFailure {
    /// `error`, reaching as far as `reach` says.
    pub fn new(
        reach: FailureReach,
        error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            reach,
            error: error.into(),
        }
    }

    /// How far the failure reaches.
    pub fn reach(&self) -> FailureReach {
        self.reach
    }

    /// The backend's error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The backend's error, unwrapped.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self.error
    }

    /// Whether the backend's error is a `T`.
    pub fn is<T: std::error::Error + 'static>(&self) -> bool {
        self.error.is::<T>()
    }

    /// The backend's error as a `T`, if it is one.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref()
    }
}

impl fmt::Display for BackendFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for BackendFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}
