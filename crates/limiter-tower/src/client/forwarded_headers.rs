//! The forwarding headers as lists of addresses: `X-Forwarded-For` and
//! RFC 7239 `Forwarded`, read as bytes, element by element.

use std::net::{IpAddr, Ipv4Addr};

use http::header::{HeaderName, FORWARDED};
use http::HeaderMap;

use crate::client::normalize::normalize_ip;

/// `X-Forwarded-For`.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The entries of every `X-Forwarded-For` header, in order: an address, or
/// `None` for one that is not.
pub(crate) fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
        .map(|node| parse_node(node, Ports::Numeric))
        .collect()
}

/// The `for=` of each element of every `Forwarded` header (RFC 7239), in
/// order: an address, or `None` for an element without one (`unknown`, an
/// obfuscated identifier, no `for=`, not parsable).
pub(crate) fn forwarded(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all(FORWARDED)
        .iter()
        .flat_map(|value| split_unquoted(value.as_bytes(), b','))
        .map(|element| {
            split_unquoted(element, b';')
                .into_iter()
                .filter_map(|pair| {
                    let at = pair.iter().position(|&byte| byte == b'=')?;
                    Some((&pair[..at], &pair[at + 1..]))
                })
                .find(|(name, _)| name.trim_ascii().eq_ignore_ascii_case(b"for"))
                .and_then(|(_, value)| {
                    parse_node(&unquote(value.trim_ascii()), Ports::NumericOrObfuscated)
                })
        })
        .collect()
}

/// `s` split at each `delimiter` outside a quoted string. A quote never
/// closed quotes nothing: `s` is then split at every `delimiter`, so that a
/// client's stray `"` cannot swallow the elements proxies append after it.
fn split_unquoted(s: &[u8], delimiter: u8) -> Vec<&[u8]> {
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    let mut cuts = Vec::new();
    for (at, &byte) in s.iter().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            byte if byte == delimiter && !quoted => {
                cuts.push(&s[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return s.split(|&byte| byte == delimiter).collect();
    }
    cuts.push(&s[start..]);
    cuts
}

/// A token as it is, or a quoted string without its quotes and escapes.
fn unquote(value: &[u8]) -> Vec<u8> {
    match value
        .strip_prefix(b"\"")
        .and_then(|inner| inner.strip_suffix(b"\""))
    {
        Some(inner) => {
            let mut out = Vec::with_capacity(inner.len());
            let mut bytes = inner.iter();
            while let Some(&byte) = bytes.next() {
                out.push(if byte == b'\\' {
                    bytes.next().copied().unwrap_or(byte)
                } else {
                    byte
                });
            }
            out
        }
        None => value.to_vec(),
    }
}

/// The ports a forwarded node may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    /// A port number, 0 to 65535 in at most 5 digits (`X-Forwarded-For`,
    /// where proxies that add a port write its number).
    Numeric,
    /// A port number, or RFC 7239's obfuscated port (`_` and letters,
    /// digits, `.`, `_` or `-`): `Forwarded`.
    NumericOrObfuscated,
}

impl Ports {
    /// Whether `port` is one of these.
    fn allow(self, port: &str) -> bool {
        let numeric = (1..=5).contains(&port.len())
            && port.bytes().all(|byte| byte.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|number| number <= 65_535);
        let obfuscated = || {
            port.strip_prefix('_').is_some_and(|rest| {
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte))
            })
        };
        numeric || (self == Self::NumericOrObfuscated && obfuscated())
    }
}

/// A forwarded node: an address, with or without a port (`10.0.0.15:53214`,
/// `[2001:db8::1]:443`, `[2001:db8::1]`; a port `ports` allows, dropped),
/// normalized; `None` for anything else: a port out of range or not a
/// port (`1.2.3.4:99999`, `1.2.3.4:abc`, `1.2.3.4:`), bytes that are not
/// UTF-8.
fn parse_node(node: &[u8], ports: Ports) -> Option<IpAddr> {
    let node = std::str::from_utf8(node).ok()?.trim();
    let ip = if let Some(bracketed) = node.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']')?;
        if !rest.is_empty() && !rest.strip_prefix(':').is_some_and(|port| ports.allow(port)) {
            return None;
        }
        IpAddr::V6(host.parse().ok()?)
    } else if let Ok(ip) = node.parse::<IpAddr>() {
        ip
    } else {
        let (host, port) = node.rsplit_once(':')?;
        if !ports.allow(port) {
            return None;
        }
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(normalize_ip(ip))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: HeaderName, values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(&name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    pub(crate) fn xff(values: &[&str]) -> HeaderMap {
        headers(X_FORWARDED_FOR, values)
    }

    pub(crate) fn fwd(values: &[&str]) -> HeaderMap {
        headers(FORWARDED, values)
    }

    #[test]
    fn addresses_are_normalized() {
        assert_eq!(normalize_ip(ip("::ffff:10.0.0.15")), ip("10.0.0.15"));
        assert_eq!(normalize_ip(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(normalize_ip(ip("10.0.0.15")), ip("10.0.0.15"));
        let numeric = |node: &[u8]| parse_node(node, Ports::Numeric);
        assert_eq!(numeric(b" 10.0.0.15:53214"), Some(ip("10.0.0.15")));
        assert_eq!(numeric(b"[::ffff:1.2.3.4]:80"), Some(ip("1.2.3.4")));
        assert_eq!(numeric(b"unknown"), None);
    }

    #[test]
    fn a_nodes_port_is_a_port_number_or_in_forwarded_an_obfuscated_one() {
        for ports in [Ports::Numeric, Ports::NumericOrObfuscated] {
            let node = |node: &str| parse_node(node.as_bytes(), ports);
            for valid in ["1.2.3.4:0", "1.2.3.4:80", "1.2.3.4:65535", "1.2.3.4:08080"] {
                assert_eq!(node(valid), Some(ip("1.2.3.4")), "{valid}");
            }
            assert_eq!(node("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
            for invalid in [
                "1.2.3.4:99999",
                "1.2.3.4:65536",
                "1.2.3.4:000080",
                "1.2.3.4:abc",
                "1.2.3.4:",
                "1.2.3.4:+80",
                "1.2.3.4:-1",
                "1.2.3.4:8 0",
                "1.2.3.4:80:80",
                "[2001:db8::1]:99999",
                "[2001:db8::1]:abc",
                "[2001:db8::1]:",
                "[2001:db8::1]x",
                "1.2.3.4:_",
            ] {
                assert_eq!(node(invalid), None, "{invalid} under {ports:?}");
            }
        }
        // RFC 7239's obfuscated ports, in Forwarded alone.
        for obfuscated in ["1.2.3.4:_port", "[2001:db8::1]:_a.b-c_9"] {
            assert!(parse_node(obfuscated.as_bytes(), Ports::NumericOrObfuscated).is_some());
            assert_eq!(parse_node(obfuscated.as_bytes(), Ports::Numeric), None);
        }
    }

    #[test]
    fn forwarded_elements_give_their_for_address() {
        let parsed = forwarded(&fwd(&[
            "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"",
            "for=\"198.51.100.1:8080\", for=\"[2001:db8::2]\"",
            "for=unknown, for=_hidden, for=\"[2001:db8::3]:_port\", proto=https",
            "ext=\"a,b;for=6.6.6.6\";for=192.0.2.1, for=\"\\1.2.3.4\"",
        ]));
        assert_eq!(
            parsed,
            vec![
                Some(ip("192.0.2.60")),
                Some(ip("2001:db8:cafe::17")),
                Some(ip("198.51.100.1")),
                Some(ip("2001:db8::2")),
                None, // unknown
                None, // obfuscated
                Some(ip("2001:db8::3")),
                None,                  // no for=
                Some(ip("192.0.2.1")), // the quoted `for=` is another parameter's value
                Some(ip("1.2.3.4")),   // an escaped character in a quoted string
            ]
        );
    }
}
