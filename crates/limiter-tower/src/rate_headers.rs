//! The values of the rate-limit headers: [`PolicyHeaders`], fixed by the
//! policies, and [`RateHeaders`], one response's, written into the inner
//! service's response or the layer's own.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue};
use limiter_core::{Algorithm, Decision, DecisionSource, Policies, Policy};

use crate::headers::{
    HeaderStyle, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_DEGRADED, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use crate::seconds::{ceil_secs, retry_after_secs};

/// A part's name in the IETF headers: its policy string, as an
/// sf-string (policy strings hold no `"` or `\`).
fn policy_name(policies: &Policies, index: usize) -> String {
    policies
        .get(index)
        .map_or_else(|| "policy".to_owned(), ToString::to_string)
}

/// The headers fixed by the limiter's policies, computed once.
#[derive(Debug, Clone)]
pub(crate) struct PolicyHeaders {
    /// `RateLimit-Policy`: `"<policy>";q=<max cost>;w=<seconds>` per part (see [`quota_window`]).
    policy: HeaderValue,
    /// Each part's quoted name.
    names: Vec<String>,
    /// Each part's time to refill one unit, for a bucket (`None` for the
    /// other algorithms): how far its next unit is (see [`next_unit_after`]).
    unit_refills: Vec<Option<Duration>>,
}

impl PolicyHeaders {
    pub(crate) fn new(policies: &Policies) -> Self {
        let names: Vec<String> = (0..policies.len())
            .map(|i| format!("\"{}\"", policy_name(policies, i)))
            .collect();
        let items: Vec<String> = policies
            .iter()
            .zip(&names)
            .map(|(policy, name)| {
                format!(
                    "{name};q={};w={}",
                    policy.max_cost(),
                    ceil_secs(quota_window(policy)).max(1)
                )
            })
            .collect();
        let policy = HeaderValue::from_str(&items.join(", "))
            .unwrap_or_else(|_| HeaderValue::from_static("\"policy\""));
        let unit_refills = policies
            .iter()
            .map(|policy| {
                matches!(
                    policy.algorithm(),
                    Algorithm::TokenBucket | Algorithm::LeakyBucket
                )
                .then(|| policy.window() / u32::try_from(policy.limit()).unwrap_or(u32::MAX))
            })
            .collect();
        Self {
            policy,
            names,
            unit_refills,
        }
    }
}

/// How long until at least one more unit than `part.remaining` is
/// available to an admitted request's key, under the part whose decision
/// `part` is: the draft's `t` for that part.
///
/// A bucket refills one unit every `unit_refill`, and `reset_after` is its
/// time to full, so its next unit is exact: `reset_after` less the time of
/// the units after it. A fixed window frees every unit at its end
/// (`reset_after`, exact). A sliding log or counter frees its units as its
/// oldest admissions leave the window, which a decision does not say:
/// `reset_after` (when the last one leaves) is their upper bound. A part
/// at full has no more unit to come: zero.
fn next_unit_after(part: &Decision, unit_refill: Option<Duration>) -> Duration {
    let missing = part.limit.saturating_sub(part.remaining);
    if missing == 0 {
        return Duration::ZERO;
    }
    match unit_refill {
        Some(refill) => {
            let later_units = u32::try_from(missing - 1).unwrap_or(u32::MAX);
            part.reset_after
                .saturating_sub(refill.saturating_mul(later_units))
        }
        None => part.reset_after,
    }
}

/// The `w` of a policy's `q` units in `RateLimit-Policy`: its window, or
/// for a bucket (whose `q`, its capacity or queue, is the most `r` can
/// show) the time it takes to go from empty to full, `q × window / limit`,
/// so that `r <= q` holds for every algorithm, and an admitted response's
/// `t` is at most `w` for all but a sliding counter: its previous window
/// weighs on the next one, so its units come back up to `2w` away
/// (docs/spec.md section 3).
fn quota_window(policy: &Policy) -> Duration {
    let micros = u128::from(policy.max_cost()) * policy.window().as_micros();
    let micros = micros.div_ceil(u128::from(policy.limit()));
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// The rate-limit headers of one response, kept compact until the inner
/// service answers: the numbers' text in one buffer (one allocation for
/// every value), the policy header shared, the marker static. A
/// `HeaderMap` here would cost allocations and hashing of its own before
/// the response's map is filled anyway.
#[derive(Debug, Default)]
pub(crate) struct RateHeaders {
    /// The values of `X-RateLimit-Limit`, `-Remaining`, `-Reset` and
    /// `RateLimit`, back to back.
    text: Bytes,
    /// The length of each of those values in `text`; 0 for one not sent.
    lens: [u16; 4],
    /// `RateLimit-Policy`.
    policy: Option<HeaderValue>,
    /// `X-RateLimit-Degraded`.
    degraded: Option<&'static str>,
    /// The `remaining` the values report, when they report one.
    remaining: Option<u64>,
}

impl RateHeaders {
    /// Sets every header in `headers`, replacing a value of the same name
    /// (the map grown once for all of them): on the layer's own answer.
    /// Inline, so that with `HeaderStyle::None` a response costs one
    /// check, not a call.
    #[inline]
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        if !self.is_empty() {
            self.insert_all(headers);
        }
    }

    /// Whether there is nothing to send.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.policy.is_none() && self.degraded.is_none()
    }

    /// [`insert_into`](Self::insert_into) the inner service's response,
    /// unless an inner layer's headers already there report as few units
    /// remaining or fewer (or it refused the request): the answer that
    /// binds stands, so stacked layers never show a 429 saying units are
    /// left. Where these replace an inner layer's, every rate-limit header
    /// of the inner one goes, its degraded marker too (a marker describes
    /// the numbers beside it), but for its `RateLimit-Policy` items:
    /// every policy that applied to the request stays listed there,
    /// whichever binds. Called only when [`is_empty`](Self::is_empty) is
    /// false: the caller checks first, so that nothing is moved for a
    /// response without headers.
    pub(crate) fn replace_inner(self, headers: &mut HeaderMap) {
        // One pass over the few names of a response: a lookup by a custom
        // name hashes it, four of them cost more than the headers' writing.
        let inner_wrote = headers.keys().any(|name| {
            name == RETRY_AFTER
                || name == X_RATELIMIT_REMAINING
                || name == RATELIMIT
                || name == X_RATELIMIT_DEGRADED
        });
        if let Some(theirs) = inner_wrote.then(|| inner_remaining(headers)).flatten() {
            if theirs <= self.remaining.unwrap_or(u64::MAX) {
                if let Some(ours) = &self.policy {
                    list_policies(headers, ours);
                }
                return;
            }
            let inner_policy = headers.remove(RATELIMIT_POLICY);
            for name in [
                X_RATELIMIT_LIMIT,
                X_RATELIMIT_REMAINING,
                X_RATELIMIT_RESET,
                RATELIMIT,
                X_RATELIMIT_DEGRADED,
            ] {
                headers.remove(name);
            }
            self.insert_all(headers);
            if let Some(inner_policy) = inner_policy {
                list_policies(headers, &inner_policy);
            }
            return;
        }
        self.insert_all(headers);
    }

    fn insert_all(self, headers: &mut HeaderMap) {
        let sent = self.lens.iter().filter(|len| **len > 0).count();
        headers.reserve(
            sent + usize::from(self.policy.is_some()) + usize::from(self.degraded.is_some()),
        );
        let mut start = 0;
        let names = [
            X_RATELIMIT_LIMIT,
            X_RATELIMIT_REMAINING,
            X_RATELIMIT_RESET,
            RATELIMIT,
        ];
        for (name, len) in names.into_iter().zip(self.lens) {
            let end = start + usize::from(len);
            if name == RATELIMIT {
                if let Some(policy) = &self.policy {
                    headers.insert(RATELIMIT_POLICY, policy.clone());
                }
            }
            if len > 0 {
                if let Ok(value) = HeaderValue::from_maybe_shared(self.text.slice(start..end)) {
                    headers.insert(name, value);
                }
            }
            start = end;
        }
        if let Some(marker) = self.degraded {
            headers.insert(X_RATELIMIT_DEGRADED, HeaderValue::from_static(marker));
        }
    }
}

/// Adds the items of `more` (a `RateLimit-Policy` value) that the
/// response's `RateLimit-Policy` does not list yet, after its own; a
/// response without one gets `more` only beside a `RateLimit` field (a
/// binding layer that sends no IETF headers gets none).
fn list_policies(headers: &mut HeaderMap, more: &HeaderValue) {
    let Some(listed) = headers.get(RATELIMIT_POLICY) else {
        if headers.contains_key(RATELIMIT) {
            headers.insert(RATELIMIT_POLICY, more.clone());
        }
        return;
    };
    let (Ok(listed_text), Ok(more_text)) = (listed.to_str(), more.to_str()) else {
        return;
    };
    // Items are separated by ", "; a policy string holds no space.
    let mut items: Vec<&str> = listed_text.split(", ").collect();
    for item in more_text.split(", ") {
        if !items.contains(&item) {
            items.push(item);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&items.join(", ")) {
        headers.insert(RATELIMIT_POLICY, value);
    }
}

/// What an inner layer's headers on a response report remaining: its
/// `X-RateLimit-Remaining`, or the `r` of its `RateLimit`; 0 for a
/// refusal that reports no count (`Retry-After` alone); `u64::MAX` for a
/// degraded admission (its marker alone: nothing counted, so any count
/// binds more); `None` when no layer wrote any.
fn inner_remaining(headers: &HeaderMap) -> Option<u64> {
    if let Some(remaining) = headers.get(X_RATELIMIT_REMAINING) {
        return Some(decimal(remaining.as_bytes()).unwrap_or(0));
    }
    if let Some(ietf) = headers.get(RATELIMIT) {
        let r = ietf
            .as_bytes()
            .split(|&byte| byte == b';')
            .find_map(|param| param.trim_ascii().strip_prefix(b"r="));
        return Some(r.and_then(decimal).unwrap_or(0));
    }
    if headers.contains_key(RETRY_AFTER) {
        return Some(0);
    }
    headers
        .contains_key(X_RATELIMIT_DEGRADED)
        .then_some(u64::MAX)
}

/// `bytes` as a decimal number, if they are one.
fn decimal(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// Appends `value` in decimal (what `HeaderValue::from(u64)` writes, with
/// the same `itoa`, two digits per division, without an allocation of
/// its own).
fn put_decimal(text: &mut BytesMut, value: u64) {
    text.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The length of what was written to `text` past `before` (a value past
/// 64 KiB, which no policy name reaches, is not sent; only the last value,
/// `RateLimit`, could be that long).
fn value_len(text: &BytesMut, before: usize) -> u16 {
    u16::try_from(text.len() - before).unwrap_or(0)
}

/// The counted headers of a decision by the backend or from a lease (or a
/// fallback: legacy headers only, its numbers being the fallback's
/// policy's).
pub(crate) fn rate_headers(
    headers: &mut RateHeaders,
    set: &Decision,
    style: HeaderStyle,
    policy_headers: &PolicyHeaders,
) {
    let decision = set;
    let ietf = style.ietf() && !decision.source.is_degraded();
    if !style.legacy() && !ietf {
        // Nothing to write: no buffer either.
        return;
    }
    let reset = ceil_secs(set.bound().reset_after);
    let bound_by = usize::from(decision.bound_by);
    let name = policy_headers
        .names
        .get(bound_by)
        .map_or("\"policy\"", String::as_str);
    let mut text = BytesMut::with_capacity(64 + if ietf { name.len() } else { 0 });
    headers.remaining = Some(decision.remaining);
    if style.legacy() {
        for (slot, value) in [decision.limit, decision.remaining, reset]
            .into_iter()
            .enumerate()
        {
            let before = text.len();
            put_decimal(&mut text, value);
            headers.lens[slot] = value_len(&text, before);
        }
    }
    if ietf {
        headers.policy = Some(policy_headers.policy.clone());
        let before = text.len();
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b";r=");
        put_decimal(&mut text, decision.remaining);
        text.extend_from_slice(b";t=");
        // The draft's `t`: until the next unit (a refusal's `Retry-After`,
        // which it never points past), not until back to full.
        let next_unit = if decision.allowed {
            let refill = policy_headers.unit_refills.get(bound_by).copied().flatten();
            ceil_secs(next_unit_after(set.bound(), refill))
        } else {
            retry_after_secs(decision.retry_after)
        };
        put_decimal(&mut text, next_unit);
        headers.lens[3] = value_len(&text, before);
    }
    headers.text = text.freeze();
}

pub(crate) fn degraded(headers: &mut RateHeaders, source: DecisionSource) {
    if source.is_degraded() {
        headers.degraded = Some(source.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_header_lists_every_part() {
        // A bucket's q is the most its r can show (capacity, queue) and w
        // its time from empty to full: r <= q for every part.
        let set: Policies =
            "sliding-log:5/1s;token-bucket:100/1m,capacity=10;fixed-window:3/250ms;\
                             leaky-bucket:2/1s,queue=3"
                .parse()
                .unwrap();
        let headers = PolicyHeaders::new(&set);
        assert_eq!(
            headers.policy.to_str().unwrap(),
            "\"sliding-log:5/1s\";q=5;w=1, \"token-bucket:100/1m,capacity=10\";q=10;w=6, \
             \"fixed-window:3/250ms\";q=3;w=1, \"leaky-bucket:2/1s,queue=3\";q=3;w=2"
        );
    }
}
