//! The client address of a request: its peer, unless the peer is a
//! trusted proxy; then the client the forwarding headers (`X-Forwarded-For`,
//! RFC 7239 `Forwarded`) name, walked from the right past every trusted
//! hop. What a client behind a proxy can forge, and what it cannot, is
//! decided here.

use std::net::{IpAddr, SocketAddr};

use http::header::FORWARDED;
use http::{Extensions, HeaderMap};

use crate::client::cidr::IpNet;
use crate::client::forwarded_headers::{forwarded, x_forwarded_for, X_FORWARDED_FOR};
pub use crate::client::normalize::normalize_ip;

/// The client address of a request whose peer is `peer`: the peer itself,
/// unless it is one of `trusted`; then the right-most address of the
/// forwarding headers that is not trusted.
///
/// The headers are `X-Forwarded-For` (every such header, in order, comma
/// separated) and RFC 7239 `Forwarded` (the `for=` of each element, in
/// order), each walked from the right. The left-most entries are never
/// believed: any client can write them. If every entry is trusted, the
/// left-most one is the client. An entry that is not an address ends the
/// walk, and the last trusted address seen is the client: `unknown`, an
/// obfuscated identifier (`for=_hidden`), an element without `for=`, or
/// garbage, since what lies left of a hop that hid its client cannot be
/// told from what the client wrote.
///
/// A proxy writes one header and passes the other through as the client
/// sent it, so when both are present and name different clients, one of
/// them is forged and the client is the peer (the nearest proxy): a forger
/// shares its proxy's budget rather than picking a fresh key per request.
///
/// Headers are read as bytes, element by element: an element that is not
/// UTF-8 is not an address, and hides no other element.
#[inline]
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    resolve_client(peer, headers, trusted).ip
}

/// A request's client address as [`client_ip`] resolves it, and whether
/// anybody vouched for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client {
    /// The address: what the IP key limits.
    pub(crate) ip: IpAddr,
    /// False when a trusted peer stands in for a client no header named (no
    /// header, the nearest entry not an address, headers that disagree): a
    /// client behind the proxy can bring that about.
    vouched: bool,
}

impl Client {
    /// The address to match against the allowlist: none for a proxy
    /// standing in for its unnamed client, which would otherwise pass
    /// unlimited whenever the proxy's own address is allowlisted.
    #[inline]
    pub(crate) fn allowlistable(self) -> Option<IpAddr> {
        self.vouched.then_some(self.ip)
    }
}

/// [`client_ip`], with whether anybody vouched for the address.
#[inline]
pub(crate) fn resolve_client(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> Client {
    let peer = normalize_ip(peer);
    if trusted.is_empty() {
        // No proxy is trusted (the default): no header is read, and
        // (inline) no call is made.
        return Client {
            ip: peer,
            vouched: true,
        };
    }
    client_behind_proxies(peer, headers, trusted)
}

/// [`resolve_client`] of a normalized `peer` with proxies to trust.
fn client_behind_proxies(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> Client {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(peer) {
        return Client {
            ip: peer,
            vouched: true,
        };
    }
    // The client a header names, if its right-most entry is an address.
    let walk = |entries: Vec<Option<IpAddr>>| {
        let mut client = None;
        for entry in entries.into_iter().rev() {
            let Some(ip) = entry else { break };
            client = Some(ip);
            if !is_trusted(ip) {
                break;
            }
        }
        client
    };
    let forwarded_for = headers
        .contains_key(X_FORWARDED_FOR)
        .then(|| walk(x_forwarded_for(headers)));
    let forwarded = headers
        .contains_key(FORWARDED)
        .then(|| walk(forwarded(headers)));
    let named = match (forwarded_for, forwarded) {
        (Some(one), Some(other)) if one != other => None,
        (Some(client), _) | (None, Some(client)) => client,
        (None, None) => None,
    };
    match named {
        Some(ip) => Client { ip, vouched: true },
        None => Client {
            ip: peer,
            vouched: false,
        },
    }
}

/// The peer address in `extensions`: (feature `axum`) axum's
/// `ConnectInfo<SocketAddr>`, or a [`SocketAddr`], or (feature `tonic`)
/// tonic's `TcpConnectInfo`. axum's comes first: with the feature on, it
/// is the one nearly every request carries, and each lookup that misses
/// costs a hash probe.
#[inline]
pub(crate) fn peer_addr(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    {
        return Some(addr.ip());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::forwarded_headers::tests::{fwd, xff};
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_forwarded_entry_with_an_invalid_port_ends_the_walk() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        for entry in [
            "198.51.100.7:99999",
            "198.51.100.7:abc",
            "[2001:db8::7]:70000",
        ] {
            let chain = xff(&[&format!("6.6.6.6, {entry}, 10.0.0.2")]);
            assert_eq!(
                client_ip(ip("10.0.0.1"), &chain, &trusted),
                ip("10.0.0.2"),
                "{entry}"
            );
            let chain = fwd(&[&format!("for=6.6.6.6, for=\"{entry}\", for=10.0.0.2")]);
            assert_eq!(
                client_ip(ip("10.0.0.1"), &chain, &trusted),
                ip("10.0.0.2"),
                "{entry}"
            );
        }
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_peers() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let spoofed = xff(&["1.2.3.4"]);
        // An untrusted peer's header is ignored: it is the client.
        assert_eq!(
            client_ip(ip("203.0.113.9"), &spoofed, &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_ip(ip("203.0.113.9"), &spoofed, &[]),
            ip("203.0.113.9")
        );
        // Behind a trusted proxy: the right-most untrusted entry, never the left-most.
        let chain = xff(&["6.6.6.6, 198.51.100.7", "10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &chain, &trusted),
            ip("198.51.100.7")
        );
        let with_port = xff(&["6.6.6.6, 198.51.100.7:5555, 10.0.0.2"]);
        assert_eq!(
            client_ip(ip("::ffff:10.0.0.1"), &with_port, &trusted),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
        // All trusted: the left-most trusted.
        let internal = xff(&["10.0.0.3, 10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &internal, &trusted),
            ip("10.0.0.3")
        );
        // Garbage ends the walk at the last trusted address seen.
        let garbage = xff(&["1.2.3.4, unknown, 10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &garbage, &trusted),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn forwarded_is_walked_as_x_forwarded_for() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let spoofed = fwd(&["for=1.2.3.4"]);
        assert_eq!(
            client_ip(ip("203.0.113.9"), &spoofed, &trusted),
            ip("203.0.113.9")
        );
        let chain = fwd(&["for=6.6.6.6, for=\"198.51.100.7:5555\"", "for=10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &chain, &trusted),
            ip("198.51.100.7")
        );
        // A proxy that hides its client ends the walk at that proxy.
        let hidden = fwd(&["for=6.6.6.6, for=_hidden;by=10.0.0.2, for=10.0.0.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &hidden, &trusted), ip("10.0.0.2"));
        let unknown = fwd(&["for=6.6.6.6, for=unknown"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &unknown, &trusted),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn both_headers_must_agree_or_the_proxy_is_the_client() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut both = xff(&["6.6.6.6, 198.51.100.7"]);
        both.append(FORWARDED, HeaderValue::from_static("for=198.51.100.7"));
        assert_eq!(
            client_ip(ip("10.0.0.1"), &both, &trusted),
            ip("198.51.100.7")
        );
        // The proxy appended to X-Forwarded-For; the client wrote Forwarded.
        let mut forged = xff(&["198.51.100.7"]);
        forged.append(FORWARDED, HeaderValue::from_static("for=1.2.3.4"));
        assert_eq!(client_ip(ip("10.0.0.1"), &forged, &trusted), ip("10.0.0.1"));
    }

    #[test]
    fn a_malformed_element_hides_no_element_a_proxy_appended() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut not_utf8 = HeaderMap::new();
        let value = HeaderValue::from_bytes(b"\xff, 198.51.100.7").unwrap();
        not_utf8.append(X_FORWARDED_FOR, value);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &not_utf8, &trusted),
            ip("198.51.100.7")
        );
        let mut garbage_between = HeaderMap::new();
        let value = HeaderValue::from_bytes(b"1.2.3.4, \xff, 10.0.0.2").unwrap();
        garbage_between.append(X_FORWARDED_FOR, value);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &garbage_between, &trusted),
            ip("10.0.0.2")
        );
        assert_eq!(
            forwarded(&fwd(&[
                "for=\"6.6.6.6, for=198.51.100.7",
                "for=\"[2001:db8::1]\", ext=\"a, for=\"[2001:db8::2]:80\""
            ])),
            vec![
                None,
                Some(ip("198.51.100.7")),
                Some(ip("2001:db8::1")),
                None,
                Some(ip("2001:db8::2")),
            ]
        );
    }

    #[test]
    fn a_proxy_standing_in_for_an_unnamed_client_is_not_allowlistable() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let allowlistable =
            |headers: &HeaderMap| resolve_client(ip("10.0.0.1"), headers, &trusted).allowlistable();
        assert_eq!(allowlistable(&HeaderMap::new()), None);
        assert_eq!(allowlistable(&fwd(&["for=unknown"])), None);
        let mut disagree = xff(&["198.51.100.7"]);
        disagree.append(FORWARDED, HeaderValue::from_static("for=1.2.3.4"));
        assert_eq!(allowlistable(&disagree), None);
        // Named by a header: the client, or a trusted hop that hid its own.
        assert_eq!(
            allowlistable(&xff(&["198.51.100.7"])),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(allowlistable(&xff(&["10.0.0.1"])), Some(ip("10.0.0.1")));
        assert_eq!(
            allowlistable(&xff(&["unknown, 10.0.0.2"])),
            Some(ip("10.0.0.2"))
        );
        // A peer that is not a trusted proxy is its own client.
        let direct = resolve_client(ip("203.0.113.9"), &HeaderMap::new(), &trusted);
        assert_eq!(direct.allowlistable(), Some(ip("203.0.113.9")));
    }

    #[test]
    fn the_peer_address_is_read_from_either_extension_axums_first() {
        let mut extensions = Extensions::new();
        assert_eq!(peer_addr(&extensions), None);
        let plain: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        extensions.insert(plain);
        assert_eq!(peer_addr(&extensions), Some(ip("192.0.2.1")));
        #[cfg(feature = "axum")]
        {
            let connect: SocketAddr = "198.51.100.2:6000".parse().unwrap();
            extensions.insert(axum::extract::ConnectInfo(connect));
            assert_eq!(peer_addr(&extensions), Some(ip("198.51.100.2")));
        }
    }
}
