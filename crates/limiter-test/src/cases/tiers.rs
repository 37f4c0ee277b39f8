//! Tiered limits (docs/spec.md section 7): one key under every part of a
//! policy set, on every backend ([`Harness::set_limiter`]).

use std::sync::Arc;

use limiter_core::{Error, Limiter, ManualClock, Policies};

use super::vectors::{
    assert_every_file_is_a_case, first_difference, read, replay_into, vectors_dir,
};
use super::{concurrency::race, T0};
use crate::Harness;

/// A fresh limiter for `policies` on a clock at `T0`.
async fn set_subject<H: Harness>(
    harness: &H,
    policies: &Policies,
) -> (Arc<dyn Limiter>, ManualClock) {
    let clock = ManualClock::new(T0);
    let limiter = harness.set_limiter(policies.clone(), clock.clone()).await;
    assert_eq!(
        limiter.policies(),
        policies,
        "the harness must build a limiter for the policies it is given"
    );
    (limiter, clock)
}

/// Splits one RFC 4180 CSV record (quoted fields may hold commas; `""` is
/// a quote).
pub(crate) fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Every case of `testdata/vectors/all-of/cases.csv` (columns
/// `case,trace,policies,expected`, the policy strings joined by `;`),
/// replayed through a limiter of the case's set, prints exactly its
/// `expected` file (docs/spec.md section 7).
pub async fn all_of_vectors_replay_byte_for_byte<H: Harness>(harness: &H) {
    let dir = vectors_dir().join("all-of");
    let cases = read(dir.join("cases.csv"));
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut named = std::collections::BTreeSet::new();
    for line in cases.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let fields = csv_fields(line);
        assert_eq!(fields.len(), 4, "all-of/cases.csv row {line:?}");
        let (case, trace, expected) = (&fields[0], &fields[1], &fields[3]);
        named.extend([trace.clone(), expected.clone()]);
        let policies: Policies = fields[2]
            .parse()
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        let (limiter, clock) = set_subject(harness, &policies).await;
        let actual = replay_into(&*limiter, &clock, &read(dir.join(trace))).await;
        let expected = read(dir.join(expected));
        if actual != expected {
            let first = first_difference(&actual, &expected);
            failures.push(format!("case {case} ({policies}) differs:\n{first}"));
        }
        checked += 1;
    }
    assert!(
        checked >= 14,
        "only {checked} all-of cases found in {}",
        dir.display()
    );
    assert_every_file_is_a_case(&dir, &named);
    assert!(
        failures.is_empty(),
        "{} of {checked} all-of cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// 8 tasks x 2,000 one-unit acquires on one key at one frozen instant:
/// under `token-bucket:10/1s,capacity=300` and `sliding-log:1000/1h`
/// exactly 300 are admitted (the bucket binds), under `sliding-log:1000/1h`
/// and `fixed-window:5000/1h` exactly 1,000 (the log binds). The
/// conjunction is atomic: no part admits a request another part denied.
pub async fn concurrent_acquires_under_a_policy_set_admit_exactly_the_tightest<H: Harness>(
    harness: &H,
) {
    for (text, expected) in [
        ("token-bucket:10/1s,capacity=300;sliding-log:1000/1h", 300),
        ("sliding-log:1000/1h;fixed-window:5000/1h", 1_000),
    ] {
        let policies: Policies = text.parse().expect("valid policies");
        let (limiter, _clock) = set_subject(harness, &policies).await;
        let admitted = race(&limiter, |_, _| "hot".to_owned()).await;
        let total: usize = admitted.iter().map(Vec::len).sum();
        assert_eq!(
            total, expected,
            "{policies}: admitted on one key by racing tasks"
        );
        let after = limiter.peek(b"hot", 1).await.expect("peek");
        assert!(!after.allowed, "{policies}: {after:?}");
        // Every part counted exactly the admitted requests.
        let minute_or_hour = &after.parts()[1];
        let counted = policies[1].max_cost() - minute_or_hour.remaining;
        assert_eq!(
            counted, expected as u64,
            "{policies}: the second part's count"
        );
    }
}

/// A cost above any part's max cost is an error, not a denial, and writes
/// nothing (docs/spec.md rule 2.2 and section 7); the set's max cost is the
/// smallest part's.
pub async fn a_cost_above_any_parts_maximum_is_an_error<H: Harness>(harness: &H) {
    let policies: Policies = "sliding-log:5/1s;token-bucket:1/1s,capacity=100"
        .parse()
        .expect("valid policies");
    let (limiter, clock) = set_subject(harness, &policies).await;
    assert_eq!(policies.max_cost(), 5);
    match limiter.acquire(b"k", 6).await {
        Err(Error::CostExceedsCapacity {
            cost: 6,
            max_cost: 5,
        }) => {}
        other => panic!("{policies}: cost 6 gave {other:?}"),
    }
    clock.set(T0 + 1);
    let decision = limiter.acquire(b"k", 5).await.expect("cost 5 fits");
    assert!(decision.allowed && decision.remaining == 0, "{decision:?}");
    let parts = limiter.peek(b"k", 1).await.expect("peek");
    assert_eq!(
        parts.parts()[1].remaining,
        95,
        "the bucket counted the 5 units once"
    );
}
