//! Named policies from a configuration file, and the registry of their
//! layers, reloaded while the service serves.

pub mod config;
pub(crate) mod config_error;
pub(crate) mod live;
pub(crate) mod named_policy;
pub(crate) mod policy_limiters;
pub(crate) mod registry;
pub(crate) mod reload;
pub(crate) mod startup_warnings;
