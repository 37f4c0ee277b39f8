//! [`Failure`]: why a command stopped, and with which exit status.

use std::error::Error;
use std::fmt;

/// Why a command stopped: a message for stderr, the error that caused it
/// (if any, as its [`source`](Error::source)) and an exit status.
///
/// `Display` is the message only; [`Failure::report`] is the message and
/// every cause after it, each once (`a: b: c`), as the binary prints it.
#[derive(Debug)]
pub struct Failure {
    message: String,
    exit_code: u8,
    source: Option<Box<dyn Error + Send + Sync + 'static>>,
}

impl Failure {
    /// The command line asked for something impossible (an invalid
    /// policy): exit status 2, as for clap's own usage errors.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
            source: None,
        }
    }

    /// The run failed (unreadable or malformed input, a backend failure,
    /// an output error): exit status 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 1,
            source: None,
        }
    }

    /// The same failure, caused by `source`: reported after the message.
    #[must_use]
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }

    /// The message and every cause after it, each once: `a: b: c`.
    pub fn report(&self) -> String {
        match self.source() {
            Some(cause) => format!("{}: {}", self.message, limiter_core::ErrorChain(cause)),
            None => self.message.clone(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_cause_once() {
        let policy = limiter_core::Error::from(limiter_core::PolicyError::ZeroLimit);
        let failure = Failure::usage("cannot build the limiter").with_source(policy);
        assert_eq!(failure.to_string(), "cannot build the limiter");
        assert_eq!(
            failure.report(),
            "cannot build the limiter: invalid policy: limit must be at least 1, got 0"
        );
        assert_eq!(failure.exit_code(), 2);
    }
}
