//! The conformance suite against the core alone ([`ModelHarness`]): proves
//! the cases themselves right, so a failure on a backend is the backend's.

use limiter_test::ModelHarness;

limiter_test::conformance_suite!(ModelHarness);
