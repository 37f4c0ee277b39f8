//! [`conformance_suite!`](crate::conformance_suite): one `#[tokio::test]`
//! per case of [`cases`](crate::cases).

/// Expands into a module `conformance` with one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case of
/// [`cases`](crate::cases), each building its harness inside its own
/// runtime and running the case against it.
///
/// Give it either an expression that builds the harness:
///
/// ```
/// use limiter_test::ModelHarness;
///
/// limiter_test::conformance_suite!(ModelHarness);
/// # fn main() {}
/// ```
///
/// or, for a harness that needs async setup (a connection pool, a server),
/// `setup =` a future of the harness, awaited in each test's runtime (so a
/// pool is bound to the runtime that uses it):
///
/// ```
/// # mod redis {
/// #     pub struct RedisHarness;
/// #     impl RedisHarness {
/// #         pub async fn start() -> limiter_test::ModelHarness { limiter_test::ModelHarness }
/// #     }
/// # }
/// # use redis::RedisHarness;
/// limiter_test::conformance_suite!(setup = RedisHarness::start());
/// # fn main() {}
/// ```
///
/// The expression is evaluated afresh in every test, inside a module that
/// imports the caller's items (`use super::*`). The calling crate needs
/// `tokio` (features `macros`, `rt-multi-thread`) as a dev-dependency. Run
/// one case with `cargo test -p BACKEND conformance::CASE`.
#[macro_export]
macro_rules! conformance_suite {
    (setup = $setup:expr $(,)?) => {
        $crate::__conformance_tests! { ($setup).await;
            // docs/spec.md section 2 and the decision fields
            denied_request_changes_nothing,
            cost_above_the_maximum_is_an_error,
            zero_cost_is_an_error,
            time_beyond_2_pow_53_is_an_error,
            time_never_runs_backwards_inside_a_key,
            peek_writes_nothing,
            peek_answers_what_acquire_would,
            reset_restores_the_full_quota,
            retry_after_is_exact,
            reset_after_is_exact,
            keys_are_independent,
            decisions_report_the_policy_limit,
            // docs/spec.md section 3
            fixed_window_counts_per_aligned_window,
            sliding_log_counts_the_trailing_window,
            sliding_counter_weighs_the_previous_window,
            token_bucket_bursts_then_refills,
            leaky_bucket_queues_and_reports_the_wait,
            article_boundary_case,
            // docs/spec.md section 6a
            shared_vectors_replay_byte_for_byte,
            // docs/spec.md section 7: tiered limits
            all_of_vectors_replay_byte_for_byte,
            concurrent_acquires_under_a_policy_set_admit_exactly_the_tightest,
            a_cost_above_any_parts_maximum_is_an_error,
            // docs/spec.md section 1: a key is a byte string
            byte_keys_are_keys_of_their_own,
            // concurrency
            concurrent_acquires_on_one_key_admit_exactly_the_limit,
            concurrent_keys_are_isolated,
            // against the core
            random_traces_match_the_core_model,
            times_up_to_2_pow_53_match_the_core_model,
            // the trait's conveniences
            acquire_fast_answers_what_acquire_does,
            until_ready_sleeps_retry_after_then_wait,
            // the failure wrapper (limiter_core::Resilient) on this backend
            failure_policies_answer_while_the_backend_fails,
            fallback_decides_until_the_backend_answers_again,
        }
    };
    ($harness:expr $(,)?) => {
        $crate::conformance_suite!(setup = async { $harness });
    };
}

/// The test functions of [`conformance_suite!`](crate::conformance_suite).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($harness:expr; $($case:ident),* $(,)?) => {
        #[cfg(test)]
        mod conformance {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let harness = $harness;
                    $crate::cases::$case(&harness).await;
                }
            )*
        }
    };
}
