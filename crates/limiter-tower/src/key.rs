//! [`KeyExtractor`]: which key a request is limited under, and the client
//! address behind [trusted proxies](crate::RateLimitLayer::trusted_proxies).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use http::header::HeaderName;
use http::{Extensions, HeaderMap, Method, Uri};

/// `X-Forwarded-For`.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// What a [`KeyExtractor::custom`] closure sees of a request: its head and
/// the client address resolved by the layer (behind trusted proxies).
#[derive(Debug)]
#[non_exhaustive]
pub struct RequestView<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request URI.
    pub uri: &'a Uri,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The request extensions (axum's `MatchedPath` is here, for instance).
    pub extensions: &'a Extensions,
    /// The client address (see [`KeyExtractor::ip`]), `None` when the peer
    /// address is not in the extensions.
    pub client_ip: Option<IpAddr>,
}

/// The function of a [`KeyExtractor::custom`].
type CustomKey = Arc<dyn Fn(&RequestView<'_>) -> Option<String> + Send + Sync>;

#[derive(Clone)]
enum Kind {
    Global,
    Ip,
    Header(HeaderName),
    Custom(CustomKey),
}

/// What a request whose key is missing (no such header, or a custom
/// closure answering `None`) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fallback {
    /// Answer `401 Unauthorized` without asking the limiter. The default.
    #[default]
    Reject,
    /// Limit the request by its client address instead (key `ip:<addr>`).
    Ip,
}

/// Which key a request is limited under.
///
/// Keys are prefixed by their kind, so that a header value can never
/// collide with an address: `global`, `ip:203.0.113.7`, `header:<value>`,
/// `custom:<value>`. A request whose key cannot be found is never let
/// through unlimited: a missing header or custom key goes to the
/// [`Fallback`] (401 by default), a missing peer address answers 500.
///
/// ```
/// use limiter_tower::KeyExtractor;
///
/// let by_user = KeyExtractor::header("x-user-id").or_ip();
/// let by_route = KeyExtractor::custom(|req| Some(format!("{} {}", req.method, req.uri.path())));
/// # let _ = (by_user, by_route);
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    kind: Kind,
    fallback: Fallback,
}

impl KeyExtractor {
    /// One key for every request: the limit is the service's.
    pub fn global() -> Self {
        Self::of(Kind::Global)
    }

    /// The client address: the peer's address from the request's
    /// extensions (a [`SocketAddr`], or with the `axum` feature axum's
    /// `ConnectInfo<SocketAddr>`), normalized (an IPv4-mapped IPv6 address
    /// is its IPv4 address; the port is dropped), or, when the peer is a
    /// trusted proxy, the right-most untrusted address of
    /// `X-Forwarded-For`. The default.
    pub fn ip() -> Self {
        Self::of(Kind::Ip)
    }

    /// The value of header `name` (an API key, a user id). A request
    /// without it goes to the [`Fallback`]: 401 unless [`or_ip`](Self::or_ip).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn header(name: &str) -> Self {
        let name = HeaderName::from_str(name).expect("a valid header name");
        Self::of(Kind::Header(name))
    }

    /// The key `f` answers; `None` goes to the [`Fallback`].
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&RequestView<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Self::of(Kind::Custom(Arc::new(f)))
    }

    /// A request without its key is limited by its client address.
    #[must_use]
    pub fn or_ip(self) -> Self {
        self.fallback(Fallback::Ip)
    }

    /// A request without its key answers 401 (the default).
    #[must_use]
    pub fn or_reject(self) -> Self {
        self.fallback(Fallback::Reject)
    }

    /// What a request without its key gets.
    #[must_use]
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    fn of(kind: Kind) -> Self {
        Self {
            kind,
            fallback: Fallback::default(),
        }
    }

    /// The key of `view`, or why there is none.
    pub(crate) fn key(&self, view: &RequestView<'_>) -> Result<String, Missing> {
        let found = match &self.kind {
            Kind::Global => return Ok("global".to_owned()),
            Kind::Ip => return ip_key(view.client_ip),
            Kind::Header(name) => view
                .headers
                .get(name)
                .filter(|value| !value.is_empty())
                .map(|value| format!("header:{}", String::from_utf8_lossy(value.as_bytes()))),
            Kind::Custom(f) => f(view).map(|key| format!("custom:{key}")),
        };
        match (found, self.fallback) {
            (Some(key), _) => Ok(key),
            (None, Fallback::Ip) => ip_key(view.client_ip),
            (None, Fallback::Reject) => Err(Missing::Key),
        }
    }
}

impl Default for KeyExtractor {
    fn default() -> Self {
        Self::ip()
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Global => "global".to_owned(),
            Kind::Ip => "ip".to_owned(),
            Kind::Header(name) => format!("header:{name}"),
            Kind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("KeyExtractor")
            .field("kind", &kind)
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// Why a request has no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// No header or custom key, and the fallback rejects: 401.
    Key,
    /// No peer address in the extensions: 500 (a setup error).
    PeerAddress,
}

fn ip_key(ip: Option<IpAddr>) -> Result<String, Missing> {
    ip.map(|ip| format!("ip:{ip}")).ok_or(Missing::PeerAddress)
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.15`) as its IPv4 address;
/// any other address as it is.
pub fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// An address block, `10.0.0.0/8`, `2001:db8::/32`, or one address
/// (`10.0.0.15`, a /32 or /128): a trusted proxy.
///
/// ```
/// use limiter_tower::IpNet;
///
/// let private: IpNet = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.1.2.3".parse()?));
/// assert!(private.contains("::ffff:10.1.2.3".parse()?)); // IPv4-mapped
/// assert!(!private.contains("11.0.0.1".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// The block of `addr` (normalized) under a `prefix`-bit mask; `None`
    /// if the prefix is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let addr = normalize_ip(addr);
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then_some(Self { addr, prefix })
    }

    /// Whether `ip` (normalized) is in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, normalize_ip(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u128::from(u32::from(net)), 32, self.prefix)
                    == masked(u128::from(u32::from(ip)), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(u128::from(net), 128, self.prefix)
                    == masked(u128::from(ip), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// The top `prefix` of the `bits` low bits of `value`.
fn masked(value: u128, bits: u32, prefix: u8) -> u128 {
    let keep = u32::from(prefix);
    if keep == 0 {
        0
    } else {
        value >> (bits - keep)
    }
}

/// Why a string is not an [`IpNet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpNetError(String);

impl fmt::Display for IpNetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid address block {:?}: expected an address or ADDRESS/PREFIX",
            self.0
        )
    }
}

impl std::error::Error for IpNetError {}

impl FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = || IpNetError(s.to_owned());
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| error())?;
        let full = if normalize_ip(addr).is_ipv4() {
            32
        } else {
            128
        };
        let prefix = match prefix {
            None => full,
            Some(prefix) => {
                let prefix: u8 = prefix.parse().map_err(|_| error())?;
                // A prefix on an IPv4-mapped address counts its 96 mapping bits.
                if addr.is_ipv6() && full == 32 {
                    prefix.checked_sub(96).ok_or_else(error)?
                } else {
                    prefix
                }
            }
        };
        Self::new(addr, prefix).ok_or_else(error)
    }
}

/// The client address of a request whose peer is `peer`: the peer itself,
/// unless it is one of `trusted`; then the right-most address of
/// `X-Forwarded-For` (every such header, in order) that is not trusted.
///
/// The left-most entries are never believed: any client can write them.
/// If every entry is trusted, the left-most one is the client; an entry
/// that is not an address (`unknown`, garbage) ends the walk, and the last
/// trusted address seen is the client. `Forwarded` (RFC 7239) is not read
/// yet.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = normalize_ip(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let mut client = peer;
    let entries: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("").split(','))
        .collect();
    for entry in entries.iter().rev() {
        match parse_forwarded_ip(entry) {
            Some(ip) => {
                client = ip;
                if !is_trusted(ip) {
                    return ip;
                }
            }
            None => return client,
        }
    }
    client
}

/// An `X-Forwarded-For` entry: an address, with or without a port
/// (`10.0.0.15:53214`, `[2001:db8::1]:443`), normalized.
fn parse_forwarded_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|addr| addr.ip()))
        .ok()
        .map(normalize_ip)
}

/// The peer address in `extensions`: a [`SocketAddr`], or (feature `axum`)
/// axum's `ConnectInfo<SocketAddr>`.
pub(crate) fn peer_addr(extensions: &Extensions) -> Option<IpAddr> {
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(X_FORWARDED_FOR, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn addresses_are_normalized() {
        assert_eq!(normalize_ip(ip("::ffff:10.0.0.15")), ip("10.0.0.15"));
        assert_eq!(normalize_ip(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(normalize_ip(ip("10.0.0.15")), ip("10.0.0.15"));
        assert_eq!(
            parse_forwarded_ip(" 10.0.0.15:53214"),
            Some(ip("10.0.0.15"))
        );
        assert_eq!(
            parse_forwarded_ip("[::ffff:1.2.3.4]:80"),
            Some(ip("1.2.3.4"))
        );
        assert_eq!(parse_forwarded_ip("unknown"), None);
    }

    #[test]
    fn blocks_parse_and_contain() {
        let v4: IpNet = "10.0.0.0/8".parse().unwrap();
        assert!(v4.contains(ip("10.255.0.1")) && !v4.contains(ip("11.0.0.1")));
        assert!(v4.contains(ip("::ffff:10.0.0.1")));
        assert!(!v4.contains(ip("2001:db8::1")));
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        let one: IpNet = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        let mapped: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped, v4);
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/a"] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
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
}
