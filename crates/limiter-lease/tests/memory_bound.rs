//! `max_bytes`: the resident memory a leased limiter's keys take, however
//! long the keys, stays within `Leased::max_bytes`; and once every lease
//! has lapsed, the keys are dropped and their memory returned within the
//! idle sweep's second, with no new key asking for the room.
//!
//! Each case runs in a child process (this same binary with `--child`),
//! which reads its resident set size (`VmRSS`) before building the
//! limiter, after filling it, and after its keys went idle, as
//! limiter-memory's `memory_bound` test does. The global limiter holds
//! nothing, so what the child holds is the leased limiter's.

use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{Decision, Error, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_lease::Leased;

#[path = "../../limiter-memory/examples/support/mod.rs"]
mod support;
use support::{resident_bytes, run_child};

/// Keys at the default cap.
const KEYS: usize = 10_000;

/// A case: its name and the length of its keys.
struct Case {
    name: &'static str,
    key_len: usize,
}

const CASES: [Case; 2] = [
    Case {
        name: "keys at the 256-byte bound",
        key_len: 256,
    },
    Case {
        name: "64 KB keys (held as digests)",
        key_len: 64 * 1024,
    },
];

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--child") {
        let case: usize = args.next().and_then(|c| c.parse().ok()).expect("a case");
        child(&CASES[case]);
        return;
    }
    if resident_bytes().is_none() {
        panic!("memory_bound reads /proc/self/status: Linux only");
    }
    for (index, case) in CASES.iter().enumerate() {
        let stdout = run_child(&["--child", &index.to_string()], case.name);
        let numbers: Vec<u64> = stdout
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let [held, bound, idle_keys, idle] = numbers[..] else {
            panic!("{}: {stdout:?}", case.name)
        };
        println!(
            "{}: {held} bytes resident for {KEYS} keys, bound {bound}; \
             {idle_keys} keys and {idle} bytes once idle",
            case.name
        );
        assert!(held <= bound, "{}: {held} > {bound}", case.name);
        assert_eq!(idle_keys, 1, "{}: only the last request's key", case.name);
        // The shards' tables, each over 64 KiB, go straight back to the
        // system (1 MiB for 10,000 keys); the keys' small allocations stay
        // with the allocator, for reuse.
        assert!(
            idle + 512 * 1024 <= held,
            "{}: {idle} bytes once idle",
            case.name
        );
    }
    println!("memory_bound: {} passed, 0 failed", CASES.len());
}

/// A global limiter that admits every request and holds nothing.
#[derive(Debug)]
struct AdmitsAll(Policies);

#[async_trait]
impl Limiter for AdmitsAll {
    fn policies(&self) -> &Policies {
        &self.0
    }

    async fn acquire(&self, _: &[u8], cost: u64) -> Result<Decision, Error> {
        Ok(Decision::admit(1_000_000, 1_000_000 - cost, 0))
    }

    async fn peek(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Ok(Decision::admit(1_000_000, 1_000_000, 0))
    }

    async fn reset(&self, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }
}

/// Fills a leased limiter with `KEYS` keys of `case`, each holding a
/// lease; prints the resident bytes it took and its bound, then, after
/// every lease lapsed and the idle sweep's second passed, the keys held
/// and the resident bytes after one request.
fn child(case: &Case) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let policy = Policy::token_bucket(Rate::per_second(1_000_000)).unwrap();
    let mut key = String::with_capacity(case.key_len);
    let mut key_of = |k: usize| {
        key.clear();
        key.push_str(&format!("{k}:"));
        key.extend(std::iter::repeat_n('k', case.key_len - key.len()));
        key.clone()
    };
    let before = resident_bytes().unwrap();
    let leased = Leased::builder(AdmitsAll(policy.into()))
        .clock(clock.clone())
        .min_lease(10)
        .build();
    assert_eq!(leased.max_keys(), KEYS);
    for k in 0..KEYS {
        clock.advance(Duration::from_micros(1));
        let decision = runtime.block_on(leased.acquire(key_of(k).as_bytes(), 1));
        assert!(decision.unwrap().allowed, "{k}");
        assert!(leased.held(key_of(k).as_bytes()) > 0, "{k} holds a lease");
    }
    assert_eq!(leased.len(), KEYS);
    let held = resident_bytes().unwrap().saturating_sub(before);
    clock.advance(leased.lifetime() + Duration::from_secs(1));
    let decision = runtime.block_on(leased.acquire(key_of(0).as_bytes(), 1));
    assert!(decision.unwrap().allowed);
    let idle = resident_bytes().unwrap().saturating_sub(before);
    println!("{held} {} {} {idle}", leased.max_bytes(), leased.len());
}
