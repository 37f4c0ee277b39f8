//! [`OwnAnswer`]: the mark of a response a limiter-tower layer answered
//! itself.

/// Marks a response a limiter-tower layer answered itself (a refusal, a
/// ban, an error's 503), in its extensions: a layer outside it reads its
/// `Retry-After` as a refusal that binds, where a service's own
/// `Retry-After` (a 503 for maintenance) is not one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnAnswer;
