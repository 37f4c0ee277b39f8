//! The 64-bit FNV-1a digest, the one every fixed digest of the workspace
//! uses (a set's fingerprint, a record's tag, a Redis hash tag for an
//! awkward user key): tiny, and stable across versions and platforms, so
//! digests stored by one release mean the same to the next. Not for
//! secrets, nor for maps keyed by untrusted input.

/// The 64-bit FNV-1a digest of `bytes`.
///
/// ```
/// use limiter_core::backend::fnv1a_64;
///
/// assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}
