//! [`KeyBytes`]: a request's key as the layer passes it to its limiter,
//! written in place when it is short.

use std::fmt;
use std::ops::Deref;

/// Bytes a key keeps inline: every address key, and `header:` with a
/// value of up to 41 bytes (most API keys and user ids), so nearly every
/// request's key costs no allocation.
pub(crate) const INLINE: usize = 48;

/// A request's key: bytes, inline up to [`INLINE`], on the heap beyond.
/// Never checked as UTF-8: an address key is not text (see
/// [`ip_key`](crate::client::ip_key)), and the other keys are written from text
/// already. [`Display`](fmt::Display) writes its text form
/// ([`crate::client::key::text_from_bytes`]).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum KeyBytes {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl KeyBytes {
    /// `bytes` as a key.
    #[inline]
    pub(crate) fn of(bytes: &[u8]) -> Self {
        let mut key = Self::empty();
        key.push(bytes);
        key
    }

    /// No bytes yet.
    #[inline]
    pub(crate) fn empty() -> Self {
        Self::Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }

    /// The first `len` bytes of `bytes`, written in place: an address key.
    #[inline]
    pub(crate) fn from_array(bytes: [u8; INLINE], len: usize) -> Self {
        debug_assert!(len <= INLINE);
        Self::Inline {
            len: len as u8,
            bytes,
        }
    }

    /// The key of `len` (at most 8) bytes, `word`'s little-endian bytes:
    /// one store (an address's key).
    #[inline]
    pub(crate) fn set_word(&mut self, word: u64, len: u8) {
        debug_assert!(len <= 8);
        match self {
            Self::Inline { len: at, bytes } => {
                bytes[..8].copy_from_slice(&word.to_le_bytes());
                *at = len;
            }
            Self::Heap(_) => {
                let mut bytes = [0; INLINE];
                bytes[..8].copy_from_slice(&word.to_le_bytes());
                *self = Self::Inline { len, bytes };
            }
        }
    }

    /// Appends `more`, moving to the heap when it no longer fits inline.
    pub(crate) fn push(&mut self, more: &[u8]) {
        match self {
            Self::Inline { len, bytes } => {
                let at = usize::from(*len);
                match bytes.get_mut(at..at + more.len()) {
                    Some(room) => {
                        room.copy_from_slice(more);
                        *len += more.len() as u8;
                    }
                    None => {
                        let mut heap = Vec::with_capacity(at + more.len());
                        heap.extend_from_slice(&bytes[..at]);
                        heap.extend_from_slice(more);
                        *self = Self::Heap(heap);
                    }
                }
            }
            Self::Heap(heap) => heap.extend_from_slice(more),
        }
    }

    /// Appends `text`.
    #[inline]
    pub(crate) fn push_str(&mut self, text: &str) {
        self.push(text.as_bytes());
    }

    /// The key's bytes.
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(heap) => heap,
        }
    }
}

impl Deref for KeyBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Write for KeyBytes {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.push_str(text);
        Ok(())
    }
}

/// The key's text form: `ip:203.0.113.7`, `header:u42`.
#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::*;

    #[test]
    fn a_short_key_stays_inline_and_a_long_one_moves_whole_to_the_heap() {
        let mut key = KeyBytes::of(b"header:");
        write!(key, "{}", "k".repeat(INLINE - 7)).unwrap();
        assert!(matches!(key, KeyBytes::Inline { .. }), "exactly full");
        assert_eq!(key.len(), INLINE);
        key.push(b"!\xff");
        assert!(matches!(key, KeyBytes::Heap(_)));
        assert_eq!(&key[..7], b"header:");
        assert!(key.ends_with(b"k!\xff"));
        key.push_str("é");
        assert!(key.ends_with("é".as_bytes()));
        assert_eq!(KeyBytes::of(b"global").to_string(), "global");
    }
}
