//! The record of a policy set that a Redis backend stores beside a key's
//! state (`{prefix}:{k}:p`, docs/backends.md "Key layout"): what a request
//! decided under another set needs to take the state over (docs/spec.md
//! section 9). limiter-redis writes it, its Lua reads it
//! (`policy_change.lua`) and limiter-redis-module writes and reads it, so
//! the bytes are written here once.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::policies::Policies;
use crate::policy::Policy;
use crate::rate::Rate;
use crate::whole_double::whole_double;

/// The version first in every record: the version of the encodings of the
/// states stored beside it (docs/backends.md, "Key layout"). A record of
/// another version says those states are in encodings this release does
/// not read, so a request takes them as none (each part starts fresh) and
/// writes its own. limiter-redis's `policy_change.lua` holds the same
/// number (`RECORD_VERSION`).
pub const POLICY_RECORD_VERSION: u8 = 2;

/// Bytes of one part in a record: the algorithm, then four doubles.
const PART_BYTES: usize = 1 + 4 * 8;

/// The record of a policy set's `parts`, in the set's order: the version
/// ([`POLICY_RECORD_VERSION`]), then per part its algorithm (a byte: 0
/// fixed window, 1 sliding log, 2 sliding counter, 3 token bucket, 4 leaky
/// bucket) and four little-endian doubles: the tick in µs, the window in
/// ticks, the limit and the maximum cost (capacity, queue, or the limit),
/// every one a whole number below 2^53, so exact as a double (and as a Lua
/// number).
///
/// ```
/// use limiter_core::backend::{encode_policy_record, POLICY_RECORD_VERSION};
/// use limiter_core::Policies;
///
/// let set: Policies = "fixed-window:5/10s;token-bucket:9/1m,capacity=20".parse()?;
/// let record = encode_policy_record(set.parts());
/// assert_eq!(record[0], POLICY_RECORD_VERSION);
/// assert_eq!(record.len(), 1 + 2 * 33);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_policy_record(parts: &[Policy]) -> Vec<u8> {
    let mut record = Vec::with_capacity(1 + PART_BYTES * parts.len());
    record.push(POLICY_RECORD_VERSION);
    for policy in parts {
        record.push(code_of(policy.algorithm()));
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

/// The tag of a record: 64 bits of FNV-1a over its bytes, little-endian.
/// Every string state a Redis backend writes ends with the tag of the
/// record of the set it was made under (docs/backends.md, "Key layout"),
/// so a request whose set's tag ends its first part's state needs not read
/// the record beside it: that state is its own set's.
///
/// ```
/// use limiter_core::backend::{encode_policy_record, policy_record_tag};
/// use limiter_core::Policies;
///
/// let free: Policies = "token-bucket:10/1s".parse()?;
/// let pro: Policies = "token-bucket:100/1s".parse()?;
/// let tag = |set: &Policies| policy_record_tag(&encode_policy_record(set.parts()));
/// assert_ne!(tag(&free), tag(&pro));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn policy_record_tag(record: &[u8]) -> [u8; 8] {
    crate::fnv::fnv1a_64(record).to_le_bytes()
}

/// The policy set a record names, `None` when the record is of another
/// version, of a length no record has, or names no valid policy set: a
/// backend then takes the states beside it as none of its own.
///
/// ```
/// use limiter_core::backend::{decode_policy_record, encode_policy_record};
/// use limiter_core::Policies;
///
/// let set: Policies = "sliding-log:300/1h;leaky-bucket:4/1s,queue=6".parse()?;
/// assert_eq!(decode_policy_record(&encode_policy_record(set.parts())), Some(set));
/// assert_eq!(decode_policy_record(b"p"), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode_policy_record(record: &[u8]) -> Option<Policies> {
    let (&version, parts) = record.split_first()?;
    if version != POLICY_RECORD_VERSION
        || parts.is_empty()
        || !parts.len().is_multiple_of(PART_BYTES)
    {
        return None;
    }
    let parts = parts
        .chunks_exact(PART_BYTES)
        .map(decode_part)
        .collect::<Option<Vec<Policy>>>()?;
    Policies::new(parts).ok()
}

/// The policy one part of a record names (`PART_BYTES` long), if it is
/// one this crate builds: every number whole, and the policy made of them
/// giving the same tick and maximum cost back.
fn decode_part(part: &[u8]) -> Option<Policy> {
    let algorithm = algorithm_of(part[0])?;
    let number = |i: usize| {
        let bytes: [u8; 8] = part[1 + 8 * i..9 + 8 * i].try_into().ok()?;
        whole_double(f64::from_le_bytes(bytes))
    };
    let (tick, window, limit, max_cost) = (number(0)?, number(1)?, number(2)?, number(3)?);
    let rate = Rate::new(limit, Duration::from_micros(tick.checked_mul(window)?));
    let policy = Policy::new(algorithm, rate).ok()?;
    let policy = match algorithm {
        Algorithm::TokenBucket => policy.with_capacity(max_cost).ok()?,
        Algorithm::LeakyBucket => policy.with_queue(max_cost).ok()?,
        Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingCounter => policy,
    };
    (policy.tick_us() == tick && policy.max_cost() == max_cost).then_some(policy)
}

/// An algorithm's number in a record.
fn code_of(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingLog => 1,
        Algorithm::SlidingCounter => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::LeakyBucket => 4,
    }
}

/// The algorithm of a number in a record, `None` for a number no
/// algorithm has.
fn algorithm_of(code: u8) -> Option<Algorithm> {
    Some(match code {
        0 => Algorithm::FixedWindow,
        1 => Algorithm::SlidingLog,
        2 => Algorithm::SlidingCounter,
        3 => Algorithm::TokenBucket,
        4 => Algorithm::LeakyBucket,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn record_of(text: &str) -> Vec<u8> {
        encode_policy_record(text.parse::<Policies>().unwrap().parts())
    }

    fn doubles(numbers: [f64; 4]) -> Vec<u8> {
        numbers.iter().flat_map(|d| d.to_le_bytes()).collect()
    }

    /// Pinned: limiter-redis's Lua reads these bytes, and a record stored
    /// by one release keeps meaning the same numbers to the next.
    #[test]
    fn the_record_is_the_version_then_each_parts_numbers() {
        let mut expected = vec![2, 0];
        expected.extend(doubles([1.0, 10_000_000.0, 5.0, 5.0]));
        expected.push(3);
        expected.extend(doubles([1.0, 60_000_000.0, 9.0, 20.0]));
        assert_eq!(
            record_of("fixed-window:5/10s;token-bucket:9/1m,capacity=20"),
            expected
        );
        assert_eq!(POLICY_RECORD_VERSION, 2);
    }

    /// Pinned: a tag stored by one release keeps naming the same record
    /// to the next. FNV-1a's published 64-bit values.
    #[test]
    fn the_tag_is_fnv_1a_of_the_record() {
        assert_eq!(
            policy_record_tag(b""),
            0xcbf2_9ce4_8422_2325u64.to_le_bytes()
        );
        assert_eq!(
            policy_record_tag(b"a"),
            0xaf63_dc4c_8601_ec8cu64.to_le_bytes()
        );
    }

    #[test]
    fn each_algorithm_has_its_number() {
        for (text, code) in [
            ("fixed-window:5/10s", 0),
            ("sliding-log:5/10s", 1),
            ("sliding-counter:5/10s", 2),
            ("token-bucket:5/10s", 3),
            ("leaky-bucket:5/10s", 4),
        ] {
            assert_eq!(record_of(text)[1], code, "{text}");
        }
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm_of(code_of(algorithm)), Some(algorithm));
        }
        assert_eq!(algorithm_of(5), None);
    }

    #[test]
    fn distinct_sets_have_distinct_records() {
        let distinct: HashSet<Vec<u8>> = [
            "fixed-window:5/10s",
            "sliding-log:5/10s",
            "fixed-window:6/10s",
            "fixed-window:5/11s",
            "token-bucket:5/10s,capacity=6",
            "fixed-window:5/10s;fixed-window:5/10s",
        ]
        .into_iter()
        .map(record_of)
        .collect();
        assert_eq!(distinct.len(), 6);
    }

    #[test]
    fn a_record_names_its_policies_back() {
        for text in [
            "fixed-window:5/10s;token-bucket:9/1m,capacity=20",
            "sliding-log:300/1h;leaky-bucket:4/1s,queue=6;sliding-counter:1000000/1d",
            "fixed-window:5/10s;fixed-window:5/10s",
            "token-bucket:1/1us",
        ] {
            let set: Policies = text.parse().unwrap();
            assert_eq!(
                decode_policy_record(&encode_policy_record(set.parts())),
                Some(set),
                "{text}"
            );
        }
    }

    #[test]
    fn a_record_of_another_version_is_refused() {
        let mut record = record_of("fixed-window:5/10s");
        assert!(decode_policy_record(&record).is_some());
        for version in [0, 1, 3, 0xff] {
            record[0] = version;
            assert_eq!(decode_policy_record(&record), None, "version {version}");
        }
    }

    #[test]
    fn a_record_of_another_length_is_refused() {
        let record = record_of("fixed-window:5/10s;token-bucket:9/1m");
        for len in [0, 1, 2, PART_BYTES, PART_BYTES + 2, record.len() - 1] {
            assert_eq!(decode_policy_record(&record[..len]), None, "{len} bytes");
        }
        let mut longer = record.clone();
        longer.push(0);
        assert_eq!(decode_policy_record(&longer), None);
        assert_eq!(decode_policy_record(b"p"), None);
    }

    #[test]
    fn a_record_of_numbers_no_policy_has_is_refused() {
        let valid = record_of("token-bucket:9/1m,capacity=20");
        let with = |at: usize, bytes: &[u8]| {
            let mut record = valid.clone();
            record[at..at + bytes.len()].copy_from_slice(bytes);
            record
        };
        for (what, record) in [
            ("an unknown algorithm", with(1, &[9])),
            ("a fractional tick", with(2, &1.5f64.to_le_bytes())),
            ("a negative window", with(10, &(-1f64).to_le_bytes())),
            ("a limit beyond 2^53", with(18, &1e17f64.to_le_bytes())),
            ("a zero limit", with(18, &0f64.to_le_bytes())),
            ("a zero capacity", with(26, &0f64.to_le_bytes())),
            ("another tick", with(2, &7f64.to_le_bytes())),
            ("a NaN", with(26, &f64::NAN.to_le_bytes())),
        ] {
            assert_eq!(decode_policy_record(&record), None, "{what}");
        }
    }
}
