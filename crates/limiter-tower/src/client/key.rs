//! [`KeyExtractor`]: which key a request is limited under (the client
//! address, a header, the route, a closure of yours), and what a request
//! without its key gets ([`Fallback`]).

use std::fmt::{self, Write};
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use http::header::HeaderName;
use http::{Extensions, HeaderMap, HeaderValue, Method, Uri};

use crate::client::ip_key::{self, ipv4_key, ipv6_key, write_ipv4_key};
use crate::client::key_bytes::KeyBytes;
#[cfg(feature = "config")]
use crate::client::normalize::normalize_ip;

/// The key a layer passes to its limiter for the key whose text form is
/// `text`: for an address written as the layer writes it (`ip:` and the
/// address, or for IPv6 its network under
/// [`ipv6_prefix`](KeyExtractor::ipv6_prefix), `ip:2001:db8:1:2::/64`), the
/// address's key bytes; for any other text, its bytes. What to give the
/// limiter to [`reset`](limiter_core::Limiter::reset) a client, or a
/// Redis limiter to find its Redis key.
///
/// ```
/// use limiter_tower::key::{bytes_from_text, text_from_bytes};
///
/// assert_eq!(bytes_from_text("ip:203.0.113.7"), [0x84, 203, 0, 113, 7]);
/// assert_eq!(bytes_from_text("header:u42"), b"header:u42");
/// assert_eq!(text_from_bytes(&[0x84, 203, 0, 113, 7]), "ip:203.0.113.7");
/// ```
pub fn bytes_from_text(text: &str) -> Vec<u8> {
    ip_key::from_text(text).to_vec()
}

/// The text form of `key`, a key a layer passed to its limiter: `ip:`
/// and the address for an address's key, the key itself for the others
/// (see [`bytes_from_text`]); bytes that are not UTF-8 escaped as `\xNN`.
pub fn text_from_bytes(key: &[u8]) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = ip_key::write_text(key, &mut text);
    text
}

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
/// collide with an address. Each key has a text form, the one bans,
/// allowlists and logs take: `global`, `ip:203.0.113.7`, `header:<value>`
/// (`header-bytes:<hex>` for a value that is not UTF-8),
/// `route:GET /users/{id}`, `custom:<value>`. The limiter is given the
/// bytes of that text, but for an address, whose key is bytes: a tag
/// byte and its octets (`0x84` and 4 octets for IPv4; `0x86` and 16
/// octets for IPv6, then the prefix length for a network under
/// [`ipv6_prefix`](Self::ipv6_prefix)), written without formatting.
/// [`bytes_from_text`] and [`text_from_bytes`] go from one form to the other. A request
/// whose key cannot be found is let through unlimited only where you
/// chose so ([`Fallback::Skip`]): a missing header or custom key goes to
/// the [`Fallback`] (401 by default), a missing peer address answers 500.
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
fn header_key(value: &[u8]) -> KeyBytes {
    match std::str::from_utf8(value) {
        Ok(text) => {
            let mut key = KeyBytes::of(b"header:");
            key.push_str(text);
            key
        }
        Err(_) => {
            let mut key = KeyBytes::of(b"header-bytes:");
            for byte in value {
                // Writing to a KeyBytes cannot fail.
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
    /// extensions (a [`SocketAddr`](std::net::SocketAddr), with the `axum` feature axum's
    /// `ConnectInfo<SocketAddr>`, with the `tonic` feature tonic's
    /// `TcpConnectInfo`), normalized (an IPv4-mapped IPv6 address
    /// is its IPv4 address; the port is dropped), or, when the peer is a
    /// trusted proxy, the right-most untrusted address of
    /// `X-Forwarded-For` or `Forwarded` (see [`client_ip`](crate::client::client_address::client_ip)). The default;
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
    /// shares one budget, and a request the router matched to no route
    /// (its fallback, a 404) `GET (unmatched)`, one budget per method for
    /// every such path; otherwise, or outside an axum router (a layer
    /// around the router rather than on it, `Router::layer`), the URI path
    /// (`GET /users/42`), every path a budget and a key of its own. Never
    /// missing.
    ///
    /// `HEAD` counts as `GET` (a router answers it with the `GET` handler),
    /// the other methods of RFC 9110 and `PATCH` as themselves, and any
    /// other method as `OTHER`: a client cannot open a fresh budget on a
    /// route by changing its method.
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

    /// The key of address `ip` (`ip:<addr>`, or `ip:<network>/<prefix>`
    /// for a grouped IPv6 address, as text; see [`bytes_from_text`]).
    #[inline]
    fn ip_key(&self, ip: Option<IpAddr>) -> Result<KeyBytes, Missing> {
        Ok(match ip.ok_or(Missing::PeerAddress)? {
            IpAddr::V4(v4) => ipv4_key(v4),
            IpAddr::V6(v6) => ipv6_key(v6, self.ipv6_prefix),
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
            .is_some_and(|key| key.to_string() == entry)
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

    /// The key of the request `view` shows.
    #[cfg(test)]
    pub(crate) fn key(&self, view: &RequestView<'_>) -> Result<KeyBytes, Missing> {
        let mut key = KeyBytes::empty();
        self.write_key(view.client_ip, || RequestView { ..*view }, &mut key)?;
        Ok(key)
    }

    /// The key of a request from `client_ip` (see [`RequestView`]),
    /// written into `key` (empty), the request's `view` built only for a
    /// key that reads it: an address's key, nearly every request's, is
    /// written in place from the address alone, nothing moved after it.
    #[inline]
    pub(crate) fn write_key<'a>(
        &self,
        client_ip: Option<IpAddr>,
        view: impl FnOnce() -> RequestView<'a>,
        key: &mut KeyBytes,
    ) -> Result<(), Missing> {
        match &self.kind {
            Kind::Ip => {
                return match client_ip.ok_or(Missing::PeerAddress)? {
                    IpAddr::V4(v4) => {
                        write_ipv4_key(v4, key);
                        Ok(())
                    }
                    IpAddr::V6(v6) => {
                        *key = ipv6_key(v6, self.ipv6_prefix);
                        Ok(())
                    }
                };
            }
            Kind::Global => {
                *key = KeyBytes::of(b"global");
                return Ok(());
            }
            _ => {}
        }
        *key = self.read_key(&view())?;
        Ok(())
    }

    /// The key of a kind that reads the request's `view`.
    fn read_key(&self, view: &RequestView<'_>) -> Result<KeyBytes, Missing> {
        let found = match &self.kind {
            Kind::Global => Some(KeyBytes::of(b"global")),
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
                let mut key = KeyBytes::of(b"custom:");
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
/// # Ok::<(), limiter_tower::key::KeyKindError>(())
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

/// What an axum router's request that matched no route is keyed by, after
/// the method: no path is it (a path starts with `/`), and clients cannot
/// open a budget per path that does not exist.
#[cfg(feature = "axum")]
const UNMATCHED: &str = "(unmatched)";

/// `route:<method> <matched route or path>`, the method as [`route_method`]
/// names it; in an axum router, a request no route matched is
/// `route:<method> (unmatched)` ([`UNMATCHED`]).
fn route_key(view: &RequestView<'_>) -> KeyBytes {
    let mut key = KeyBytes::of(b"route:");
    key.push_str(route_method(view.method));
    key.push_str(" ");
    #[cfg(feature = "axum")]
    {
        use axum::extract::{MatchedPath, OriginalUri};
        if let Some(route) = view.extensions.get::<MatchedPath>() {
            key.push_str(route.as_str());
            return key;
        }
        // The router marks every request it routes with its original URI,
        // and the matched ones with their route too: the fallback's are
        // the rest.
        if view.extensions.get::<OriginalUri>().is_some() {
            key.push_str(UNMATCHED);
            return key;
        }
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
/// RFC 9110's other methods and `PATCH` (RFC 5789) as they are, and any
/// other method as `OTHER`, so that no method is a budget of its own
/// beside them.
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn header_values_that_are_not_utf8_keep_distinct_keys() {
        assert_eq!(header_key(b"partner").to_string(), "header:partner");
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
        assert_eq!(key.to_string(), "header:u42");
        assert_eq!(header_key(b"k\xff").to_string(), "header-bytes:6bff");
        assert_eq!(header_key(b"k\xfe").to_string(), "header-bytes:6bfe");
        // A UTF-8 value spelling the hex is another key still.
        assert_eq!(header_key(b"6bff").to_string(), "header:6bff");
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
