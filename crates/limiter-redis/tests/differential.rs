//! Model test: random traces through the pure core ([`SetState`]) and
//! through Redis (caller time, and Redis time) give identical answers — the
//! combined decision and every part's — for all five algorithms alone and
//! in tiered sets of two or three (docs/spec.md section 7), including
//! peeks, resets, costs above a part's maximum, time stepping backwards,
//! ticks above 1 µs and times near 2^53. The decisions alternate between
//! the two engines on the same keys, the Lua functions and
//! limiter-redis-module: each reads the state the other wrote.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use limiter_core::backend::SetState;
use limiter_core::{Algorithm, Decision, Error, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_redis::{Engine, RedisLimiter};
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

/// The two engines on one server with the module, on the same keys
/// (one prefix), with `clock` (none: Redis time).
async fn engines(policies: &Policies, clock: Option<&ManualClock>) -> [RedisLimiter; 2] {
    let url = common::module_server().url();
    let prefix = common::fresh_prefix("t");
    let mut limiters = Vec::new();
    for engine in [Engine::Lua, Engine::Module] {
        let mut builder = common::builder_at(&url, policies.clone())
            .key_prefix(prefix.clone())
            .engine(engine);
        if let Some(clock) = clock {
            builder = builder.clock(clock.clone());
        }
        let limiter = builder.build().await.unwrap();
        assert_eq!(limiter.engine(), engine);
        limiters.push(limiter);
    }
    limiters.try_into().unwrap()
}

async fn differ(policies: Policies, start: u64, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let engines = engines(&policies, Some(&clock)).await;
    let mut model: HashMap<usize, SetState> = HashMap::new();
    let mut now = start;
    for (i, step) in steps.iter().enumerate() {
        now = now
            .saturating_add_signed(step.dt)
            .min(limiter_core::MAX_TIME_US);
        clock.set(now);
        let redis = &engines[i % 2];
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
            "step {} ({:?}) at t={} under {} by {:?}",
            i,
            step,
            now,
            policies,
            redis.engine()
        );
    }
    // Every key the trace left has a TTL, at least the floor (caller time).
    let server = common::module_server().url();
    for key in common::keys_under_at(&server, engines[0].key_prefix()).await {
        let ttl = common::pttl_at(&server, &key).await;
        prop_assert!(ttl > 50_000, "{} has PTTL {}", key, ttl);
    }
    Ok(())
}

/// As [`differ`], on Redis time: the model decides each request at the
/// time its decision says Redis read.
async fn differ_on_redis_time(policies: Policies, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let engines = engines(&policies, None).await;
    let mut model: HashMap<usize, SetState> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        let redis = &engines[i % 2];
        let name = |key: usize| format!("k{key}");
        let (key, cost, acquire) = match step.op {
            Op::Acquire { key, cost } => (key, cost, true),
            Op::Peek { key, cost } => (key, cost, false),
            Op::Reset { key } => {
                model.remove(&key);
                redis.reset(name(key).as_bytes()).await.unwrap();
                continue;
            }
        };
        let actual = match acquire {
            true => outcome(redis.acquire(name(key).as_bytes(), cost).await),
            false => outcome(redis.peek(name(key).as_bytes(), cost).await),
        };
        // A refused request has no time: any time refuses it alike.
        let now = actual.as_ref().map_or(0, |d| d.time_us);
        let state = model
            .entry(key)
            .or_insert_with(|| SetState::fresh(&policies));
        let expected = match acquire {
            true => outcome(state.acquire(&policies, now, cost)),
            false => outcome(state.peek(&policies, now, cost)),
        };
        prop_assert_eq!(
            actual,
            expected,
            "step {} ({:?}) at t={} under {} by {:?}",
            i,
            step,
            now,
            policies,
            redis.engine()
        );
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

    #[test]
    fn redis_decides_exactly_as_the_core_on_redis_time((policies, _, steps) in case()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(differ_on_redis_time(policies, steps))?;
    }
}
