//! The layer in front of a real tonic server (tonic-health's service, no
//! protoc needed) called by a real tonic client over HTTP/2: refusals
//! arrive as gRPC statuses (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`) with a
//! message and the layer's headers as metadata; admitted calls pass.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use limiter_core::{FailurePolicy, Limiter, ManualClock, Policies, Resilient};
use limiter_memory::MemoryLimiter;
use limiter_test::Flaky;
use limiter_tower::ban::BanList;
use limiter_tower::key::bytes_from_text;
use limiter_tower::{KeyExtractor, LimiterLayer};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A request time far from the epoch, in µs.
const T0: u64 = 1_700_000_000_000_000;

/// A memory limiter of `policies` whose time stands still at [`T0`], so
/// every call of a test is decided at one instant.
fn limiter(policies: &str) -> Arc<dyn Limiter> {
    let policies: Policies = policies.parse().unwrap();
    Arc::new(
        MemoryLimiter::builder(policies)
            .clock(ManualClock::new(T0))
            .build(),
    )
}

/// Serves the gRPC health service behind `layer` on 127.0.0.1, an
/// ephemeral port, with tonic's own server (which records each
/// connection's `TcpConnectInfo`).
async fn serve(layer: LimiterLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// One `Check` of the whole server: `Ok` is its serving status.
async fn check(client: &mut HealthClient<Channel>) -> Result<i32, Status> {
    let response = client.check(HealthCheckRequest::default()).await?;
    Ok(response.into_inner().status)
}

fn metadata<'a>(status: &'a Status, name: &str) -> Option<&'a str> {
    status
        .metadata()
        .get(name)
        .map(|value| value.to_str().unwrap())
}

#[tokio::test]
async fn a_limit_of_n_admits_n_calls_and_exhausts_the_rest() {
    const N: usize = 5;
    let layer = LimiterLayer::new(limiter("sliding-log:5/2s")).key(KeyExtractor::global());
    let mut client = client(serve(layer).await).await;

    let mut refused = Vec::new();
    for _ in 0..N + 3 {
        match check(&mut client).await {
            Ok(status) => assert_eq!(status, ServingStatus::Serving as i32),
            Err(status) => refused.push(status),
        }
    }

    assert_eq!(refused.len(), 3, "{refused:?}");
    for status in &refused {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(status.message(), "rate limited, retry after 2 s");
        // The HTTP answer's headers reach the client as metadata.
        assert_eq!(metadata(status, "retry-after"), Some("2"));
        assert_eq!(metadata(status, "x-ratelimit-limit"), Some("5"));
        assert_eq!(metadata(status, "x-ratelimit-remaining"), Some("0"));
        assert!(metadata(status, "ratelimit").is_some(), "{status:?}");
    }
}

#[tokio::test]
async fn admitted_calls_pass_with_the_rate_limit_headers() {
    let layer = LimiterLayer::new(limiter("sliding-log:5/2s")).key(KeyExtractor::global());
    let mut client = client(serve(layer).await).await;

    for remaining in ["4", "3"] {
        let response = client.check(HealthCheckRequest::default()).await.unwrap();
        let header = response.metadata().get("x-ratelimit-remaining");
        assert_eq!(header.map(|v| v.to_str().unwrap()), Some(remaining));
        assert_eq!(response.into_inner().status, ServingStatus::Serving as i32);
    }
}

#[tokio::test]
async fn the_ip_key_reads_tonics_peer_address_and_a_ban_exhausts() {
    // The ban's time stands still: its 60 s are all left when read.
    let bans = BanList::memory_with_clock(ManualClock::new(T0));
    // The default key is the client address: tonic's TcpConnectInfo.
    let layer = LimiterLayer::new(limiter("sliding-log:100/1m")).bans(bans.clone());
    let mut client = client(serve(layer).await).await;
    assert_eq!(
        check(&mut client).await.unwrap(),
        ServingStatus::Serving as i32
    );

    bans.ban(&bytes_from_text("ip:127.0.0.1"), Duration::from_secs(60))
        .await
        .unwrap();
    let banned = check(&mut client).await.unwrap_err();
    assert_eq!(banned.code(), Code::ResourceExhausted, "{banned:?}");
    assert_eq!(banned.message(), "banned, retry after 60 s");
    assert_eq!(metadata(&banned, "retry-after"), Some("60"));

    bans.unban(&bytes_from_text("ip:127.0.0.1")).await.unwrap();
    assert_eq!(
        check(&mut client).await.unwrap(),
        ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn fail_closed_and_limiter_errors_are_unavailable() {
    let flaky = Arc::new(Flaky::new(limiter("sliding-log:5/2s")));
    let closed: Arc<dyn Limiter> = Arc::new(
        Resilient::new(Arc::clone(&flaky), FailurePolicy::FailClosed)
            .probe_interval(Duration::ZERO),
    );
    let closed_layer = LimiterLayer::from_arc(closed).key(KeyExtractor::global());
    let error_layer =
        LimiterLayer::from_arc(Arc::clone(&flaky) as Arc<dyn Limiter>).key(KeyExtractor::global());
    let mut closed_client = client(serve(closed_layer).await).await;
    let mut error_client = client(serve(error_layer).await).await;
    flaky.set_failing(true);

    let closed = check(&mut closed_client).await.unwrap_err();
    assert_eq!(closed.code(), Code::Unavailable, "{closed:?}");
    assert!(
        closed
            .message()
            .starts_with("rate limiter unavailable, retry after "),
        "{closed:?}"
    );
    assert_eq!(
        metadata(&closed, "x-ratelimit-degraded"),
        Some("fail-closed")
    );
    assert!(metadata(&closed, "retry-after").is_some(), "{closed:?}");

    let error = check(&mut error_client).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    assert_eq!(error.message(), "rate limiter unavailable, retry after 1 s");
    assert_eq!(metadata(&error, "retry-after"), Some("1"));

    flaky.set_failing(false);
    assert!(check(&mut error_client).await.is_ok());
}

#[tokio::test]
async fn an_on_limited_function_still_decides_a_grpc_refusal() {
    let layer = LimiterLayer::new(limiter("sliding-log:1/2s"))
        .key(KeyExtractor::global())
        .on_limited(|_| {
            Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "7")
                .header("grpc-message", "ask%20nicely")
                .body(Bytes::new())
                .unwrap()
        });
    let mut client = client(serve(layer).await).await;
    assert!(check(&mut client).await.is_ok());

    let refused = check(&mut client).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(refused.message(), "ask nicely");
    assert_eq!(metadata(&refused, "retry-after"), Some("2"));
}

/// Over TLS the IP key still finds the client's address: tonic 0.14
/// records a TLS connection's `TcpConnectInfo` beside its
/// `TlsConnectInfo`, so calls over TLS are limited (and banned) by
/// address, not refused for want of one. The certificate is a throwaway
/// one for 127.0.0.1.
#[tokio::test]
async fn over_tls_the_ip_key_reads_the_peer_address() {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

    let dir = std::env::temp_dir().join(format!("limiter-tower-grpc-tls-{}", std::process::id()));
    limiter_test::certificates::generate(&dir);
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (ca, cert, key) = (read("ca.crt"), read("server.crt"), read("server.key"));
    let _ = std::fs::remove_dir_all(&dir);

    let bans = BanList::memory();
    // The default key: the client address.
    let layer = LimiterLayer::new(limiter("sliding-log:2/1m")).bans(bans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    tokio::spawn(async move {
        Server::builder()
            .tls_config(tls)
            .unwrap()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("127.0.0.1"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);

    for _ in 0..2 {
        assert_eq!(
            check(&mut client).await.unwrap(),
            ServingStatus::Serving as i32
        );
    }
    let denied = check(&mut client).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    // Keyed by the address read over TLS: a ban of it holds.
    bans.ban(&bytes_from_text("ip:127.0.0.1"), Duration::from_secs(60))
        .await
        .unwrap();
    let banned = check(&mut client).await.unwrap_err();
    assert!(banned.message().starts_with("banned"), "{banned:?}");
}
