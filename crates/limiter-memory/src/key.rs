//! [`Key`]: a key as the map stores it, its bytes inline when short.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

use limiter_core::backend::DIGEST_MARK;

/// The longest key stored inline, in bytes: [`Key`] is then 24 bytes, the
/// size of a `String`, with no allocation behind it.
pub(crate) const INLINE: usize = 22;

/// A key's stored bytes ([`StoredKey`](limiter_core::backend::StoredKey)): up to [`INLINE`] bytes in the
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

    use limiter_core::backend::StoredKey;

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

    #[test]
    fn a_digest_shows_as_its_hex() {
        let digest = Key::new(StoredKey::of(b"abc", 2).as_bytes());
        assert_eq!(
            format!("{digest:?}"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
