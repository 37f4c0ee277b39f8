//! The five algorithms on any valid policy and any request sequence, against
//! the u128 reference of docs/spec.md section 3 that `cargo test` also runs
//! (crates/limiter-core/tests/model): no panic, `remaining <= limit`, every
//! decision and every error equal to the reference's, peeks writing nothing.
#![no_main]

#[path = "../../crates/limiter-core/tests/model/mod.rs"]
mod model;

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policy, Rate, MAX_TIME_US};
use model::Reference;

/// Reads little-endian integers off the input, zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u64(&mut self, width: usize) -> u64 {
        let take = width.min(self.0.len());
        let (head, rest) = self.0.split_at(take);
        self.0 = rest;
        head.iter()
            .rev()
            .fold(0, |acc, &b| (acc << 8) | u64::from(b))
    }

    /// A number shaped to hit edges: small, a power of two, near one, or any.
    fn shaped(&mut self, max: u64) -> u64 {
        let kind = self.u64(1);
        let raw = self.u64(8);
        let value = match kind % 4 {
            0 => raw % 17,
            1 => 1u64 << (raw % 64),
            2 => (1u64 << (raw % 64)).wrapping_sub(raw >> 60),
            _ => raw,
        };
        value.min(max)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The largest limit, window (µs), capacity or queue tried: any u64. (This
/// target found `Policy::new`'s range check overflowing near 2^64, fixed in
/// cc69be3; seed `seed-found-policy-tick-overflow`.)
const LARGEST: u64 = u64::MAX;

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let algorithm = Algorithm::ALL[input.u64(1) as usize % Algorithm::ALL.len()];
    let limit = input.shaped(LARGEST);
    let window = input.shaped(LARGEST);
    let extra = input.shaped(LARGEST);
    let rate = Rate::new(limit, Duration::from_micros(window));
    let (capacity, queue) = if algorithm == Algorithm::TokenBucket {
        (Some(extra), None)
    } else if algorithm == Algorithm::LeakyBucket {
        (None, Some(extra))
    } else {
        (None, None)
    };
    // Durations beyond u64 µs are compared too: the core converts in 128
    // bits and saturates at `Duration::MAX`, as the reference does.
    let Ok(policy) = Policy::from_options(algorithm, rate, capacity, queue) else {
        return;
    };
    let mut core = KeyState::fresh(&policy);
    let mut reference = Reference::new(&policy);
    // The time the next step moves from: it may start beyond the range, but
    // a request beyond it (an error, which changes nothing) does not move
    // it, so the steps after one are decisions again.
    let mut clock = input.shaped(MAX_TIME_US + 2);
    let max_cost = policy.max_cost();
    let mut step = 0;
    while !input.is_empty() && step < 4_096 {
        step += 1;
        let flags = input.u64(1);
        let now = match flags % 8 {
            0 => clock,
            1 => clock.saturating_add(input.shaped(u64::MAX)),
            2 => clock.saturating_sub(input.u64(2)),
            _ => clock.saturating_add(input.u64(3) % policy.window_us().saturating_mul(2).max(1)),
        };
        if now <= MAX_TIME_US {
            clock = now;
        }
        let cost = match (flags >> 3) % 4 {
            0 => 1,
            1 => max_cost,
            2 => max_cost.saturating_add(input.u64(1) % 2),
            _ => input.shaped(max_cost),
        };
        let peek = flags >> 5 == 7;
        let expected = reference.decide(now, cost, !peek);
        let actual = if peek {
            core.peek(&policy, now, cost)
        } else {
            core.acquire(&policy, now, cost)
        };
        match (actual, expected) {
            (Ok(decision), Ok(expected)) => {
                assert!(decision.remaining <= decision.limit, "{decision:?}");
                assert!(
                    expected.matches(&decision),
                    "{policy}: step {step} t={now} cost={cost}: core {decision:?}, reference {expected:?}"
                );
            }
            (Err(error), Err(expected)) => assert!(
                expected.matches(&error),
                "{policy}: step {step} t={now} cost={cost}: core {error:?}, reference {expected:?}"
            ),
            (actual, expected) => panic!(
                "{policy}: step {step} t={now} cost={cost}: core {actual:?}, reference {expected:?}"
            ),
        }
    }
});
