//! [`Key`]: a key as the map stores it, its bytes inline when short; and
//! [`StoredKey`]: the bytes a key is stored under, a digest when it is
//! longer than the limiter's bound.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

use sha2::{Digest as _, Sha256};

/// The longest key stored inline, in bytes: [`Key`] is then 24 bytes, the
/// size of a `String`, with no allocation behind it.
pub(crate) const INLINE: usize = 22;

/// The stored form of a key longer than the bound: [`DIGEST_MARK`], then
/// the SHA-256 of the key's bytes.
pub(crate) const DIGEST_KEY_BYTES: usize = 1 + 32;

/// The first byte of a digest's stored form. No key of a digest's length
/// stored whole starts with it (such a key is stored as its own digest),
/// so no key stored whole can equal a digest.
const DIGEST_MARK: u8 = 0xff;

/// The bytes a key is stored and looked up under: its own, when it is at
/// most the limiter's bound long, else a digest of them, so that what a
/// client-chosen key can cost is bounded whatever its length.
///
/// Two keys share a state only if they are equal: keys stored whole are
/// compared whole; a digest never equals a key stored whole (no key of
/// its length stored whole starts with [`DIGEST_MARK`]); two digested keys
/// share one only if their SHA-256 collide, which no one can bring about.
#[derive(Debug)]
pub(crate) enum StoredKey<'a> {
    Whole(&'a [u8]),
    Digest([u8; DIGEST_KEY_BYTES]),
}

impl<'a> StoredKey<'a> {
    /// `key` as stored under a bound of `max_key_bytes`.
    #[inline]
    pub(crate) fn of(key: &'a [u8], max_key_bytes: usize) -> Self {
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
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Whole(bytes) => bytes,
            Self::Digest(stored) => stored,
        }
    }
}

/// A key's stored bytes ([`StoredKey`]): up to [`INLINE`] bytes in the
/// entry itself (IPv4 addresses, user ids, most API keys), longer ones on
/// the heap.
///
/// A key stored inline costs no allocation when it is inserted, no
/// allocator overhead while it is held, and no second cache line when it is
/// compared on a lookup: the map's probe reads the entry, and the bytes are
/// in it. The map is looked up by `&[u8]` ([`Borrow<[u8]>`]); [`Hash`] and
/// [`Eq`] are those of the bytes, as `Borrow` requires.
#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    /// `key`'s bytes, inline if they fit.
    #[inline]
    pub(crate) fn new(key: &[u8]) -> Self {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                Self::Inline { len, bytes }
            }
            _ => Self::Heap(Box::from(key)),
        }
    }

    /// The key's stored bytes, as given to [`Key::new`].
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

/// A key stored whole as its text; a digest as `sha256:` and its hex.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_bytes() {
            [DIGEST_MARK, digest @ ..] => {
                f.write_str("sha256:")?;
                digest.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
            }
            bytes => fmt::Debug::fmt(&String::from_utf8_lossy(bytes), f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use std::mem::size_of;

    use super::*;

    #[test]
    fn a_key_is_the_size_of_a_string() {
        assert_eq!(size_of::<Key>(), 24);
    }

    #[test]
    fn short_keys_are_inline_long_ones_on_the_heap_and_both_hash_as_their_bytes() {
        let hasher = RandomState::new();
        for (text, inline) in [
            ("", true),
            ("ip:10.0.0.1", true),
            ("x".repeat(INLINE).as_str(), true),
            ("x".repeat(INLINE + 1).as_str(), false),
            ("ip:2001:db8:85a3::8a2e:370:7334", false),
            ("ключ", true),
        ] {
            let key = Key::new(text.as_bytes());
            assert_eq!(matches!(key, Key::Inline { .. }), inline, "{text}");
            assert_eq!(key.as_bytes(), text.as_bytes());
            assert_eq!(key, Key::new(text.as_bytes()));
            assert_eq!(
                hasher.hash_one(&key),
                hasher.hash_one(text.as_bytes()),
                "{text}"
            );
            assert_eq!(format!("{key:?}"), format!("{text:?}"));
        }
        assert_ne!(Key::new(b"a"), Key::new(b"a\0"));
    }

    /// The stored form of `key` under a bound of `max`, as a [`Key`].
    fn stored(key: impl AsRef<[u8]>, max: usize) -> Key {
        Key::new(StoredKey::of(key.as_ref(), max).as_bytes())
    }

    #[test]
    fn a_key_up_to_the_bound_is_stored_whole_and_a_longer_one_as_its_digest() {
        let at_bound = "k".repeat(64);
        assert_eq!(stored(&at_bound, 64).as_bytes(), at_bound.as_bytes());
        let past_bound = "k".repeat(65);
        let digest = stored(&past_bound, 64);
        assert_eq!(digest.as_bytes().len(), DIGEST_KEY_BYTES);
        assert_eq!(digest.as_bytes()[0], DIGEST_MARK);
        // The same key, the same digest; SHA-256 of the key's bytes.
        assert_eq!(digest, stored(&past_bound, 64));
        assert_eq!(
            format!("{:?}", stored("abc", 2)),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_digest_never_equals_a_key_stored_whole() {
        let long = "x".repeat(300);
        let digest = stored(&long, 256);
        // A key of the digest's very bytes starts with its mark: it is
        // stored as its own digest, not whole.
        let lookalike = digest.as_bytes().to_vec();
        assert_ne!(stored(&lookalike, 256), digest);
        assert_eq!(stored(&lookalike, 256).as_bytes()[0], DIGEST_MARK);
        // Of another length, or another first byte, within the bound:
        // stored whole.
        assert_eq!(stored([DIGEST_MARK, 1], 256).as_bytes(), [DIGEST_MARK, 1]);
        let mut other = lookalike.clone();
        other[0] = 0xfe;
        assert_eq!(stored(&other, 256).as_bytes(), other);
    }
}
