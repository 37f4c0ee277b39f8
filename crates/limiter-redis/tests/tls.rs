//! TLS (`rediss://`, feature `tls-rustls`) against a redis-server serving
//! TLS with a throwaway CA: decisions match the core; a server whose
//! certificate the client does not trust is refused with a clear error;
//! and a Redis Cluster serving TLS is reached on every primary.
//!
//! Built only with the feature (`[[test]] required-features` in
//! Cargo.toml); `scripts/test` runs it:
//! `cargo test -p limiter-redis --features tls-rustls --test tls`.

mod common;

use std::time::Duration;

use limiter_core::{Error, Limiter, ManualClock, Policy, Rate};
use limiter_redis::{BackendError, BackendErrorKind, RedisBackend, RedisLimiter};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::{fresh_prefix, unrelated_ca_pem, RedisServer};
use limiter_test::ModelLimiter;

const TIMEOUT: Duration = Duration::from_secs(2);

fn tls_backend(url: &str, ca_pem: Option<Vec<u8>>) -> limiter_redis::RedisBackendBuilder {
    let builder = RedisBackend::builder(url)
        .connection_timeout(TIMEOUT)
        .command_timeout(TIMEOUT);
    match ca_pem {
        Some(pem) => builder.tls_root_certificate(pem),
        None => builder,
    }
}

#[tokio::test]
async fn rediss_with_a_private_ca_decides_as_the_core() {
    let server = RedisServer::start_tls();
    let backend = tls_backend(&server.tls_url(), Some(server.ca_pem()))
        .build()
        .await
        .unwrap();
    backend.ping().await.unwrap();
    let clock = ManualClock::new(1_000_000);
    for policy in [
        Policy::token_bucket(Rate::per_second(3)).unwrap(),
        Policy::sliding_log(Rate::per_second(3)).unwrap(),
    ] {
        let redis = RedisLimiter::builder(&backend, policy.clone())
            .key_prefix(common::fresh_prefix("tls"))
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        let model = ModelLimiter::new(policy.clone(), clock.clone());
        for (step, advance_ms, cost) in [(0, 0, 1), (1, 0, 2), (2, 0, 1), (3, 400, 1), (4, 1000, 3)]
        {
            clock.advance(Duration::from_millis(advance_ms));
            let got = redis.acquire(b"k", cost).await.unwrap();
            let want = model.acquire(b"k", cost).await.unwrap();
            assert_eq!(
                (got.allowed, got.remaining, got.retry_after, got.reset_after),
                (
                    want.allowed,
                    want.remaining,
                    want.retry_after,
                    want.reset_after
                ),
                "{policy}, step {step}"
            );
        }
    }
    // One connection carried it all, on the TLS port (the plain port is
    // the harness's): a plain-text client cannot talk to it.
    assert_eq!(server.connected_clients(), 1);
    let plain = server.tls_url().replace("rediss://", "redis://");
    assert!(tls_backend(&plain, None).build().await.is_err());
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_ca_is_refused_with_a_clear_error() {
    let server = RedisServer::start_tls();
    for (name, ca) in [
        ("an unrelated CA", Some(unrelated_ca_pem())),
        ("the system's roots", None),
    ] {
        let error = tls_backend(&server.tls_url(), ca)
            .build()
            .await
            .unwrap_err();
        assert_eq!(
            common::backend_kind(&error),
            BackendErrorKind::Connect,
            "{name}"
        );
        let message = error.chain().to_string();
        // Refused by the handshake, not left to the connection timeout.
        assert!(
            !message.contains("no connection within"),
            "{name}: {message}"
        );
        assert!(message.contains(&server.tls_url()), "{name}: {message}");
        assert!(
            message.to_lowercase().contains("certificate"),
            "{name}: the error names the certificate: {message}"
        );
        println!("{name}: {message}");
    }
}

/// A root certificate option without any certificate in it is a bad
/// option: [`Error::InvalidConfig`] before any round trip, not a
/// connection that fails later for want of a trusted root.
#[tokio::test]
async fn a_root_certificate_without_a_certificate_is_a_configuration_error() {
    let server = RedisServer::start_tls();
    let error = tls_backend(&server.tls_url(), Some(b"not a certificate".to_vec()))
        .build_lazy()
        .unwrap_err();
    println!("not a certificate: {}", error.chain());
    match error {
        Error::InvalidConfig(e) => {
            let e = e.downcast::<BackendError>().expect("a BackendError");
            assert_eq!(e.kind(), BackendErrorKind::Config, "{e}");
        }
        other => panic!("expected a configuration error, got {}", other.chain()),
    }
}

/// A Redis Cluster serving TLS (its bus and replication too): the cluster
/// backend, seeded by `rediss://` URLs and trusting the throwaway CA, finds
/// every primary's TLS port in `CLUSTER SLOTS` and decides exactly on a key
/// of each (ten of 40); without the CA, building fails naming the
/// certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_reached_on_every_primary() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start_tls)
        .await
        .unwrap();
    let cluster_backend = || {
        RedisBackend::cluster(cluster.tls_seed_urls())
            .connection_timeout(TIMEOUT)
            .command_timeout(TIMEOUT)
    };
    let error = cluster_backend().build().await.unwrap_err();
    let message = error.chain().to_string();
    assert!(
        message.to_lowercase().contains("certificate"),
        "the error names the certificate: {message}"
    );
    let backend = cluster_backend()
        .tls_root_certificate(cluster.ca_pem())
        .build()
        .await
        .unwrap();
    let limiter =
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(10)).unwrap())
            .key_prefix(fresh_prefix("tls-cluster"))
            .build()
            .await
            .unwrap();
    let primaries = cluster.primaries();
    let mut keys: Vec<(String, u16)> = Vec::new();
    for n in 0.. {
        let key = format!("user:{n}");
        let owner = cluster.node_for_key(limiter.redis_key(key.as_bytes())).port;
        if !keys.iter().any(|(_, port)| *port == owner) {
            keys.push((key, owner));
        }
        if keys.len() == primaries.len() {
            break;
        }
    }
    for (key, owner) in keys {
        let mut admitted = 0;
        for _ in 0..40 {
            admitted += u32::from(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
        }
        assert_eq!(admitted, 10, "{key} on the primary of port {owner}");
    }
}
