//! The conformance cases, each written once as a generic async function over
//! a [`Harness`], so every backend runs the same checks.
//!
//! A backend does not call these one by one: its `tests/` expands
//! [`conformance_suite!`](crate::conformance_suite), which generates one
//! `#[tokio::test]` per case. Each case makes its own limiters (and so its
//! own key prefixes) through the harness, and drives time through the
//! [`ManualClock`] it hands them.
//!
//! Grouped by theme: the rules every algorithm shares (docs/spec.md section 2), each
//! algorithm's behaviour (section 3), the shared vectors (section 6a),
//! tiered limits (section 7), concurrency, random traces against the core's model, and the `Limiter`
//! trait's conveniences.

mod algorithms;
mod concurrency;
mod conveniences;
mod failure;
mod keys;
mod policy_change;
mod random;
mod rules;
mod tiers;
mod vectors;

use std::sync::Arc;

use limiter_core::{Decision, Error, Limiter, ManualClock, Policy, Rate};

pub use self::{
    algorithms::{
        article_boundary_case, fixed_window_counts_per_aligned_window,
        leaky_bucket_queues_and_reports_the_wait, sliding_counter_weighs_the_previous_window,
        sliding_log_counts_the_trailing_window, token_bucket_bursts_then_refills,
    },
    concurrency::{
        concurrent_acquires_on_one_key_admit_exactly_the_limit, concurrent_keys_are_isolated,
    },
    conveniences::{
        acquire_fast_answers_what_acquire_does, until_ready_sleeps_retry_after_then_wait,
    },
    failure::{
        failure_policies_answer_while_the_backend_fails,
        fallback_decides_until_the_backend_answers_again,
    },
    keys::byte_keys_are_keys_of_their_own,
    policy_change::{
        policy_change_cases, policy_change_vectors_replay_byte_for_byte, PolicyChangeCase,
    },
    random::{random_traces_match_the_core_model, times_up_to_2_pow_53_match_the_core_model},
    rules::{
        cost_above_the_maximum_is_an_error, decisions_report_the_policy_limit,
        denied_request_changes_nothing, keys_are_independent, peek_answers_what_acquire_would,
        peek_writes_nothing, reset_after_is_exact, reset_restores_the_full_quota,
        retry_after_is_exact, time_beyond_2_pow_53_is_an_error,
        time_never_runs_backwards_inside_a_key, zero_cost_is_an_error,
    },
    tiers::{
        a_cost_above_any_parts_maximum_is_an_error, all_of_vectors_replay_byte_for_byte,
        concurrent_acquires_under_a_policy_set_admit_exactly_the_tightest,
    },
    vectors::shared_vectors_replay_byte_for_byte,
};
use crate::Harness;

/// The time most cases start at: 2023-11-14T22:13:20Z in µs, a multiple of
/// ten seconds, so windows of 1 s and 10 s start on it.
pub(crate) const T0: u64 = 1_700_000_000_000_000;

/// One of each algorithm with small numbers, the buckets with a capacity or
/// queue apart from the limit, and policies whose tick is above 1 µs
/// (docs/spec.md section 5).
pub(crate) fn policies() -> Vec<Policy> {
    let policy = |result: Result<Policy, limiter_core::PolicyError>| result.expect("valid policy");
    vec![
        policy(Policy::fixed_window(Rate::new(3, secs(10)))),
        policy(Policy::sliding_log(Rate::new(3, secs(10)))),
        policy(Policy::sliding_counter(Rate::new(10, secs(10)))),
        policy(Policy::token_bucket(Rate::new(2, secs(1))).and_then(|p| p.with_capacity(5))),
        policy(Policy::leaky_bucket(Rate::new(2, secs(1))).and_then(|p| p.with_queue(3))),
        policy(Policy::fixed_window(Rate::per_day(1_000_000))),
        policy(Policy::sliding_counter(Rate::per_day(1_000_000))),
        policy(Policy::token_bucket(Rate::per_day(5_000_000))),
        policy(Policy::leaky_bucket(Rate::per_day(1_000_000))),
    ]
}

pub(crate) fn secs(secs: u64) -> std::time::Duration {
    std::time::Duration::from_secs(secs)
}

/// A duration in whole µs.
pub(crate) fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).expect("durations fit in u64 µs")
}

/// A limiter under test, the clock it reads and its policy.
pub(crate) struct Subject {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) clock: ManualClock,
    pub(crate) policy: Policy,
}

impl Subject {
    pub(crate) async fn new<H: Harness>(harness: &H, policy: &Policy) -> Self {
        let clock = ManualClock::new(T0);
        let limiter = harness.limiter(policy.clone(), clock.clone()).await;
        assert_eq!(
            limiter.policies().single(),
            Some(policy),
            "the harness must build a limiter for the policy it is given"
        );
        Self {
            limiter,
            clock,
            policy: policy.clone(),
        }
    }

    /// `acquire` with the clock set to `t_us`.
    pub(crate) async fn try_acquire(
        &self,
        t_us: u64,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, Error> {
        self.clock.set(t_us);
        self.limiter.acquire(key.as_ref(), cost).await
    }

    /// `peek` with the clock set to `t_us`.
    pub(crate) async fn try_peek(
        &self,
        t_us: u64,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Decision, Error> {
        self.clock.set(t_us);
        self.limiter.peek(key.as_ref(), cost).await
    }

    /// Acquires each `(time, cost, expected)` in turn on one key and checks
    /// every decision field by field (see [`assert_decision`]), and that it
    /// reports the policy's limit (the capacity or queue for the buckets).
    pub(crate) async fn expect_steps(&self, steps: &[(u64, u64, Expected)]) {
        for &(t, cost, expected) in steps {
            let decision = self.acquire(t, "k", cost).await;
            let context = format!("{} at T0+{}µs cost {cost}", self.policy, t - T0);
            assert_decision(&decision, expected, &context);
            assert_eq!(decision.limit, self.policy.max_cost(), "{context}: limit");
        }
    }

    /// `acquire` at `t_us`, which must not fail.
    pub(crate) async fn acquire(&self, t_us: u64, key: impl AsRef<[u8]>, cost: u64) -> Decision {
        let key = key.as_ref();
        let result = self.try_acquire(t_us, key, cost).await;
        self.decided(result, "acquire", t_us, key, cost)
    }

    /// `peek` at `t_us`, which must not fail.
    pub(crate) async fn peek(&self, t_us: u64, key: impl AsRef<[u8]>, cost: u64) -> Decision {
        let key = key.as_ref();
        let result = self.try_peek(t_us, key, cost).await;
        self.decided(result, "peek", t_us, key, cost)
    }

    pub(crate) async fn reset(&self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if let Err(e) = self.limiter.reset(key).await {
            panic!("{}: reset({}) failed: {e}", self.policy, key.escape_ascii());
        }
    }

    fn decided(
        &self,
        result: Result<Decision, Error>,
        op: &str,
        t_us: u64,
        key: &[u8],
        cost: u64,
    ) -> Decision {
        let decision = result.unwrap_or_else(|e| {
            panic!(
                "{}: {op}({}, {cost}) at {t_us}µs failed: {e}",
                self.policy,
                key.escape_ascii()
            )
        });
        assert_eq!(
            decision.time_us, t_us,
            "{}: a decision reports the time it was made at",
            self.policy
        );
        decision
    }
}

/// What a request came to, comparable across backends: a decision, or the
/// kind of error that docs/spec.md section 1 names. A backend failure is no answer at all, so
/// it fails the case on the spot.
pub(crate) type Outcome = Result<Decision, &'static str>;

pub(crate) fn outcome(result: Result<Decision, Error>) -> Outcome {
    result.map_err(|e| match e {
        Error::ZeroCost => "ZeroCost",
        Error::CostExceedsCapacity { .. } => "CostExceedsCapacity",
        Error::TimeOutOfRange { .. } => "TimeOutOfRange",
        Error::InvalidPolicy(e) => panic!("invalid policy where a decision was expected: {e}"),
        e => panic!("backend failure where a decision was expected: {e}"),
    })
}

/// A decision's fields as a test expects them, durations in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) wait_us: u64,
}

impl Expected {
    /// Admitted at once (no retry, no wait).
    pub(crate) fn allowed(remaining: u64, reset_after_us: u64) -> Self {
        Self {
            allowed: true,
            remaining,
            retry_after_us: 0,
            reset_after_us,
            wait_us: 0,
        }
    }

    /// Denied: retry after `retry_after_us` (a denial never waits).
    pub(crate) fn denied(remaining: u64, retry_after_us: u64, reset_after_us: u64) -> Self {
        Self {
            allowed: false,
            remaining,
            retry_after_us,
            reset_after_us,
            wait_us: 0,
        }
    }

    /// Admitted, to proceed after `wait_us` (a leaky bucket's queue).
    #[must_use]
    pub(crate) fn waiting(self, wait_us: u64) -> Self {
        Self { wait_us, ..self }
    }

    fn of(decision: &Decision) -> Self {
        Self {
            allowed: decision.allowed,
            remaining: decision.remaining,
            retry_after_us: micros(decision.retry_after),
            reset_after_us: micros(decision.reset_after),
            wait_us: micros(decision.wait),
        }
    }
}

/// Asserts a decision field by field.
#[track_caller]
pub(crate) fn assert_decision(decision: &Decision, expected: Expected, context: &str) {
    assert_eq!(Expected::of(decision), expected, "{context}");
}

/// The tests' generator: limiter-core's
/// [`SplitMix64`](limiter_core::trace::SplitMix64), so a failing trace
/// reproduces exactly.
pub use limiter_core::trace::SplitMix64 as Rng;
