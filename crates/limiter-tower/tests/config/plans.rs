//! Plans from a configuration file (`[plans]`, `[key_plans]`,
//! `default_plan`, `plan_header`), and a configuration reloaded while the
//! service serves: on memory and on a real `redis-server`, each request
//! decided entirely under the old limits or the new, each client's used
//! units carried to its new limits, and a reload that cannot be applied
//! refused whole.

use std::sync::Arc;

use axum::extract::Request as AxumRequest;
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use limiter_tower::Plan;
use support::Backend;

use super::*;

/// Free (10 a minute, the policy's own limits), pro (100) and acme's
/// contract (1,000) for `api`, by API key; `login` in no plan, so every
/// plan has its own limits; the plan from authentication, or from the
/// gateway's `x-plan`.
const PLANS: &str = r#"
[defaults]
default_plan = "free"
plan_header = "x-plan"

[policies.api]
limits = ["fixed-window:10/1m"]
key = "header:x-api-key"

[policies.login]
limits = ["sliding-log:5/1m"]

[plans.pro]
api = ["fixed-window:100/1m"]

[plans.acme]
api = ["fixed-window:1000/1m"]

[key_plans]
"header:acme-key" = "acme"
"#;

/// Stands in for the application's authentication: the plan `x-auth`
/// names goes into the request's extensions.
async fn authenticate(mut request: AxumRequest, next: Next) -> AxumResponse {
    let plan = (request.headers().get("x-auth"))
        .map(|value| Plan::new(value.to_str().unwrap().to_owned()));
    if let Some(plan) = plan {
        request.extensions_mut().insert(plan);
    }
    next.run(request).await
}

async fn registry(backend: Backend, text: &str) -> Registry {
    let config = Config::from_toml("plans.toml", text).unwrap();
    match backend {
        Backend::Memory => Registry::memory(&config),
        Backend::Redis => {
            let redis = redis_backend(&redis_server().url());
            Registry::redis(&config, &redis, &fresh_prefix("plans"))
                .await
                .unwrap()
        }
    }
}

async fn serve_registry(registry: &Registry) -> std::net::SocketAddr {
    let router = routes(registry, &["api", "login"]).layer(middleware::from_fn(authenticate));
    serve_router(router).await
}

#[tokio::test]
async fn a_file_of_plans_decides_each_request_under_its_plan() {
    let registry = registry(Backend::Memory, PLANS).await;
    let addr = serve_registry(&registry).await;
    let client = client();
    let limit_of = async |headers: &[(&str, &str)]| {
        let reply = get_path(&client, addr, "/api", headers).await;
        (
            reply.number("x-ratelimit-limit"),
            reply.header("ratelimit-policy").map(str::to_owned),
        )
    };
    assert_eq!(
        limit_of(&[("x-api-key", "a")]).await,
        (10, Some("\"free/fixed-window:10/1m\";q=10;w=60".to_owned()))
    );
    assert_eq!(
        limit_of(&[("x-api-key", "b"), ("x-auth", "pro")]).await.0,
        100
    );
    assert_eq!(
        limit_of(&[("x-api-key", "c"), ("x-plan", "pro")]).await.0,
        100
    );
    assert_eq!(
        limit_of(&[("x-api-key", "acme-key"), ("x-auth", "pro")])
            .await
            .0,
        1000
    );
    assert_eq!(
        limit_of(&[("x-api-key", "d"), ("x-auth", "gold")]).await.0,
        10,
        "unknown"
    );
    // A plan that does not list a policy decides it by its own limits.
    let login = get_path(&client, addr, "/login", &[("x-auth", "pro")]).await;
    assert_eq!(login.number("x-ratelimit-limit"), 5);
    assert_eq!(
        login.header("ratelimit-policy"),
        Some("\"pro/sliding-log:5/1m\";q=5;w=60")
    );
}

/// 9 of free's 10 used; a reload to free = 50 gives the key 41 more and
/// no more, and then one to free = 5 refuses it: exact counts, on both
/// backends. (A window keeps at most its own limit's units, docs/spec.md
/// rule 9.2: after the move to 5, the key holds 5.)
#[tokio::test]
async fn a_reload_carries_each_clients_used_units_to_its_new_limits() {
    for backend in [Backend::Memory, Backend::Redis] {
        let registry = registry(backend, PLANS).await;
        let addr = serve_registry(&registry).await;
        let client = client();
        let key = [("x-api-key", "k")];
        for _ in 0..9 {
            assert_eq!(
                get_path(&client, addr, "/api", &key).await.status,
                StatusCode::OK
            );
        }
        let bigger = PLANS.replace("fixed-window:10/1m", "fixed-window:50/1m");
        let config = Config::from_toml("plans.toml", &bigger).unwrap();
        registry.reload(&config).await.unwrap();
        let mut admitted = 0;
        for _ in 0..45 {
            if get_path(&client, addr, "/api", &key).await.status == StatusCode::OK {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 41, "{backend:?}");
        // Upgraded to pro: 50 used of 100.
        let pro = [("x-api-key", "k"), ("x-auth", "pro")];
        let reply = get_path(&client, addr, "/api", &pro).await;
        assert_eq!(reply.number("x-ratelimit-remaining"), 49, "{backend:?}");
        let smaller = PLANS.replace("fixed-window:10/1m", "fixed-window:5/1m");
        let config = Config::from_toml("plans.toml", &smaller).unwrap();
        registry.reload(&config).await.unwrap();
        let refused = get_path(&client, addr, "/api", &key).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{backend:?}");
        assert_eq!(refused.number("x-ratelimit-limit"), 5);
    }
}

/// Requests on four tasks while the limits switch back and forth: every
/// response's limit is the one its `RateLimit-Policy` names (never old
/// limits under new headers), and the admitted count is exact.
#[tokio::test]
async fn no_request_is_decided_under_a_mix_of_old_and_new_limits() {
    let registry = Arc::new(registry(Backend::Memory, PLANS).await);
    let addr = serve_registry(&registry).await;
    let texts = [
        PLANS.replace("fixed-window:10/1m", "fixed-window:300/1m"),
        PLANS.replace("fixed-window:10/1m", "fixed-window:400/1m"),
    ];
    let reloads = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            for round in 0..40 {
                let config = Config::from_toml("plans.toml", &texts[round % 2]).unwrap();
                registry.reload(&config).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let client = client();
                let mut admitted = 0;
                for _ in 0..100 {
                    let reply = get_path(&client, addr, "/api", &[("x-api-key", "k")]).await;
                    let limit = reply.number("x-ratelimit-limit");
                    let policy = reply.header("ratelimit-policy").unwrap().to_owned();
                    assert_eq!(
                        policy,
                        format!("\"free/fixed-window:{limit}/1m\";q={limit};w=60")
                    );
                    admitted += u64::from(reply.status == StatusCode::OK);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    reloads.await.unwrap();
    // 400 requests, and never more than 300 or 400 in the window: each
    // of the first 300 is admitted under either limit.
    assert!((300..=400).contains(&admitted), "{admitted}");
    let last = get_path(&client(), addr, "/api", &[("x-api-key", "k")]).await;
    assert_eq!(last.number("x-ratelimit-limit"), 400);
}

#[tokio::test]
async fn a_reload_that_cannot_be_applied_keeps_the_configuration_in_force() {
    let registry = registry(Backend::Memory, PLANS).await;
    let addr = serve_registry(&registry).await;
    let client = client();
    let cases = [
        (
            PLANS.replace("key = \"header:x-api-key\"", "key = \"ip\""),
            "policies.api.key",
            "changed from \"header:x-api-key\" to \"ip\": a reload changes only `limits`, \
          `default_plan`, `plan_header`, `[plans]` and `[key_plans]`; restart the service to \
          change it",
        ),
        (
            PLANS.replace("[policies.login]\nlimits = [\"sliding-log:5/1m\"]\n", ""),
            "policies.login",
            "removed: a reload changes only `limits`, `default_plan`, `plan_header`, `[plans]` \
          and `[key_plans]`; restart the service to remove a policy",
        ),
    ];
    for (text, entry, reason) in cases {
        let config = Config::from_toml("plans.toml", &text).unwrap();
        let error = registry.reload(&config).await.unwrap_err();
        assert_eq!(error.kind(), ConfigErrorKind::Reload);
        assert_eq!((error.entry(), error.reason()), (entry, reason));
    }
    let broken = TomlFile::new("broken-reload", "[policies.api\nlimits = [");
    let error = registry.reload_file(broken.path()).await.unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::Syntax);
    let reply = get_path(&client, addr, "/api", &[("x-api-key", "a")]).await;
    assert_eq!(
        reply.number("x-ratelimit-limit"),
        10,
        "the limits in force stay"
    );
}
