//! Every shared conformance vector, replayed through the core algorithms
//! (no backend, no binary), must print exactly the expected decisions
//! (docs/spec.md section 6a). Here rather than in limiter-core because the
//! trace format is the command line's.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use limiter_core::backend::{KeyState, SetState};
use limiter_core::trace::{decision_row, TraceReader, DECISION_HEADER};
use limiter_core::{parse_duration, Policies, Policy, Rate};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors")
}

fn replay(policy: &Policy, trace: &str) -> String {
    let mut keys: HashMap<String, KeyState> = HashMap::new();
    let mut out = format!("{DECISION_HEADER}\n");
    for request in TraceReader::new(trace.as_bytes()) {
        let request = request.expect("vector traces are well formed");
        let state = keys
            .entry(request.key.clone())
            .or_insert_with(|| KeyState::fresh(policy));
        let decision = state.acquire(policy, request.time_us, request.cost).ok();
        out.push_str(&decision_row(&request, decision.as_ref()));
        out.push('\n');
    }
    out
}

#[test]
fn core_reproduces_every_shared_vector_byte_for_byte() {
    let dir = vectors_dir();
    let cases = fs::read_to_string(dir.join("cases.csv")).unwrap();
    let mut checked = 0;
    for line in cases.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let optional = |s: &str| (!s.is_empty()).then(|| s.parse::<u64>().unwrap());
        let policy = Policy::from_options(
            f[2].parse().unwrap(),
            Rate::new(f[3].parse().unwrap(), parse_duration(f[4]).unwrap()),
            optional(f[5]),
            optional(f[6]),
        )
        .unwrap();
        let trace = fs::read_to_string(dir.join(f[1])).unwrap();
        let expected = fs::read_to_string(dir.join(f[7])).unwrap();
        let actual = replay(&policy, &trace);
        if actual != expected {
            let first = actual
                .lines()
                .zip(expected.lines())
                .find(|(a, e)| a != e)
                .map(|(a, e)| format!("got      {a}\nexpected {e}"));
            panic!("case {} differs:\n{}", f[0], first.unwrap_or_default());
        }
        checked += 1;
    }
    assert_eq!(checked, 32);
}

/// Every policy-change vector (docs/spec.md sections 6a and 9) through the
/// core's rule: each key's state is taken over by the policies in force at
/// its first request after a change, and stored whatever the decision.
#[test]
fn core_reproduces_every_policy_change_vector_byte_for_byte() {
    let cases = limiter_test::cases::policy_change_cases();
    for case in &cases {
        let mut keys: HashMap<String, (SetState, Policies)> = HashMap::new();
        let mut out = format!("{DECISION_HEADER}\n");
        for (row, request) in TraceReader::new(case.trace.as_bytes()).enumerate() {
            let request = request.expect("vector traces are well formed");
            let policies = case.policies_at(row);
            let (state, made_under) = keys
                .remove(&request.key)
                .unwrap_or_else(|| (SetState::fresh(policies), policies.clone()));
            let mut taken_over = if made_under == *policies {
                state.clone()
            } else {
                state.change_policies(&made_under, policies, request.time_us)
            };
            let decision = taken_over
                .acquire(policies, request.time_us, request.cost)
                .ok();
            // An error is no decision, and takes nothing over.
            let kept = match decision {
                Some(_) => (taken_over, policies.clone()),
                None => (state, made_under),
            };
            keys.insert(request.key.clone(), kept);
            out.push_str(&decision_row(&request, decision.as_ref()));
            out.push('\n');
        }
        if out != case.expected {
            let first = out
                .lines()
                .zip(case.expected.lines())
                .find(|(a, e)| a != e)
                .map(|(a, e)| format!("got      {a}\nexpected {e}"));
            panic!("case {} differs:\n{}", case.name, first.unwrap_or_default());
        }
    }
    assert_eq!(cases.len(), 30);
}
