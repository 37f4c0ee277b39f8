//! Header values whose text is never freed: the numbers below 100, and
//! the texts a layer's policies fix (a limit, `RateLimit-Policy`), each
//! kept once for the life of the process. A response's copy of one moves
//! no reference count: every request, on every core, would otherwise
//! write to the one counter of a shared value.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use http::HeaderValue;

/// The numbers 0 to 99 in decimal.
const SMALL: [&str; 100] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32",
    "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48",
    "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63", "64",
    "65", "66", "67", "68", "69", "70", "71", "72", "73", "74", "75", "76", "77", "78", "79", "80",
    "81", "82", "83", "84", "85", "86", "87", "88", "89", "90", "91", "92", "93", "94", "95", "96",
    "97", "98", "99",
];

/// `number` as a static header value, if it is below 100 (a reset or a
/// next unit in seconds, nearly always).
#[inline]
pub(crate) fn small_number(number: u64) -> Option<HeaderValue> {
    let text = SMALL.get(usize::try_from(number).ok()?)?;
    Some(HeaderValue::from_static(text))
}

/// The most texts kept, and the longest: a layer built beyond them (a
/// process building layers of ever new policies) gets values shared
/// as any other, never more memory kept.
const MAX_TEXTS: usize = 4_096;
const MAX_TEXT_BYTES: usize = 1_024;

/// `text` as a header value that is static where it can be (see the
/// module); `None` if it is not a header value.
pub(crate) fn fixed(text: &str) -> Option<HeaderValue> {
    static TEXTS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let shared = HeaderValue::from_str(text).ok()?;
    if text.len() > MAX_TEXT_BYTES {
        return Some(shared);
    }
    let mut texts = TEXTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let kept: &'static str = match texts.get(text) {
        Some(kept) => kept,
        None if texts.len() < MAX_TEXTS => {
            let kept: &'static str = Box::leak(text.into());
            texts.insert(kept);
            kept
        }
        None => return Some(shared),
    };
    // A header value's text, checked above.
    Some(HeaderValue::from_static(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_numbers_and_fixed_texts_are_their_text() {
        for number in [0, 7, 42, 99] {
            assert_eq!(small_number(number).unwrap(), number.to_string().as_str());
        }
        assert_eq!(small_number(100), None);
        let policy = "\"token-bucket:10/1s\";q=10;w=1";
        assert_eq!(fixed(policy).unwrap(), policy);
        assert_eq!(fixed(policy).unwrap(), fixed(policy).unwrap());
        assert_eq!(fixed("bad\nvalue"), None);
    }
}
