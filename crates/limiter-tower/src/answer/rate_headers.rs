//! The values of the rate-limit headers: [`PolicyHeaders`], fixed by the
//! policies, and [`RateHeaders`], one response's, written into the inner
//! service's response or the layer's own.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use limiter_core::{Algorithm, Decision, DecisionSource, Policies, Policy};

use crate::answer::headers::{
    HeaderStyle, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_DEGRADED, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use crate::answer::own_answer::OwnAnswer;
use crate::answer::seconds::{ceil_secs, retry_after_secs};
use crate::answer::static_values::{fixed, small_number};

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
    /// Each part's headers as a response gets them, the fixed values
    /// written and the others to be filled in ([`Template`]).
    templates: Vec<Template>,
}

/// A part's headers in the order they are sent, per set of them: a
/// response's headers are a clone with its numbers filled in, which
/// costs no hashing of the header names.
#[derive(Debug, Clone)]
struct Template {
    /// The part's max cost, `X-RateLimit-Limit`'s value in the templates.
    limit: u64,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    legacy: HeaderMap,
    /// `RateLimit-Policy`, `RateLimit`.
    ietf: HeaderMap,
    /// Both, in that order.
    both: HeaderMap,
}

impl Template {
    fn new(limit: u64, policy: &HeaderValue) -> Self {
        let number = fixed(&limit.to_string()).unwrap_or_else(|| HeaderValue::from(limit));
        let unset = HeaderValue::from_static("0");
        let map = |entries: &[(HeaderName, &HeaderValue)]| {
            let mut map = HeaderMap::with_capacity(entries.len());
            for (name, value) in entries {
                map.insert(name.clone(), (*value).clone());
            }
            map
        };
        let legacy = [
            (X_RATELIMIT_LIMIT, &number),
            (X_RATELIMIT_REMAINING, &unset),
            (X_RATELIMIT_RESET, &unset),
        ];
        let ietf = [(RATELIMIT_POLICY, policy), (RATELIMIT, &unset)];
        let both: Vec<_> = legacy.iter().chain(&ietf).cloned().collect();
        Self {
            limit,
            legacy: map(&legacy),
            ietf: map(&ietf),
            both: map(&both),
        }
    }
}

impl PolicyHeaders {
    /// The headers of `policies` as `plan`'s, if any: each part named
    /// `"<plan>/<policy>"`, so a client reads which plan it is on.
    pub(crate) fn named(policies: &Policies, plan: Option<&str>) -> Self {
        let names: Vec<String> = (0..policies.len())
            .map(|i| match plan {
                Some(plan) => format!("\"{plan}/{}\"", policy_name(policies, i)),
                None => format!("\"{}\"", policy_name(policies, i)),
            })
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
        let policy =
            fixed(&items.join(", ")).unwrap_or_else(|| HeaderValue::from_static("\"policy\""));
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
        let templates = policies
            .iter()
            .map(|part| Template::new(part.max_cost(), &policy))
            .collect();
        Self {
            policy,
            names,
            unit_refills,
            templates,
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

/// The rate-limit headers of one response, written when the decision is
/// made, kept until the inner service answers: a map of their own (a
/// template's clone, see [`PolicyHeaders`]), which becomes the response's
/// map when the inner service sets no header, and is inserted into it
/// otherwise.
#[derive(Debug, Default)]
pub(crate) struct RateHeaders {
    /// The headers, in the order they are sent; `None` for none.
    headers: Option<HeaderMap>,
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
        if let Some(ours) = self.headers {
            insert_all(ours, headers);
        }
    }

    /// Whether there is nothing to send.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.headers.as_ref().is_none_or(HeaderMap::is_empty)
    }

    /// [`insert_into`](Self::insert_into) the inner service's response,
    /// unless an inner layer's headers already there report as few units
    /// remaining or fewer (or it refused the request: a `Retry-After` on
    /// a 429 or on a limiter-tower layer's own answer, [`OwnAnswer`]):
    /// the answer that binds stands, so stacked layers never show a 429
    /// with another layer's numbers beside its `Retry-After`. Another `Retry-After` (a 503 for
    /// maintenance, a 202's polling hint) is the service's, and these
    /// headers go beside it. Where these replace an inner layer's, every rate-limit header
    /// of the inner one goes, its degraded marker too (a marker describes
    /// the numbers beside it), but for its `RateLimit-Policy` items:
    /// every policy that applied to the request stays listed there,
    /// whichever binds. A response without headers takes these as its
    /// map, as they are. Called only when [`is_empty`](Self::is_empty) is
    /// false: the caller checks first, so that nothing is moved for a
    /// response without headers.
    pub(crate) fn replace_inner<B>(self, response: &mut Response<B>) {
        let Some(ours) = self.headers else { return };
        if response.headers().is_empty() {
            *response.headers_mut() = ours;
            return;
        }
        let refused = response.status() == StatusCode::TOO_MANY_REQUESTS
            || response.extensions().get::<OwnAnswer>().is_some();
        let headers = response.headers_mut();
        // One pass over the few names of a response: a lookup by a custom
        // name hashes it, four of them cost more than the headers' writing.
        let inner_wrote = headers.keys().any(|name| {
            name == RETRY_AFTER
                || name == X_RATELIMIT_REMAINING
                || name == RATELIMIT
                || name == X_RATELIMIT_DEGRADED
        });
        if let Some(theirs) = inner_wrote
            .then(|| inner_remaining(headers, refused))
            .flatten()
        {
            if theirs <= self.remaining.unwrap_or(u64::MAX) {
                if let Some(policy) = ours.get(RATELIMIT_POLICY) {
                    list_policies(headers, policy);
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
            insert_all(ours, headers);
            if let Some(inner_policy) = inner_policy {
                list_policies(headers, &inner_policy);
            }
            return;
        }
        insert_all(ours, headers);
    }
}

/// Inserts every header of `ours` into `headers`, in order, replacing a
/// value of the same name (the map grown once for all of them).
fn insert_all(ours: HeaderMap, headers: &mut HeaderMap) {
    headers.reserve(ours.len());
    let mut last = None;
    for (name, value) in ours {
        // A name repeats as `None` (none of ours does).
        let Some(name) = name.or_else(|| last.clone()) else {
            continue;
        };
        last = Some(name.clone());
        headers.insert(name, value);
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

/// What an inner layer's headers on a response report remaining: 0 for
/// a refusal (`Retry-After` on a response `refused`), which binds
/// whatever units it reports left (fewer than its request costs); else
/// its `X-RateLimit-Remaining`, or the `r` of its `RateLimit`; `u64::MAX`
/// for a degraded admission (its marker alone: nothing counted, so any
/// count binds more); `None` when no layer wrote any.
fn inner_remaining(headers: &HeaderMap, refused: bool) -> Option<u64> {
    if refused && headers.contains_key(RETRY_AFTER) {
        return Some(0);
    }
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
    headers
        .contains_key(X_RATELIMIT_DEGRADED)
        .then_some(u64::MAX)
}

/// `bytes` as a decimal number, if they are one.
fn decimal(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// The numbers' text of one response, written in place, then one
/// allocation shared by every value ([`Bytes::from_owner`]); on the heap
/// for a policy name too long for it.
enum Text {
    Inline { bytes: [u8; TEXT], len: usize },
    Heap(Vec<u8>),
}

/// The bytes of an inline [`Text`]: a policy name of up to 42 bytes and
/// four numbers of up to 20 digits, with their separators.
const TEXT: usize = 128;

/// Two decimal digits of each number below 100.
const PAIRS: [[u8; 2]; 100] = {
    let mut pairs = [[0; 2]; 100];
    let mut n = 0;
    while n < 100 {
        pairs[n] = [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
        n += 1;
    }
    pairs
};

/// Writes `value` in decimal into `out`, exactly its digits long (what
/// `itoa` writes, two digits per division, in place).
#[inline]
fn write_decimal(out: &mut [u8], mut value: u64) {
    let mut at = out.len();
    while value >= 100 {
        at -= 2;
        out[at..at + 2].copy_from_slice(&PAIRS[(value % 100) as usize]);
        value /= 100;
    }
    if value >= 10 {
        out[..2].copy_from_slice(&PAIRS[value as usize]);
    } else {
        out[0] = b'0' + value as u8;
    }
}

/// The number of decimal digits of `value`.
#[inline]
fn digits(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

impl Text {
    /// Room for `name` and four numbers.
    fn for_name(name: &str) -> Self {
        if name.len() + 4 * 20 + 6 <= TEXT {
            Self::Inline {
                bytes: [0; TEXT],
                len: 0,
            }
        } else {
            Self::Heap(Vec::with_capacity(name.len() + 4 * 20 + 6))
        }
    }

    fn put(&mut self, more: &[u8]) {
        match self {
            Self::Inline { bytes, len } => {
                bytes[*len..*len + more.len()].copy_from_slice(more);
                *len += more.len();
            }
            Self::Heap(heap) => heap.extend_from_slice(more),
        }
    }

    /// Appends `value` in decimal, answering where.
    fn put_decimal(&mut self, value: u64) -> std::ops::Range<usize> {
        let count = digits(value);
        match self {
            Self::Inline { bytes, len } => {
                let start = *len;
                write_decimal(&mut bytes[start..start + count], value);
                *len = start + count;
                start..*len
            }
            Self::Heap(heap) => {
                let start = heap.len();
                heap.resize(start + count, 0);
                write_decimal(&mut heap[start..], value);
                start..heap.len()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Inline { len, .. } => *len,
            Self::Heap(heap) => heap.len(),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            // The values are slices of the text: its tail is never read.
            Self::Inline { bytes, .. } => Bytes::from_owner(bytes),
            Self::Heap(heap) => Bytes::from(heap),
        }
    }
}

/// `text` as a value, or `"0"` for text that is not a header value
/// (never: digits, and a policy name checked when it was built).
fn whole(text: Bytes) -> HeaderValue {
    HeaderValue::from_maybe_shared(text).unwrap_or(HeaderValue::from_static("0"))
}

/// The value of `text[range]`, or `"0"` for text that is not a header
/// value (never: digits, and a policy name checked when it was built).
fn value(text: &Bytes, range: std::ops::Range<usize>) -> HeaderValue {
    HeaderValue::from_maybe_shared(text.slice(range)).unwrap_or(HeaderValue::from_static("0"))
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
    let legacy = style.legacy();
    let ietf = style.ietf() && !decision.source.is_degraded();
    if !legacy && !ietf {
        // Nothing to write: no map either.
        return;
    }
    let reset = ceil_secs(set.bound().reset_after);
    let bound_by = usize::from(decision.bound_by);
    let name = policy_headers
        .names
        .get(bound_by)
        .map_or("\"policy\"", String::as_str);
    headers.remaining = Some(decision.remaining);
    let next_unit = || {
        // The draft's `t`: until the next unit (a refusal's `Retry-After`,
        // which it never points past), not until back to full.
        if decision.allowed {
            let refill = policy_headers.unit_refills.get(bound_by).copied().flatten();
            ceil_secs(next_unit_after(set.bound(), refill))
        } else {
            retry_after_secs(decision.retry_after)
        }
    };
    // The text: `RateLimit`'s value (its `r` is `X-RateLimit-Remaining`'s
    // too), then `X-RateLimit-Reset`'s and `X-RateLimit-Limit`'s.
    let mut text = Text::for_name(name);
    let (ratelimit, remaining) = if ietf {
        text.put(name.as_bytes());
        text.put(b";r=");
        let remaining = text.put_decimal(decision.remaining);
        text.put(b";t=");
        text.put_decimal(next_unit());
        (0..text.len(), remaining)
    } else {
        (0..0, text.put_decimal(decision.remaining))
    };
    // `X-RateLimit-Reset` below 100 s (nearly always) is a static value.
    let small_reset = if legacy { small_number(reset) } else { None };
    let reset_at = (legacy && small_reset.is_none()).then(|| text.put_decimal(reset));
    let template = policy_headers.templates.get(bound_by);
    // The template's limit is the part's max cost, which a decision
    // reports: written only when it does not.
    let limit_at = (legacy && template.map(|template| template.limit) != Some(decision.limit))
        .then(|| text.put_decimal(decision.limit));
    let mut text = text.into_bytes();
    // Every value of the text but its first a slice of it (a reference
    // counted); the first, the text itself, cut to its length.
    let limit = limit_at.map(|at| value(&text, at));
    let reset = small_reset.or_else(|| reset_at.map(|at| value(&text, at)));
    let (remaining, ratelimit) = if ietf {
        let remaining = legacy.then(|| value(&text, remaining));
        text.truncate(ratelimit.end);
        (remaining, Some(whole(text)))
    } else {
        text.truncate(remaining.end);
        (Some(whole(text)), None)
    };
    headers.headers = Some(fill(
        template,
        (legacy, ietf),
        &policy_headers.policy,
        [limit, remaining, reset, ratelimit],
    ));
}

/// The headers of `(legacy, ietf)` with `values` (`X-RateLimit-Limit`,
/// `-Remaining`, `-Reset`, `RateLimit`): `template`'s clone, its numbers
/// filled in (its limit kept where `values` has none).
fn fill(
    template: Option<&Template>,
    (legacy, ietf): (bool, bool),
    policy: &HeaderValue,
    [limit, remaining, reset, ratelimit]: [Option<HeaderValue>; 4],
) -> HeaderMap {
    let Some(template) = template else {
        // A part the policies do not have (no limiter reports one).
        let owned = Template::new(0, policy);
        return fill(
            Some(&owned),
            (legacy, ietf),
            policy,
            [limit, remaining, reset, ratelimit],
        );
    };
    let mut map = match (legacy, ietf) {
        (true, true) => template.both.clone(),
        (true, false) => template.legacy.clone(),
        _ => template.ietf.clone(),
    };
    let mut values = map.values_mut();
    let set = |slot: Option<&mut HeaderValue>, value: Option<HeaderValue>| {
        if let (Some(slot), Some(value)) = (slot, value) {
            *slot = value;
        }
    };
    if legacy {
        set(values.next(), limit);
        set(values.next(), remaining);
        set(values.next(), reset);
    }
    if ietf {
        // `RateLimit-Policy`, then `RateLimit`.
        set(values.nth(1), ratelimit);
    }
    map
}

pub(crate) fn degraded(headers: &mut RateHeaders, source: DecisionSource) {
    if source.is_degraded() {
        headers
            .headers
            .get_or_insert_with(|| HeaderMap::with_capacity(1))
            .insert(
                X_RATELIMIT_DEGRADED,
                HeaderValue::from_static(source.name()),
            );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_itoa_writes_them() {
        for value in
            (0..1_000).chain([9_999, 10_000, 99_999, 1_000_000_000, u64::MAX - 1, u64::MAX])
        {
            let mut out = vec![0; digits(value)];
            write_decimal(&mut out, value);
            assert_eq!(out, itoa::Buffer::new().format(value).as_bytes());
        }
        let mut text = Text::for_name(&"n".repeat(200));
        text.put(b"r=");
        let at = text.put_decimal(42);
        assert_eq!(&text.into_bytes()[at], b"42");
    }

    #[test]
    fn policy_header_lists_every_part() {
        // A bucket's q is the most its r can show (capacity, queue) and w
        // its time from empty to full: r <= q for every part.
        let set: Policies =
            "sliding-log:5/1s;token-bucket:100/1m,capacity=10;fixed-window:3/250ms;\
                             leaky-bucket:2/1s,queue=3"
                .parse()
                .unwrap();
        let headers = PolicyHeaders::named(&set, None);
        assert_eq!(
            headers.policy.to_str().unwrap(),
            "\"sliding-log:5/1s\";q=5;w=1, \"token-bucket:100/1m,capacity=10\";q=10;w=6, \
             \"fixed-window:3/250ms\";q=3;w=1, \"leaky-bucket:2/1s,queue=3\";q=3;w=2"
        );
    }
}
