//! [`ipv4_key`]: the key of an IPv4 client, written without `format!`.

use std::net::Ipv4Addr;

use crate::key_text::{self, KeyBuffer, KeyText};

/// Every octet's decimal text followed by a dot, padded to 4 bytes, and
/// its length (dot included): an IPv4 key is four copies from this table.
const OCTETS: [([u8; 4], u8); 256] = {
    let mut table = [([0; 4], 0); 256];
    let mut octet = 0;
    while octet < 256 {
        let (text, len) = &mut table[octet];
        let mut at = 0;
        if octet >= 100 {
            text[at] = b'0' + (octet / 100) as u8;
            at += 1;
        }
        if octet >= 10 {
            text[at] = b'0' + (octet / 10 % 10) as u8;
            at += 1;
        }
        text[at] = b'0' + (octet % 10) as u8;
        text[at + 1] = b'.';
        *len = at as u8 + 2;
        octet += 1;
    }
    table
};

/// `ip:a.b.c.d`, written by hand: the key of nearly every request of an
/// IPv4 service, and `format!`'s machinery was most of the key's cost.
pub(crate) fn ipv4_key(ip: Ipv4Addr) -> KeyText {
    let mut buffer = KeyBuffer([0; key_text::INLINE]);
    let text = &mut buffer.0;
    text[..3].copy_from_slice(b"ip:");
    let mut len = 3;
    for octet in ip.octets() {
        // At most 3 + 4 x 4 bytes written: within the buffer. What a
        // shorter octet leaves past its dot is overwritten or cut off.
        let (digits, digits_len) = OCTETS[usize::from(octet)];
        text[len..len + 4].copy_from_slice(&digits);
        len += usize::from(digits_len);
    }
    // Without the last octet's dot.
    KeyText::from_buffer(&buffer, len - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn an_ipv4_key_is_written_as_display_writes_it() {
        for octet in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(octet, 0, 255, octet),
                Ipv4Addr::new(10, octet, 9, 100),
            ] {
                assert_eq!(&*ipv4_key(ip), format!("ip:{ip}"));
            }
        }
    }
}
