//! Test support for limiter (unpublished): the conformance suite that every
//! backend runs unchanged, and a real `redis-server` harness.
//!
//! A backend's `tests/` implements [`Harness`] and expands
//! [`conformance_suite!`] into one `#[tokio::test]` per case.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

mod harness;
pub mod redis_server;

pub use self::harness::Harness;
