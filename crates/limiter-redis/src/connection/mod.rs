//! The connection layer: a backend's connections to one server or a
//! cluster's primaries, how a command reaches Redis (routing, redirects,
//! timeouts, reconnection) and the circuit that answers at once while
//! Redis is down. It knows commands and function libraries, not decisions:
//! the decision protocol (`crate::protocol`) builds on it.

pub(crate) mod backend;
pub(crate) mod backend_builder;
pub(crate) mod circuit;
pub(crate) mod cluster;
pub(crate) mod commands;
pub(crate) mod library;
pub(crate) mod runtime;
pub(crate) mod slot_map;
pub(crate) mod watched;
