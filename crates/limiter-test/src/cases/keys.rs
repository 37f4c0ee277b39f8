//! Keys are byte strings (docs/spec.md section 1): any bytes, text or
//! not, are a key of their own, equal only to the same bytes.

use std::time::Duration;

use limiter_core::{Policy, Rate};

use super::{Subject, T0};
use crate::Harness;

/// Keys a backend could confuse: bytes that are not UTF-8, braces (a
/// Redis hash tag), a NUL, the first byte of the memory backend's digest
/// form and a key of a digest's length led by it, an address's octets
/// beside its text, and keys one byte apart.
fn keys() -> Vec<Vec<u8>> {
    let mut digest_like = vec![0xff];
    digest_like.extend([7u8; 32]);
    vec![
        vec![0xff, 0xfe, 0x00, 0x80],
        vec![0xff, 0xfe, 0x00, 0x81],
        b"{user}:1".to_vec(),
        b"}user{".to_vec(),
        b"{}".to_vec(),
        vec![0x00],
        Vec::new(),
        digest_like,
        vec![203, 0, 113, 7],
        b"203.0.113.7".to_vec(),
        "ключ".as_bytes().to_vec(),
    ]
}

/// Each of those keys is limited on its own: two admitted, the third
/// denied, and spending one never touches another.
pub async fn byte_keys_are_keys_of_their_own<H: Harness>(harness: &H) {
    let policy = Policy::fixed_window(Rate::new(2, Duration::from_secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    let keys = keys();
    for (i, key) in keys.iter().enumerate() {
        for earlier in &keys[..i] {
            let spent = s.peek(T0, earlier, 1).await;
            assert!(!spent.allowed, "{key:?} after {earlier:?}");
        }
        for expected in [true, true, false] {
            let decision = s.acquire(T0, key, 1).await;
            assert_eq!(decision.allowed, expected, "{key:?}");
        }
        for later in &keys[i + 1..] {
            // A fresh key: one request admitted would leave one.
            let fresh = s.peek(T0, later, 1).await;
            assert!(
                fresh.allowed && fresh.remaining == 1,
                "{later:?} after {key:?}"
            );
        }
    }
    s.reset(&keys[0]).await;
    assert!(s.acquire(T0, &keys[0], 1).await.allowed);
    assert!(!s.acquire(T0, &keys[1], 1).await.allowed);
}
