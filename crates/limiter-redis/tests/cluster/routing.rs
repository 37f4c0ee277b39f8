//! Where decisions go: keys spread over every primary, a tiered set in one
//! slot, the article's load test per primary, a password (and one the
//! nodes refuse), and a single-server backend pointed at a cluster node.

use limiter_core::LimiterExt;

use super::*;

/// Many user keys under every algorithm: each primary holds some of them,
/// and each limiter key sits on the primary of its user key's hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_primary() {
    const USERS: usize = 120;
    let cluster = cluster();
    let backend = backend(cluster);
    let mut per_primary: BTreeMap<u16, usize> = BTreeMap::new();
    for algorithm in Algorithm::ALL {
        let limiter = limiter(
            &backend,
            Policy::new(algorithm, Rate::per_minute(5)).unwrap(),
            "spread",
        )
        .await;
        for user in 0..USERS {
            let decision = limiter
                .acquire(format!("user:{user}").as_bytes(), 1)
                .await
                .unwrap();
            assert!(decision.allowed, "{algorithm}: {decision:?}");
        }
        let pattern = format!("{}:*", limiter.key_prefix());
        let mut total = 0;
        for primary in cluster.primaries() {
            let keys = cluster.keys_matching(&primary, &pattern);
            for key in &keys {
                let user = key
                    .split_once('{')
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .expect("a hash tag")
                    .0;
                assert_eq!(
                    cluster.slot_of(key),
                    cluster.slot_of(format!("{{{user}}}")),
                    "{key}: the key's slot is its user key's"
                );
            }
            *per_primary.entry(primary.port).or_default() += keys.len();
            assert!(
                !keys.is_empty(),
                "{algorithm}: no key on primary {}",
                primary.port
            );
            total += keys.len();
        }
        assert_eq!(
            total,
            2 * USERS,
            "{algorithm}: a state and a record per user key"
        );
    }
    eprintln!("limiter keys per primary (port: keys): {per_primary:?}");
}
/// A user key that is empty or starts with `}` has no hash tag of its own
/// (`{}` would make Redis hash each whole key): a tiered set on it still
/// decides in one slot — exactly, not with a `CROSSSLOT` error that a
/// fail-open limiter would turn into unlimited admissions — and resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_set_on_a_key_without_a_hash_tag_decides_in_one_slot() {
    let cluster = cluster();
    let backend = backend(cluster);
    let policies: Policies = "sliding-log:5/1m;token-bucket:100/1h".parse().unwrap();
    let limiter = RedisLimiter::builder(&backend, policies)
        .key_prefix(common::fresh_prefix("tagless"))
        .build()
        .await
        .unwrap();
    for user_key in ["", "}", "}x"] {
        let mut admitted = 0;
        for _ in 0..8 {
            let decision = limiter
                .acquire(user_key.as_bytes(), 1)
                .await
                .unwrap_or_else(|e| {
                    panic!("{user_key:?}: {}", chain(&e));
                });
            assert!(!decision.is_degraded(), "{user_key:?}: {decision:?}");
            admitted += u64::from(decision.allowed);
        }
        assert_eq!(admitted, 5, "{user_key:?}");
        limiter.reset(user_key.as_bytes()).await.unwrap();
        assert!(
            limiter
                .acquire(user_key.as_bytes(), 1)
                .await
                .unwrap()
                .allowed,
            "{user_key:?} after reset"
        );
        let slots: Vec<u16> = limiter
            .redis_keys(user_key.as_bytes())
            .iter()
            .map(|key| cluster.slot_of(key))
            .collect();
        assert!(
            slots.windows(2).all(|w| w[0] == w[1]),
            "{user_key:?}: {slots:?}"
        );
    }
}
/// The article's load test on the cluster, on a key of each primary: 500
/// acquires at concurrency 50 against 100 per 10 s (sliding log, Redis
/// `TIME`) admit exactly 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_load_test_admits_exactly_one_hundred_on_every_primary() {
    let cluster = cluster();
    let backend = backend(cluster);
    let policy = Policy::sliding_log(Rate::new(100, Duration::from_secs(10))).unwrap();
    let limiter = limiter(&backend, policy, "article").await;
    let keys = keys_on(cluster, &limiter, "article", &cluster.primaries(), 1);
    assert_eq!(keys.len(), 3);
    for key in keys {
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (limiter, key) = (Arc::clone(&limiter), key.clone());
                tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..10 {
                        let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
                        admitted += usize::from(decision.allowed);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        assert_eq!(
            admitted,
            100,
            "{key} on node {}",
            cluster.node_for_key(limiter.redis_key(key.as_bytes())).port
        );
    }
}
/// A cluster whose nodes require a password (`requirepass`): the backend
/// reaches every primary with the builder's password, or with one in the
/// seed URLs, and decides exactly (ten of 40 on a key of each primary);
/// without it, building fails with the server's refusal in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_password_needs_it_and_decides_exactly_with_it() {
    const PASSWORD: &str = "s3cret-cluster";
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start_with_password(PASSWORD))
            .await
            .unwrap(),
    );
    let refused = RedisBackend::cluster(cluster.seed_urls())
        .build()
        .await
        .expect_err("no password, no cluster");
    assert!(chain(&refused).contains("NOAUTH"), "{}", chain(&refused));

    let with_urls: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| url.replacen("redis://", &format!("redis://:{PASSWORD}@"), 1))
        .collect();
    let backends = [
        RedisBackend::cluster(cluster.seed_urls())
            .password(PASSWORD)
            .build()
            .await
            .unwrap(),
        RedisBackend::cluster(with_urls).build().await.unwrap(),
    ];
    for (i, backend) in backends.iter().enumerate() {
        let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
        let name = format!("password-{i}");
        let limiter = limiter(backend, policy, &name).await;
        let keys = keys_on(&cluster, &limiter, &name, &cluster.primaries(), 1);
        assert_eq!(keys.len(), 3);
        for key in keys {
            let mut admitted = 0;
            for _ in 0..40 {
                admitted += u32::from(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
            }
            assert_eq!(admitted, 10, "{key} (backend {i})");
        }
    }
}
/// Credentials the cluster refuses are a configuration error, never a
/// failure policy's answer: building without the password or with a wrong
/// one; and a password rotated on the nodes under a running backend (its
/// node connections then lost), where each decision is `InvalidConfig`
/// under fail-open, counted nowhere. Once the nodes take the backend's
/// password again, their probes reconnect and decisions go on exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_the_cluster_refuses_is_a_configuration_error() {
    const PASSWORD: &str = "s3cret-cluster";
    const ROTATED: &str = "r0tated";
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start_with_password(PASSWORD))
            .await
            .unwrap(),
    );
    let refused = |error: &limiter_core::Error| {
        let message = chain(error);
        assert!(
            matches!(error, limiter_core::Error::InvalidConfig(_)),
            "{message}"
        );
        assert!(message.contains("refuses the"), "{message}");
        assert!(message.contains("credentials"), "{message}");
    };
    for builder in [
        RedisBackend::cluster(cluster.seed_urls()),
        RedisBackend::cluster(cluster.seed_urls()).password("wr0ng-pw"),
    ] {
        refused(&builder.build().await.unwrap_err());
    }

    let backend = RedisBackend::cluster(cluster.seed_urls())
        .password(PASSWORD)
        .connection_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let limiter = RedisLimiter::builder(&backend, policy)
        .key_prefix(common::fresh_prefix("rotated"))
        .build()
        .await
        .unwrap();
    // Asked once: the harness's own password stops working with the rotation.
    let primaries = cluster.primaries();
    let keys = keys_on(&cluster, &limiter, "rotated", &primaries, 1);
    let open = limiter
        .on_failure(limiter_core::FailurePolicy::FailOpen)
        .probe_interval(Duration::ZERO);
    for key in &keys {
        assert_eq!(open.acquire(key.as_bytes(), 1).await.unwrap().remaining, 9);
    }
    for primary in &primaries {
        // Every client but this one: the backend's connection, and on a
        // busy machine a refused build's that the node has not yet seen
        // closed.
        let kill = ["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"];
        let killed = cluster.command(primary, &kill);
        assert!(
            killed.integer() >= 1,
            "the backend's connection is killed: {killed:?}"
        );
        let rotate = ["CONFIG", "SET", "requirepass", ROTATED];
        assert_eq!(
            cluster.command(primary, &rotate),
            Reply::Status("OK".into())
        );
    }
    for key in &keys {
        for _ in 0..3 {
            let error = open
                .acquire(key.as_bytes(), 1)
                .await
                .expect_err("no failure policy answers refused credentials");
            refused(&error);
        }
    }

    for primary in &primaries {
        let url = primary
            .url()
            .replacen("redis://", &format!("redis://:{ROTATED}@"), 1);
        let mut admin = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(PASSWORD)
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    // A "did not hang" guard: the probe retries every probe interval, far
    // less than a minute even on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    for key in &keys {
        let decision = loop {
            match open.acquire(key.as_bytes(), 1).await {
                Ok(decision) => break decision,
                Err(error) => refused(&error),
            }
            assert!(Instant::now() < deadline, "{key}: the probe never got in");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(
            (decision.allowed, decision.remaining, decision.source),
            (true, 8, limiter_core::DecisionSource::Backend),
            "{key}: nothing counted while refused"
        );
    }
}

/// A single-server backend pointed at a cluster node is the wrong backend
/// (the node redirects the keys of every other node): building it fails
/// with a configuration error that names `RedisBackend::cluster`, as does a
/// lazy backend's first call. For a user whose ACL refuses `INFO` the
/// backend builds, and the node's first `MOVED` is that configuration
/// error: under fail-open it is no admission, and every later call, on any
/// node's key, fails with it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_backend_at_a_cluster_node_is_refused() {
    let cluster = cluster();
    let node = cluster.primaries()[0].clone();
    let refused = |error: limiter_core::Error| match error {
        limiter_core::Error::InvalidConfig(e) => {
            let message = chain(&*e);
            let e = e
                .downcast::<limiter_redis::BackendError>()
                .expect("a BackendError");
            assert_eq!(e.kind(), limiter_redis::BackendErrorKind::Config);
            assert!(message.contains("RedisBackend::cluster"), "{message}");
            message
        }
        other => panic!("expected a configuration error, got {}", chain(&other)),
    };
    let error = RedisBackend::builder(node.url()).build().await.unwrap_err();
    let message = refused(error);
    assert!(message.contains("cluster_enabled:1"), "{message}");
    let lazy = RedisBackend::builder(node.url()).build_lazy().unwrap();
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let error = RedisLimiter::builder(&lazy, policy.clone())
        .build()
        .await
        .unwrap_err();
    refused(error);

    let user = [
        "ACL", "SETUSER", "no-info", "on", ">pw", "~*", "&*", "+@all", "-info",
    ];
    assert_eq!(cluster.command(&node, &user).text(), "OK");
    let backend = RedisBackend::builder(node.url())
        .username("no-info")
        .password("pw")
        .build()
        .await
        .expect("INFO refused: taken as one server");
    let limiter = limiter(&backend, policy, "single-at-node").await;
    let primaries = cluster.primaries();
    let elsewhere = keys_on(cluster, &limiter, "single", &primaries[1..2], 1).remove(0);
    let here = keys_on(cluster, &limiter, "single", &primaries[..1], 1).remove(0);
    let open = limiter_core::LimiterExt::on_failure(
        Arc::clone(&limiter),
        limiter_core::FailurePolicy::FailOpen,
    );
    let message = refused(open.acquire(elsewhere.as_bytes(), 1).await.unwrap_err());
    assert!(message.contains("MOVED"), "{message}");
    refused(open.acquire(here.as_bytes(), 1).await.unwrap_err());
}
