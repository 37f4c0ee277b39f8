//! [`KeyExtractor`]: which key a request is limited under, and the client
//! address behind [trusted proxies](crate::RateLimitLayer::trusted_proxies)
//! (`X-Forwarded-For` and RFC 7239 `Forwarded`).

use std::fmt::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::{Extensions, HeaderMap, HeaderValue, Method, Uri};

use crate::key_text::{self, KeyBuffer, KeyText};

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
    Route,
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
    /// Let the request through unlimited, with no rate-limit headers, and
    /// count it as `skipped` in the metrics: for routes where anonymous
    /// requests are limited by another layer, or meant to be free. Only
    /// ever by choice: never the default.
    Skip,
}

/// Which key a request is limited under.
///
/// Keys are prefixed by their kind, so that a header value can never
/// collide with an address: `global`, `ip:203.0.113.7`, `header:<value>`
/// (`header-bytes:<hex>` for a value that is not UTF-8),
/// `route:GET /users/{id}`, `custom:<value>`. A request whose key cannot be found is never let
/// through unlimited: a missing header or custom key goes to the
/// [`Fallback`] (401 by default), a missing peer address answers 500.
///
/// ```
/// use limiter_tower::KeyExtractor;
///
/// let by_user = KeyExtractor::header("x-user-id").or_ip();
/// let by_network = KeyExtractor::ip().ipv6_prefix(64);
/// let by_tenant = KeyExtractor::custom(|req| {
///     req.uri.host().map(str::to_owned)
/// });
/// # let _ = (by_user, by_network, by_tenant);
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    kind: Kind,
    fallback: Fallback,
    /// Group IPv6 client addresses by this many leading bits.
    ipv6_prefix: Option<u8>,
}

/// `header:<value>`, or for a value that is not UTF-8 `header-bytes:` and
/// its bytes in hex: one key per distinct value (a lossy decoding would put
/// `k\xff` and `k\xfe` in one bucket, each client draining the other's).
fn header_key(value: &[u8]) -> KeyText {
    match std::str::from_utf8(value) {
        Ok(text) => {
            let mut key = KeyText::of("header:");
            key.push_str(text);
            key
        }
        Err(_) => {
            let mut key = KeyText::of("header-bytes:");
            for byte in value {
                // Writing to a KeyText cannot fail.
                let _ = write!(key, "{byte:02x}");
            }
            key
        }
    }
}

impl KeyExtractor {
    /// One key for every request: the limit is the service's.
    pub fn global() -> Self {
        Self::of(Kind::Global)
    }

    /// The client address: the peer's address from the request's
    /// extensions (a [`SocketAddr`], with the `axum` feature axum's
    /// `ConnectInfo<SocketAddr>`, with the `tonic` feature tonic's
    /// `TcpConnectInfo`), normalized (an IPv4-mapped IPv6 address
    /// is its IPv4 address; the port is dropped), or, when the peer is a
    /// trusted proxy, the right-most untrusted address of
    /// `X-Forwarded-For` or `Forwarded` (see [`client_ip`]). The default;
    /// [`ipv6_prefix`](Self::ipv6_prefix) groups IPv6 networks.
    pub fn ip() -> Self {
        Self::of(Kind::Ip)
    }

    /// The value of header `name` (an API key, a user id). A request
    /// without it goes to the [`Fallback`]: 401 unless [`or_ip`](Self::or_ip).
    /// Of several lines of the header, the last: the one a gateway in
    /// front appends after the client's own (as the right-most forwarded
    /// address is the one a trusted proxy wrote).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn header(name: &str) -> Self {
        let name = HeaderName::from_str(name).expect("a valid header name");
        Self::of(Kind::Header(name))
    }

    /// The method and the route: with the `axum` feature the route pattern
    /// matched (axum's `MatchedPath`, `GET /users/{id}`), so every user id
    /// shares one budget; otherwise, or outside an axum router, the URI
    /// path (`GET /users/42`). Never missing.
    ///
    /// `HEAD` counts as `GET` (a router answers it with the `GET` handler),
    /// and every method outside RFC 9110's eight as `OTHER`: a client cannot
    /// open a fresh budget on a route by changing its method.
    pub fn route() -> Self {
        Self::of(Kind::Route)
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

    /// A request without its key passes unlimited (see [`Fallback::Skip`]).
    #[must_use]
    pub fn or_skip(self) -> Self {
        self.fallback(Fallback::Skip)
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

    /// Limits IPv6 clients by their first `prefix` bits, in this key and
    /// in an [`Fallback::Ip`]: one host commonly holds a whole /64 and can
    /// take a fresh address per request, so `ipv6_prefix(64)` gives every
    /// address of a /64 one budget (key `ip:2001:db8:1:2::/64`). IPv4
    /// addresses are not grouped. Defaults to none (each address alone).
    ///
    /// # Panics
    ///
    /// If `prefix` is above 128.
    #[must_use]
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        assert!(prefix <= 128, "an IPv6 prefix is at most 128 bits");
        self.ipv6_prefix = Some(prefix);
        self
    }

    fn of(kind: Kind) -> Self {
        Self {
            kind,
            fallback: Fallback::default(),
            ipv6_prefix: None,
        }
    }

    /// `ip:<addr>`, or `ip:<network>/<prefix>` for a grouped IPv6 address.
    #[inline]
    fn ip_key(&self, ip: Option<IpAddr>) -> Result<KeyText, Missing> {
        Ok(match ip.ok_or(Missing::PeerAddress)? {
            IpAddr::V4(v4) => ipv4_key(v4),
            IpAddr::V6(v6) => self.ipv6_key(v6),
        })
    }

    /// Whether `entry` is a key this extractor writes for some address:
    /// `ip:` and the address as [`ip_key`](Self::ip_key) writes it
    /// (normalized, in canonical form, grouped under an IPv6 prefix). An
    /// allowlisted key in another form (`ip:10.0.0.0/8`, `ip:2001:DB8::1`,
    /// `ip:::ffff:10.0.0.1`) would never match a request.
    #[cfg(feature = "config")]
    pub(crate) fn writes_ip_key(&self, entry: &str) -> bool {
        let Some(text) = entry.strip_prefix("ip:") else {
            return false;
        };
        let address = text.split_once('/').map_or(text, |(address, _)| address);
        address
            .parse::<IpAddr>()
            .ok()
            .and_then(|ip| self.ip_key(Some(normalize_ip(ip))).ok())
            .is_some_and(|key| key.as_str() == entry)
    }

    /// `ip:<addr>`, or `ip:<network>/<prefix>` grouped.
    fn ipv6_key(&self, v6: Ipv6Addr) -> KeyText {
        let mut key = KeyText::of("ip:");
        match self.ipv6_prefix {
            Some(prefix) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                let network = Ipv6Addr::from(u128::from(v6) & mask);
                let _ = write!(key, "{network}/{prefix}");
            }
            None => {
                let _ = write!(key, "{v6}");
            }
        }
        key
    }

    /// The key of `view`, or why there is none.
    /// The `WWW-Authenticate` challenge of the 401 for a request without
    /// its key: `ApiKey header="x-api-key"` names the header the key is
    /// read from (the scheme OpenAPI's `apiKey` security describes); a
    /// closure's key, whose source the layer does not know, `ApiKey`.
    pub(crate) fn challenge(&self) -> HeaderValue {
        match &self.kind {
            Kind::Header(name) => {
                // A header name is a token: nothing to escape in quotes.
                HeaderValue::try_from(format!("ApiKey header=\"{name}\""))
                    .unwrap_or(HeaderValue::from_static("ApiKey"))
            }
            _ => HeaderValue::from_static("ApiKey"),
        }
    }

    pub(crate) fn key(&self, view: &RequestView<'_>) -> Result<KeyText, Missing> {
        let found = match &self.kind {
            Kind::Global => return Ok(KeyText::of("global")),
            Kind::Ip => return self.ip_key(view.client_ip),
            Kind::Route => return Ok(route_key(view)),
            Kind::Header(name) => view
                .headers
                .get_all(name)
                .iter()
                .next_back()
                .filter(|value| !value.is_empty())
                .map(|value| header_key(value.as_bytes())),
            Kind::Custom(f) => f(view).map(|custom| {
                let mut key = KeyText::of("custom:");
                key.push_str(&custom);
                key
            }),
        };
        match (found, self.fallback) {
            (Some(key), _) => Ok(key),
            (None, Fallback::Ip) => self.ip_key(view.client_ip),
            (None, Fallback::Reject) => Err(Missing::Key),
            (None, Fallback::Skip) => Err(Missing::Skip),
        }
    }
}

/// A key kind as written in configuration and on command lines: `ip`,
/// `global`, `route` or `header:NAME` (with the default fallback, 401).
///
/// ```
/// use limiter_tower::KeyExtractor;
///
/// let by_user: KeyExtractor = "header:x-user-id".parse()?;
/// assert!("cookie:sid".parse::<KeyExtractor>().is_err());
/// # let _ = by_user;
/// # Ok::<(), limiter_tower::KeyKindError>(())
/// ```
impl FromStr for KeyExtractor {
    type Err = KeyKindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ip" => Ok(Self::ip()),
            "global" => Ok(Self::global()),
            "route" => Ok(Self::route()),
            _ => match s.strip_prefix("header:") {
                Some(name) => HeaderName::from_str(name)
                    .map(|name| Self::of(Kind::Header(name)))
                    .map_err(|_| KeyKindError::HeaderName(name.to_owned())),
                None => Err(KeyKindError::Unknown(s.to_owned())),
            },
        }
    }
}

/// Why a string is not a [`KeyExtractor`] kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyKindError {
    /// Not `ip`, `global`, `route` or `header:NAME`.
    Unknown(String),
    /// `header:NAME` with a `NAME` that is not a header name.
    HeaderName(String),
}

impl fmt::Display for KeyKindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(kind) => write!(
                f,
                "unknown key kind {kind:?}; expected ip, global, route or header:NAME"
            ),
            Self::HeaderName(name) => write!(f, "invalid header name {name:?}"),
        }
    }
}

impl std::error::Error for KeyKindError {}

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
            Kind::Route => "route".to_owned(),
            Kind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("KeyExtractor")
            .field("kind", &kind)
            .field("fallback", &self.fallback)
            .field("ipv6_prefix", &self.ipv6_prefix)
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
    /// No header or custom key, and the fallback lets the request through.
    Skip,
}

/// `route:<method> <matched route or path>`, the method as [`route_method`]
/// names it.
fn route_key(view: &RequestView<'_>) -> KeyText {
    let mut key = KeyText::of("route:");
    key.push_str(route_method(view.method));
    key.push_str(" ");
    #[cfg(feature = "axum")]
    if let Some(route) = view.extensions.get::<axum::extract::MatchedPath>() {
        key.push_str(route.as_str());
        return key;
    }
    key.push_str(view.uri.path());
    key
}

/// Whether `entry` has the form of a route key: `route:`, a method as the
/// key names it ([`route_method`]), a space and a path.
#[cfg(feature = "config")]
pub(crate) fn is_route_key(entry: &str) -> bool {
    const METHODS: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "OTHER",
    ];
    entry
        .strip_prefix("route:")
        .and_then(|rest| rest.split_once(' '))
        .is_some_and(|(method, path)| METHODS.contains(&method) && path.starts_with('/'))
}

/// The method as the route key names it: `HEAD` as `GET`, which serves it,
/// RFC 9110's other methods as they are, and any extension method as
/// `OTHER`, so that no method is a budget of its own beside them.
fn route_method(method: &Method) -> &'static str {
    match *method {
        Method::GET | Method::HEAD => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
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

impl IpNet {
    /// Whether this block holds every address of its family: `0.0.0.0/0`
    /// or `::/0`.
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }
}

/// `ADDRESS/PREFIX`, the address normalized: `10.0.0.0/8`, `::/0`.
impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
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

/// The entries of every `X-Forwarded-For` header, in order: an address, or
/// `None` for one that is not.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
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
fn forwarded(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
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
fn ipv4_key(ip: Ipv4Addr) -> KeyText {
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
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

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

    #[test]
    fn header_values_that_are_not_utf8_keep_distinct_keys() {
        assert_eq!(&*header_key(b"partner"), "header:partner");
        // Of several lines, the last (the one a gateway appended).
        let mut headers = HeaderMap::new();
        headers.append("x-user-id", HeaderValue::from_static("monitor"));
        headers.append("x-user-id", HeaderValue::from_static("u42"));
        let uri: Uri = "/".parse().unwrap();
        let view = RequestView {
            method: &Method::GET,
            uri: &uri,
            headers: &headers,
            extensions: &Extensions::new(),
            client_ip: None,
        };
        let key = KeyExtractor::header("x-user-id").key(&view).unwrap();
        assert_eq!(&*key, "header:u42");
        assert_eq!(&*header_key(b"k\xff"), "header-bytes:6bff");
        assert_eq!(&*header_key(b"k\xfe"), "header-bytes:6bfe");
        // A UTF-8 value spelling the hex is another key still.
        assert_eq!(&*header_key(b"6bff"), "header:6bff");
    }

    fn headers(name: HeaderName, values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(&name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn xff(values: &[&str]) -> HeaderMap {
        headers(X_FORWARDED_FOR, values)
    }

    fn fwd(values: &[&str]) -> HeaderMap {
        headers(FORWARDED, values)
    }

    /// The key `extractor` gives a GET of `uri` from `client_ip`.
    fn key_of(extractor: &KeyExtractor, uri: &str, client_ip: &str) -> Result<String, Missing> {
        let uri: Uri = uri.parse().unwrap();
        let view = RequestView {
            method: &Method::GET,
            uri: &uri,
            headers: &HeaderMap::new(),
            extensions: &Extensions::new(),
            client_ip: Some(ip(client_ip)),
        };
        extractor.key(&view).map(|key| key.to_string())
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

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let by_64 = KeyExtractor::ip().ipv6_prefix(64);
        let key = |client: &str| key_of(&by_64, "/", client).unwrap();
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "ip:2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:bbbb::9"), "ip:2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:3::1"), "ip:2001:db8:1:3::/64");
        assert_eq!(key("203.0.113.7"), "ip:203.0.113.7"); // IPv4 is not grouped
        let everything = KeyExtractor::ip().ipv6_prefix(0);
        assert_eq!(key_of(&everything, "/", "2001:db8::1").unwrap(), "ip:::/0");
        let exact = KeyExtractor::ip().ipv6_prefix(128);
        assert_eq!(
            key_of(&exact, "/", "2001:db8::1").unwrap(),
            "ip:2001:db8::1/128"
        );
        assert_eq!(
            key_of(&KeyExtractor::ip(), "/", "2001:db8::1").unwrap(),
            "ip:2001:db8::1"
        );
        // The grouping holds for a header key's fallback too.
        let fallback = KeyExtractor::header("x-user-id").or_ip().ipv6_prefix(48);
        assert_eq!(
            key_of(&fallback, "/", "2001:db8:1:2::1").unwrap(),
            "ip:2001:db8:1::/48"
        );
    }

    #[test]
    fn the_route_key_is_the_method_and_path_outside_a_router() {
        assert_eq!(
            key_of(&KeyExtractor::route(), "/users/42?x=1", "203.0.113.7").unwrap(),
            "route:GET /users/42"
        );
    }

    /// No method opens a budget of its own on a route: `HEAD` is `GET`'s,
    /// and every extension method shares one, `OTHER`.
    #[test]
    fn the_route_key_folds_head_into_get_and_extension_methods_into_other() {
        let uri: Uri = "/report/1".parse().unwrap();
        let key = |method: &str| {
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            let view = RequestView {
                method: &method,
                uri: &uri,
                headers: &HeaderMap::new(),
                extensions: &Extensions::new(),
                client_ip: None,
            };
            KeyExtractor::route().key(&view).unwrap().to_string()
        };
        assert_eq!(key("HEAD"), "route:GET /report/1");
        assert_eq!(key("GET"), "route:GET /report/1");
        for method in [
            "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
        ] {
            assert_eq!(key(method), format!("route:{method} /report/1"));
        }
        for method in ["X1", "X2", "PROPFIND", "get"] {
            assert_eq!(key(method), "route:OTHER /report/1", "{method}");
        }
    }

    #[test]
    fn a_missing_key_is_challenged_by_its_header_name() {
        assert_eq!(
            KeyExtractor::header("X-Api-Key").challenge(),
            "ApiKey header=\"x-api-key\""
        );
        assert_eq!(KeyExtractor::custom(|_| None).challenge(), "ApiKey");
    }
}
