//! What a backend author needs: the algorithms' per-key states, the request
//! checks, decisions in ticks, and the dispatch over algorithms.
//!
//! An application does not need this module: it holds a
//! [`Limiter`](crate::Limiter) and reads [`Decision`](crate::Decision)s.
//!
//! # Implementer notes
//!
//! A backend is a keyed store of algorithm states plus a way to run one
//! decision on one key atomically. Whatever it stores, it must decide
//! exactly as the states here do (docs/spec.md section 3), bit for bit, so
//! that the conformance suite (`limiter-test`) and the vectors pass on it.
//!
//! - **Decide with the states.** A backend that holds state in process
//!   keeps one [`AlgorithmState`] per key ([`KeyState`] when the algorithm
//!   is chosen at run time, or a map typed per algorithm, see
//!   [`ForAlgorithm`]) and calls [`AlgorithmState::acquire`] or
//!   [`peek`](AlgorithmState::peek) under the key's lock: read, decide and
//!   write must be one atomic step, or concurrent requests over-admit.
//! - **Deciding elsewhere** (a Redis script): port the algorithm, take the
//!   numbers from the [`Policy`] accessors (`tick_us`, `window_ticks`,
//!   `limit`, `max_cost`), answer in ticks, and convert with
//!   [`TickDecision::into_decision`], the one place where ticks become
//!   microseconds (docs/spec.md section 5).
//! - **Check the request first**: [`check_request`] (cost 0, cost above the
//!   max cost, time beyond 2^53 µs) before touching the store, so a request
//!   that can never succeed writes nothing and allocates nothing.
//! - **Time**: stamp each request once, before the lock; the states apply
//!   `t_eff = max(t, T_s)` themselves ([`effective_time`], docs/spec.md
//!   rule 2.3).
//! - **A denial writes nothing** (docs/spec.md rule 2.1), not even an
//!   expiry time.
//! - **Expiry**: a key may be dropped once `time_us + reset_after` of its
//!   last admission has passed, never earlier (docs/spec.md rule 2.5).
//! - **Long keys**: a store in process bounds what a client-chosen key
//!   costs by holding a key longer than its bound as its digest,
//!   [`StoredKey`], and deciding it as itself.
//! - **Errors**: a failure of the store is [`Error::Backend`](crate::Error::Backend)
//!   with the cause as its source (and nothing of the cause in the message);
//!   a bad configuration found before any request is
//!   [`Error::InvalidConfig`](crate::Error::InvalidConfig). Fail-open,
//!   fail-closed and fallback are not the backend's business: users wrap it
//!   in [`Resilient`](crate::Resilient).
//! - **A change of policy** keeps what each key used (docs/spec.md
//!   section 9): a key's state is taken over by
//!   [`KeyState::change_policy`] (a set's by
//!   [`SetState::change_policies`]) at the first request decided under
//!   the new policy, and stored whatever that request's decision. A
//!   backend that keeps state across a change names it without the
//!   numbers and stores beside it the [fingerprint](crate::Policies::fingerprint)
//!   of the set it was made under; one that stores the state apart from
//!   the limiter's memory (Redis) stores the set's numbers instead:
//!   [`encode_policy_record`] writes them, [`decode_policy_record`] reads
//!   them back, and [`policy_record_tag`] digests them for the end of each
//!   state.
//! - **Per-algorithm code outside this crate** (a script per algorithm, a
//!   key suffix) goes in a [`PerAlgorithm`] table, never in a `match` on
//!   [`Algorithm`] (which is `#[non_exhaustive]`): a new
//!   algorithm then fails to compile at each table.
//! - **A synchronous backend** (in process, no I/O) overrides
//!   [`Limiter::acquire_now`](crate::Limiter::acquire_now) and
//!   [`peek_now`](crate::Limiter::peek_now), so callers holding an
//!   `Arc<dyn Limiter>` can skip the boxed future.
//!
//! Then expand `limiter_test::conformance_suite!` over a `Harness` for it
//! (see `docs/backends.md`, "Writing a backend").

use std::fmt;
use std::mem::size_of_val;

mod policy_record;

pub use self::policy_record::{
    decode_policy_record, encode_policy_record, policy_record_tag, POLICY_RECORD_VERSION,
};
pub use crate::algorithm::PerAlgorithm;
pub use crate::algorithms::{
    check_request, effective_tick, effective_time, AlgorithmState, FixedWindow, KeyState,
    LeakyBucket, LogUpdate, SlidingCounter, SlidingLog, TokenBucket,
};
pub use crate::all_of::{all_of, check_policies, SetState};
pub use crate::clock_source::ClockSource;
pub use crate::cluster_slot::{cluster_slot, cluster_slot_of_tag, CLUSTER_SLOTS};
pub use crate::decision::TickDecision;
pub use crate::fnv::fnv1a_64;
pub use crate::inline_key::InlineKey;
pub use crate::policy_history::PolicyHistory;
pub use crate::stored_key::{StoredKey, DIGEST_KEY_BYTES, DIGEST_MARK};
pub use crate::whole_double::whole_double;

use crate::algorithm::Algorithm;
use crate::policy::Policy;

/// A type for each algorithm state: what a backend keeps per algorithm, e.g.
/// a map from keys to `S`. [`ForAlgorithm<F>`] holds the one for a policy's
/// algorithm.
///
/// ```
/// use limiter_core::backend::{with_state, AlgorithmState, ForAlgorithm, StateFamily};
/// use limiter_core::{Policy, Rate};
/// use std::collections::HashMap;
///
/// /// Keys to states, typed by the algorithm.
/// #[derive(Debug)]
/// struct Maps;
///
/// impl StateFamily for Maps {
///     type Of<S: AlgorithmState> = HashMap<String, S>;
///     fn make<S: AlgorithmState>(_: &Policy) -> HashMap<String, S> {
///         HashMap::new()
///     }
/// }
///
/// let policy = Policy::token_bucket(Rate::per_second(5))?;
/// let mut keys = ForAlgorithm::<Maps>::new(&policy);
/// let decision = with_state!(&mut keys, map => map
///     .entry("alice".to_owned())
///     .or_insert_with(|| AlgorithmState::fresh(&policy))
///     .acquire(&policy, 0, 1))?;
/// assert_eq!(decision.remaining, 4);
/// assert_eq!(with_state!(&keys, map => map.len()), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait StateFamily {
    /// The type kept for algorithm state `S`.
    type Of<S: AlgorithmState>: fmt::Debug + Send + Sync;

    /// A new, empty value for state `S` under `policy`.
    fn make<S: AlgorithmState>(policy: &Policy) -> Self::Of<S>;
}

/// `F::Of<S>` for the state `S` of one algorithm: a backend's store, typed
/// by the policy's algorithm, so each key holds only its own algorithm's
/// state. Reach the value with [`with_state!`](crate::backend::with_state),
/// which runs the same generic code for whichever algorithm it is.
///
/// Build it with [`new`](Self::new), never by naming a variant: the
/// variants are listed here and in `with_state!` only.
#[allow(missing_docs)] // each variant is its algorithm's
pub enum ForAlgorithm<F: StateFamily> {
    FixedWindow(F::Of<FixedWindow>),
    SlidingLog(F::Of<SlidingLog>),
    SlidingCounter(F::Of<SlidingCounter>),
    TokenBucket(F::Of<TokenBucket>),
    LeakyBucket(F::Of<LeakyBucket>),
}

impl<F: StateFamily> ForAlgorithm<F> {
    /// The value for `policy`'s algorithm, made by [`StateFamily::make`].
    pub fn new(policy: &Policy) -> Self {
        match policy.algorithm() {
            Algorithm::FixedWindow => Self::FixedWindow(F::make(policy)),
            Algorithm::SlidingLog => Self::SlidingLog(F::make(policy)),
            Algorithm::SlidingCounter => Self::SlidingCounter(F::make(policy)),
            Algorithm::TokenBucket => Self::TokenBucket(F::make(policy)),
            Algorithm::LeakyBucket => Self::LeakyBucket(F::make(policy)),
        }
    }

    /// The algorithm whose state it holds.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Self::FixedWindow(_) => Algorithm::FixedWindow,
            Self::SlidingLog(_) => Algorithm::SlidingLog,
            Self::SlidingCounter(_) => Algorithm::SlidingCounter,
            Self::TokenBucket(_) => Algorithm::TokenBucket,
            Self::LeakyBucket(_) => Algorithm::LeakyBucket,
        }
    }
}

impl<F: StateFamily> fmt::Debug for ForAlgorithm<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.algorithm().name();
        crate::backend::with_state!(self, value => f.debug_tuple(name).field(value).finish())
    }
}

/// Runs `$body` with `$name` bound to the value inside a
/// [`ForAlgorithm`], whatever the algorithm: the body is compiled once per
/// algorithm, with `$name: &F::Of<S>` (or `&mut`, given `&mut`) for that
/// algorithm's state `S`. Every arm must give the same type.
///
/// `with_state!(&keys, map => map.len())`
#[doc(hidden)]
#[macro_export]
macro_rules! __with_state {
    ($value:expr, $name:ident => $body:expr) => {
        match $value {
            $crate::backend::ForAlgorithm::FixedWindow($name) => $body,
            $crate::backend::ForAlgorithm::SlidingLog($name) => $body,
            $crate::backend::ForAlgorithm::SlidingCounter($name) => $body,
            $crate::backend::ForAlgorithm::TokenBucket($name) => $body,
            $crate::backend::ForAlgorithm::LeakyBucket($name) => $body,
        }
    };
}

#[doc(inline)]
pub use crate::__with_state as with_state;

impl KeyState {
    /// Bytes this key's state takes in memory: the algorithm's state value,
    /// plus the entries a sliding log keeps on the heap.
    pub fn size_bytes(&self) -> usize {
        match self {
            Self::FixedWindow(state) => size_of_val(state),
            Self::SlidingLog(log) => size_of_val(log).saturating_add(log.heap_bytes()),
            Self::SlidingCounter(state) => size_of_val(state),
            Self::TokenBucket(state) => size_of_val(state),
            Self::LeakyBucket(state) => size_of_val(state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Rate;

    #[derive(Debug)]
    struct Fresh;

    impl StateFamily for Fresh {
        type Of<S: AlgorithmState> = S;
        fn make<S: AlgorithmState>(policy: &Policy) -> S {
            S::fresh(policy)
        }
    }

    #[test]
    fn a_typed_store_decides_as_the_key_state() {
        for algorithm in Algorithm::ALL {
            let policy = Policy::new(algorithm, Rate::per_second(3)).unwrap();
            let mut typed = ForAlgorithm::<Fresh>::new(&policy);
            let mut key = KeyState::fresh(&policy);
            assert_eq!(typed.algorithm(), algorithm);
            for t in [0, 1, 2, 3, 500_000, 1_000_001] {
                let ours = with_state!(&mut typed, state => state.acquire(&policy, t, 1));
                assert_eq!(ours.unwrap(), key.acquire(&policy, t, 1).unwrap());
            }
            assert!(format!("{typed:?}").starts_with(algorithm.name()));
        }
    }

    /// A state rebuilt from the parts its accessors give decides as the
    /// state itself: what a backend that stores states in a layout of its
    /// own relies on.
    #[test]
    fn a_state_rebuilt_from_its_parts_decides_as_the_state() {
        fn rebuilt(key: &KeyState) -> KeyState {
            match key {
                KeyState::FixedWindow(s) => {
                    KeyState::FixedWindow(FixedWindow::from_parts(s.window_start(), s.count()))
                }
                KeyState::SlidingLog(s) => {
                    KeyState::SlidingLog(SlidingLog::from_parts(s.dropped_total(), s.entries()))
                }
                KeyState::SlidingCounter(s) => KeyState::SlidingCounter(
                    SlidingCounter::from_parts(s.window_start(), s.previous(), s.current()),
                ),
                KeyState::TokenBucket(s) => {
                    KeyState::TokenBucket(TokenBucket::from_parts(s.scaled_tokens(), s.last()))
                }
                KeyState::LeakyBucket(s) => {
                    KeyState::LeakyBucket(LeakyBucket::from_parts(s.scaled_queued(), s.last()))
                }
            }
        }
        for algorithm in Algorithm::ALL {
            let policy = Policy::new(algorithm, Rate::per_second(3)).unwrap();
            let mut key = KeyState::fresh(&policy);
            for t in [0, 1, 2, 3, 400_000, 1_000_001, 1_500_000, 2_600_000] {
                let mut copy = rebuilt(&key);
                assert_eq!(copy, key);
                assert_eq!(
                    copy.acquire(&policy, t, 1).unwrap(),
                    key.acquire(&policy, t, 1).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_sliding_log_counts_its_entries_in_its_size() {
        let policy = Policy::sliding_log(Rate::per_second(3)).unwrap();
        let mut key = KeyState::fresh(&policy);
        let empty = key.size_bytes();
        key.acquire(&policy, 0, 1).unwrap();
        key.acquire(&policy, 1, 1).unwrap();
        assert_eq!(key.size_bytes(), empty + 2 * 16);
    }
}
