//! The record of a policy set stored beside a key's state (limiter-redis's
//! `protocol/keys.rs`, `policy_record`, and the Lua's `policy_change.lua`
//! read the same bytes): the state encodings' version, then per part its
//! algorithm (a byte) and four little-endian doubles, the tick in µs, the
//! window in ticks, the limit and the maximum cost. A request decided
//! under another set than the record's takes the state over by
//! docs/spec.md section 9.

use std::time::Duration;

use limiter_core::{Algorithm, Policies, Policy, Rate};

/// The version of the state encodings, first in every record: a record of
/// another version holds states this module does not read (each part
/// starts fresh).
const STATE_ENCODING: u8 = 1;

/// Bytes of one part in a record.
const PART_BYTES: usize = 33;

/// Each algorithm by its number in a record.
const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::TokenBucket,
    Algorithm::LeakyBucket,
];

/// The record of `policies`.
pub(crate) fn policy_record(policies: &Policies) -> Vec<u8> {
    let mut record = Vec::with_capacity(1 + PART_BYTES * policies.len());
    record.push(STATE_ENCODING);
    for policy in policies.iter() {
        let code = ALGORITHMS
            .iter()
            .position(|&a| a == policy.algorithm())
            .unwrap_or_default();
        record.push(code as u8);
        for number in [
            policy.tick_us(),
            policy.window_ticks(),
            policy.limit(),
            policy.max_cost(),
        ] {
            record.extend_from_slice(&(number as f64).to_le_bytes());
        }
    }
    record
}

/// The policies a record names, `None` when it is of another version or
/// none of ours.
pub(crate) fn policies_of(record: &[u8]) -> Option<Policies> {
    let (&version, parts) = record.split_first()?;
    if version != STATE_ENCODING || parts.is_empty() || !parts.len().is_multiple_of(PART_BYTES) {
        return None;
    }
    let parts = parts
        .chunks_exact(PART_BYTES)
        .map(|part| {
            let algorithm = *ALGORITHMS.get(usize::from(part[0]))?;
            let number = |i: usize| {
                let bytes: [u8; 8] = part[1 + 8 * i..9 + 8 * i].try_into().ok()?;
                crate::call::whole(f64::from_le_bytes(bytes))
            };
            let (tick, window, limit, max_cost) = (number(0)?, number(1)?, number(2)?, number(3)?);
            let rate = Rate::new(limit, Duration::from_micros(tick.checked_mul(window)?));
            let policy = Policy::new(algorithm, rate).ok()?;
            let policy = match algorithm {
                Algorithm::TokenBucket => policy.with_capacity(max_cost).ok()?,
                Algorithm::LeakyBucket => policy.with_queue(max_cost).ok()?,
                _ => policy,
            };
            (policy.tick_us() == tick && policy.max_cost() == max_cost).then_some(policy)
        })
        .collect::<Option<Vec<Policy>>>()?;
    Policies::new(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// limiter-redis's pinned record (its keys.rs test), byte for byte.
    #[test]
    fn the_record_is_limiter_rediss() {
        let set: Policies = "fixed-window:5/10s;token-bucket:9/1m,capacity=20"
            .parse()
            .unwrap();
        let doubles = |numbers: [f64; 4]| {
            numbers
                .iter()
                .flat_map(|d| d.to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let mut expected = vec![STATE_ENCODING, 0];
        expected.extend(doubles([1.0, 10_000_000.0, 5.0, 5.0]));
        expected.push(3);
        expected.extend(doubles([1.0, 60_000_000.0, 9.0, 20.0]));
        assert_eq!(policy_record(&set), expected);
    }

    #[test]
    fn a_record_names_its_policies_back() {
        for text in [
            "fixed-window:5/10s;token-bucket:9/1m,capacity=20",
            "sliding-log:300/1h;leaky-bucket:4/1s,queue=6;sliding-counter:1000000/1d",
        ] {
            let set: Policies = text.parse().unwrap();
            assert_eq!(policies_of(&policy_record(&set)), Some(set));
        }
        let mut other_version = policy_record(&"fixed-window:5/10s".parse().unwrap());
        other_version[0] = 2;
        assert_eq!(policies_of(&other_version), None);
        assert_eq!(policies_of(b"p"), None);
    }
}
