//! [`IpNet`]: an address block (CIDR), as trusted proxies and allowlisted
//! addresses are given.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::client::normalize::normalize_ip;

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
    /// if the prefix is longer than the address. The block is kept by its
    /// first address, so `10.0.0.1/8` and `10.0.0.0/8` are one block, equal
    /// and written alike.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let addr = match normalize_ip(addr) {
            IpAddr::V4(v4) if prefix <= 32 => {
                IpAddr::from(Ipv4Addr::from(
                    first_address(u128::from(u32::from(v4)), 32, prefix) as u32,
                ))
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                IpAddr::from(Ipv6Addr::from(first_address(u128::from(v6), 128, prefix)))
            }
            _ => return None,
        };
        Some(Self { addr, prefix })
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
/// `value`, an address of `bits` bits, with all but its first `prefix`
/// bits cleared.
fn first_address(value: u128, bits: u32, prefix: u8) -> u128 {
    masked(value, bits, prefix)
        .checked_shl(bits - u32::from(prefix))
        .unwrap_or(0)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
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
        // A block written from another of its addresses is the same block.
        let written: IpNet = "10.1.2.3/8".parse().unwrap();
        assert_eq!(
            (written, written.to_string()),
            (v4, "10.0.0.0/8".to_owned())
        );
        let written: IpNet = "2001:db8:1::7/32".parse().unwrap();
        assert_eq!(
            (written, written.to_string()),
            (v6, "2001:db8::/32".to_owned())
        );
        assert_eq!("10.1.2.3/0".parse::<IpNet>().unwrap(), all);
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/a"] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }
}
