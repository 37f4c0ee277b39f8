//! The allowlist: client addresses and keys that are never limited.

use std::collections::HashSet;
use std::net::IpAddr;

use crate::client::cidr::IpNet;
use crate::client::ip_key::{from_text, is_ip_key};

/// Addresses (blocks) and keys that skip limiting: the office, the health
/// checker, a partner's API key. Neither the ban list nor the limiter is
/// asked for them, and their responses carry no rate-limit headers.
///
/// Addresses are matched against the client address the layer resolved
/// (behind [trusted proxies](crate::LimiterLayer::trusted_proxies)),
/// normalized: without its port, an IPv4-mapped IPv6 address as its IPv4
/// address; the layer passes none for a trusted proxy standing in for a
/// client no header named. Keys are matched against the whole key of the layer's
/// [`KeyExtractor`](crate::KeyExtractor), kind prefix included
/// (`header:partner-key`): given in their text form, kept as the limiter
/// is given them (an address's bytes, see [`crate::client::key::bytes_from_text`]), so
/// matching a request formats nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowlist {
    nets: Vec<IpNet>,
    keys: HashSet<Vec<u8>>,
}

impl Allowlist {
    pub(crate) fn add_nets(&mut self, nets: impl IntoIterator<Item = IpNet>) {
        self.nets.extend(nets);
    }

    pub(crate) fn add_keys<K: Into<String>>(&mut self, keys: impl IntoIterator<Item = K>) {
        self.keys
            .extend(keys.into_iter().map(|key| from_text(&key.into()).to_vec()));
    }

    /// Whether a request from `ip` (if known and vouched for) under `key`
    /// skips limiting. An address key (`ip:…`) matches only with a vouched
    /// address: without one it names a trusted proxy standing in for a
    /// client nobody named, which any client behind it can bring about.
    /// Inline: an empty list, the usual case, is two checks.
    #[inline]
    pub(crate) fn allows(&self, ip: Option<IpAddr>, key: &[u8]) -> bool {
        // An empty set is not asked: it would hash the key first.
        self.allows_ip(ip)
            || (!self.keys.is_empty()
                && (ip.is_some() || !is_ip_key(key))
                && self.keys.contains(key))
    }

    /// Whether `ip` (if known) skips limiting whatever the key: also when
    /// the request has no key (a health checker without an API key).
    #[inline]
    pub(crate) fn allows_ip(&self, ip: Option<IpAddr>) -> bool {
        ip.is_some_and(|ip| self.nets.iter().any(|net| net.contains(ip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::key::bytes_from_text;

    #[test]
    fn addresses_match_their_blocks_and_keys_match_whole() {
        let mut allow = Allowlist::default();
        allow.add_nets([
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ]);
        allow.add_keys(["header:partner"]);
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let key = |text: &str| bytes_from_text(text);
        assert!(allow.allows(ip("10.1.2.3"), &key("ip:10.1.2.3")));
        assert!(allow.allows(ip("::ffff:10.1.2.3"), &key("ip:10.1.2.3")));
        assert!(allow.allows(ip("2001:db8::7"), b"x"));
        assert!(!allow.allows(ip("11.0.0.1"), &key("ip:11.0.0.1")));
        assert!(allow.allows(None, b"header:partner"));
        assert!(!allow.allows(None, b"header:partner2"));
        assert!(!allow.allows(None, b"partner"));
    }

    #[test]
    fn an_address_key_matches_only_a_vouched_address() {
        let mut allow = Allowlist::default();
        allow.add_keys(["ip:10.0.0.1"]);
        let key = bytes_from_text("ip:10.0.0.1");
        assert!(allow.allows(Some("10.0.0.1".parse().unwrap()), &key));
        // The proxy 10.0.0.1 standing in for a client no header named.
        assert!(!allow.allows(None, &key));
    }
}
