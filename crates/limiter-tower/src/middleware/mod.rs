//! The middleware: the layer a route is limited with, its service, the
//! future of each request, the body its response goes out in (metered for a
//! charge after it), the settings they share, and what they record.

pub mod body;
pub mod future;
pub(crate) mod layer;
pub(crate) mod metered_body;
pub(crate) mod observe;
pub(crate) mod pending;
pub(crate) mod plans;
pub(crate) mod response_charge;
pub(crate) mod service;
pub(crate) mod settings;
pub(crate) mod shaping;
