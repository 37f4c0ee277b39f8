//! limiter-redis-module on a cluster whose every node loaded it: the
//! module's command goes to the node of its keys (no `MOVED`), and
//! decides there as the functions do.

use limiter_redis::Engine;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_the_module_decides_on_each_keys_node() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start_with_module)
            .await
            .unwrap(),
    );
    let backend = backend(&cluster);
    let policies: Policies = "token-bucket:2/10s;sliding-log:3/10s".parse().unwrap();
    let limiter = RedisLimiter::builder(&backend, policies)
        .key_prefix(common::fresh_prefix("module"))
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.engine(), Engine::Module);
    // 100 user keys, over every primary: two of three acquires admitted.
    for user in 0..100 {
        let key = format!("user:{user}");
        let mut admitted = Vec::new();
        for _ in 0..3 {
            admitted.push(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
        }
        assert_eq!(admitted, [true, true, false], "{key}");
    }
    let primaries = cluster.primaries();
    for node in &primaries {
        let stats = cluster.command(node, &["INFO", "commandstats"]).text();
        assert!(
            stats.contains("cmdstat_limiter.decide:calls="),
            "{}: {stats}",
            node.port
        );
        let errors = cluster.command(node, &["INFO", "errorstats"]).text();
        assert!(!errors.contains("MOVED"), "{}: {errors}", node.port);
    }
}
