//! The shared conformance vectors (docs/spec.md section 6a), replayed through the
//! backend: every decisions file must come out byte for byte.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use limiter_core::trace::{decision_row, TraceReader, DECISION_HEADER};
use limiter_core::{parse_duration, Limiter, ManualClock, Policy, Rate};

use super::{outcome, Subject};
use crate::Harness;

/// `testdata/vectors` at the workspace root.
pub(crate) fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors")
}

pub(crate) fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Asserts that the files under `dir`'s `traces` and `expected` are
/// exactly those the cases name (`named`, paths relative to `dir`): a
/// vector file no case names would never be checked.
pub(crate) fn assert_every_file_is_a_case(dir: &Path, named: &BTreeSet<String>) {
    let mut present = BTreeSet::new();
    for sub in ["traces", "expected"] {
        let entries = fs::read_dir(dir.join(sub))
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.join(sub).display()));
        for entry in entries {
            let name = entry.unwrap().file_name();
            present.insert(format!("{sub}/{}", name.to_string_lossy()));
        }
    }
    let unnamed: Vec<_> = present.difference(named).collect();
    assert!(
        unnamed.is_empty(),
        "vector files in {} no case names: {unnamed:?}",
        dir.display()
    );
}

/// One row of `cases.csv`: `case,trace,algorithm,limit,window,capacity,queue,expected`.
fn parse_case(line: &str) -> (String, Policy, String, String) {
    let fields: Vec<&str> = line.split(',').collect();
    assert_eq!(fields.len(), 8, "cases.csv row {line:?}");
    let optional = |s: &str| (!s.is_empty()).then(|| s.parse::<u64>().expect("a whole number"));
    let policy = Policy::from_options(
        fields[2].parse().expect("an algorithm"),
        Rate::new(
            fields[3].parse().expect("a limit"),
            parse_duration(fields[4]).expect("a window"),
        ),
        optional(fields[5]),
        optional(fields[6]),
    )
    .unwrap_or_else(|e| panic!("case {}: {e}", fields[0]));
    (
        fields[0].to_owned(),
        policy,
        fields[1].to_owned(),
        fields[7].to_owned(),
    )
}

/// Replays `trace` through a fresh limiter of the harness, setting the
/// clock to each row's time before its request, and prints the decisions
/// CSV as `limiter replay` does.
async fn replay<H: Harness>(harness: &H, policy: &Policy, trace: &str) -> String {
    let subject = Subject::new(harness, policy).await;
    replay_into(&*subject.limiter, &subject.clock, trace).await
}

/// Replays `trace` through `limiter`, setting `clock` (the limiter's) to
/// each row's time before its request, and prints the decisions CSV as
/// `limiter replay` does: the replay of every vector, one policy or a set.
pub(crate) async fn replay_into(limiter: &dyn Limiter, clock: &ManualClock, trace: &str) -> String {
    let mut out = format!("{DECISION_HEADER}\n");
    for request in TraceReader::new(trace.as_bytes()) {
        let request = request.expect("vector traces are well formed");
        clock.set(request.time_us);
        let result = limiter.acquire(request.key.as_bytes(), request.cost).await;
        let decision = outcome(result).ok();
        out.push_str(&decision_row(&request, decision.as_ref()));
        out.push('\n');
    }
    out
}

/// The first line where `actual` and `expected` differ, for a failure message.
pub(crate) fn first_difference(actual: &str, expected: &str) -> String {
    actual
        .lines()
        .zip(expected.lines())
        .enumerate()
        .find(|(_, (a, e))| a != e)
        .map_or_else(
            || {
                format!(
                    "  {} lines, expected {}",
                    actual.lines().count(),
                    expected.lines().count()
                )
            },
            |(i, (a, e))| format!("  line {}:\n  got      {a}\n  expected {e}", i + 1),
        )
}

/// Every case of `testdata/vectors/cases.csv`, replayed through the
/// backend, prints exactly its `expected` file.
pub async fn shared_vectors_replay_byte_for_byte<H: Harness>(harness: &H) {
    let dir = vectors_dir();
    let cases = read(dir.join("cases.csv"));
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut named = BTreeSet::new();
    for line in cases.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let (case, policy, trace, expected) = parse_case(line);
        named.extend([trace.clone(), expected.clone()]);
        let actual = replay(harness, &policy, &read(dir.join(&trace))).await;
        let expected = read(dir.join(&expected));
        if actual != expected {
            let first = first_difference(&actual, &expected);
            failures.push(format!("case {case} ({policy}) differs:\n{first}"));
        }
        checked += 1;
    }
    assert!(
        checked >= 32,
        "only {checked} vector cases found in {}",
        dir.display()
    );
    assert_every_file_is_a_case(&dir, &named);
    assert!(
        failures.is_empty(),
        "{} of {checked} vector cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
