//! [`Key`]: a key as the lease map stores it, its bytes inline when short.

/// The longest key stored inline, in bytes: [`Key`] is then 16 bytes, with
/// no allocation behind it.
const INLINE: usize = 14;

/// A key's bytes: up to [`INLINE`] of them in the map's entry itself, so
/// that comparing a short key on a lookup reads no second cache line;
/// longer ones on the heap, behind a thin pointer, so that they keep the
/// entry small.
#[derive(Debug)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<Box<[u8]>>),
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
            _ => Self::Heap(Box::new(Box::from(key))),
        }
    }

    /// The key's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(bytes) => bytes,
        }
    }

    /// Whether this is `key`.
    #[inline]
    pub(crate) fn is(&self, key: &[u8]) -> bool {
        self.bytes() == key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_long_ones_on_the_heap() {
        assert_eq!(std::mem::size_of::<Key>(), 16);
        for (text, inline) in [
            ("", true),
            ("tenant:42", true),
            ("x".repeat(INLINE).as_str(), true),
            ("x".repeat(INLINE + 1).as_str(), false),
            ("ключ", true),
            ("ip:203.0.113.195", false),
        ] {
            let key = Key::new(text.as_bytes());
            assert_eq!(matches!(key, Key::Inline { .. }), inline, "{text}");
            assert!(key.is(text.as_bytes()), "{text}");
            assert_eq!(key.bytes(), text.as_bytes());
            assert!(!key.is(format!("{text}\0").as_bytes()), "{text}");
        }
        assert!(!Key::new(b"a").is(b""));
    }
}
