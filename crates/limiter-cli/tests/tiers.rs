//! `limiter replay --policy P [--policy P ...]` through the real binary:
//! every all-of vector (docs/spec.md section 7) byte for byte, and the
//! usage errors of bad policy sets.

mod support;

use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::RedisServer;
use support::{limiter, run, stderr, stdout, vectors_dir};

/// `case,trace,policies,expected` rows of `all-of/cases.csv` (RFC 4180:
/// the policies field is quoted when it holds a comma).
fn all_of_cases() -> Vec<[String; 4]> {
    let text = std::fs::read_to_string(vectors_dir().join("all-of/cases.csv")).unwrap();
    text.lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
            for c in line.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ',' if !quoted => fields.push(std::mem::take(&mut field)),
                    c => field.push(c),
                }
            }
            fields.push(field);
            fields.try_into().expect("four columns")
        })
        .collect()
}

/// Replays every all-of case with one `--policy` per policy string (plus
/// `extra`) and returns how many matched.
fn replay_every_all_of_vector(extra: &[&str]) -> usize {
    let dir = vectors_dir().join("all-of");
    let cases = all_of_cases();
    for [case, trace, policies, expected] in &cases {
        let mut command = limiter();
        command.arg("replay");
        for policy in policies.split(';') {
            command.args(["--policy", policy]);
        }
        let output = command.args(extra).arg(dir.join(trace)).output().unwrap();
        assert!(output.status.success(), "case {case}: {}", stderr(&output));
        assert_eq!(stderr(&output), "", "case {case}: no warning on a vector");
        let expected = std::fs::read_to_string(dir.join(expected)).unwrap();
        let actual = stdout(&output);
        if actual != expected {
            let first = actual
                .lines()
                .zip(expected.lines())
                .enumerate()
                .find(|(_, (a, e))| a != e)
                .map_or_else(
                    || format!("{} lines", actual.lines().count()),
                    |(i, (a, e))| format!("line {}:\n  got      {a}\n  expected {e}", i + 1),
                );
            panic!("case {case} ({policies}) differs: {first}");
        }
    }
    cases.len()
}

#[test]
fn replay_with_several_policies_matches_every_all_of_vector_on_memory() {
    assert_eq!(replay_every_all_of_vector(&[]), 14);
}

#[test]
fn replay_with_several_policies_matches_every_all_of_vector_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    assert_eq!(
        replay_every_all_of_vector(&["--backend", "redis", "--redis-url", url.as_ref()]),
        14
    );
}

#[test]
fn one_policy_string_replays_as_the_single_policy_flags() {
    let trace = "t_us,key,cost\n0,a,1\n1,a,2\n2,a,1\n500000,a,1\n1000001,a,3\n";
    let flags = run(
        &[
            "replay",
            "--algorithm",
            "token-bucket",
            "--limit",
            "2",
            "--window",
            "1s",
            "--capacity",
            "3",
            "-",
        ],
        trace,
    );
    let string = run(
        &["replay", "--policy", "token-bucket:2/1s,capacity=3", "-"],
        trace,
    );
    assert!(flags.status.success(), "{}", stderr(&flags));
    assert!(string.status.success(), "{}", stderr(&string));
    // Capacity 3, one token every 500 ms: the burst of 3 passes, then one
    // request per 500 ms.
    assert_eq!(
        stdout(&flags),
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
         0,a,1,allowed,3,2,0,500000,0\n\
         1,a,2,allowed,3,0,0,1499999,0\n\
         2,a,1,denied,3,0,499998,1499998,0\n\
         500000,a,1,allowed,3,0,0,1500000,0\n\
         1000001,a,3,denied,3,1,999999,999999,0\n"
    );
    assert_eq!(stdout(&string), stdout(&flags));
    // Joined by `;` in one flag, or one flag each: the same set, each part
    // of which binds (a set of either part alone answers otherwise).
    let trace = "t_us,key,cost\n0,a,1\n1,a,1\n2,a,1\n1500000,a,1\n1500001,a,1\n1600000,a,3\n";
    let joined = run(
        &[
            "replay",
            "--policy",
            "sliding-log:2/1s;fixed-window:3/10s",
            "-",
        ],
        trace,
    );
    let apart = run(
        &[
            "replay",
            "--policy",
            "sliding-log:2/1s",
            "--policy",
            "fixed-window:3/10s",
            "-",
        ],
        trace,
    );
    // The sliding log denies the third request within a second; the fixed
    // window, full after its third admission (at 1.5 s), the next one; a
    // cost of 3 is above the sliding log's maximum. The set resets when its
    // last part does (the fixed window, at 10 s).
    let expected = "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
                    0,a,1,allowed,2,1,0,10000000,0\n\
                    1,a,1,allowed,2,0,0,9999999,0\n\
                    2,a,1,denied,2,0,999998,9999998,0\n\
                    1500000,a,1,allowed,3,0,0,8500000,0\n\
                    1500001,a,1,denied,3,0,8499999,8499999,0\n\
                    1600000,a,3,error,,,,,\n";
    for (how, output) in [("joined", &joined), ("apart", &apart)] {
        assert!(output.status.success(), "{how}: {}", stderr(output));
        assert_eq!(stderr(output), "", "{how}");
        assert_eq!(stdout(output), expected, "{how}");
    }
}

#[test]
fn a_cost_above_any_parts_maximum_is_an_error_row() {
    let trace = "t_us,key,cost\n0,a,3\n1,a,2\n";
    let output = run(
        &[
            "replay",
            "--policy",
            "sliding-log:2/1s",
            "--policy",
            "fixed-window:5/1s",
            "-",
        ],
        trace,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
         0,a,3,error,,,,,\n\
         1,a,2,allowed,2,0,0,1000000,0\n"
    );
}

#[test]
fn bad_policy_sets_are_usage_errors() {
    let nine: Vec<String> = (1..=9).map(|i| format!("fixed-window:{i}/1s")).collect();
    let mut too_many = vec!["replay"];
    for policy in &nine {
        too_many.extend(["--policy", policy.as_str()]);
    }
    too_many.push("-");
    let cases: [(&[&str], &str); 6] = [
        (
            &["replay", "--policy", "sliding-logs:1/1s", "-"],
            "unknown algorithm \"sliding-logs\"",
        ),
        (
            &["replay", "--policy", "token-bucket:1/1s,burst=2", "-"],
            "unknown option \"burst\"",
        ),
        (
            &["replay", "--policy", "sliding-log:5/1s,capacity=3", "-"],
            "capacity does not apply to sliding-log",
        ),
        (&["replay", "--policy", "", "-"], "at least one policy"),
        (&too_many, "at most 8 policies, got 9"),
        (
            &[
                "replay",
                "--policy",
                "sliding-log:5/1s",
                "--limit",
                "3",
                "-",
            ],
            "cannot be used with",
        ),
    ];
    for (args, expected) in cases {
        let output = run(args, "t_us,key,cost\n");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(expected),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stdout(&output).is_empty(), "{args:?}");
    }
}

#[test]
fn compare_runs_the_tiered_scenario_and_sets_side_by_side() {
    let output = run(&["compare", "--scenario", "tiered", "--format", "json"], "");
    assert!(output.status.success(), "{}", stderr(&output));
    let json = stdout(&output);
    // One lane per algorithm, both tiers of it; the sliding log holds 5 in
    // any second and 100 in any minute.
    assert!(json.contains(
        "\"algorithm\": \"sliding-log\", \"policy\": \"sliding-log:5/1s;sliding-log:100/1m\", \
         \"max_units_within\": [{\"window_us\": 1000000, \"units\": 5}, {\"window_us\": 60000000, \"units\": 100}]"
    ), "{json}");
    let output = run(
        &[
            "compare",
            "--scenario",
            "boundary-burst",
            "--set",
            "sliding-log:100/10s",
            "--set",
            "sliding-log:50/1s;sliding-log:100/10s",
        ],
        "",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    // The heading names no shared rate: each lane has its own.
    assert!(
        table.starts_with("boundary-burst (each lane under its --set): "),
        "{table}"
    );
    let row = |label: &str| -> Vec<String> {
        table
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|cells| cells.first().map(String::as_str) == Some(label))
            .unwrap_or_else(|| panic!("no row {label}:\n{table}"))
    };
    // policy, admitted, denied, max/1s, max/10s
    assert_eq!(
        row("sliding-log:100/10s")[1..5],
        ["100", "100", "100", "100"]
    );
    assert_eq!(
        row("sliding-log:50/1s;sliding-log:100/10s")[1..5],
        ["100", "100", "50", "100"]
    );
    let bad = run(&["compare", "--set", "sliding-log:5/1s,capacity=2"], "");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("capacity does not apply"),
        "{}",
        stderr(&bad)
    );
}

/// The tiered scenario's lanes run under its rate's tiers: its heading
/// names the rate (docs/cli.md), where one under `--set` names none.
#[test]
fn the_tiered_scenario_is_headed_by_its_rate() {
    let output = run(&["compare", "--scenario", "tiered"], "");
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(
        table.starts_with("tiered (5 per 1s): tiered limits, 5 per second and 100 per minute"),
        "{table}"
    );
}

#[test]
fn replay_with_several_policies_matches_every_all_of_vector_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let seed = &cluster.seed_urls()[0];
    assert_eq!(
        replay_every_all_of_vector(&["--backend", "redis-cluster", "--redis-url", seed]),
        14
    );
}
