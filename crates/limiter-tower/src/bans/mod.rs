//! Who is never limited (the allowlist), and who is refused outright (bans
//! and penalties).

pub(crate) mod allow;
pub mod ban;
