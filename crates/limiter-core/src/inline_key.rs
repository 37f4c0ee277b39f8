//! [`InlineKey`]: a key as an in-process map stores it, its bytes inline
//! when short; the one key type of the memory backend, the leases and the
//! HTTP layer's ban list.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::stored_key::DIGEST_MARK;

/// A key's stored bytes ([`StoredKey`](crate::backend::StoredKey)): up
/// to `N` bytes in the map's entry itself (IPv4 addresses, user ids, most
/// API keys), longer ones on the heap behind a thin pointer, so that the
/// key is `N + 2` bytes whatever its length (24 with `N = 22`, the size
/// of a `String`; 16 with `N = 14`).
///
/// A key stored inline costs no allocation when it is inserted, no
/// allocator overhead while it is held, and no second cache line when it
/// is compared on a lookup: the map's probe reads the entry, and the bytes
/// are in it. A map is looked up by `&[u8]` ([`Borrow<[u8]>`]); [`Hash`]
/// and [`Eq`] are those of the bytes, as `Borrow` requires. Its `Debug`
/// shows a key stored whole as its text, a digest as `sha256:` and its
/// hex.
///
/// ```
/// use limiter_core::backend::InlineKey;
///
/// let short = InlineKey::<14>::new(b"tenant:42");
/// assert!(short.is_inline() && short.as_bytes() == b"tenant:42");
/// assert!(!InlineKey::<14>::new(b"ip:203.0.113.195").is_inline());
/// assert_eq!(std::mem::size_of::<InlineKey<14>>(), 16);
/// assert_eq!(std::mem::size_of::<InlineKey<22>>(), 24);
/// ```
#[derive(Clone)]
pub enum InlineKey<const N: usize> {
    /// Up to `N` bytes, in place.
    Inline {
        /// How many of `bytes` are the key's.
        len: u8,
        /// The key's bytes, then zeros.
        bytes: [u8; N],
    },
    /// More than `N` bytes, on the heap.
    Heap(Box<Box<[u8]>>),
}

impl<const N: usize> InlineKey<N> {
    /// `key`'s bytes, inline if they fit.
    #[inline]
    pub fn new(key: &[u8]) -> Self {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= N => {
                let mut bytes = [0; N];
                bytes[..key.len()].copy_from_slice(key);
                Self::Inline { len, bytes }
            }
            _ => Self::Heap(Box::new(Box::from(key))),
        }
    }

    /// The key's stored bytes, as given to [`new`](Self::new).
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }

    /// Whether the bytes are held in place (no allocation behind them).
    pub fn is_inline(&self) -> bool {
        matches!(self, Self::Inline { .. })
    }
}

impl<const N: usize> Borrow<[u8]> for InlineKey<N> {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl<const N: usize> Hash for InlineKey<N> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl<const N: usize> PartialEq for InlineKey<N> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for InlineKey<N> {}

/// A key stored whole as its text; a digest as `sha256:` and its hex.
impl<const N: usize> fmt::Debug for InlineKey<N> {
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

    use super::*;
    use crate::backend::StoredKey;

    #[test]
    fn short_keys_are_inline_long_ones_on_the_heap_and_both_hash_as_their_bytes() {
        let hasher = RandomState::new();
        for (text, inline) in [
            ("", true),
            ("ip:10.0.0.1", true),
            ("x".repeat(22).as_str(), true),
            ("x".repeat(23).as_str(), false),
            ("ip:2001:db8:85a3::8a2e:370:7334", false),
            ("ключ", true),
        ] {
            let key = InlineKey::<22>::new(text.as_bytes());
            assert_eq!(key.is_inline(), inline, "{text}");
            assert_eq!(key.as_bytes(), text.as_bytes());
            assert_eq!(key, InlineKey::new(text.as_bytes()));
            assert_eq!(
                hasher.hash_one(&key),
                hasher.hash_one(text.as_bytes()),
                "{text}"
            );
            assert_eq!(format!("{key:?}"), format!("{text:?}"));
        }
        assert_ne!(InlineKey::<22>::new(b"a"), InlineKey::new(b"a\0"));
        assert_ne!(InlineKey::<14>::new(b""), InlineKey::new(b"\0"));
    }

    #[test]
    fn a_digest_shows_as_its_hex() {
        let digest = InlineKey::<22>::new(StoredKey::of(b"abc", 2).as_bytes());
        assert_eq!(
            format!("{digest:?}"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
