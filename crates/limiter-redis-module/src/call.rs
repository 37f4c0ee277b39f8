//! One command's arguments, checked: the policies, the TTL floor, the
//! requests (limiter-redis's `wire.rs` packed `ARGV[1]`) and the keys (its
//! `KEYS` layout for one server or one slot, and a hot key's batch: per
//! request, a key per part, then its record's).
//!
//! `LIMITER.DECIDE policies ttl_floor_ms packed key...` (and `LIMITER.PEEK`,
//! the same read-only): the Lua library has its policies' constants and
//! TTL floor written in its text; the module takes them as the first two
//! arguments (the policies as their text, which parses back to equal
//! policies), then `ARGV[1]` and `KEYS` as the library reads them. The
//! keys come last, so that a command declares them as "every argument from
//! the fourth" and Redis Cluster routes it.
//!
//! `LIMITER.DECIDE_ACROSS …` (and `LIMITER.PEEK_ACROSS`) decide requests
//! of several slots of one cluster node, as the library's function with
//! `KEYS` and `ARGV[2..]` of a batch across slots: after the packed
//! argument, the first request's keys (which route the call, the first of
//! them its one declared key), then every request's keys
//! ([`Call::parse_across_slots`]).
//!
//! Anything else is refused with an error reply before any key is read.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use limiter_core::backend::{encode_policy_record, policy_record_tag, whole_double};
use limiter_core::{Policies, MAX_TIME_US};

/// Requests one call decides at most: limiter-redis sends far fewer (its
/// batches), and the bound keeps a hot key's count from asking for a huge
/// reply.
pub const MAX_REQUESTS: usize = 4096;

/// Policy sets kept parsed, by their text, at most this many (then all
/// are dropped): an app has a few, each sent with every call.
const MAX_CACHED_POLICIES: usize = 256;

/// A checked call.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// The parts, in the set's order.
    pub policies: Rc<Policies>,
    /// The set's record (limiter-core's `encode_policy_record`).
    pub record: Rc<[u8]>,
    /// The tag the set's states end with (limiter-core's
    /// `policy_record_tag` of its record).
    pub tag: [u8; 8],
    /// The least TTL of a key in ms (0 with Redis time).
    pub ttl_floor_ms: u64,
    /// The requests, in order.
    pub requests: Vec<Request>,
    /// The keys: request r's state under part i is `keys[r * step + i]`,
    /// its record's (of the policies its state was made under) the next.
    pub keys: &'a [&'a [u8]],
    /// Keys between two requests': the number of parts and one, or 0 for
    /// a hot key's batch (every request on the same keys).
    pub step: usize,
}

/// One request's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Whether an admission commits (acquire) or not (peek, charge).
    pub acquire: bool,
    /// Whether it is a charge after the fact of `cost` units (docs/spec.md
    /// section 10), answered as a peek of 1 on the state it leaves.
    pub charge: bool,
    /// Units asked for: 1 up to every part's max cost; a charge's, any
    /// whole number from 1 to 2^53.
    pub cost: u64,
    /// The time in µs, or `None` for the server's clock.
    pub time_us: Option<u64>,
}

impl<'a> Call<'a> {
    /// The call `args` (after the command's name) asks for, or the error
    /// to reply with.
    pub fn parse(args: &'a [&'a [u8]]) -> Result<Self, String> {
        Self::parse_keys(args, false)
    }

    /// The call across slots `args` (after the command's name) asks for:
    /// the keys that route it (the first request's) are left out of
    /// [`keys`](Self::keys).
    pub fn parse_across_slots(args: &'a [&'a [u8]]) -> Result<Self, String> {
        Self::parse_keys(args, true)
    }

    fn parse_keys(args: &'a [&'a [u8]], across_slots: bool) -> Result<Self, String> {
        let [policies, floor, packed, keys @ ..] = args else {
            return Err(
                "ERR wrong number of arguments: policies, ttl_floor_ms, packed \
                        arguments, then the keys"
                    .to_owned(),
            );
        };
        let Set {
            policies,
            record,
            tag,
        } = parse_policies(policies)?;
        let ttl_floor_ms = std::str::from_utf8(floor)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .filter(|&ms| ms <= MAX_TIME_US / 1000)
            .ok_or("ERR limiter: the TTL floor is not a whole number of ms up to 2^53 µs")?;
        // Each request's keys: one per part, then its record's.
        let parts = policies.len() + 1;
        if keys.is_empty() || !keys.len().is_multiple_of(parts) {
            return Err(format!(
                "ERR limiter: {} keys for {} policies: one per policy and the record's per \
                 request",
                keys.len(),
                parts - 1
            ));
        }
        // A call across slots: the first request's keys route it, then
        // come every request's.
        let keys = match across_slots {
            true => keys.get(parts..).filter(|rest| !rest.is_empty()).ok_or(
                "ERR limiter: a call across slots names the keys that route it, then every \
                 request's",
            )?,
            false => keys,
        };
        let numbers = packed_numbers(packed)?;
        let (requests, step) = match numbers.len() {
            // A hot key's batch: the three once, then R, on one set of keys.
            4 if keys.len() == parts => {
                let count = numbers[3];
                if !(1.0..=MAX_REQUESTS as f64).contains(&count) || count.fract() != 0.0 {
                    return Err(format!(
                        "ERR limiter: a batch of 1 to {MAX_REQUESTS} requests, not {count}"
                    ));
                }
                let request = request(&policies, &numbers[..3])?;
                (vec![request; count as usize], 0)
            }
            // One set of arguments for every request.
            3 => {
                let request = request(&policies, &numbers)?;
                (vec![request; keys.len() / parts], parts)
            }
            n if n == 3 * (keys.len() / parts) => (
                numbers
                    .chunks_exact(3)
                    .map(|fields| request(&policies, fields))
                    .collect::<Result<Vec<_>, _>>()?,
                parts,
            ),
            _ => {
                return Err(format!(
                    "ERR limiter: {} packed bytes for {} requests",
                    packed.len(),
                    keys.len() / parts
                ))
            }
        };
        if requests.len() > MAX_REQUESTS {
            return Err(format!(
                "ERR limiter: at most {MAX_REQUESTS} requests per call"
            ));
        }
        Ok(Self {
            policies,
            record,
            tag,
            ttl_floor_ms,
            requests,
            keys,
            step,
        })
    }

    /// Request `r`'s key under part `i`.
    pub fn key(&self, r: usize, i: usize) -> &'a [u8] {
        self.keys[r * self.step + i]
    }

    /// Request `r`'s record key.
    pub fn record_key(&self, r: usize) -> &'a [u8] {
        self.key(r, self.policies.len())
    }
}

/// The little-endian doubles of a packed argument.
fn packed_numbers(packed: &[u8]) -> Result<Vec<f64>, String> {
    if packed.is_empty() || !packed.len().is_multiple_of(8) {
        return Err(format!(
            "ERR limiter: packed arguments of {} bytes, not a multiple of 8",
            packed.len()
        ));
    }
    Ok(packed
        .chunks_exact(8)
        .map(|bytes| {
            let mut field = [0; 8];
            field.copy_from_slice(bytes);
            f64::from_le_bytes(field)
        })
        .collect())
}

/// One request from its mode, cost and time, checked against every part.
fn request(policies: &Policies, fields: &[f64]) -> Result<Request, String> {
    let [mode, cost, time] = fields else {
        return Err("ERR limiter: a request is three numbers".to_owned());
    };
    let (acquire, charge) = match *mode {
        1.0 => (true, false),
        0.0 => (false, false),
        2.0 => (false, true),
        other => return Err(format!("ERR limiter: mode {other} is not 1, 0 or 2")),
    };
    let max_cost = match charge {
        true => MAX_TIME_US,
        false => policies.iter().map(|p| p.max_cost()).min().unwrap_or(0),
    };
    let cost = whole_double(*cost)
        .filter(|cost| (1..=max_cost).contains(cost))
        .ok_or_else(|| {
            format!("ERR limiter: cost {cost} is not a whole number in 1..={max_cost}")
        })?;
    let time_us = match *time {
        -1.0 => None,
        time => Some(whole_double(time).filter(|&t| t <= MAX_TIME_US).ok_or_else(|| {
            format!("ERR limiter: time {time} is neither -1 nor a whole number of µs up to 2^53")
        })?),
    };
    Ok(Request {
        acquire,
        charge,
        cost,
        time_us,
    })
}

/// A policy set as calls use it: parsed, with its record and tag.
#[derive(Debug, Clone)]
struct Set {
    policies: Rc<Policies>,
    record: Rc<[u8]>,
    tag: [u8; 8],
}

thread_local! {
    /// Parsed policy sets by their text. Redis runs a module's commands on
    /// its main thread: one cache.
    static POLICIES: RefCell<HashMap<Vec<u8>, Set>> = RefCell::default();
}

/// The policy set `text` names, parsed once.
fn parse_policies(text: &[u8]) -> Result<Set, String> {
    if let Some(parsed) = POLICIES.with(|cache| cache.borrow().get(text).cloned()) {
        return Ok(parsed);
    }
    let policies: Policies = std::str::from_utf8(text)
        .map_err(|_| "ERR limiter: the policies are not UTF-8".to_owned())?
        .parse()
        .map_err(|e| format!("ERR limiter: policies: {e}"))?;
    let record = encode_policy_record(policies.parts());
    let parsed = Set {
        tag: policy_record_tag(&record),
        record: record.into(),
        policies: Rc::new(policies),
    };
    POLICIES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.len() >= MAX_CACHED_POLICIES {
            cache.clear();
        }
        cache.insert(text.to_vec(), parsed.clone());
    });
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn packed(numbers: &[f64]) -> Vec<u8> {
        numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
    }

    fn parse(args: &[&[u8]]) -> Result<(usize, usize, Vec<Request>), String> {
        Call::parse(args).map(|call| (call.policies.len(), call.step, call.requests))
    }

    #[test]
    fn the_three_layouts_of_the_wire_format_parse() {
        let one = packed(&[1.0, 2.0, -1.0]);
        let hot = packed(&[0.0, 1.0, 5.0, 3.0]);
        let each = packed(&[1.0, 1.0, 7.0, 0.0, 3.0, -1.0]);
        let set = b"token-bucket:10/1s;fixed-window:5/1m".as_slice();
        let (parts, step, requests) =
            parse(&[set, b"0", &one, b"a1", b"a2", b"ap", b"b1", b"b2", b"bp"]).unwrap();
        assert_eq!((parts, step, requests.len()), (2, 3, 2));
        assert_eq!(
            requests[1],
            Request {
                acquire: true,
                charge: false,
                cost: 2,
                time_us: None
            }
        );
        let (_, step, requests) = parse(&[set, b"0", &hot, b"a1", b"a2", b"ap"]).unwrap();
        assert_eq!((step, requests.len()), (0, 3));
        assert_eq!(requests[2].time_us, Some(5));
        assert!(!requests[0].acquire);
        let (_, _, requests) = parse(&[
            set, b"60000", &each, b"a1", b"a2", b"ap", b"b1", b"b2", b"bp",
        ])
        .unwrap();
        assert_eq!(requests[1].cost, 3);
        // A charge (mode 2) of any number of units.
        let charge = packed(&[2.0, 1e6, -1.0]);
        let (_, _, requests) = parse(&[set, b"0", &charge, b"a1", b"a2", b"ap"]).unwrap();
        assert!(requests[0].charge && !requests[0].acquire);
        assert_eq!(requests[0].cost, 1_000_000);
    }

    /// A call across slots: the first request's keys route it and are
    /// no request's; every request's keys follow.
    #[test]
    fn a_call_across_slots_leaves_out_the_keys_that_route_it() {
        let one = packed(&[1.0, 1.0, -1.0]);
        let policy = b"token-bucket:10/1s".as_slice();
        let args: [&[u8]; 9] = [
            policy, b"0", &one, b"{a}", b"{a}p", b"{a}", b"{a}p", b"{b}", b"{b}p",
        ];
        let call = Call::parse_across_slots(&args).unwrap();
        assert_eq!((call.step, call.requests.len()), (2, 2));
        assert_eq!(
            (call.key(1, 0), call.record_key(1)),
            (&b"{b}"[..], &b"{b}p"[..])
        );
        // Declared, the same arguments are three requests.
        assert_eq!(Call::parse(&args).unwrap().requests.len(), 3);
        // The routing keys alone are no call.
        assert!(Call::parse_across_slots(&args[..5]).is_err());
        assert!(Call::parse_across_slots(&args[..6]).is_err());
    }

    #[test]
    fn refused_input_is_an_error() {
        let one = packed(&[1.0, 1.0, -1.0]);
        let policy = b"token-bucket:10/1s".as_slice();
        for args in [
            vec![policy, b"0", &one],
            vec![policy, b"0", &one, b"k"],
            vec![b"no-such-algorithm:1/1s".as_slice(), b"0", &one, b"k", b"p"],
            vec![policy, b"-1", &one, b"k", b"p"],
            vec![policy, b"0", &one[..23], b"k", b"p"],
            vec![policy, b"0", &packed(&[3.0, 1.0, -1.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[2.0, 0.0, -1.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 11.0, -1.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 0.0, -1.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 1.5, -1.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 1.0, -2.0]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 1.0, 1e300]), b"k", b"p"],
            vec![policy, b"0", &packed(&[1.0, 1.0, -1.0, 1e9]), b"k", b"p"],
            vec![
                policy,
                b"0",
                &packed(&[1.0, 1.0, -1.0, 0.0, 1.0]),
                b"k",
                b"p",
                b"l",
                b"q",
            ],
        ] {
            assert!(parse(&args).is_err(), "{args:?}");
        }
    }

    proptest! {
        /// Whatever the bytes, the parser answers: a call or an error,
        /// never a panic (which would take the server down with it).
        #[test]
        fn any_arguments_parse_or_are_refused(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            numbers in proptest::collection::vec(
                prop_oneof![Just(-1.0), Just(0.0), Just(1.0), Just(2.0), any::<f64>()], 0..9),
            keys in 0usize..9,
        ) {
            let packed = packed(&numbers);
            let mut with_policy: Vec<&[u8]> = vec![b"sliding-log:3/1s;token-bucket:2/1s", b"10", &packed];
            with_policy.extend(std::iter::repeat_n(b"k".as_slice(), keys));
            for call in [Call::parse(&with_policy), Call::parse_across_slots(&with_policy)]
                .into_iter()
                .flatten()
            {
                for r in 0..call.requests.len() {
                    for i in 0..call.policies.len() {
                        call.key(r, i);
                    }
                    call.record_key(r);
                }
            }
            let raw: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let _ = Call::parse(&raw);
            let _ = Call::parse_across_slots(&raw);
        }
    }
}
