//! A server without Redis Functions (older than 7.0, or an ACL or a
//! `rename-command` that hides `FUNCTION`) fails the build at once, saying
//! what the limiter needs, and leaves nothing behind that would fail the
//! backend's later connections.

use limiter_core::{Error, Policy, Rate};
use limiter_redis::{BackendErrorKind, RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;

#[tokio::test]
async fn a_server_without_functions_fails_the_build_with_the_version_needed() {
    // `""`: the config parser's empty name, i.e. the command is removed.
    let server = RedisServer::start_with_args(&["--rename-command", "FUNCTION", "\"\""]);
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let policy = Policy::token_bucket(Rate::per_second(10)).unwrap();
    let error = RedisLimiter::builder(&backend, policy)
        .build()
        .await
        .unwrap_err();
    let Error::Backend(source) = &error else {
        panic!("expected a backend error, got {error:?}");
    };
    let backend_error = source
        .downcast_ref::<limiter_redis::BackendError>()
        .expect("a BackendError");
    assert_eq!(backend_error.kind(), BackendErrorKind::Redis);
    let message = error.chain().to_string();
    assert!(
        message.contains("Redis 7.0 or later") && message.contains("unknown command"),
        "{message}"
    );
    // The refused library is not kept: were it, every new connection
    // would try to load it and fail. Kill the backend's connection; the
    // next command reconnects.
    server.command("CLIENT KILL TYPE normal");
    backend.ping().await.unwrap();
    assert!(backend.is_available());
}
