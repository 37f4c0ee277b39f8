//! The policy-change vectors (docs/spec.md sections 6a and 9): a trace
//! replayed while the limiter's policies change before the rows its case
//! names. Backend-independent: a backend gives a way to build its limiter
//! and one to change its policies.

use std::collections::BTreeSet;
use std::future::Future;

use limiter_core::trace::{decision_row, TraceReader, DECISION_HEADER};
use limiter_core::{Limiter, ManualClock, Policies};

use super::outcome;
use super::tiers::csv_fields;
use super::vectors::{assert_every_file_is_a_case, first_difference, read, vectors_dir};

/// One case of `testdata/vectors/policy-change/cases.csv`.
#[derive(Debug, Clone)]
pub struct PolicyChangeCase {
    /// The case's name.
    pub name: String,
    /// The trace, as `limiter replay` reads it.
    pub trace: String,
    /// From which data row (0-based) each policy set is in force, in
    /// order, the first from row 0.
    pub schedule: Vec<(usize, Policies)>,
    /// The decisions CSV the case must print.
    pub expected: String,
}

impl PolicyChangeCase {
    /// The policies in force at data row `row`.
    pub fn policies_at(&self, row: usize) -> &Policies {
        let (_, policies) = self
            .schedule
            .iter()
            .rfind(|(from, _)| *from <= row)
            .unwrap_or(&self.schedule[0]);
        policies
    }
}

/// Every case of `testdata/vectors/policy-change/cases.csv` (columns
/// `case,trace,from_row,policies,expected`, one row per policy set a case
/// puts in force), checking that every vector file there is a case's.
pub fn policy_change_cases() -> Vec<PolicyChangeCase> {
    let dir = vectors_dir().join("policy-change");
    let mut cases: Vec<PolicyChangeCase> = Vec::new();
    let mut named = BTreeSet::new();
    for line in read(dir.join("cases.csv")).lines().skip(1) {
        let fields = csv_fields(line);
        assert_eq!(fields.len(), 5, "policy-change/cases.csv row {line:?}");
        let (name, trace, expected) = (&fields[0], &fields[1], &fields[4]);
        let from: usize = fields[2].parse().expect("a row number");
        let policies: Policies = fields[3]
            .parse()
            .unwrap_or_else(|e| panic!("case {name}: {e}"));
        named.extend([trace.clone(), expected.clone()]);
        match cases.last_mut() {
            Some(case) if case.name == *name => {
                assert!(from > case.schedule.last().map_or(0, |(row, _)| *row));
                case.schedule.push((from, policies));
            }
            _ => {
                assert_eq!(from, 0, "case {name} starts at row 0");
                cases.push(PolicyChangeCase {
                    name: name.clone(),
                    trace: read(dir.join(trace)),
                    schedule: vec![(from, policies)],
                    expected: read(dir.join(expected)),
                });
            }
        }
    }
    assert_every_file_is_a_case(&dir, &named);
    cases
}

/// Replays every policy-change case through a limiter `build` makes for
/// the case's first policies on a clock (a fresh one per case, sharing no
/// key with another's), calling `change` before each row from which the
/// case puts other policies in force, and asserts that each prints
/// exactly its expected file.
pub async fn policy_change_vectors_replay_byte_for_byte<L: Limiter, F: Future<Output = L>>(
    build: impl Fn(Policies, ManualClock) -> F,
    change: impl Fn(&L, Policies),
) {
    let cases = policy_change_cases();
    let mut failures = Vec::new();
    for case in &cases {
        let clock = ManualClock::new(0);
        let limiter = build(case.schedule[0].1.clone(), clock.clone()).await;
        let mut out = format!("{DECISION_HEADER}\n");
        for (row, request) in TraceReader::new(case.trace.as_bytes()).enumerate() {
            let request = request.expect("vector traces are well formed");
            if let Some((_, policies)) = case.schedule.iter().find(|(from, _)| *from == row) {
                if row > 0 {
                    change(&limiter, policies.clone());
                }
            }
            clock.set(request.time_us);
            let result = limiter.acquire(request.key.as_bytes(), request.cost).await;
            out.push_str(&decision_row(&request, outcome(result).ok().as_ref()));
            out.push('\n');
        }
        if out != case.expected {
            let first = first_difference(&out, &case.expected);
            failures.push(format!("case {} differs:\n{first}", case.name));
        }
    }
    assert!(
        cases.len() >= 30,
        "only {} policy-change cases",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} policy-change cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
