//! Random traces through the backend and through the core's model (the
//! pure [`KeyState`] per key, never evicted): every answer must agree.

use std::collections::HashMap;

use limiter_core::backend::KeyState;
use limiter_core::{Policy, MAX_TIME_US};

use super::{outcome, policies, Outcome, Rng, Subject, T0};
use crate::Harness;

/// The core, keyed: what every backend must answer.
#[derive(Default)]
struct Model {
    keys: HashMap<String, KeyState>,
}

impl Model {
    fn acquire(&mut self, policy: &Policy, t: u64, key: &str, cost: u64) -> Outcome {
        let result = match self.keys.get_mut(key) {
            Some(state) => state.acquire(policy, t, cost),
            None => {
                let mut state = KeyState::fresh(policy);
                let result = state.acquire(policy, t, cost);
                if matches!(result, Ok(ref d) if d.allowed) {
                    self.keys.insert(key.to_owned(), state);
                }
                result
            }
        };
        outcome(result)
    }

    fn peek(&self, policy: &Policy, t: u64, key: &str, cost: u64) -> Outcome {
        let result = match self.keys.get(key) {
            Some(state) => state.peek(policy, t, cost),
            None => KeyState::fresh(policy).peek(policy, t, cost),
        };
        outcome(result)
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Peek,
    Reset,
}

/// Runs `steps` random requests over three keys, with times from `next_time`,
/// through the backend and the model, and asserts every answer agrees.
async fn compare<H: Harness>(
    harness: &H,
    policy: &Policy,
    seed: u64,
    steps: usize,
    mut next_time: impl FnMut(&mut Rng, u64) -> u64,
) {
    let subject = Subject::new(harness, policy).await;
    let mut model = Model::default();
    let mut rng = Rng::new(seed);
    let max = policy.max_cost();
    let mut t = T0 + rng.below(policy.window_us());
    let mut log = Vec::new();
    for step in 0..steps {
        t = next_time(&mut rng, t);
        let key = ["a", "b", "c"][rng.below(3) as usize];
        let cost = match rng.below(20) {
            0 => 0,
            1 => max + 1 + rng.below(3),
            2..=7 => 1 + rng.below(max),
            _ => 1,
        };
        let op = match rng.below(25) {
            0 => Op::Reset,
            1..=4 => Op::Peek,
            _ => Op::Acquire,
        };
        let (actual, expected) = match op {
            Op::Acquire => (
                outcome(subject.try_acquire(t, key, cost).await),
                model.acquire(policy, t, key, cost),
            ),
            Op::Peek => (
                outcome(subject.try_peek(t, key, cost).await),
                model.peek(policy, t, key, cost),
            ),
            Op::Reset => {
                subject.reset(key).await;
                model.keys.remove(key);
                (Err("reset"), Err("reset"))
            }
        };
        log.push(format!("{step}: {op:?} {key} cost {cost} at {t}"));
        if actual != expected {
            let recent = log[log.len().saturating_sub(12)..].join("\n  ");
            panic!(
                "{policy}, seed {seed}: step {step} differs from the core\n  got      {actual:?}\n  expected {expected:?}\nlast steps:\n  {recent}"
            );
        }
    }
}

/// Random traces (deterministic seeds) through the backend and the core
/// give identical answers, for every algorithm: times cluster around window
/// boundaries, sometimes repeat or step backwards; costs mix 1, larger
/// costs, 0 and above the maximum; peeks and resets are interleaved.
pub async fn random_traces_match_the_core_model<H: Harness>(harness: &H) {
    for (p, policy) in policies().into_iter().enumerate() {
        let w = policy.window_us();
        for seed in 0..3u64 {
            let next_time = move |rng: &mut Rng, t: u64| match rng.below(20) {
                0 => t.saturating_sub(rng.below(w)),            // backwards
                1..=3 => t,                                     // same µs
                4..=10 => t + rng.below(w / 10 + 1),            // close
                11..=14 => t + rng.below(w + 1),                // up to a window
                15..=17 => (t / w + 1) * w - 1 + rng.below(3),  // around a boundary
                _ => t + w * (1 + rng.below(2)) + rng.below(2), // jump a window or two
            };
            compare(harness, &policy, (p as u64) << 8 | seed, 300, next_time).await;
        }
    }
}

/// Times just below 2^53 µs, the end of the exact range, and beyond it:
/// the backend agrees with the core, with no overflow.
pub async fn times_up_to_2_pow_53_match_the_core_model<H: Harness>(harness: &H) {
    for (p, policy) in policies().into_iter().enumerate() {
        let w = policy.window_us();
        let start = MAX_TIME_US - 3 * w;
        let next_time = move |rng: &mut Rng, t: u64| {
            // After a request beyond the range, come back below it.
            let t = if (start..=MAX_TIME_US).contains(&t) {
                t
            } else {
                start + rng.below(2 * w)
            };
            match rng.below(10) {
                0 => MAX_TIME_US + 1,
                1 => MAX_TIME_US,
                2..=5 => (t + rng.below(w / 4 + 1)).min(MAX_TIME_US),
                _ => t,
            }
        };
        compare(harness, &policy, 0x253 << 8 | p as u64, 150, next_time).await;
    }
}
