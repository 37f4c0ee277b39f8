//! The decision protocol: what state a policy keeps (`state`) and where it
//! lives (`keys`), the Lua program Redis runs (`scripts`), what a call of
//! it sends and its reply holds (`wire`), and how decisions share calls
//! (`batch`). It sends its calls through the connection layer
//! (`crate::connection`), which never reads a decision.

pub(crate) mod batch;
pub(crate) mod keys;
pub(crate) mod scripts;
pub(crate) mod state;
pub(crate) mod wire;
