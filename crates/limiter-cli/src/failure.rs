//! [`Failure`]: why a command stopped, and with which exit status.

use std::fmt;

/// Why a command stopped: a message for stderr and an exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
    exit_code: u8,
}

impl Failure {
    /// The command line asked for something impossible (an invalid
    /// policy): exit status 2, as for clap's own usage errors.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
        }
    }

    /// The run failed (unreadable or malformed input, a backend failure,
    /// an output error): exit status 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 1,
        }
    }

    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}
