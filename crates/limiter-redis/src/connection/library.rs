//! [`Library`]: a Redis Functions library as the connection layer sees it,
//! a name and a source to load on every new connection.

use std::sync::Arc;

use redis::{Cmd, RedisError};

/// A Redis Functions library: loaded once per connection (`FUNCTION
/// LOAD`), and again on a connection that answers "function not found"
/// (after a `FUNCTION FLUSH`, or a node first met). The decision protocol
/// makes it; the connection layer only loads it.
#[derive(Debug, Clone)]
pub(crate) struct Library {
    name: Arc<str>,
    source: Arc<str>,
}

impl Library {
    /// The library `name` with its whole `source` (`#!lua name=...` first).
    pub(crate) fn new(source: Arc<str>, name: Arc<str>) -> Self {
        Self { name, source }
    }

    /// The library's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its source, as loaded.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// `FUNCTION LOAD REPLACE source`: idempotent, so every app instance
    /// may load it at connect (the code under one name never differs).
    pub(crate) fn load_command(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(self.source());
        cmd
    }
}

/// `FCALL` of a function the server does not have (flushed, or lost in a
/// restart without persistence): load it and call again.
pub(crate) fn is_function_missing(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}
