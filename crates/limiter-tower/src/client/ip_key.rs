//! The key of a client address, as the layer passes it to its limiter: a
//! tag byte and the address's octets, written without formatting; and the
//! text form every key has (`ip:203.0.113.7`), which bans, allowlists and
//! logs are given in.
//!
//! | address | key bytes | text form |
//! |---|---|---|
//! | IPv4 | `0x84`, 4 octets | `ip:203.0.113.7` |
//! | IPv6 | `0x86`, 16 octets | `ip:2001:db8::7` |
//! | IPv6 network ([`ipv6_prefix`](crate::KeyExtractor::ipv6_prefix)) | `0x86`, 16 octets, the prefix length | `ip:2001:db8:1:2::/64` |
//!
//! No text starts with either tag (a byte of `0x80` to `0xBF` only ever
//! continues a UTF-8 character), so an address key is never a text key:
//! not a header value's, nor one a user writes.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::client::key_bytes::{KeyBytes, INLINE};

/// The first byte of an IPv4 address's key.
pub(crate) const IPV4: u8 = 0x84;
/// The first byte of an IPv6 address's (or network's) key.
pub(crate) const IPV6: u8 = 0x86;

/// The key of IPv4 client `ip`: the key of nearly every request of an
/// IPv4 service, five bytes written in place.
#[inline]
pub(crate) fn ipv4_key(ip: Ipv4Addr) -> KeyBytes {
    let mut bytes = [0; INLINE];
    // One word (the address as a number, not its octets one by one):
    // read back whole when the key is hashed.
    let word = (u64::from(u32::from(ip).swap_bytes()) << 8) | u64::from(IPV4);
    bytes[..8].copy_from_slice(&word.to_le_bytes());
    KeyBytes::from_array(bytes, 5)
}

/// [`ipv4_key`], written into `key`, a key of the layer not yet written
/// (inline): two words stored, nothing moved after them.
#[inline]
pub(crate) fn write_ipv4_key(ip: Ipv4Addr, key: &mut KeyBytes) {
    let word = (u64::from(u32::from(ip).swap_bytes()) << 8) | u64::from(IPV4);
    key.set_word(word, 5);
}

/// The key of IPv6 client `ip`, or with a prefix, of its network: the
/// address under the prefix's mask, then the prefix length.
#[inline]
pub(crate) fn ipv6_key(ip: Ipv6Addr, prefix: Option<u8>) -> KeyBytes {
    match prefix {
        Some(prefix) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            ipv6_bytes(Ipv6Addr::from(u128::from(ip) & mask), Some(prefix))
        }
        None => ipv6_bytes(ip, None),
    }
}

/// `0x86`, the octets of `ip` as they are, and `prefix` if any.
fn ipv6_bytes(ip: Ipv6Addr, prefix: Option<u8>) -> KeyBytes {
    let mut bytes = [0; INLINE];
    bytes[0] = IPV6;
    bytes[1..17].copy_from_slice(&ip.octets());
    match prefix {
        Some(prefix) => {
            bytes[17] = prefix;
            KeyBytes::from_array(bytes, 18)
        }
        None => KeyBytes::from_array(bytes, 17),
    }
}

/// Whether `key` is an address's key.
#[inline]
pub(crate) fn is_ip_key(key: &[u8]) -> bool {
    matches!(key.first(), Some(&(IPV4 | IPV6)))
}

/// The address (and prefix) an address key holds; `None` for any other
/// key.
fn address(key: &[u8]) -> Option<(IpAddr, Option<u8>)> {
    match key {
        &[IPV4, a, b, c, d] => Some((IpAddr::V4(Ipv4Addr::new(a, b, c, d)), None)),
        [IPV6, rest @ ..] => {
            let octets: [u8; 16] = rest.get(..16)?.try_into().ok()?;
            let ip = IpAddr::V6(Ipv6Addr::from(octets));
            match rest[16..] {
                [] => Some((ip, None)),
                [prefix] => Some((ip, Some(prefix))),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Writes `key`'s text form: an address key as `ip:` and the address
/// (`/prefix` for a network), any other key as its text; bytes that are
/// not UTF-8 (which no key of the layer holds) escaped as `\xNN`.
pub(crate) fn write_text(key: &[u8], f: &mut impl fmt::Write) -> fmt::Result {
    if let Some((ip, prefix)) = address(key) {
        write!(f, "ip:{ip}")?;
        return match prefix {
            Some(prefix) => write!(f, "/{prefix}"),
            None => Ok(()),
        };
    }
    match std::str::from_utf8(key) {
        Ok(text) => f.write_str(text),
        Err(_) => write!(f, "{}", key.escape_ascii()),
    }
}

/// The key whose text form is `text`: an address key for `ip:` and an
/// address (or network) written as the layer writes it, which is the
/// only way a key of the layer is ever written; any other text as its
/// bytes. `ip:2001:DB8::1` or `ip:10.0.0.0/8` stay text: the layer never
/// writes an address that way, so no request's key is ever that text.
pub(crate) fn from_text(text: &str) -> KeyBytes {
    text.strip_prefix("ip:")
        .and_then(address_key)
        .filter(|key| {
            let mut written = String::with_capacity(text.len());
            write_text(key, &mut written).is_ok() && written == text
        })
        .unwrap_or_else(|| KeyBytes::of(text.as_bytes()))
}

/// The key of `address` (`ADDRESS` or, for IPv6, `NETWORK/PREFIX`), the
/// octets as written.
fn address_key(address: &str) -> Option<KeyBytes> {
    let (ip, prefix) = match address.split_once('/') {
        Some((ip, prefix)) => (ip, Some(prefix.parse::<u8>().ok()?)),
        None => (address, None),
    };
    match (ip.parse::<IpAddr>().ok()?, prefix) {
        (IpAddr::V4(v4), None) => Some(ipv4_key(v4)),
        (IpAddr::V6(v6), prefix) if prefix.is_none_or(|prefix| prefix <= 128) => {
            Some(ipv6_bytes(v6, prefix))
        }
        _ => None,
    }
}

/// A key as logs and errors show it: its text form.
impl fmt::Display for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(self.as_bytes(), f)
    }
}

impl fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(key: &[u8]) -> String {
        let mut text = String::new();
        write_text(key, &mut text).unwrap();
        text
    }

    #[test]
    fn an_address_key_reads_back_as_the_address() {
        for octet in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(octet, 0, 255, octet),
                Ipv4Addr::new(10, octet, 9, 100),
            ] {
                let key = ipv4_key(ip);
                assert_eq!(
                    &key[..],
                    [
                        IPV4,
                        ip.octets()[0],
                        ip.octets()[1],
                        ip.octets()[2],
                        ip.octets()[3]
                    ]
                );
                assert_eq!(text(&key), format!("ip:{ip}"));
                assert_eq!(from_text(&format!("ip:{ip}")), key);
            }
        }
        let v6: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        assert_eq!(text(&ipv6_key(v6, None)), "ip:2001:db8:1:2:aaaa::1");
        assert_eq!(text(&ipv6_key(v6, Some(64))), "ip:2001:db8:1:2::/64");
        assert_eq!(text(&ipv6_key(v6, Some(0))), "ip:::/0");
        assert_eq!(ipv6_key(v6, Some(64)).len(), 18);
        assert_eq!(from_text("ip:2001:db8:1:2::/64"), ipv6_key(v6, Some(64)));
        assert!(is_ip_key(&ipv6_key(v6, None)));
        assert!(!is_ip_key(b"header:ip"));
    }

    #[test]
    fn only_an_address_as_the_layer_writes_it_is_an_address_key() {
        for text in [
            "ip:2001:DB8::1",
            "ip:10.0.0.0/8",
            "ip:010.0.0.1",
            "ip:2001:db8::/064",
            "ip:2001:db8::/129",
            "ip:abcd",
            "ip:",
            "header:ip:10.0.0.1",
        ] {
            assert_eq!(&from_text(text)[..], text.as_bytes(), "{text}");
        }
        // The text of any other key is the key; bytes that are not UTF-8
        // are escaped.
        assert_eq!(text(b"header:u42"), "header:u42");
        assert_eq!(text(b"k\xff\""), "k\\xff\\\"");
        assert_eq!(text(&[IPV4, 1, 2]), "\\x84\\x01\\x02");
    }
}
