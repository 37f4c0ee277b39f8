//! The answer: the rate-limit headers, the layer's own responses, and
//! gRPC's statuses.

pub(crate) mod grpc;
pub mod headers;
pub(crate) mod limited;
pub(crate) mod own_answer;
pub(crate) mod rate_headers;
pub(crate) mod response;
pub(crate) mod seconds;
pub(crate) mod static_values;
