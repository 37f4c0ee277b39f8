//! Model test: random traces through the pure core ([`SetState`]) and
//! through Redis (caller time) give identical answers — the combined
//! decision and every part's — for all five algorithms alone and in tiered
//! sets of two or three (docs/spec.md section 7), including peeks, resets,
//! costs above a part's maximum, time stepping backwards, ticks above 1 µs
//! and times near 2^53.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use limiter_core::backend::SetState;
use limiter_core::{Algorithm, Decision, Error, Limiter, ManualClock, Policies, Policy, Rate};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Acquire { key: usize, cost: u64 },
    Peek { key: usize, cost: u64 },
    Reset { key: usize },
}

#[derive(Debug, Clone)]
struct Step {
    /// Microseconds to move the clock by (negative: backwards).
    dt: i64,
    op: Op,
}

fn policy() -> impl Strategy<Value = Policy> {
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    let window = prop_oneof![
        Just(Duration::from_micros(7)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_millis(250)),
        Just(Duration::from_secs(1)),
        Just(Duration::from_secs(10)),
        Just(Duration::from_secs(86_400)),
    ];
    let limit = prop_oneof![1..=12u64, Just(1_000_000u64)];
    (algorithm, limit, window, 1..=15u64).prop_filter_map(
        "policy out of range",
        |(algorithm, limit, window, extra)| {
            // Keep sliding logs small (one entry per admission): up to 12
            // in one string, 200 in a sorted set (scripts.rs,
            // PACKED_LOG_MAX), so both encodings meet the core; let the
            // buckets differ from their rate.
            let limit = if algorithm == Algorithm::SlidingLog {
                limit.min(200)
            } else {
                limit
            };
            let extra = if limit > 100 { limit } else { extra };
            let (capacity, queue) = match algorithm {
                Algorithm::TokenBucket => (Some(extra), None),
                Algorithm::LeakyBucket => (None, Some(extra)),
                _ => (None, None),
            };
            Policy::from_options(algorithm, Rate::new(limit, window), capacity, queue).ok()
        },
    )
}

fn steps(max_cost: u64, window_us: u64) -> impl Strategy<Value = Vec<Step>> {
    let window = i64::try_from(window_us).unwrap_or(i64::MAX);
    let dt = prop_oneof![
        6 => 0..=window / 3 + 1,
        2 => 0..=2 * window + 1,
        1 => -(window / 2 + 1)..=0,
        1 => Just(0i64),
    ];
    let cost = prop_oneof![8 => 1..=max_cost.min(4), 2 => 1..=max_cost, 1 => Just(max_cost + 1), 1 => Just(0u64)];
    let key = 0..3usize;
    let op = prop_oneof![
        8 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Acquire { key, cost }),
        2 => (key.clone(), cost).prop_map(|(key, cost)| Op::Peek { key, cost }),
        1 => key.prop_map(|key| Op::Reset { key }),
    ];
    prop::collection::vec((dt, op).prop_map(|(dt, op)| Step { dt, op }), 1..60)
}

/// One policy (half the cases) or a set of two or three, any mix.
fn policies() -> impl Strategy<Value = Policies> {
    prop_oneof![
        policy().prop_map(Policies::from),
        prop::collection::vec(policy(), 2..=3).prop_map(|parts| Policies::new(parts).unwrap()),
    ]
}

fn case() -> impl Strategy<Value = (Policies, u64, Vec<Step>)> {
    let start = prop_oneof![
        Just(0u64),
        0..1_000_000u64,
        1_700_000_000_000_000..1_800_000_000_000_000u64,
        Just(limiter_core::MAX_TIME_US - 3 * 86_400_000_000),
        // Within a window of the end of the range, where ts + W > 2^53.
        (limiter_core::MAX_TIME_US - 20_000_000)..=limiter_core::MAX_TIME_US,
    ];
    (policies(), start).prop_flat_map(|(policies, start)| {
        let window = policies.iter().map(Policy::window_us).max().unwrap_or(1);
        let steps = steps(policies.max_cost(), window);
        (Just(policies), Just(start), steps)
    })
}

/// An answer reduced to what must agree: the decisions, or the error's kind.
fn outcome(result: Result<Decision, Error>) -> Result<Decision, String> {
    result.map_err(|e| match e {
        Error::Backend(e) => panic!("Redis failed: {e}"),
        e => format!("{e}"),
    })
}

async fn differ(policies: Policies, start: u64, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let redis = common::builder(policies.clone())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let mut model: HashMap<usize, SetState> = HashMap::new();
    let mut now = start;
    for (i, step) in steps.iter().enumerate() {
        now = now
            .saturating_add_signed(step.dt)
            .min(limiter_core::MAX_TIME_US);
        clock.set(now);
        let name = |key: usize| format!("k{key}");
        let (expected, actual) = match step.op {
            Op::Acquire { key, cost } => {
                let state = model
                    .entry(key)
                    .or_insert_with(|| SetState::fresh(&policies));
                (
                    outcome(state.acquire(&policies, now, cost)),
                    outcome(redis.acquire(name(key).as_bytes(), cost).await),
                )
            }
            Op::Peek { key, cost } => {
                let state = model
                    .entry(key)
                    .or_insert_with(|| SetState::fresh(&policies));
                (
                    outcome(state.peek(&policies, now, cost)),
                    outcome(redis.peek(name(key).as_bytes(), cost).await),
                )
            }
            Op::Reset { key } => {
                model.remove(&key);
                redis.reset(name(key).as_bytes()).await.unwrap();
                continue;
            }
        };
        prop_assert_eq!(
            actual,
            expected,
            "step {} ({:?}) at t={} under {}",
            i,
            step,
            now,
            policies
        );
    }
    // Every key the trace left has a TTL, at least the floor (caller time).
    for key in common::keys_under(redis.key_prefix()).await {
        let ttl = common::pttl(&key).await;
        prop_assert!(ttl > 50_000, "{} has PTTL {}", key, ttl);
    }
    Ok(())
}

proptest! {
    // Real I/O: a modest number of cases, each a trace of up to 60 requests.
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn redis_decides_exactly_as_the_core((policies, start, steps) in case()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(differ(policies, start, steps))?;
    }
}
