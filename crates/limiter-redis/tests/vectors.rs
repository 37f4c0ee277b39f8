//! Every shared conformance vector, replayed through Redis with the trace's
//! times (caller clock), prints exactly the expected decisions.

mod common;

use std::fs;
use std::path::PathBuf;

use limiter_core::trace::{decision_row, TraceReader, DECISION_HEADER};
use limiter_core::{parse_duration, Limiter, ManualClock, Policy, Rate};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors")
}

async fn replay(policy: &Policy, trace: &str) -> String {
    let clock = ManualClock::new(0);
    let limiter = common::builder(policy.clone())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let mut out = format!("{DECISION_HEADER}\n");
    for request in TraceReader::new(trace.as_bytes()) {
        let request = request.expect("vector traces are well formed");
        clock.set(request.time_us);
        let decision = match limiter.acquire(&request.key, request.cost).await {
            Ok(decision) => Some(decision),
            Err(limiter_core::Error::Backend(e)) => panic!("backend failed: {e}"),
            Err(_) => None,
        };
        out.push_str(&decision_row(&request, decision.as_ref()));
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn redis_reproduces_every_shared_vector_byte_for_byte() {
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
        let actual = replay(&policy, &trace).await;
        if actual != expected {
            let first = actual
                .lines()
                .zip(expected.lines())
                .enumerate()
                .find(|(_, (a, e))| a != e)
                .map(|(i, (a, e))| format!("line {}:\ngot      {a}\nexpected {e}", i + 1));
            panic!(
                "case {} differs on Redis:\n{}",
                f[0],
                first.unwrap_or_default()
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 32);
}
