//! Metrics over HTTP: every outcome is counted under the layer's name, and
//! each decision's latency recorded, through the `metrics` facade into a
//! small recorder of this test's own; and a charge after the response that
//! fails.

mod support;

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::{routing, Router};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use limiter_core::{FailurePolicy, Limiter, ManualClock, Resilient};
use limiter_test::Flaky;
use limiter_tower::ban::BanList;
use limiter_tower::metrics::{METRIC_CHARGE_ERRORS, METRIC_DECISION_SECONDS, METRIC_REQUESTS};
use limiter_tower::{ChargeAfter, KeyExtractor, LimiterLayer};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use support::events::Events;
use support::{client, get, get_with, limiter, serve, Backend};
use tower::ServiceExt;
use tracing::Level;

/// A recorder that keeps every counter's value and every histogram's
/// samples, by name and labels.
#[derive(Debug, Default)]
struct TestRecorder {
    counters: Mutex<HashMap<Key, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<Key, Arc<Samples>>>,
}

#[derive(Debug, Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let counter = self
            .counters
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .clone();
        Counter::from_arc(counter)
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let samples = self
            .histograms
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .clone();
        Histogram::from_arc(samples)
    }
}

/// The process's recorder, installed on first use. Each test counts under
/// its own policy name, so tests running at once do not mix.
fn recorder() -> &'static TestRecorder {
    static RECORDER: OnceLock<&'static TestRecorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static TestRecorder = Box::leak(Box::default());
        metrics::set_global_recorder(recorder).unwrap();
        recorder
    })
}

/// Every outcome counted under `policy`, by outcome.
fn outcomes(policy: &str) -> HashMap<String, u64> {
    let counters = recorder().counters.lock().unwrap();
    let mut outcomes = HashMap::new();
    for (key, value) in counters.iter() {
        let labels: HashMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
        if key.name() == METRIC_REQUESTS && labels.get("policy") == Some(&policy) {
            outcomes.insert(labels["outcome"].to_owned(), value.load(Ordering::Relaxed));
        }
    }
    outcomes
}

/// The value of counter `name` under `policy` (0 if never counted).
fn counted(name: &str, policy: &str) -> u64 {
    let counters = recorder().counters.lock().unwrap();
    counters
        .iter()
        .filter(|(key, _)| {
            key.name() == name
                && key
                    .labels()
                    .any(|l| l.key() == "policy" && l.value() == policy)
        })
        .map(|(_, value)| value.load(Ordering::Relaxed))
        .sum()
}

/// The latencies recorded under `policy`.
fn latencies(policy: &str) -> Vec<f64> {
    let histograms = recorder().histograms.lock().unwrap();
    histograms
        .iter()
        .filter(|(key, _)| {
            key.name() == METRIC_DECISION_SECONDS
                && key
                    .labels()
                    .any(|l| l.key() == "policy" && l.value() == policy)
        })
        .flat_map(|(_, samples)| samples.0.lock().unwrap().clone())
        .collect()
}

fn expected(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[tokio::test]
async fn allowed_denied_banned_allowlisted_missing_and_skipped_keys_are_counted() {
    recorder();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let bans = BanList::memory();
    let layer = LimiterLayer::from_arc(limiter(Backend::Memory, "sliding-log:2/10s", &clock).await)
        .name("login")
        .key(KeyExtractor::header("x-user"))
        .allow_keys(["header:robot"])
        .bans(bans.clone());
    let addr = serve(layer).await;
    let client = client();
    let user = |name: &'static str| [("x-user", name)];
    for _ in 0..3 {
        get_with(&client, addr, &user("ann")).await;
    }
    get_with(&client, addr, &user("robot")).await;
    get_with(&client, addr, &user("robot")).await;
    bans.ban(b"header:bob", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        get_with(&client, addr, &user("bob")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(get(&client, addr).await.status, StatusCode::UNAUTHORIZED);

    assert_eq!(
        outcomes("login"),
        expected(&[
            ("allowed", 2),
            ("denied", 1),
            ("allowlisted", 2),
            ("banned", 1),
            ("missing_key", 1)
        ])
    );
    let latencies = latencies("login");
    assert_eq!(latencies.len(), 7);
    assert!(
        latencies.iter().all(|s| (0.0..1.0).contains(s)),
        "{latencies:?}"
    );

    // A key skipped by choice is counted as such, not as missing.
    let skipping =
        LimiterLayer::from_arc(limiter(Backend::Memory, "sliding-log:2/10s", &clock).await)
            .name("anonymous")
            .key(KeyExtractor::header("x-user").or_skip());
    let addr = serve(skipping).await;
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    assert_eq!(outcomes("anonymous"), expected(&[("skipped", 1)]));
}

#[tokio::test]
async fn failed_open_failed_closed_and_errors_are_counted() {
    recorder();
    let clock = ManualClock::new(1_700_000_000_000_000);
    for (name, policy) in [
        ("open", Some(FailurePolicy::FailOpen)),
        ("closed", Some(FailurePolicy::FailClosed)),
        ("error", None),
    ] {
        let flaky = Arc::new(Flaky::new(
            limiter(Backend::Memory, "sliding-log:5/10s", &clock).await,
        ));
        let limiter: Arc<dyn Limiter> = match policy {
            Some(policy) => {
                Arc::new(Resilient::new(Arc::clone(&flaky), policy).probe_interval(Duration::ZERO))
            }
            None => Arc::clone(&flaky) as Arc<dyn Limiter>,
        };
        let addr = serve(LimiterLayer::from_arc(limiter).name(name)).await;
        let client = client();
        get(&client, addr).await;
        flaky.set_failing(true);
        get(&client, addr).await;
        get(&client, addr).await;
        let outcome = match name {
            "open" => "failed_open",
            "closed" => "failed_closed",
            _ => "error",
        };
        assert_eq!(
            outcomes(name),
            expected(&[("allowed", 1), (outcome, 2)]),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_charge_that_fails_is_logged_at_warn_and_counted_the_response_unchanged() {
    recorder();
    let events = Events::at(Level::WARN);
    let _default = tracing::subscriber::set_default(events.clone());
    let clock = ManualClock::new(1_700_000_000_000_000);
    // `Flaky` counts no charge after the fact: every charge fails.
    let flaky = Flaky::new(limiter(Backend::Memory, "fixed-window:100/1m", &clock).await);
    let layer = LimiterLayer::new(flaky)
        .name("uncharged")
        .key(KeyExtractor::global())
        .charge_after(ChargeAfter::response_bytes(NonZeroU64::MIN));
    let app = Router::new()
        .route("/", routing::get(|| async { "0123456789" }))
        .layer(layer);
    let response = app
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "0123456789");

    assert_eq!(counted(METRIC_CHARGE_ERRORS, "uncharged"), 1);
    let lines = events.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("a charge after the response failed: the key is not charged")
            && lines[0].contains("policy=uncharged units=9 error="),
        "{lines:?}"
    );
}
