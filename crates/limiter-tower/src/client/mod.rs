//! The client: its address behind trusted proxies, the address blocks, and
//! the key a request is limited under.

pub mod cidr;
pub mod client_address;
pub(crate) mod forwarded_headers;
pub(crate) mod ip_key;
pub mod key;
pub(crate) mod key_bytes;
pub(crate) mod normalize;
