//! Free loopback ports for servers and cluster nodes, taken below the
//! kernel's ephemeral range.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};

/// `N` distinct loopback ports that were free a moment ago (each bound,
/// all held at once, then released), taken below the kernel's ephemeral
/// range.
///
/// Why not port 0: the kernel hands out ephemeral ports, and once released
/// one can be taken at once by any outgoing connection (the tests' clients,
/// a cluster's bus) before the server binds it: a server started beside
/// several clusters failed with "Address already in use" in CI. Ports
/// below the range are never given to outgoing connections; test
/// processes start at different offsets (by pid) and skip any port that
/// something holds.
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    let (low, high) = (10_000, ephemeral_start().max(10_000 + 4 * N as u32));
    let span = high - low;
    static NEXT: AtomicU64 = AtomicU64::new(u64::MAX);
    let _ = NEXT.compare_exchange(
        u64::MAX,
        u64::from(std::process::id()) * 7_919,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut held = Vec::with_capacity(N);
    for _ in 0..span {
        if held.len() == N {
            break;
        }
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % u64::from(span);
        let port = (u64::from(low) + offset) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    assert_eq!(
        held.len(),
        N,
        "no {N} free loopback ports between {low} and {high}"
    );
    std::array::from_fn(|i| held[i].local_addr().expect("bound address").port())
}

/// The first port of the kernel's ephemeral range (Linux's
/// `ip_local_port_range`; 32768, its default, elsewhere).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Other test processes take ports of the same range at any moment, so
    /// a port free when chosen may be taken before the test binds it: a
    /// set passes if every port binds, and one set in three attempts must.
    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut taken = Vec::new();
        for _ in 0..3 {
            let ports = free_ports::<18>();
            let mut sorted = ports.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 18, "{ports:?}");
            for port in ports {
                assert!(u32::from(port) < ephemeral_start(), "{port}");
                assert_ne!(port, held.local_addr().unwrap().port());
            }
            let unbound: Vec<_> = ports
                .iter()
                .filter(|&&port| TcpListener::bind(("127.0.0.1", port)).is_err())
                .collect();
            if unbound.is_empty() {
                return;
            }
            taken.push(format!("{unbound:?}"));
        }
        panic!("in every attempt a port was taken when bound: {taken:?}");
    }
}
