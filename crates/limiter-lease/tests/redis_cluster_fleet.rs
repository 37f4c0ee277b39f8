//! docs/spec.md section 8.2 on the 3-primary Redis Cluster harness: 4 OS
//! processes (the `lease_worker` example) × 64 callers lease sliding-log
//! quota on one hot key and on 1,000 keys spread over the primaries, and
//! the units their logs say they admitted stay within the bound in every
//! interval, as on one server (`redis_fleet.rs`).

mod worker_fleet;

use std::time::Duration;

use limiter_core::{Policy, Rate};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::fresh_prefix;
use worker_fleet::{FleetRun, Target, PROCESSES};

#[test]
fn a_fleet_on_a_cluster_stays_within_the_bound() {
    let cluster = RedisCluster::start();
    // (limit per 200 ms, keys, T in ms, M): as redis_fleet.rs's runs.
    for (limit, keys, lifetime_ms, max_lease) in [(100, 1, 100, 10), (4, 1_000, 400, 4)] {
        let policy = Policy::sliding_log(Rate::new(limit, Duration::from_millis(200))).unwrap();
        let fleet = FleetRun {
            target: Target::Cluster(cluster.seed_urls()),
            prefix: fresh_prefix("lease-cluster"),
            policy: policy.clone(),
            keys,
            run: Duration::from_millis(1_500),
            // 6/5 of the limit, over the workers.
            rate: keys * limit * 5 * 6 / 5 / PROCESSES,
            lifetime: Duration::from_millis(lifetime_ms),
            max_lease,
            on_failure: "return-error",
        };
        let outcome = fleet.run();
        let leased = outcome.admitted_from("lease");
        eprintln!(
            "{policy} on {keys} keys: {} admitted ({leased} from leases), {} denied",
            outcome.admitted(),
            outcome.denied
        );
        assert!(outcome.denied > 0, "the fleet asks for more than the limit");
        assert!(leased > 0, "leases serve decisions");
        if keys > 1 {
            for primary in cluster.primaries() {
                let held = cluster.keys_matching(&primary, format!("{}:*", fleet.prefix));
                assert!(!held.is_empty(), "the keys reach every primary");
            }
        }
        if let Err(violation) = fleet.check_bound(&outcome) {
            panic!("{policy} on {keys} keys on a cluster: {violation}");
        }
    }
}
