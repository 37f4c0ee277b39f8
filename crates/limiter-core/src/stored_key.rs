//! [`StoredKey`]: the bytes an in-process backend stores a key under, a
//! digest when the key is longer than the backend's bound.

use sha2::{Digest as _, Sha256};

/// The length of a digest's stored form: [`DIGEST_MARK`], then the
/// SHA-256 of the key's bytes.
pub const DIGEST_KEY_BYTES: usize = 1 + 32;

/// The first byte of a digest's stored form. No key of a digest's length
/// stored whole starts with it (such a key is stored as its own digest),
/// so no key stored whole can equal a digest.
pub const DIGEST_MARK: u8 = 0xff;

/// The bytes a key is stored and looked up under: its own, when it is at
/// most the backend's bound long, else a digest of them, so that what a
/// client-chosen key can cost is bounded whatever its length.
///
/// Two keys share a state only if they are equal: keys stored whole are
/// compared whole; a digest never equals a key stored whole (no key of
/// its length stored whole starts with [`DIGEST_MARK`]); two digested keys
/// share one only if their SHA-256 collide, which no one can bring about.
///
/// ```
/// use limiter_core::backend::{StoredKey, DIGEST_KEY_BYTES};
///
/// assert_eq!(StoredKey::of(b"tenant:42", 64).as_bytes(), b"tenant:42");
/// let long = "k".repeat(65);
/// assert_eq!(StoredKey::of(long.as_bytes(), 64).as_bytes().len(), DIGEST_KEY_BYTES);
/// ```
#[derive(Debug)]
pub enum StoredKey<'a> {
    /// A key up to the bound, stored as it is.
    Whole(&'a [u8]),
    /// A longer key's digest's stored form.
    Digest([u8; DIGEST_KEY_BYTES]),
}

impl<'a> StoredKey<'a> {
    /// `key` as stored under a bound of `max_key_bytes`.
    #[inline]
    pub fn of(key: &'a [u8], max_key_bytes: usize) -> Self {
        // Only a key of a digest's length can equal one: the first byte is
        // read for those alone.
        if key.len() <= max_key_bytes && (key.len() != DIGEST_KEY_BYTES || key[0] != DIGEST_MARK) {
            Self::Whole(key)
        } else {
            Self::digest(key)
        }
    }

    /// The digest's stored form of `key`.
    #[cold]
    #[inline(never)]
    fn digest(key: &[u8]) -> Self {
        let mut stored = [DIGEST_MARK; DIGEST_KEY_BYTES];
        stored[1..].copy_from_slice(&Sha256::digest(key));
        Self::Digest(stored)
    }

    /// The bytes to look up and store.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Whole(bytes) => bytes,
            Self::Digest(stored) => stored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(key: impl AsRef<[u8]>, max: usize) -> Vec<u8> {
        StoredKey::of(key.as_ref(), max).as_bytes().to_vec()
    }

    #[test]
    fn a_key_up_to_the_bound_is_stored_whole_and_a_longer_one_as_its_digest() {
        let at_bound = "k".repeat(64);
        assert_eq!(stored(&at_bound, 64), at_bound.as_bytes());
        let past_bound = "k".repeat(65);
        let digest = stored(&past_bound, 64);
        assert_eq!(digest.len(), DIGEST_KEY_BYTES);
        assert_eq!(digest[0], DIGEST_MARK);
        // The same key, the same digest; SHA-256 of the key's bytes.
        assert_eq!(digest, stored(&past_bound, 64));
        let abc = stored("abc", 2);
        let hex: String = abc[1..].iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_digest_never_equals_a_key_stored_whole() {
        let long = "x".repeat(300);
        let digest = stored(&long, 256);
        // A key of the digest's very bytes starts with its mark: it is
        // stored as its own digest, not whole.
        let lookalike = digest.clone();
        assert_ne!(stored(&lookalike, 256), digest);
        assert_eq!(stored(&lookalike, 256)[0], DIGEST_MARK);
        // Of another length, or another first byte, within the bound:
        // stored whole.
        assert_eq!(stored([DIGEST_MARK, 1], 256), [DIGEST_MARK, 1]);
        let mut other = lookalike.clone();
        other[0] = 0xfe;
        assert_eq!(stored(&other, 256), other);
    }
}
