//! Named policies from a TOML file: the file drives a real axum router on
//! an ephemeral loopback port, and every configuration error is reported
//! with the file, the entry and the reason (`errors`); plans and reloads
//! (`plans`).

#[path = "../support/mod.rs"]
mod support;

mod errors;
mod plans;

use std::path::PathBuf;

use axum::routing;
use axum::Router;
use http::StatusCode;
use limiter_tower::config::ConfigErrorKind;
use limiter_tower::{Config, ConfigError, Registry};
use support::{client, fresh_prefix, get_path, redis_backend, redis_server, serve_router};

/// A TOML file holding `text`, removed when dropped.
struct TomlFile(PathBuf);

impl TomlFile {
    fn new(name: &str, text: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("limiter-tower-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TomlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A router with one route per name, `/{name}` answering "ok", each
/// under `registry`'s layer of that name.
fn routes(registry: &Registry, names: &[&str]) -> Router {
    names.iter().fold(Router::new(), |router, name| {
        router.merge(
            Router::new()
                .route(&format!("/{name}"), routing::get(|| async { "ok" }))
                .route_layer(registry.layer(name).unwrap()),
        )
    })
}

const LIMITS: &str = r#"
[policies.login]
limits = ["sliding-log:2/5m"]
key = "ip"

[policies.user]
limits = ["token-bucket:1/1m,capacity=2", "sliding-log:100/1d"]
key = "header:x-user-id"
headers = "ietf"
"#;

#[tokio::test]
async fn a_config_file_drives_a_router_with_two_named_policies() {
    let file = TomlFile::new("router", LIMITS);
    let config = Config::from_file(&file.0).unwrap();
    assert_eq!(config.names().collect::<Vec<_>>(), ["login", "user"]);
    let registry = Registry::memory(&config);
    let login = Router::new()
        .route("/login", routing::get(|| async { "welcome" }))
        .route_layer(registry.layer("login").unwrap());
    let me = Router::new()
        .route("/me", routing::get(|| async { "you" }))
        .route_layer(registry.layer("user").unwrap());
    let addr = serve_router(login.merge(me)).await;
    let client = client();
    let get = async |path, headers| get_path(&client, addr, path, headers).await;

    // login: 2 per 5 minutes by address, both header styles.
    let first = get("/login", &[]).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "welcome")
    );
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"sliding-log:2/5m\";q=2;w=300")
    );
    assert_eq!(get("/login", &[]).await.status, StatusCode::OK);
    let denied = get("/login", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(denied.number("retry-after") > 290, "{denied:?}");

    // user: a tiered set keyed by the header, IETF headers only, counted
    // apart from login's.
    let alice = [("x-user-id", "alice")];
    let first = get("/me", &alice).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"token-bucket:1/1m,capacity=2\";q=2;w=120, \"sliding-log:100/1d\";q=100;w=86400")
    );
    assert_eq!(first.header("x-ratelimit-limit"), None);
    assert_eq!(get("/me", &alice).await.status, StatusCode::OK);
    assert_eq!(
        get("/me", &alice).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get("/me", &[("x-user-id", "bob")]).await.status,
        StatusCode::OK
    );
    assert_eq!(get("/me", &[]).await.status, StatusCode::UNAUTHORIZED);
}

/// Two instances of a service, each building its own registry from
/// `config` on one real redis-server and one fresh prefix, with the router
/// `app` makes of it: their addresses.
async fn two_instances_on_redis(
    config: &Config,
    prefix: &str,
    app: impl Fn(&Registry) -> Router,
) -> Vec<std::net::SocketAddr> {
    let backend = redis_backend(&redis_server().url());
    let prefix = fresh_prefix(prefix);
    let mut instances = Vec::new();
    for _ in 0..2 {
        let registry = Registry::redis(config, &backend, &prefix).await.unwrap();
        instances.push(serve_router(app(&registry)).await);
    }
    instances
}

#[tokio::test]
async fn on_redis_two_instances_of_a_service_share_each_named_policy() {
    let file = TomlFile::new("redis", LIMITS);
    let config = Config::from_file(&file.0).unwrap();
    let instances = two_instances_on_redis(&config, "registry", |registry| {
        Router::new()
            .route("/login", routing::get(|| async { "welcome" }))
            .route_layer(registry.layer("login").unwrap())
            .merge(
                Router::new()
                    .route("/me", routing::get(|| async { "you" }))
                    .route_layer(registry.layer("user").unwrap()),
            )
    })
    .await;
    let client = client();
    let status = async |instance: usize, path, headers| {
        get_path(&client, instances[instance], path, headers)
            .await
            .status
    };
    // login allows 2 per 5 minutes by address, across both instances.
    assert_eq!(status(0, "/login", &[]).await, StatusCode::OK);
    assert_eq!(status(1, "/login", &[]).await, StatusCode::OK);
    assert_eq!(
        status(0, "/login", &[]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(1, "/login", &[]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // user counts apart from login, by its header, across both.
    let alice = [("x-user-id", "alice")];
    assert_eq!(status(1, "/me", &alice).await, StatusCode::OK);
    assert_eq!(status(0, "/me", &alice).await, StatusCode::OK);
    assert_eq!(
        status(1, "/me", &alice).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_policy_redis_refuses_fails_the_registry_naming_it() {
    let file = TomlFile::new("redis-refused", &login(r#"["sliding-log:20000/1h"]"#, ""));
    let config = Config::from_file(&file.0).unwrap();
    let backend = redis_backend(&redis_server().url());
    let error = Registry::redis(&config, &backend, &fresh_prefix("refused"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::Backend);
    assert_eq!(error.entry(), "policies.login.limits");
    assert_eq!(
        error.to_string(),
        format!("{}: policies.login.limits: {}", file.path(), error.reason())
    );
    assert!(error.reason().contains("max_sliding_log_limit"), "{error}");
}

/// `[defaults]` under two policies: `inherits` takes every field from it,
/// `overrides` replaces two of them (its allowlist with an empty one).
const DEFAULTS: &str = r#"
[defaults]
limits = ["sliding-log:1/1m"]
trusted_proxies = ["127.0.0.1"]
allow_ips = ["192.0.2.10"]
headers = "legacy"

[policies.inherits]

[policies.overrides]
allow_ips = []
headers = "ietf"
"#;

#[tokio::test]
async fn every_policy_inherits_the_defaults_and_may_override_each() {
    let config = Config::from_toml("limits.toml", DEFAULTS).unwrap();
    let registry = Registry::memory(&config);
    let inherits = Router::new()
        .route("/inherits", routing::get(|| async { "ok" }))
        .route_layer(registry.layer("inherits").unwrap());
    let overrides = Router::new()
        .route("/overrides", routing::get(|| async { "ok" }))
        .route_layer(registry.layer("overrides").unwrap());
    let addr = serve_router(inherits.merge(overrides)).await;
    let client = client();
    let from = |path: &'static str, client_ip: &'static str| {
        let client = client.clone();
        async move { get_path(&client, addr, path, &[("x-forwarded-for", client_ip)]).await }
    };
    for path in ["/inherits", "/overrides"] {
        // Both trust the loopback proxy: each client behind it has a
        // budget of its own, from the inherited limits.
        assert_eq!(
            from(path, "203.0.113.1").await.status,
            StatusCode::OK,
            "{path}"
        );
        let denied = from(path, "203.0.113.1").await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{path}");
        assert_eq!(
            from(path, "203.0.113.2").await.status,
            StatusCode::OK,
            "{path}"
        );
    }
    // The inherited allowlist and header style, and their overrides.
    let inherited = from("/inherits", "192.0.2.10").await;
    assert_eq!(inherited.status, StatusCode::OK);
    assert_eq!(inherited.header("x-ratelimit-remaining"), None);
    let styled = from("/inherits", "203.0.113.3").await;
    assert_eq!(styled.number("x-ratelimit-remaining"), 0);
    assert_eq!(styled.header("ratelimit"), None);
    let overridden = from("/overrides", "192.0.2.10").await;
    assert_eq!(overridden.header("x-ratelimit-remaining"), None);
    assert!(
        overridden
            .header("ratelimit")
            .is_some_and(|value| value.contains(";r=0;")),
        "{overridden:?}"
    );
    assert_eq!(
        from("/overrides", "192.0.2.10").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `ipv6_prefix` and `fallback` in `[defaults]` apply to the policies
/// whose key takes them, and leave the others be: a `global` policy among
/// them does not stop the file.
const DEFAULTS_BY_KEY: &str = r#"
[defaults]
limits = ["sliding-log:1/1m"]
trusted_proxies = ["127.0.0.1"]
ipv6_prefix = 64
fallback = "ip"

[policies.total]
key = "global"

[policies.addresses]
key = "ip"

[policies.users]
key = "header:x-user-id"
"#;

#[tokio::test]
async fn defaults_apply_to_the_policies_whose_key_takes_them() {
    let config = Config::from_toml("limits.toml", DEFAULTS_BY_KEY).unwrap();
    let registry = Registry::memory(&config);
    let addr = serve_router(routes(&registry, &["total", "addresses", "users"])).await;
    let client = client();
    let from = |path: &'static str, client_ip: &'static str| {
        let client = client.clone();
        async move {
            let forwarded = [("x-forwarded-for", client_ip)];
            get_path(&client, addr, path, &forwarded).await.status
        }
    };
    // `addresses` groups a /64; `users`, without the header, falls back to
    // the address, grouped too.
    for path in ["/addresses", "/users"] {
        assert_eq!(
            from(path, "2001:db8:1:1::1").await,
            StatusCode::OK,
            "{path}"
        );
        assert_eq!(
            from(path, "2001:db8:1:1::2").await,
            StatusCode::TOO_MANY_REQUESTS,
            "{path}: one network, one budget"
        );
        assert_eq!(
            from(path, "2001:db8:1:2::1").await,
            StatusCode::OK,
            "{path}"
        );
    }
    // `total` is one budget for all.
    assert_eq!(from("/total", "2001:db8:1:1::1").await, StatusCode::OK);
    assert_eq!(
        from("/total", "2001:db8:1:2::1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A policy's in-process ban list holds at most its `max_keys` bans: a
/// client earning bans under ever new keys cannot grow the process.
#[tokio::test]
async fn a_policys_ban_list_in_memory_holds_at_most_max_keys_bans() {
    let config = Config::from_toml(
        "limits.toml",
        r#"
[policies.api]
limits = ["sliding-log:10/1m"]
key = "header:x-api-key"
bans = true
max_keys = 2
"#,
    )
    .unwrap();
    let registry = Registry::memory(&config);
    let bans = registry.bans("api").expect("bans = true");
    let hour = std::time::Duration::from_secs(3_600);
    bans.ban(b"header:a", hour).await.unwrap();
    bans.ban(b"header:b", hour).await.unwrap();
    let refused = bans.ban(b"header:c", hour).await.unwrap_err();
    assert!(refused.is_key_limit(), "{refused}");
    assert_eq!(bans.banned_for(b"header:c").await.unwrap(), None);
    // A ban in force is renewed; a lifted one makes room.
    bans.ban(b"header:a", hour).await.unwrap();
    bans.unban(b"header:b").await.unwrap();
    bans.ban(b"header:c", hour).await.unwrap();
}

/// `allow_ips`, `allow_keys`, `penalty`, `ban_status` and `bans` from the
/// file, on a real router: the allowlisted pass however often they come,
/// a key denied too often is banned with the configured status, and a ban
/// made through the registry holds.
#[tokio::test]
async fn allowlists_penalties_and_bans_come_from_the_file() {
    let text = r#"
[policies.open]
limits = ["sliding-log:1/5m"]
allow_ips = ["127.0.0.0/8"]

[policies.partner]
limits = ["sliding-log:1/5m"]
key = "header:x-api-key"
allow_keys = ["header:partner"]

[policies.strict]
limits = ["sliding-log:1/5m"]
penalty = { denials = "2/1m", ban_for = "10m" }
ban_status = 429

[policies.banned]
limits = ["sliding-log:100/5m"]
bans = true
"#;
    let file = TomlFile::new("lists", text);
    let registry = Registry::memory(&Config::from_file(&file.0).unwrap());
    let addr = serve_router(routes(&registry, &["open", "partner", "strict", "banned"])).await;
    let client = client();
    let status = async |path, headers| get_path(&client, addr, path, headers).await.status;

    // 127.0.0.1 is in 127.0.0.0/8: never limited.
    for _ in 0..3 {
        assert_eq!(status("/open", &[]).await, StatusCode::OK);
    }
    // The partner's key is allowlisted, another key is limited.
    let partner = [("x-api-key", "partner")];
    let other = [("x-api-key", "other")];
    for _ in 0..3 {
        assert_eq!(status("/partner", &partner).await, StatusCode::OK);
    }
    assert_eq!(status("/partner", &other).await, StatusCode::OK);
    assert_eq!(
        status("/partner", &other).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Denied twice within a minute: banned for ten minutes, answered 429
    // with the ban's Retry-After from the denial that earned it on.
    assert_eq!(status("/strict", &[]).await, StatusCode::OK);
    let denied = get_path(&client, addr, "/strict", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(denied.number("retry-after") <= 300, "{denied:?}");
    for _ in 0..2 {
        let banned = get_path(&client, addr, "/strict", &[]).await;
        assert_eq!(banned.status, StatusCode::TOO_MANY_REQUESTS);
        // The ban's 600 s less the time since it began (system clock):
        // milliseconds, 30 s allowed for a loaded host; the limiter's
        // Retry-After is at most 300.
        assert!(banned.number("retry-after") > 570, "{banned:?}");
    }
    assert!(registry.bans("strict").is_some());

    // A ban made through the registry: 403, the default status.
    assert_eq!(status("/banned", &[]).await, StatusCode::OK);
    let bans = registry.bans("banned").expect("bans = true");
    let me = limiter_tower::key::bytes_from_text("ip:127.0.0.1");
    bans.ban(&me, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(status("/banned", &[]).await, StatusCode::FORBIDDEN);
    bans.unban(&me).await.unwrap();
    assert_eq!(status("/banned", &[]).await, StatusCode::OK);
    assert!(registry.bans("open").is_none());
}

/// `max_keys` from the file caps the in-process limiter: a new key while
/// it is full is answered by `on_failure`, that request alone, and the
/// keys held are still decided exactly; a key past `max_key_bytes` is
/// decided as itself.
#[tokio::test]
async fn a_full_memory_limiter_answers_a_new_key_by_its_failure_policy() {
    let text = r#"
[policies.default]
limits = ["sliding-log:2/5m"]
key = "header:x-api-key"
max_keys = 2
max_key_bytes = 16

[policies.open]
limits = ["sliding-log:2/5m"]
key = "header:x-api-key"
max_keys = 2
on_failure = "fail-open"

[policies.closed]
limits = ["sliding-log:2/5m"]
key = "header:x-api-key"
max_keys = 2
on_failure = "fail-closed"

[policies.fallback]
limits = ["sliding-log:2/5m"]
key = "header:x-api-key"
max_keys = 2
on_failure = "fallback"
"#;
    let config = Config::from_toml("capped.toml", text).unwrap();
    let registry = Registry::memory(&config);
    let addr = serve_router(routes(
        &registry,
        &["default", "open", "closed", "fallback"],
    ))
    .await;
    let client = client();
    let get = async |path, key: &str| get_path(&client, addr, path, &[("x-api-key", key)]).await;
    // Two keys of 64 bytes each (held as digests): the cap is full.
    let (a, b) = ("a".repeat(64), format!("{}b", "a".repeat(63)));
    for path in ["/default", "/open", "/closed", "/fallback"] {
        for key in [&a, &b] {
            let reply = get(path, key).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}");
            assert_eq!(
                reply.number("x-ratelimit-remaining"),
                1,
                "{path}: a key of its own"
            );
        }
    }
    let new = get("/default", "c").await;
    assert_eq!(new.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(new.number("retry-after"), 1);
    assert_eq!(new.header("x-ratelimit-degraded"), None);
    let open = get("/open", "c").await;
    assert_eq!(open.status, StatusCode::OK);
    assert_eq!(open.header("x-ratelimit-degraded"), Some("fail-open"));
    let closed = get("/closed", "c").await;
    assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(closed.header("x-ratelimit-degraded"), Some("fail-closed"));
    assert_eq!(
        get("/fallback", "c").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The keys held: decided exactly, no outage begun.
    for path in ["/default", "/open", "/closed", "/fallback"] {
        let reply = get(path, &a).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.number("x-ratelimit-remaining"), 0, "{path}");
        assert_eq!(get(path, &a).await.status, StatusCode::TOO_MANY_REQUESTS);
    }
}

/// Without `max_keys` and `max_key_bytes`, each in-process limiter of a
/// memory registry holds at most 100,000 keys of 256 bytes: the limiter
/// and the penalty's counts alike.
#[test]
fn a_memory_registry_caps_its_limiters_by_default() {
    let config = Config::from_toml(
        "limits.toml",
        "[policies.login]\nlimits = [\"sliding-log:10/5m\"]\npenalty = { denials = \"5/1m\", ban_for = \"1h\" }\n",
    )
    .unwrap();
    assert_eq!(limiter_tower::Config::DEFAULT_MAX_KEYS, 100_000);
    let layer = format!("{:?}", Registry::memory(&config).layer("login").unwrap());
    assert_eq!(
        layer
            .matches("max_keys: Some(100000), max_key_bytes: 256")
            .count(),
        2,
        "{layer}"
    );
}

/// `on_failure` from the file, on a Redis that refuses every connection:
/// `fail-open` passes the request and marks it, `fail-closed` answers 503,
/// `fallback` decides with this instance's own count of the same limits,
/// and `return-error` (the default) answers 503 too.
#[tokio::test]
async fn the_failure_policy_comes_from_the_file() {
    let text = r#"
[policies.open]
limits = ["sliding-log:1/5m"]
on_failure = "fail-open"

[policies.closed]
limits = ["sliding-log:1/5m"]
on_failure = "fail-closed"

[policies.fallback]
limits = ["sliding-log:1/5m"]
on_failure = "fallback"

[policies.default]
limits = ["sliding-log:1/5m"]
"#;
    let file = TomlFile::new("failure", text);
    let config = Config::from_file(&file.0).unwrap();
    // Nothing listens on port 1 of the loopback: every connection is refused.
    let backend = redis_backend("redis://127.0.0.1:1");
    let registry = Registry::redis(&config, &backend, &fresh_prefix("down"))
        .await
        .unwrap();
    let addr = serve_router(routes(
        &registry,
        &["open", "closed", "fallback", "default"],
    ))
    .await;
    let client = client();
    let get = async |path| get_path(&client, addr, path, &[]).await;

    for _ in 0..2 {
        let open = get("/open").await;
        assert_eq!(open.status, StatusCode::OK);
        assert_eq!(open.header("x-ratelimit-degraded"), Some("fail-open"));
    }
    assert_eq!(get("/closed").await.status, StatusCode::SERVICE_UNAVAILABLE);
    // The fallback counts in process: one admitted, then denied.
    let first = get("/fallback").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("x-ratelimit-degraded"), Some("fallback"));
    assert_eq!(get("/fallback").await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        get("/default").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

/// On Redis, a ban earned on one instance holds on the other: both build
/// their registry from the same file on the same Redis and prefix.
#[tokio::test]
async fn on_redis_a_penalty_earned_on_one_instance_bans_on_every_instance() {
    let text = r#"
[policies.login]
limits = ["sliding-log:1/5m"]
penalty = { denials = "1/1m", ban_for = "10m" }
"#;
    let file = TomlFile::new("redis-penalty", text);
    let config = Config::from_file(&file.0).unwrap();
    let instances = two_instances_on_redis(&config, "penalty", |registry| {
        Router::new()
            .route("/login", routing::get(|| async { "welcome" }))
            .route_layer(registry.layer("login").unwrap())
    })
    .await;
    let client = client();
    let status = async |instance: usize| {
        get_path(&client, instances[instance], "/login", &[])
            .await
            .status
    };
    assert_eq!(status(0).await, StatusCode::OK);
    // Denied once on instance 1: the penalty's one denial, answered as
    // the ban it earned.
    assert_eq!(status(1).await, StatusCode::FORBIDDEN);
    assert_eq!(status(0).await, StatusCode::FORBIDDEN);
    assert_eq!(status(1).await, StatusCode::FORBIDDEN);
}

/// `[policies.login]` with `limits` and then `rest`.
fn login(limits: &str, rest: &str) -> String {
    format!("[policies.login]\nlimits = {limits}\n{rest}\n")
}

#[tokio::test]
async fn each_policys_cost_comes_from_the_file() {
    let file = TomlFile::new(
        "costs",
        r#"
[policies.search]
limits = ["fixed-window:10/1m"]
cost = 4

[policies.stated]
limits = ["fixed-window:10/1m"]
cost = "header:x-cost,or=2"

[policies.upload]
limits = ["fixed-window:10/1m"]
cost = "content-length:1024"
"#,
    );
    let registry = Registry::memory(&Config::from_file(&file.0).unwrap());
    let addr = serve_router(routes(&registry, &["search", "stated", "upload"])).await;
    let client = client();
    let get = async |path, headers| get_path(&client, addr, path, headers).await;
    let left = |reply: &support::Reply| reply.number("x-ratelimit-remaining");

    let search = [get("/search", &[]).await, get("/search", &[]).await];
    assert_eq!(search.map(|reply| left(&reply)), [6, 2]);
    let third = get("/search", &[]).await;
    assert_eq!(
        (third.status, left(&third)),
        (StatusCode::TOO_MANY_REQUESTS, 2)
    );

    let stated = get("/stated", &[("x-cost", "7")]).await;
    assert_eq!((stated.status, left(&stated)), (StatusCode::OK, 3));
    let unstated = get("/stated", &[]).await;
    assert_eq!((unstated.status, left(&unstated)), (StatusCode::OK, 1));
    let zero = get("/stated", &[("x-cost", "0")]).await;
    assert_eq!(zero.status, StatusCode::BAD_REQUEST);

    // A GET without a body costs one unit of the upload policy.
    let upload = get("/upload", &[]).await;
    assert_eq!((upload.status, left(&upload)), (StatusCode::OK, 9));
}
