//! [`Decided`]: what the layer answers from, one policy's [`Decision`] or a
//! tiered set's [`SetDecision`].

use limiter_core::{Decision, SetDecision};

/// A limiter's answer as the layer reads it. A [`SetDecision`] carries
/// every part (nine decisions, about 700 bytes, built and moved on each
/// request); a single policy decided in process answers with its
/// [`Decision`] alone, and is made a set only where one is kept (a
/// follow-up future, an `on_limited` function's context).
pub(crate) trait Decided: Copy {
    /// The (combined) decision.
    fn decision(&self) -> &Decision;

    /// The decision of the part that bound the answer.
    fn bound(&self) -> &Decision;

    /// As a set.
    fn into_set(self) -> SetDecision;
}

impl Decided for Decision {
    fn decision(&self) -> &Decision {
        self
    }

    fn bound(&self) -> &Decision {
        self
    }

    fn into_set(self) -> SetDecision {
        SetDecision::single(self)
    }
}

impl Decided for SetDecision {
    fn decision(&self) -> &Decision {
        &self.decision
    }

    fn bound(&self) -> &Decision {
        SetDecision::bound(self)
    }

    fn into_set(self) -> SetDecision {
        self
    }
}
