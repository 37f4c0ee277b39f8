//! What a request costs: before it is decided, and after its response.

pub(crate) mod charge_after;
pub mod cost;
