//! The string states, in the bytes the Lua functions read and write
//! (limiter-redis's `scripts/prelude.lua`, `save`, and
//! `scripts/packed_log.lua`), and the TTL rule they follow, so that a key
//! moves between the two engines with no reset.
//!
//! Two or three little-endian doubles (`<dd` for a token bucket, a leaky
//! bucket and a fixed window, `<ddd` for a sliding counter), followed,
//! when written with the server's clock, by the server time in ms the
//! key's TTL runs out at, a little before it does (its deadline). A
//! sliding log of a small limit is that deadline (`<d`, 0 when unknown),
//! then one 14-byte record per tick with admissions (`<I7I7`: the tick and
//! the running total), the first being the edge's when one was dropped
//! before it. Every value ends with the [`Tag`] of the set that made it.
//!
//! A value of another length, or with numbers the functions never write
//! (not whole, beyond 2^53, beyond the policy's bounds, records out of
//! order), is none of ours: read as none and written over, as the Lua
//! functions do with a value of another length.

use limiter_core::backend::{
    whole_double, FixedWindow, KeyState, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use limiter_core::{Algorithm, Policy, MAX_TIME_US};

use crate::log::keeps_packed_log;

/// The last 8 bytes of every string state: limiter-core's
/// `policy_record_tag` of the record of the set that made it. A state
/// ending with the tag of the call's own set is that set's, with no read
/// of the record beside it.
pub(crate) type Tag = [u8; 8];

/// Bytes of a [`Tag`].
const TAG: usize = 8;

/// One string key as a call holds it: its state, and what its next write
/// is (the value written once, when the call ends).
#[derive(Debug, Clone)]
pub(crate) struct StringKey {
    /// The length of the string Redis holds (`None`: none, or another type).
    pub(crate) held_len: Option<usize>,
    /// The state as the call leaves it.
    pub(crate) state: KeyState,
    /// The deadline of the value as the call leaves it (`None`: written
    /// without one; a packed log always has one, 0 when unknown).
    pub(crate) deadline: Option<f64>,
    /// The TTL in ms the write sets (`None`: the key's TTL kept).
    pub(crate) grant: Option<u64>,
    /// Whether the call admitted on it (and so writes it).
    pub(crate) put: bool,
    /// Whether the state, as the call leaves it, is the call's set's: it
    /// ended with the set's tag when read, or the call put it.
    pub(crate) ours: bool,
}

/// How the write of a key sets its TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// `SET key value PX ms`.
    Px(u64),
    /// `SETRANGE key 0 value`: as long as the value held, TTL kept.
    InPlace,
    /// `SET key value KEEPTTL`.
    Kept,
}

impl StringKey {
    /// The key holding `held` (`None`: no string) under `policy`, of the
    /// set whose tag is `own`.
    pub(crate) fn read(policy: &Policy, held: Option<&[u8]>, own: &Tag) -> Self {
        let (state, deadline) = held
            .and_then(|bytes| decode(policy, bytes))
            .unwrap_or_else(|| {
                (
                    KeyState::fresh(policy),
                    keeps_packed_log(policy).then_some(0.0),
                )
            });
        // By its last bytes alone, as the Lua functions tell it.
        let ours = held.is_some_and(|bytes| bytes.ends_with(own));
        Self {
            held_len: held.map(<[u8]>::len),
            state,
            deadline,
            grant: None,
            put: false,
            ours,
        }
    }

    /// The key after a take-over leaves `state` in it (docs/spec.md
    /// section 9; `before`, the key as the call held it): written with no
    /// deadline, as the Lua's `take_over` writes it, and, for an acquire,
    /// with a TTL of `ms` (`None`: a peek, which writes nothing).
    pub(crate) fn taken(policy: &Policy, state: KeyState, before: &Self, ms: Option<u64>) -> Self {
        Self {
            held_len: before.held_len,
            state,
            deadline: keeps_packed_log(policy).then_some(0.0),
            grant: ms,
            put: ms.is_some(),
            ours: true,
        }
    }

    /// Notes an admission that leaves `state`, whose key must live at
    /// least `ms` more: the TTL rule of the prelude's `save` (and
    /// `pl_write`). With the server's clock (`server_ms`), a write whose TTL
    /// the deadline covers keeps it; one it does not sets `ms` plus a margin
    /// of max(`ms`, 1 s), with a new deadline 5 ms short of it. With a
    /// caller's clock every write sets `ms`, and the value carries no
    /// deadline (a packed log, 0).
    /// Returns the TTL it grants, if it sets one.
    pub(crate) fn save(&mut self, state: KeyState, ms: u64, server_ms: Option<u64>) -> Option<u64> {
        self.state = state;
        self.put = true;
        self.ours = true;
        let packed_log = matches!(self.state, KeyState::SlidingLog(_));
        let Some(now) = server_ms else {
            self.grant = Some(ms);
            self.deadline = packed_log.then_some(0.0);
            return Some(ms);
        };
        // Whole numbers below 2^53: exact, as in the Lua's doubles.
        let covered = self.deadline.is_some_and(|d| d >= (now + ms) as f64);
        if covered {
            return None;
        }
        let grant = ms + ms.max(1000);
        self.grant = Some(grant);
        self.deadline = Some((now + grant - 5) as f64);
        Some(grant)
    }

    /// The value to write, ending with `tag` (the call's set's), and how
    /// its TTL is set.
    pub(crate) fn write(&self, tag: &Tag) -> (Vec<u8>, Expiry) {
        let value = encode(&self.state, self.deadline, tag);
        let expiry = match self.grant {
            Some(ms) => Expiry::Px(ms),
            None if self.held_len == Some(value.len()) => Expiry::InPlace,
            None => Expiry::Kept,
        };
        (value, expiry)
    }
}

/// The state `held` (`None`: no string) keeps under `policy`, whichever
/// set made it: fresh when it is none of ours.
pub(crate) fn state_of(policy: &Policy, held: Option<&[u8]>) -> KeyState {
    held.and_then(|bytes| decode(policy, bytes))
        .map_or_else(|| KeyState::fresh(policy), |(state, _)| state)
}

/// The state and deadline `bytes` hold under `policy`, if they are ours,
/// whichever set's tag ends them.
fn decode(policy: &Policy, bytes: &[u8]) -> Option<(KeyState, Option<f64>)> {
    let bytes = &bytes[..bytes.len().checked_sub(TAG)?];
    if keeps_packed_log(policy) {
        return decode_log(policy, bytes);
    }
    let fields = match policy.algorithm() {
        Algorithm::SlidingCounter => 3,
        _ => 2,
    };
    let count = bytes.len() / 8;
    if !bytes.len().is_multiple_of(8) || !(fields..=fields + 1).contains(&count) {
        return None;
    }
    let double = |i: usize| {
        let mut field = [0; 8];
        field.copy_from_slice(&bytes[8 * i..8 * i + 8]);
        f64::from_le_bytes(field)
    };
    let deadline = (count > fields).then(|| double(fields));
    let mut whole_fields = [0u64; 3];
    for (i, field) in whole_fields.iter_mut().take(fields).enumerate() {
        *field = whole_double(double(i))?;
    }
    let numbers = &whole_fields[..fields];
    let full = policy.max_cost() * policy.window_ticks();
    let state = match (policy.algorithm(), numbers) {
        (Algorithm::TokenBucket, &[s, last]) if s <= full => {
            KeyState::TokenBucket(TokenBucket::from_parts(s, last))
        }
        (Algorithm::LeakyBucket, &[s, last]) if s <= full => {
            KeyState::LeakyBucket(LeakyBucket::from_parts(s, last))
        }
        (Algorithm::FixedWindow, &[start, count]) if count <= policy.limit() => {
            KeyState::FixedWindow(FixedWindow::from_parts(start, count))
        }
        (Algorithm::SlidingCounter, &[start, previous, current])
            if previous <= policy.limit() && current <= policy.limit() =>
        {
            KeyState::SlidingCounter(SlidingCounter::from_parts(start, previous, current))
        }
        _ => return None,
    };
    Some((state, deadline))
}

/// Bytes of a packed log's record: its tick and its running total, 7 bytes each.
const RECORD: usize = 14;

/// A packed log: its deadline and its records, if they are ours.
fn decode_log(policy: &Policy, bytes: &[u8]) -> Option<(KeyState, Option<f64>)> {
    if bytes.len() < 8 || !(bytes.len() - 8).is_multiple_of(RECORD) {
        return None;
    }
    let (head, records) = bytes.split_at(8);
    let deadline = f64::from_le_bytes(head.try_into().ok()?);
    let records = records
        .chunks_exact(RECORD)
        .map(|record| (seven(&record[..7]), seven(&record[7..])));
    let entries = crate::log::checked(policy, records)?;
    Some((
        KeyState::SlidingLog(SlidingLog::from_parts(0, entries)),
        Some(deadline),
    ))
}

/// A 7-byte little-endian unsigned integer.
fn seven(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word[..7].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

/// The bytes of `state`, with `deadline` after its fields when it has one,
/// then `tag`.
fn encode(state: &KeyState, deadline: Option<f64>, tag: &Tag) -> Vec<u8> {
    let (fields, count) = match state {
        KeyState::TokenBucket(s) => ([s.scaled_tokens(), s.last(), 0], 2),
        KeyState::LeakyBucket(s) => ([s.scaled_queued(), s.last(), 0], 2),
        KeyState::FixedWindow(s) => ([s.window_start(), s.count(), 0], 2),
        KeyState::SlidingCounter(s) => ([s.window_start(), s.previous(), s.current()], 3),
        KeyState::SlidingLog(log) => return encode_log(log, deadline.unwrap_or(0.0), tag),
    };
    let mut bytes = Vec::with_capacity(8 * (count + 1) + TAG);
    for field in &fields[..count] {
        // Whole numbers below 2^53: exact as doubles.
        bytes.extend_from_slice(&(*field as f64).to_le_bytes());
    }
    if let Some(deadline) = deadline {
        bytes.extend_from_slice(&deadline.to_le_bytes());
    }
    bytes.extend_from_slice(tag);
    bytes
}

/// A packed log's bytes: its deadline, then its records, then `tag`.
fn encode_log(log: &SlidingLog, deadline: f64, tag: &Tag) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + RECORD * log.len() + TAG);
    bytes.extend_from_slice(&deadline.to_le_bytes());
    for (ts, total) in log.entries() {
        bytes.extend_from_slice(&ts.to_le_bytes()[..7]);
        bytes.extend_from_slice(&total.to_le_bytes()[..7]);
    }
    bytes.extend_from_slice(tag);
    bytes
}

/// A key's TTL in ms after an admission at tick `t` (effective `t_eff`)
/// whose reset is `reset_after` ticks: the prelude's `ttl_ms`, in the
/// same double arithmetic, at least the floor and at most 2^53 µs in ms.
pub(crate) fn ttl_ms(policy: &Policy, t: u64, t_eff: u64, reset_after: u64, floor_ms: u64) -> u64 {
    let ticks = (t_eff as f64 - t as f64) + reset_after as f64;
    let ms = (ticks * policy.tick_us() as f64 / 1000.0).ceil() + 1.0;
    let ms = ms.max(floor_ms as f64).min((MAX_TIME_US / 1000) as f64);
    ms as u64
}

#[cfg(test)]
mod tests {
    use limiter_core::Rate;

    use super::*;

    #[test]
    fn a_state_reads_back_as_written() {
        for algorithm in Algorithm::ALL {
            let policy = Policy::new(algorithm, Rate::per_second(5)).unwrap();
            let mut state = KeyState::fresh(&policy);
            state.acquire(&policy, 1_234_567, 2).unwrap();
            for deadline in [None, Some(1_700_000_000_123.0)] {
                let deadline = deadline.or(keeps_packed_log(&policy).then_some(0.0));
                let bytes = encode(&state, deadline, b"set tag!");
                assert_eq!(
                    decode(&policy, &bytes),
                    Some((state.clone(), deadline)),
                    "{policy}"
                );
            }
        }
    }

    /// A state is the call's set's when it ends with the set's tag, or
    /// once the call puts it; whatever the tag, its numbers read the same.
    #[test]
    fn a_state_is_the_sets_by_its_tag_or_once_put() {
        let policy = Policy::token_bucket(Rate::per_second(5)).unwrap();
        let mut state = KeyState::fresh(&policy);
        state.acquire(&policy, 1_234_567, 2).unwrap();
        let own = *b"own tag!";
        let mine = encode(&state, None, &own);
        let theirs = encode(&state, None, b"another!");
        let read = StringKey::read(&policy, Some(&mine), &own);
        assert!(read.ours);
        let mut foreign = StringKey::read(&policy, Some(&theirs), &own);
        assert!(!foreign.ours);
        assert_eq!(foreign.state, read.state);
        assert!(!StringKey::read(&policy, None, &own).ours);
        foreign.save(state, 10, None);
        assert!(foreign.ours);
        assert_eq!(foreign.write(&own).0, mine);
    }

    #[test]
    fn a_value_the_functions_never_write_is_none_of_ours() {
        let bucket = Policy::token_bucket(Rate::per_second(5)).unwrap();
        let log = Policy::sliding_log(Rate::per_second(5)).unwrap();
        let doubles = |n: &[f64]| n.iter().flat_map(|d| d.to_le_bytes()).collect::<Vec<u8>>();
        for (policy, bytes) in [
            (&bucket, b"hello".to_vec()),
            (&bucket, doubles(&[1.5, 2.0, 0.0])),
            (&bucket, doubles(&[6e6, 2.0, 0.0])),
            (&bucket, doubles(&[1.0, 2.0, 3.0, 4.0, 0.0])),
            (&bucket, doubles(&[1.0, 2.0])),
            (&log, vec![0; 15]),
            (&log, vec![0; 16 + 13]),
        ] {
            assert_eq!(decode(policy, &bytes), None, "{policy} {bytes:?}");
        }
    }
}
