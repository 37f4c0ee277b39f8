//! docs/spec.md section 8 on a real redis-server: 4 OS processes (the
//! `lease_worker` example) × 64 callers lease from one `RedisLimiter`,
//! asking for a fifth more than the limit on average (demand that comes and
//! goes: some windows under the limit, where leases grow, some over it),
//! and the units their own logs say they admitted stay within the section
//! 8.2 bound in every interval, for every algorithm, on one hot key and on
//! 10,000 keys. With the server killed mid-run, nothing
//! beyond the leases in hand is admitted before the failure policy answers,
//! and its answers say so.
//!
//! The logs' times are the decisions' own: Redis `TIME` for the global
//! limiter's, each worker's clock (the host's wall clock, advanced
//! monotonically) for a leased one; server and workers share one host.

mod worker_fleet;

use std::time::Duration;

use limiter_core::{Algorithm, Policy, Rate};
use limiter_test::redis_server::{fresh_prefix, RedisServer};
use worker_fleet::{micros, wall_us, FleetRun, Target, PROCESSES};

/// Every algorithm at `limit` per 200 ms.
fn policies(limit: u64) -> Vec<Policy> {
    Algorithm::ALL
        .iter()
        .map(|&algorithm| {
            Policy::new(algorithm, Rate::new(limit, Duration::from_millis(200))).expect("a policy")
        })
        .collect()
}

/// Runs the fleet on `keys` keys under each policy of `limit` per 200 ms,
/// asking for a fifth more, and checks the bound.
fn every_algorithm(server: &RedisServer, limit: u64, keys: u64, lifetime_ms: u64, max_lease: u64) {
    // 5 windows a second, 6/5 of the limit, over the workers.
    let rate = keys * limit * 5 * 6 / 5 / PROCESSES;
    for policy in policies(limit) {
        let fleet = FleetRun {
            target: Target::Server(server.url()),
            prefix: fresh_prefix("lease-fleet"),
            policy: policy.clone(),
            keys,
            run: Duration::from_millis(1_500),
            rate,
            lifetime: Duration::from_millis(lifetime_ms),
            max_lease,
            on_failure: "return-error",
        };
        let outcome = fleet.run();
        let admitted = outcome.admitted();
        let leased = outcome.admitted_from("lease");
        eprintln!(
            "{policy} on {keys} keys: {admitted} admitted ({leased} from leases), {} denied",
            outcome.denied
        );
        assert!(
            outcome.denied > 0,
            "{policy}: the fleet asks for more than the limit"
        );
        assert!(leased > 0, "{policy}: leases serve decisions");
        assert!(
            outcome.logged.iter().all(|l| l.allowed),
            "{policy}: nothing but admissions while Redis is up"
        );
        if let Err(violation) = fleet.check_bound(&outcome) {
            panic!("{policy} on {keys} keys: {violation}");
        }
    }
}

#[test]
fn one_hot_key_stays_within_the_bound_for_every_algorithm() {
    let server = RedisServer::start();
    every_algorithm(&server, 100, 1, 100, 10);
}

#[test]
fn many_keys_stay_within_the_bound_for_every_algorithm() {
    let server = RedisServer::start();
    // Each worker asks a key for about 12 units a second: a lifetime of
    // 400 ms lets its leases hold more than one.
    every_algorithm(&server, 4, 10_000, 400, 4);
}

#[test]
fn a_killed_server_admits_only_the_leases_in_hand_before_the_failure_policy() {
    let mut server = RedisServer::start();
    let fleet = FleetRun {
        target: Target::Server(server.url()),
        prefix: fresh_prefix("lease-outage"),
        policy: Policy::token_bucket(Rate::new(400, Duration::from_millis(200))).unwrap(),
        keys: 1,
        run: Duration::from_millis(2_000),
        // Half the limit: the leases grow to their maximum.
        rate: 1_000 / PROCESSES,
        lifetime: Duration::from_millis(300),
        max_lease: 20,
        on_failure: "fail-open",
    };
    let port = server.port();
    let mut killed = (0, 0);
    let outcome = fleet.run_with(|start_us| {
        std::thread::sleep(Duration::from_micros(
            (start_us + 1_000_000).saturating_sub(wall_us()),
        ));
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
