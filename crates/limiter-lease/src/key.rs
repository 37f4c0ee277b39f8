//! [`Key`]: a key as the lease map stores it, its bytes inline when short.

/// The longest key stored inline, in bytes: [`Key`] is then 24 bytes, the
/// size of a `String`, with no allocation behind it.
const INLINE: usize = 22;

/// A key's bytes: up to [`INLINE`] of them in the map's entry itself, so
/// that comparing a short key on a lookup reads no second cache line;
/// longer ones on the heap.
#[derive(Debug)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    /// `key`'s bytes, inline if they fit.
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

    /// Whether this is `key`.
    #[inline]
    pub(crate) fn is(&self, key: &[u8]) -> bool {
        let stored = match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        };
        stored == key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_long_ones_on_the_heap() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        for (text, inline) in [
            ("", true),
            ("tenant:42", true),
            ("x".repeat(INLINE).as_str(), true),
            ("x".repeat(INLINE + 1).as_str(), false),
            ("ключ", true),
        ] {
            let key = Key::new(text.as_bytes());
            assert_eq!(matches!(key, Key::Inline { .. }), inline, "{text}");
            assert!(key.is(text.as_bytes()), "{text}");
            assert!(!key.is(format!("{text}\0").as_bytes()), "{text}");
        }
        assert!(!Key::new(b"a").is(b""));
    }
}
