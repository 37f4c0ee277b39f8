//! One call's decisions, with limiter-core's states, on the keys a
//! [`Store`] holds, answered in limiter-redis's wire format (its
//! `wire.rs`): the reply's Redis `TIME` (0 when no request read it), then
//! per request and part: allowed, remaining, retry_after, reset_after,
//! t_eff (ticks), reset_now when the set has several parts, wait for a
//! leaky bucket; t_eff -1 for a part whose sorted set's key holds another
//! type (the request is then not decided, and nothing of it written).
//!
//! A request whose record (the policies its state was made under,
//! limiter-core's `encode_policy_record`) names another set than the
//! call's takes the state over first (docs/spec.md section 9,
//! limiter-core's `SetState::change_policies`), as the Lua's `take_over`
//! does. The record is read only when the request's first part's state
//! does not end with the call's set's tag (or some part keeps a sorted
//! set): a state that does is the set's own, as its record says; one of
//! another set's tag beside no record (evicted) is none of ours, and each
//! part starts fresh. A charge
//! (section 10) is counted with `KeyState::charge` and answered as a peek
//! of 1.
//!
//! Every part of a request is decided first, and an acquire commits every
//! part only if every part admits (docs/spec.md section 7; the client
//! combines the parts' answers with `limiter_core::backend::all_of`). A
//! policy repeated in a set keeps one state under one key: committed
//! once. A string key is written once, when the call ends, with its last
//! value; a sorted set as each admission commits, as the Lua functions do.

use std::collections::HashMap;

use ahash::RandomState;

use limiter_core::backend::{
    decode_policy_record, effective_tick, AlgorithmState, KeyState, SetState, SlidingLog,
    TickDecision,
};
use limiter_core::{Algorithm, Policy, MAX_TIME_US};

use crate::call::Call;
use crate::log::{expired, keeps_sorted_set, with_edge};
use crate::string_state::{ttl_ms, Expiry, StringKey};

/// The server's keys and clock, as one call reads and writes them.
pub(crate) trait Store {
    /// `MGET keys`: each key's string lent to `read`, with its place in
    /// `keys`, `None` for none or another type.
    fn read_strings(
        &mut self,
        keys: &[&[u8]],
        read: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<(), String>;
    /// `MGET keys`: each key's string, copied.
    fn strings(&mut self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, String> {
        let mut values = Vec::with_capacity(keys.len());
        self.read_strings(keys, &mut |_, value| {
            values.push(value.map(<[u8]>::to_vec));
        })?;
        Ok(values)
    }
    /// The sorted set at `key` as (tick, total) entries, lowest tick
    /// first; `Ok(None)` when the key holds another type.
    fn sorted_log(&mut self, key: &[u8]) -> Result<Option<Vec<(u64, u64)>>, String>;
    /// Redis `TIME` in µs.
    fn time_us(&mut self) -> Result<u64, String>;
    /// Writes a string state.
    fn write_string(&mut self, key: &[u8], value: &[u8], expiry: Expiry) -> Result<(), String>;
    /// Commits an admission to a sorted set's log.
    fn write_sorted_log(&mut self, key: &[u8], write: &LogWrite) -> Result<(), String>;
    /// `DEL key`.
    fn delete(&mut self, key: &[u8]) -> Result<(), String>;
    /// `PEXPIRE key ms GT`: the key lives at least `ms` more.
    fn extend(&mut self, key: &[u8], ms: u64) -> Result<(), String>;
}

/// What an admission changes in a sorted set's log, in the Lua function's
/// steps (`sl_write`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogWrite {
    /// Drop every entry below this tick (the edge's).
    pub(crate) drop_below: Option<u64>,
    /// Remove this member (the newest entry's total, when the admission's
    /// tick is its).
    pub(crate) replace: Option<u64>,
    /// Every entry anew (a rebase of the totals), the new one excepted.
    pub(crate) rebased: Option<Vec<(u64, u64)>>,
    /// The new entry: tick and total.
    pub(crate) add: (u64, u64),
    /// The key's TTL in ms.
    pub(crate) ttl_ms: u64,
}

/// One part's answer to one request.
struct Part {
    ticks: TickDecision,
    reset_now: u64,
    /// The state an admission leaves.
    next: Option<KeyState>,
    /// The tick of the request's time.
    t: u64,
    /// The key held another type: not decided.
    foreign: bool,
}

/// The reply to `call`, its writes made through `store`.
pub(crate) fn decide(call: &Call<'_>, store: &mut impl Store) -> Result<Vec<u8>, String> {
    let parts = call.policies.parts();
    let fields = record_fields(parts);
    let mut reply = Vec::with_capacity(8 + 8 * fields * call.requests.len());
    reply.extend_from_slice(&0f64.to_le_bytes());
    let own: &[u8] = &call.record;
    let mut strings = read_strings(call, store)?;
    let mut records = Records::default();
    let sorted_part = parts.iter().any(keeps_sorted_set);
    let mut server_us = None;
    for (r, request) in call.requests.iter().enumerate() {
        let time_us = match request.time_us {
            Some(time) => time,
            None => match server_us {
                Some(time) => time,
                None => *server_us.insert(store.time_us()?.min(MAX_TIME_US)),
            },
        };
        let record_key = call.record_key(r);
        let writes = request.acquire || request.charge;
        let mut taken = Taken::default();
        let first = (!sorted_part)
            .then(|| strings.get(call.key(r, 0)))
            .flatten();
        if !first.is_some_and(|held| held.ours) {
            // A string of another set's tag beside no record (evicted):
            // none of ours, each part fresh (a record of no version).
            let orphan = first.is_some_and(|held| held.held_len.is_some());
            let from = match read_record(&mut records, store, record_key)?.as_deref() {
                Some(held) if held != own => Some(held.to_vec()),
                Some(_) => None,
                None => orphan.then(Vec::new),
            };
            if let Some(held) = from {
                taken = take_over(call, store, r, time_us, &held, &mut strings)?;
                if writes {
                    let ms = taken.longest_ttl_ms;
                    store.write_string(record_key, own, Expiry::Px(ms))?;
                    records.insert(record_key, Some(own.to_vec()));
                }
            }
        }
        let mut granted_ms = 0;
        if request.charge {
            granted_ms = charge(call, store, &mut strings, r, time_us)?;
        }
        // A charge's answer is a peek of 1 on the state it leaves.
        let cost = if request.charge { 1 } else { request.cost };
        let mut answers = Vec::with_capacity(parts.len());
        for (i, policy) in parts.iter().enumerate() {
            let key = call.key(r, i);
            let part = if let Some((_, state)) = taken.logs.iter().find(|(k, _)| *k == key) {
                Part::decide(state, policy, time_us, cost)
            } else if keeps_sorted_set(policy) {
                match store.sorted_log(key)? {
                    None => Part::foreign(),
                    Some(entries) => {
                        let log = crate::log::checked(policy, entries.into_iter())
                            .ok_or("ERR limiter: a sorted set holds no sliding log")?;
                        let state = KeyState::SlidingLog(SlidingLog::from_parts(0, log));
                        Part::decide(&state, policy, time_us, cost)
                    }
                }
            } else {
                let held = strings.get(key).ok_or("ERR limiter: a key not read")?;
                Part::decide(&held.state, policy, time_us, cost)
            };
            answers.push(part);
        }
        let admitted = answers.iter().all(|a| a.ticks.allowed && !a.foreign);
        if request.acquire && admitted {
            let server_ms = server_us.map(|us| us / 1000);
            for (i, policy) in parts.iter().enumerate() {
                if parts[..i].contains(policy) {
                    continue;
                }
                let granted = commit(
                    call,
                    store,
                    &mut strings,
                    r,
                    i,
                    policy,
                    &answers[i],
                    server_ms,
                )?;
                granted_ms = granted_ms.max(granted.unwrap_or(0));
            }
        }
        // The record lasts as long as every state it names (the Lua's
        // note_record).
        if writes && granted_ms > 0 {
            if read_record(&mut records, store, record_key)?.as_deref() == Some(own) {
                store.extend(record_key, granted_ms)?;
            } else {
                store.write_string(record_key, own, Expiry::Px(granted_ms))?;
                records.insert(record_key, Some(own.to_vec()));
            }
        }
        for (key, held) in taken.peeked.into_iter().rev() {
            strings.insert(key, held);
        }
        for (policy, answer) in parts.iter().zip(&answers) {
            answer.push_fields(&mut reply, policy, parts.len());
        }
    }
    for (key, held) in &strings {
        if held.put {
            let (value, expiry) = held.write(&call.tag);
            store.write_string(key, &value, expiry)?;
        }
    }
    reply[..8].copy_from_slice(&(server_us.unwrap_or(0) as f64).to_le_bytes());
    Ok(reply)
}

/// Values by key name. `ahash`: SipHash, the standard one, cost a call
/// more than its decisions; its keys are seeded at random all the same.
type ByKey<'a, V> = HashMap<&'a [u8], V, RandomState>;

/// Each record key's value (`None`: none).
type Records<'a> = ByKey<'a, Option<Vec<u8>>>;

/// The record at `key` (`None`: none), read on first use.
fn read_record<'a, 'm>(
    records: &'m mut Records<'a>,
    store: &mut impl Store,
    key: &'a [u8],
) -> Result<&'m Option<Vec<u8>>, String> {
    if !records.contains_key(key) {
        let held = store.strings(&[key])?.pop().flatten();
        records.insert(key, held);
    }
    Ok(&records[key])
}

/// Every string key of the call (records aside), read with one `MGET`.
fn read_strings<'a>(
    call: &Call<'a>,
    store: &mut impl Store,
) -> Result<ByKey<'a, StringKey>, String> {
    let parts = call.policies.parts();
    let mut keys: Vec<(&'a [u8], &Policy)> = Vec::new();
    let requests = if call.step == 0 {
        1
    } else {
        call.requests.len()
    };
    for r in 0..requests {
        for (i, policy) in parts.iter().enumerate() {
            if !keeps_sorted_set(policy) {
                keys.push((call.key(r, i), policy));
            }
        }
    }
    let names: Vec<&[u8]> = keys.iter().map(|(key, _)| *key).collect();
    let mut strings = ByKey::with_capacity_and_hasher(keys.len(), RandomState::new());
    store.read_strings(&names, &mut |at, value| {
        let (key, policy) = keys[at];
        strings
            .entry(key)
            .or_insert_with(|| StringKey::read(policy, value, &call.tag));
    })?;
    Ok(strings)
}

/// What a request's take-over leaves besides the string states it puts.
#[derive(Default)]
struct Taken<'a> {
    /// The sorted-set logs a peek took over (it writes none), by key:
    /// decided from here. One per part at most, so a list.
    logs: Vec<(&'a [u8], KeyState)>,
    /// The string keys a peek took over, as they were before, to put back.
    peeked: Vec<(&'a [u8], StringKey)>,
    /// The longest TTL an acquire's take-over gave a state, in ms.
    longest_ttl_ms: u64,
}

/// Request `r`'s state, made under the set `held` records, taken over by
/// the call's set at `time_us` (docs/spec.md section 9, limiter-core's
/// `SetState::change_policies`), as the Lua's `take_over` does: an acquire
/// writes each part's state with a TTL of its reset (its string at the
/// call's end) and deletes the keys of parts the set does not have; a
/// peek writes nothing. A record of another version: every part fresh.
fn take_over<'a>(
    call: &Call<'a>,
    store: &mut impl Store,
    r: usize,
    time_us: u64,
    held: &[u8],
    strings: &mut ByKey<'a, StringKey>,
) -> Result<Taken<'a>, String> {
    let to = &call.policies;
    let record_key = call.record_key(r);
    let base = &record_key[..record_key.len().saturating_sub(1)];
    let key_at = |position: usize| [base, position.to_string().as_bytes()].concat();
    let from = decode_policy_record(held);
    let taken = match &from {
        Some(from) => {
            let mut states = Vec::with_capacity(from.len());
            for (policy, position) in from.iter().zip(positions(from)) {
                states.push(read_state(store, policy, &key_at(position))?);
            }
            SetState::from_parts(states.into()).change_policies(from, to, time_us)
        }
        None => SetState::fresh(to),
    };
    let writes = call.requests[r].acquire || call.requests[r].charge;
    let mut result = Taken::default();
    let to_positions = positions(to);
    for (i, (policy, state)) in to.iter().zip(taken.parts()).enumerate() {
        if to_positions[i] != i {
            continue;
        }
        let key = call.key(r, i);
        if !writes {
            if keeps_sorted_set(policy) {
                result.logs.push((key, state.clone()));
            } else if let Some(before) = strings.get(key).cloned() {
                result.peeked.push((key, before.clone()));
                strings.insert(key, StringKey::taken(policy, state.clone(), &before, None));
            }
            continue;
        }
        let ms = put_state(call, store, strings, key, policy, state.clone(), time_us)?;
        result.longest_ttl_ms = result.longest_ttl_ms.max(ms);
    }
    if writes {
        if let Some(from) = &from {
            let kept: Vec<usize> = to_positions.clone();
            for position in positions(from) {
                if !kept.contains(&position) {
                    store.delete(&key_at(position))?;
                }
            }
        }
    }
    Ok(result)
}

/// Writes `state` at `key` (part `policy`'s) with a TTL of its reset, as
/// the Lua's `put_state` does: a string with no deadline, at the call's
/// end; a sorted set anew, now. Returns the TTL in ms.
fn put_state<'a>(
    call: &Call<'a>,
    store: &mut impl Store,
    strings: &mut ByKey<'a, StringKey>,
    key: &'a [u8],
    policy: &Policy,
    state: KeyState,
    time_us: u64,
) -> Result<u64, String> {
    let t = time_us / policy.tick_us();
    let t_eff = effective_tick(policy, state.stamp(), time_us);
    let reset = reset_ticks(&state, policy, t_eff);
    let ms = ttl_ms(policy, t, t_eff, reset, call.ttl_floor_ms);
    if keeps_sorted_set(policy) {
        store.delete(key)?;
        if let KeyState::SlidingLog(log) = state {
            let mut entries: Vec<(u64, u64)> = log.entries().collect();
            if let Some(add) = entries.pop() {
                let write = LogWrite {
                    drop_below: None,
                    replace: None,
                    rebased: Some(entries),
                    add,
                    ttl_ms: ms,
                };
                store.write_sorted_log(key, &write)?;
            }
        }
    } else {
        let before = strings.get(key).ok_or("ERR limiter: a key not read")?;
        let taken = StringKey::taken(policy, state, before, Some(ms));
        strings.insert(key, taken);
    }
    Ok(ms)
}

/// Counts request `r`'s charge on every part of its state (docs/spec.md
/// section 10, limiter-core's `KeyState::charge`), each written as
/// [`put_state`] writes; a repeated policy once. Returns the longest TTL
/// given, in ms.
fn charge<'a>(
    call: &Call<'a>,
    store: &mut impl Store,
    strings: &mut ByKey<'a, StringKey>,
    r: usize,
    time_us: u64,
) -> Result<u64, String> {
    let parts = call.policies.parts();
    let mut longest = 0;
    for (i, policy) in parts.iter().enumerate() {
        if parts[..i].contains(policy) {
            continue;
        }
        let key = call.key(r, i);
        let mut state = if keeps_sorted_set(policy) {
            read_state(store, policy, key)?
        } else {
            let held = strings.get(key).ok_or("ERR limiter: a key not read")?;
            held.state.clone()
        };
        state
            .charge(policy, time_us, call.requests[r].cost)
            .map_err(|e| format!("ERR limiter: {e}"))?;
        longest = longest.max(put_state(
            call, store, strings, key, policy, state, time_us,
        )?);
    }
    Ok(longest)
}

/// Each part's position among a set's keys: its own, or its first
/// occurrence's for a repeated policy (limiter-redis's keys.rs).
fn positions(policies: &limiter_core::Policies) -> Vec<usize> {
    let parts = policies.parts();
    (0..parts.len())
        .map(|i| parts[..i].iter().position(|p| *p == parts[i]).unwrap_or(i))
        .collect()
}

/// The state `policy` keeps at `key`, read now (fresh when none of ours).
fn read_state(store: &mut impl Store, policy: &Policy, key: &[u8]) -> Result<KeyState, String> {
    if keeps_sorted_set(policy) {
        let entries = store.sorted_log(key)?;
        let log = entries.and_then(|entries| crate::log::checked(policy, entries.into_iter()));
        return Ok(match log {
            Some(entries) => KeyState::SlidingLog(SlidingLog::from_parts(0, entries)),
            None => KeyState::fresh(policy),
        });
    }
    let value = store.strings(&[key])?.pop().flatten();
    Ok(crate::string_state::state_of(policy, value.as_deref()))
}

/// Ticks until `state` is back to its initial state at `t_eff`.
fn reset_ticks(state: &KeyState, policy: &Policy, t_eff: u64) -> u64 {
    match state {
        KeyState::FixedWindow(s) => s.reset_as_it_stands(policy, t_eff),
        KeyState::SlidingLog(s) => s.reset_as_it_stands(policy, t_eff),
        KeyState::SlidingCounter(s) => s.reset_as_it_stands(policy, t_eff),
        KeyState::TokenBucket(s) => s.reset_as_it_stands(policy, t_eff),
        KeyState::LeakyBucket(s) => s.reset_as_it_stands(policy, t_eff),
    }
}

/// Commits part `i`'s admission of request `r`; the TTL it granted its
/// key, if it set one.
#[allow(clippy::too_many_arguments)]
fn commit(
    call: &Call<'_>,
    store: &mut impl Store,
    strings: &mut ByKey<'_, StringKey>,
    r: usize,
    i: usize,
    policy: &Policy,
    answer: &Part,
    server_ms: Option<u64>,
) -> Result<Option<u64>, String> {
    let (Some(next), ticks) = (answer.next.clone(), &answer.ticks) else {
        return Ok(None);
    };
    let key = call.key(r, i);
    let ms = ttl_ms(
        policy,
        answer.t,
        ticks.t_eff,
        ticks.reset_after,
        call.ttl_floor_ms,
    );
    if keeps_sorted_set(policy) {
        let before = match store.sorted_log(key)? {
            Some(entries) => SlidingLog::from_parts(0, entries),
            None => return Ok(None),
        };
        let KeyState::SlidingLog(after) = next else {
            return Ok(None);
        };
        let write = log_write(
            policy,
            &before,
            &after,
            ticks.t_eff,
            call.requests[r].cost,
            ms,
        );
        return store.write_sorted_log(key, &write).map(|()| Some(ms));
    }
    let held = strings.get_mut(key).ok_or("ERR limiter: a key not read")?;
    let next = match (&held.state, next) {
        (KeyState::SlidingLog(before), KeyState::SlidingLog(after)) => {
            let expired = expired(policy, before, ticks.t_eff);
            KeyState::SlidingLog(with_edge(before, expired, &after))
        }
        (_, next) => next,
    };
    Ok(held.save(next, ms, server_ms))
}

/// The sorted set's changes an admission of `cost` at `t_eff` makes, from
/// the log `before` it to `after` (limiter-core's, the edge's total alone).
fn log_write(
    policy: &Policy,
    before: &SlidingLog,
    after: &SlidingLog,
    t_eff: u64,
    cost: u64,
    ttl_ms: u64,
) -> LogWrite {
    let expired = expired(policy, before, t_eff);
    let kept = with_edge(before, expired, after);
    let newest = before.entries().last();
    let drop_below = expired
        .checked_sub(1)
        .and_then(|edge| before.entries().nth(edge))
        .map(|(ts, _)| ts);
    let replace = newest
        .filter(|&(ts, _)| ts == t_eff)
        .map(|(_, total)| total);
    let newest_total = newest.map_or(0, |(_, total)| total);
    let mut entries: Vec<(u64, u64)> = kept.entries().collect();
    let add = entries.pop().unwrap_or((t_eff, cost));
    let rebased = (newest_total > MAX_TIME_US - cost).then_some(entries);
    LogWrite {
        drop_below,
        replace,
        rebased,
        add,
        ttl_ms,
    }
}

impl Part {
    /// A part on a key of another type.
    fn foreign() -> Self {
        Self {
            ticks: TickDecision::default(),
            reset_now: 0,
            next: None,
            t: 0,
            foreign: true,
        }
    }

    /// Decides a request of `cost` at `time_us` on `state`, without writing.
    fn decide(state: &KeyState, policy: &Policy, time_us: u64, cost: u64) -> Self {
        fn part<S: AlgorithmState>(
            state: &S,
            policy: &Policy,
            time_us: u64,
            cost: u64,
            wrap: fn(S) -> KeyState,
        ) -> Part {
            let t_eff = effective_tick(policy, state.stamp(), time_us);
            let (mut ticks, update) = state.evaluate(policy, t_eff, cost);
            ticks.t_eff = t_eff;
            let next = update.map(|update| {
                let mut next = state.clone();
                next.apply(update);
                wrap(next)
            });
            Part {
                reset_now: state.reset_as_it_stands(policy, t_eff),
                ticks,
                next,
                t: time_us / policy.tick_us(),
                foreign: false,
            }
        }
        match state {
            KeyState::FixedWindow(s) => part(s, policy, time_us, cost, KeyState::FixedWindow),
            KeyState::SlidingLog(s) => part(s, policy, time_us, cost, KeyState::SlidingLog),
            KeyState::SlidingCounter(s) => part(s, policy, time_us, cost, KeyState::SlidingCounter),
            KeyState::TokenBucket(s) => part(s, policy, time_us, cost, KeyState::TokenBucket),
            KeyState::LeakyBucket(s) => part(s, policy, time_us, cost, KeyState::LeakyBucket),
        }
    }

    /// Appends this part's fields to the reply.
    fn push_fields(&self, reply: &mut Vec<u8>, policy: &Policy, parts: usize) {
        let t = &self.ticks;
        let t_eff = if self.foreign { -1.0 } else { t.t_eff as f64 };
        let always = [
            f64::from(u8::from(t.allowed && !self.foreign)),
            t.remaining as f64,
            t.retry_after as f64,
            t.reset_after as f64,
            t_eff,
        ];
        let reset_now = (parts > 1).then_some(self.reset_now as f64);
        let wait = (policy.algorithm() == Algorithm::LeakyBucket).then_some(t.wait as f64);
        for field in always.into_iter().chain(reset_now).chain(wait) {
            reply.extend_from_slice(&field.to_le_bytes());
        }
    }
}

/// Numbers in one request's record: five per part, reset_now when there
/// are several parts, wait for a leaky bucket.
fn record_fields(parts: &[Policy]) -> usize {
    parts
        .iter()
        .map(|p| {
            5 + usize::from(parts.len() > 1) + usize::from(p.algorithm() == Algorithm::LeakyBucket)
        })
        .sum()
}
