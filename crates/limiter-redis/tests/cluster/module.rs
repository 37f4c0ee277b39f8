//! limiter-redis-module on a cluster whose every node loaded it: the
//! module's command goes to the node of its keys (no `MOVED`), and
//! decides there as the functions do; a cluster losing it and getting it
//! back is decided on by the Lua functions meanwhile and by the module
//! again once new node connections find it.

use limiter_redis::Engine;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_the_module_decides_on_each_keys_node() {
    let cluster = cluster_of_its_own_for(Engine::Module).await;
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
    for node in &cluster.primaries() {
        assert_the_module_decided(&cluster, node);
        let errors = cluster.command(node, &["INFO", "errorstats"]).text();
        assert!(!errors.contains("MOVED"), "{}: {errors}", node.port);
    }
}

/// Asserts that `node` ran the module's decisions since it started (or
/// loaded the module: `MODULE LOAD` starts its command's count anew).
fn assert_the_module_decided(cluster: &RedisCluster, node: &ClusterNode) {
    let stats = cluster.command(node, &["INFO", "commandstats"]).text();
    assert!(
        stats.contains("cmdstat_limiter.decide"),
        "{}: the module decided nothing: {stats}",
        node.port
    );
}

/// Every primary loses the module (unloaded here; a rolling restart
/// without it alike), then gets it back: a limiter that detected it
/// decides with the Lua functions meanwhile, and with the module again
/// once its new node connections find it, on the same state throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_the_module_back_on_every_node_is_found_by_new_connections() {
    let cluster = cluster_of_its_own_for(Engine::Module).await;
    let backend = backend(&cluster);
    let limiter =
        RedisLimiter::builder(&backend, Policy::token_bucket(Rate::per_second(5)).unwrap())
            .key_prefix(common::fresh_prefix("back"))
            .clock(ManualClock::new(1_000_000))
            .build()
            .await
            .unwrap();
    let keys: Vec<String> = (0..30).map(|user| format!("user:{user}")).collect();
    // Every key at once: their calls span slots of each node, so the
    // module's calls across slots meet its going and coming back too.
    let remaining = |left: u64| {
        let limiter = &limiter;
        let keys = &keys;
        async move {
            let decisions = keys.iter().map(|key| limiter.acquire(key.as_bytes(), 1));
            let decisions = futures_util::future::join_all(decisions).await;
            for (key, decision) in keys.iter().zip(decisions) {
                assert_eq!(decision.unwrap().remaining, left, "{key}");
            }
        }
    };
    assert_eq!(limiter.engine(), Engine::Module);
    remaining(4).await;
    let primaries = cluster.primaries();
    for node in &primaries {
        let unloaded = cluster
            .command(node, &["MODULE", "UNLOAD", "limiter"])
            .text();
        assert!(unloaded.contains("OK"), "{}: {unloaded}", node.port);
    }
    remaining(3).await;
    assert_eq!(limiter.engine(), Engine::Lua);
    let path = limiter_test::redis_server::module_path();
    let path = path.to_str().expect("a UTF-8 path");
    for node in &primaries {
        let loaded = cluster.command(node, &["MODULE", "LOAD", path]).text();
        assert!(loaded.contains("OK"), "{}: {loaded}", node.port);
    }
    // The connections in use were asked before the module came back.
    remaining(2).await;
    assert_eq!(limiter.engine(), Engine::Lua);
    for node in &primaries {
        cluster.command(node, &["CLIENT", "KILL", "TYPE", "normal"]);
    }
    remaining(1).await;
    assert_eq!(limiter.engine(), Engine::Module);
    remaining(0).await;
    for node in &primaries {
        assert_the_module_decided(&cluster, node);
    }
}
