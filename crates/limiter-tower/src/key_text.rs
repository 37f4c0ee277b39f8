//! [`KeyText`]: a request's key, written in place when it is short.

use std::fmt;
use std::ops::Deref;

use arrayvec::ArrayString;

/// Bytes a key keeps inline: `ip:` and any IPv6 address with a `/64`
/// prefix fit, so nearly every request's key costs no allocation (the
/// layer's hot path made one per request before, and freed it after).
/// A multiple of 16: a [`KeyBuffer`] is checked two words at a time.
pub(crate) const INLINE: usize = 48;

/// A zero-filled buffer a key is written into in place, then made a
/// [`KeyText`] by [`KeyText::from_buffer`]. Aligned so that checking it is
/// UTF-8 goes two words at a time with no byte left over.
#[repr(align(16))]
pub(crate) struct KeyBuffer(pub(crate) [u8; INLINE]);

/// A request's key: inline up to [`INLINE`] bytes, on the heap beyond.
/// Written with [`fmt::Write`], read as a `str`.
#[derive(Clone)]
pub(crate) enum KeyText {
    Inline(ArrayString<INLINE>),
    Heap(String),
}

impl KeyText {
    /// `text` as a key.
    pub(crate) fn of(text: &str) -> Self {
        let mut key = Self::Inline(ArrayString::new());
        key.push_str(text);
        key
    }

    /// The first `len` bytes of `buffer`, a key written in place over
    /// zeros: the whole buffer is checked and copied at once, its size
    /// fixed, which costs less than checking and appending `len` bytes
    /// (the IPv4 key of nearly every request). Text that is not UTF-8 is
    /// taken lossily.
    pub(crate) fn from_buffer(KeyBuffer(buffer): &KeyBuffer, len: usize) -> Self {
        match ArrayString::from_byte_string(buffer) {
            Ok(mut inline) if inline.is_char_boundary(len) => {
                inline.truncate(len);
                Self::Inline(inline)
            }
            _ => Self::of(&String::from_utf8_lossy(&buffer[..len.min(INLINE)])),
        }
    }

    /// Appends `text`, moving to the heap when it no longer fits inline.
    pub(crate) fn push_str(&mut self, text: &str) {
        match self {
            Self::Inline(inline) => {
                if inline.try_push_str(text).is_err() {
                    let mut heap = String::with_capacity(inline.len() + text.len());
                    heap.push_str(inline);
                    heap.push_str(text);
                    *self = Self::Heap(heap);
                }
            }
            Self::Heap(heap) => heap.push_str(text),
        }
    }

    /// The key.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Inline(inline) => inline,
            Self::Heap(heap) => heap,
        }
    }
}

impl Deref for KeyText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Write for KeyText {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.push_str(text);
        Ok(())
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::*;

    #[test]
    fn a_short_key_stays_inline_and_a_long_one_moves_whole_to_the_heap() {
        let mut key = KeyText::of("ip:");
        let network: std::net::Ipv6Addr = "2001:db8:1:2::".parse().unwrap();
        write!(key, "{network}/64").unwrap();
        assert!(matches!(key, KeyText::Inline(_)));
        assert_eq!(&*key, "ip:2001:db8:1:2::/64");
        let long = "x".repeat(INLINE - key.len());
        key.push_str(&long);
        assert!(matches!(key, KeyText::Inline(_)), "exactly full");
        key.push_str("!");
        assert!(matches!(key, KeyText::Heap(_)));
        assert_eq!(&*key, format!("ip:2001:db8:1:2::/64{long}!"));
        key.push_str("é");
        assert!(key.ends_with("!é"));
    }

    #[test]
    fn a_buffer_is_cut_at_its_length_and_taken_lossily_when_not_text() {
        let mut buffer = KeyBuffer([0; INLINE]);
        buffer.0[..6].copy_from_slice(b"ip:1.2");
        assert_eq!(&*KeyText::from_buffer(&buffer, 6), "ip:1.2");
        assert_eq!(&*KeyText::from_buffer(&buffer, 0), "");
        buffer.0[6] = 0xff;
        assert_eq!(&*KeyText::from_buffer(&buffer, 7), "ip:1.2\u{fffd}");
    }

    #[test]
    fn multibyte_text_is_never_split() {
        let mut key = KeyText::of(&"é".repeat(INLINE / 2));
        assert_eq!(key.len(), INLINE);
        key.push_str("é");
        assert_eq!(&*key, "é".repeat(INLINE / 2 + 1));
    }
}
