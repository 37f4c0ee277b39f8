//! docs/spec.md section 8 on a real redis-server: 4 OS processes (the
//! `lease_worker` example) × 64 callers lease from one `RedisLimiter` on a
//! fixed schedule, and the units their own logs say they admitted stay
//! within the section 8.2 bound in every interval, for every algorithm, on
//! one hot key and on keys drawn from 10,000. The schedule is a round every
//! 50 ms, in phases of 400 ms on one key per caller (the callers of the same
//! number in every process on the same key): quiet rounds under the limit,
//! where leases grow, then a burst larger than the bound lets the fleet
//! admit in a window, so demand exceeds the limit whatever the host's
//! speed. With the server killed mid-run, nothing beyond the leases in
//! hand is admitted before the failure policy answers, and its answers say
//! so.
//!
//! The logs' times are the decisions' own: Redis `TIME` for the global
//! limiter's, each worker's clock (the host's wall clock, advanced
//! monotonically) for a leased one; server and workers share one host.

mod lease_worker_fleet;

use std::time::Duration;

use lease_worker_fleet::{micros, wall_us, FleetRun, Target, PROCESSES};
use limiter_core::{Algorithm, Policy, Rate};
use limiter_test::redis_server::{fresh_prefix, RedisServer};

/// Every algorithm at `limit` per 200 ms.
fn policies(limit: u64) -> Vec<Policy> {
    Algorithm::ALL
        .iter()
        .map(|&algorithm| {
            Policy::new(algorithm, Rate::new(limit, Duration::from_millis(200))).expect("a policy")
        })
        .collect()
}

/// The leases of a fleet run: `T` in ms and `M`, or the defaults.
#[derive(Clone, Copy)]
enum Leases {
    Given { lifetime_ms: u64, max_lease: u64 },
    Defaults,
}

/// Runs the fleet on `keys` keys under each policy of `limit` per 200 ms:
/// 64 callers a worker, 3 phases of 8 rounds 50 ms apart, `quiet` callers
/// in a quiet round, bursts sized to be denied in part; and checks the
/// bound.
fn every_algorithm(server: &RedisServer, limit: u64, keys: u64, quiet: u64, leases: Leases) {
    for policy in policies(limit) {
        let (lifetime, max_lease, at_defaults) = match leases {
            Leases::Given {
                lifetime_ms,
                max_lease,
            } => (Duration::from_millis(lifetime_ms), max_lease, false),
            Leases::Defaults => {
                let (lifetime, max_lease) = FleetRun::defaults_of(&policy);
                (lifetime, max_lease, true)
            }
        };
        let mut fleet = FleetRun {
            target: Target::Server(server.url()),
            prefix: fresh_prefix("lease-fleet"),
            policy: policy.clone(),
            keys,
            tasks: 64,
            rounds: 24,
            period: Duration::from_millis(50),
            phase: 8,
            quiet,
            burst: 0,
            until_degraded: 0,
            lifetime,
            max_lease,
            at_defaults,
            on_failure: "return-error",
        };
        fleet.burst = fleet.denied_burst();
        let outcome = fleet.run();
        let admitted = outcome.admitted();
        let leased = outcome.admitted_from("lease");
        eprintln!(
            "{policy} on {keys} keys, T {lifetime:?}, M {max_lease}{}, bursts of {}: {admitted} \
             admitted ({leased} from leases), {} denied",
            if at_defaults { " (the defaults)" } else { "" },
            fleet.burst,
            outcome.denied
        );
        assert_eq!(
            admitted + outcome.denied,
            fleet.requests(),
            "{policy}: every request answered"
        );
        if let Err(violation) = fleet.check_bound(&outcome) {
            panic!("{policy} on {keys} keys: {violation}");
        }
        assert!(
            outcome.denied > 0,
            "{policy}: bursts beyond the bound are denied in part"
        );
        assert!(leased > 0, "{policy}: leases serve decisions");
        assert!(
            outcome.logged.iter().all(|l| l.allowed),
            "{policy}: nothing but admissions while Redis is up"
        );
    }
}

#[test]
fn one_hot_key_stays_within_the_bound_for_every_algorithm() {
    let server = RedisServer::start();
    // Quiet rounds: 20 requests from the fleet, 80 a window of 100.
    let leases = Leases::Given {
        lifetime_ms: 100,
        max_lease: 10,
    };
    every_algorithm(&server, 100, 1, 5, leases);
}

/// At the defaults (no `T` or `M` given: `M` from the over-admission
/// budget, docs/spec.md section 8.6), on one hot key: the bound holds with
/// the `T` and `M` the defaults give.
#[test]
fn at_the_defaults_one_hot_key_stays_within_the_bound_for_every_algorithm() {
    let server = RedisServer::start();
    // Quiet rounds: 128 requests from the fleet, 512 a window of 1,000,
    // so leases grow; 1% of 1,000 a lease at most.
    every_algorithm(&server, 1_000, 1, 32, Leases::Defaults);
}

#[test]
fn many_keys_stay_within_the_bound_for_every_algorithm() {
    let server = RedisServer::start();
    // Quiet rounds: 4 requests a key from the fleet, 16 a window of 20. A
    // lifetime of two windows: units leased in one are used in the next.
    let leases = Leases::Given {
        lifetime_ms: 400,
        max_lease: 4,
    };
    every_algorithm(&server, 20, 10_000, 64, leases);
}

#[test]
fn a_killed_server_admits_only_the_leases_in_hand_before_the_failure_policy() {
    let mut server = RedisServer::start();
    let fleet = FleetRun {
        target: Target::Server(server.url()),
        prefix: fresh_prefix("lease-outage"),
        policy: Policy::token_bucket(Rate::new(400, Duration::from_millis(200))).unwrap(),
        keys: 1,
        // 64 requests a round from the fleet, 4 rounds a window: well
        // under the limit, so the leases grow to their maximum.
        tasks: 16,
        rounds: 0,
        period: Duration::from_millis(50),
        phase: 1,
        quiet: 0,
        burst: 1,
        // Past a lifetime of rounds with the failure policy's answers.
        until_degraded: 10,
        lifetime: Duration::from_millis(300),
        max_lease: 20,
        at_defaults: false,
        on_failure: "fail-open",
    };
    let port = server.port();
    let mut killed = (0, 0);
    // Killed once every worker has done 20 rounds; they go on until each
    // caller has had 10 rounds answered by the failure policy.
    let outcome = fleet.run_with(20, |_| {
        let watcher = std::thread::spawn(move || refused_from(port));
        killed.0 = wall_us();
        server.kill();
        killed.1 = watcher.join().expect("the watcher");
    });
    // SIGKILL sent at `kill_us`; no command decided from `dead_us`.
    let (kill_us, dead_us) = killed;
    let lifetime_us = micros(fleet.lifetime);
    let units = |source: &str, from_us: u64| -> u64 {
        outcome
            .logged
            .iter()
            .filter(|l| l.allowed && l.source == source && l.time_us >= from_us)
            .map(|l| l.cost)
            .sum()
    };
    let held = PROCESSES * fleet.applied_max_lease();
    eprintln!(
        "killed {} ms into the run, dead {} µs later: after it {} leased, {} by Redis, \
         {} failed open",
        (kill_us - outcome.start_us) / 1_000,
        dead_us - kill_us,
        units("lease", dead_us),
        units("backend", dead_us),
        units("fail-open", kill_us),
    );
    assert!(
        units("lease", outcome.start_us) > held,
        "leases serve before the kill"
    );
    assert!(
        units("lease", dead_us) <= held,
        "once the server is dead, at most the N*M = {held} units in hand are leased: {}",
        units("lease", dead_us)
    );
    assert_eq!(
        units("lease", dead_us + lifetime_us),
        0,
        "a lease in hand lapses a lifetime after it was sent, at the latest"
    );
    assert_eq!(units("backend", dead_us), 0, "a dead server admits nothing");
    let degraded: Vec<_> = outcome
        .logged
        .iter()
        .filter(|l| l.source != "lease" && l.source != "backend")
        .collect();
    assert!(
        !degraded.is_empty(),
        "the failure policy answers after the kill"
    );
    assert!(
        degraded
            .iter()
            .all(|l| l.source == "fail-open" && l.allowed && l.time_us >= kill_us),
        "every other answer is the failure policy's, marked fail-open, after the kill"
    );
}

/// A time (wall-clock µs) when the server on `port` refuses connections,
/// within about a millisecond of its exit: its connections closed with it,
/// so it decides nothing from then on.
fn refused_from(port: u16) -> u64 {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err() {
            return wall_us();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
