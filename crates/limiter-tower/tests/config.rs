//! Named policies from a TOML file: the file drives a real axum router on
//! an ephemeral loopback port, and every configuration error is reported
//! with the file, the entry and the reason.

mod support;

use std::path::PathBuf;

use axum::routing;
use axum::Router;
use http::StatusCode;
use limiter_tower::{Config, ConfigError, ConfigErrorKind, Registry};
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
        Some("\"token-bucket:1/1m,capacity=2\";q=1;w=60, \"sliding-log:100/1d\";q=100;w=86400")
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

#[tokio::test]
async fn on_redis_two_instances_of_a_service_share_each_named_policy() {
    let file = TomlFile::new("redis", LIMITS);
    let config = Config::from_file(&file.0).unwrap();
    let backend = redis_backend(&redis_server().url());
    let prefix = fresh_prefix("registry");
    let mut instances = Vec::new();
    for _ in 0..2 {
        // Each instance builds its own registry on the shared backend.
        let registry = Registry::redis(&config, &backend, &prefix).await.unwrap();
        let app = Router::new()
            .route("/login", routing::get(|| async { "welcome" }))
            .route_layer(registry.layer("login").unwrap())
            .merge(
                Router::new()
                    .route("/me", routing::get(|| async { "you" }))
                    .route_layer(registry.layer("user").unwrap()),
            );
        instances.push(serve_router(app).await);
    }
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
    assert_eq!(error.entry(), "policies.login");
    assert_eq!(
        error.to_string(),
        format!("{}: policies.login: {}", file.path(), error.reason())
    );
    assert!(error.reason().contains("max_sliding_log_limit"), "{error}");
}

/// The error of a file holding `text`, and the file's path.
fn error_of(name: &str, text: &str) -> (ConfigError, String) {
    let file = TomlFile::new(name, text);
    let error = Config::from_file(&file.0).unwrap_err();
    (error, file.path())
}

/// `[policies.login]` with `limits` and then `rest`.
fn login(limits: &str, rest: &str) -> String {
    format!("[policies.login]\nlimits = {limits}\n{rest}\n")
}

#[test]
fn every_configuration_error_names_the_file_the_entry_and_the_reason() {
    let cases: [(&str, String, ConfigErrorKind, &str, &str); 16] = [
        (
            "unknown-algorithm",
            login(r#"["sliding-lgo:10/5m"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[0]",
            "unknown algorithm \"sliding-lgo\"; expected one of: fixed-window, sliding-log, \
             sliding-counter, token-bucket, leaky-bucket",
        ),
        (
            "bad-policy",
            login(r#"["sliding-log:10/5m", "token-bucket:ten/1s"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[1]",
            "invalid rate \"ten/1s\": limit \"ten\" is not a whole number \
             (examples: 100/10s, 10/minute, 1000/1d)",
        ),
        (
            "not-applicable",
            login(r#"["sliding-log:10/5m,capacity=20"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[0]",
            "capacity does not apply to sliding-log (capacity is for token-bucket, queue for \
             leaky-bucket)",
        ),
        (
            "no-limits",
            login("[]", ""),
            ConfigErrorKind::Policy,
            "policies.login.limits",
            "a policy set needs at least one policy, got none \
             (example: sliding-log:5/1s;sliding-log:100/1m)",
        ),
        (
            "bad-cidr",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"trusted_proxies = ["10.0.0.0/8", "10.0.0.0/33"]"#,
            ),
            ConfigErrorKind::Address,
            "policies.login.trusted_proxies[1]",
            "invalid address block \"10.0.0.0/33\": expected an address or ADDRESS/PREFIX",
        ),
        (
            "unknown-key",
            login(r#"["sliding-log:10/5m"]"#, r#"key = "cookie:sid""#),
            ConfigErrorKind::Key,
            "policies.login.key",
            "unknown key kind \"cookie:sid\"; expected ip, global, route or header:NAME",
        ),
        (
            "bad-header",
            login(r#"["sliding-log:10/5m"]"#, r#"key = "header:x user""#),
            ConfigErrorKind::Key,
            "policies.login.key",
            "invalid header name \"x user\"",
        ),
        (
            "fallback-on-ip",
            login(r#"["sliding-log:10/5m"]"#, r#"fallback = "ip""#),
            ConfigErrorKind::Key,
            "policies.login.fallback",
            "a fallback is for a header key, and the key is \"ip\"",
        ),
        (
            "unknown-fallback",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"header:x-api-key\"\nfallback = \"allow\"",
            ),
            ConfigErrorKind::Key,
            "policies.login.fallback",
            "unknown fallback \"allow\"; expected reject, ip or skip",
        ),
        (
            "prefix-on-global",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"global\"\nipv6_prefix = 64",
            ),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "an IPv6 prefix groups ip keys, and the key is \"global\"",
        ),
        (
            "prefix-too-long",
            login(r#"["sliding-log:10/5m"]"#, "ipv6_prefix = 129"),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "129 is above 128 bits",
        ),
        (
            "unknown-style",
            login(r#"["sliding-log:10/5m"]"#, r#"headers = "draft""#),
            ConfigErrorKind::Headers,
            "policies.login.headers",
            "unknown header style \"draft\"; expected none, legacy, ietf or both",
        ),
        (
            "syntax",
            "[policies.login]\nlimits = [\"sliding-log:10/5m\"\n".to_owned(),
            ConfigErrorKind::Syntax,
            "line 2, column 30",
            "unclosed array, expected `]`",
        ),
        (
            "unknown-field",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"limit = ["sliding-log:1/1s"]"#,
            ),
            ConfigErrorKind::Schema,
            "policies.login",
            "unknown field `limit`, expected one of `limits`, `key`, `fallback`, \
             `trusted_proxies`, `ipv6_prefix`, `headers`",
        ),
        (
            "missing-field",
            "[policies.login]\nkey = \"ip\"\n".to_owned(),
            ConfigErrorKind::Schema,
            "policies.login",
            "missing field `limits`",
        ),
        (
            "unknown-table",
            "[policy.login]\nlimits = [\"sliding-log:10/5m\"]\n".to_owned(),
            ConfigErrorKind::Schema,
            "policy",
            "unknown table; expected `policies`",
        ),
    ];
    for (name, text, kind, entry, reason) in cases {
        let (error, path) = error_of(name, &text);
        assert_eq!(error.file(), path, "{name}");
        assert_eq!(error.kind(), kind, "{name}: {error}");
        assert_eq!(error.entry(), entry, "{name}: {error}");
        assert_eq!(error.reason(), reason, "{name}");
        assert_eq!(
            error.to_string(),
            format!("{path}: {entry}: {}", error.reason()),
            "{name}"
        );
    }
}

#[test]
fn a_policy_that_is_not_configured_fails_where_the_router_is_built() {
    let file = TomlFile::new("missing-name", LIMITS);
    let registry = Registry::memory(&Config::from_file(&file.0).unwrap());
    let error = registry.layer("signup").unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::NotConfigured);
    assert_eq!(
        error.to_string(),
        format!(
            "{}: policies.signup: not configured (the file has: login, user)",
            file.path()
        )
    );
}

#[test]
fn an_unreadable_file_is_named() {
    let path = std::env::temp_dir().join("limiter-tower-no-such-file.toml");
    let error = Config::from_file(&path).unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::Io);
    assert_eq!(
        error.to_string(),
        format!("{}: No such file or directory (os error 2)", path.display())
    );
}
