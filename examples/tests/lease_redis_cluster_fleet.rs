//! docs/spec.md section 8.2 on the 3-primary Redis Cluster harness: 4 OS
//! processes (the `lease_worker` example) × 64 callers lease sliding-log
//! quota on one hot key and on keys drawn from 1,000, spread over the
//! primaries, on `lease_redis_fleet.rs`'s schedule (quiet rounds, then bursts
//! larger than the bound admits), and the units their logs say they
//! admitted stay within the bound in every interval, as on one server.

mod lease_worker_fleet;

use std::time::Duration;

use lease_worker_fleet::{FleetRun, Target};
use limiter_core::{Policy, Rate};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::fresh_prefix;

/// Callers in each worker.
const TASKS: u64 = 64;

#[test]
fn a_fleet_on_a_cluster_stays_within_the_bound() {
    let cluster = RedisCluster::start();
    // (limit per 200 ms, keys, quiet callers, T in ms, M): as
    // lease_redis_fleet.rs's runs.
    for (limit, keys, quiet, lifetime_ms, max_lease) in
        [(100, 1, 5, 100, 10), (20, 1_000, 64, 400, 4)]
    {
        let policy = Policy::sliding_log(Rate::new(limit, Duration::from_millis(200))).unwrap();
        let mut fleet = FleetRun {
            target: Target::Cluster(cluster.seed_urls()),
            prefix: fresh_prefix("lease-cluster"),
            policy: policy.clone(),
            keys,
            tasks: TASKS,
            rounds: 24,
            period: Duration::from_millis(50),
            phase: 8,
            quiet,
            burst: 0,
            until_degraded: 0,
            lifetime: Duration::from_millis(lifetime_ms),
            max_lease,
            at_defaults: false,
            on_failure: "return-error",
        };
        fleet.burst = fleet.denied_burst();
        let outcome = fleet.run();
        let leased = outcome.admitted_from("lease");
        eprintln!(
            "{policy} on {keys} keys, bursts of {}: {} admitted ({leased} from leases), {} denied",
            fleet.burst,
            outcome.admitted(),
            outcome.denied
        );
        assert_eq!(
            outcome.admitted() + outcome.denied,
            fleet.requests(),
            "every request answered"
        );
        if let Err(violation) = fleet.check_bound(&outcome) {
            panic!("{policy} on {keys} keys on a cluster: {violation}");
        }
        assert!(
            outcome.denied > 0,
            "bursts beyond the bound are denied in part"
        );
        assert!(leased > 0, "leases serve decisions");
        if keys > 1 {
            for primary in cluster.primaries() {
                let held = cluster.keys_matching(&primary, format!("{}:*", fleet.prefix));
                assert!(!held.is_empty(), "the keys reach every primary");
            }
        }
    }
}
