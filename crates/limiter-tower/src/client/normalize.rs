//! [`normalize_ip`]: an address as the layer compares and keys it.

use std::net::IpAddr;

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.15`) as its IPv4 address;
/// any other address as it is.
#[inline]
pub fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}
