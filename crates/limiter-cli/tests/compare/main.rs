//! `limiter compare` through the real binary: the article's case in the
//! table and in JSON, a user trace; the plot's structure in `plot`.

#[path = "../support/mod.rs"]
mod support;

mod plot;

use std::collections::BTreeMap;

use limiter_core::Algorithm;
use limiter_test::redis_server::RedisServer;
use serde_json::Value;
use support::{limiter, run, stderr, stdout, vectors_dir};
use support::{parse_json, JsonShape};

/// Every algorithm's name, in the core's order (the order of the output).
fn algorithms() -> Vec<&'static str> {
    Algorithm::ALL.map(Algorithm::name).to_vec()
}

fn compare(args: &[&str]) -> String {
    let output = limiter().arg("compare").args(args).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
    stdout(&output)
}

fn compare_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let text = compare(&all);
    parse_json(&text)
}

/// `{algorithm: result}` of the scenario named `name`.
fn results<'a>(doc: &'a Value, name: &str) -> BTreeMap<&'a str, &'a Value> {
    let scenario = doc
        .field("scenarios")
        .array()
        .iter()
        .find(|s| s.field("name").str() == name)
        .unwrap_or_else(|| panic!("no scenario {name}"));
    let results: BTreeMap<_, _> = scenario
        .field("results")
        .array()
        .iter()
        .map(|r| (r.field("algorithm").str(), r))
        .collect();
    assert_eq!(results.len(), 5);
    results
}

#[test]
fn the_default_table_shows_the_articles_case() {
    let table = compare(&[]);
    let section: Vec<&str> = table
        .split("\n\n")
        .find(|s| s.starts_with("boundary-burst"))
        .expect("a boundary-burst table")
        .lines()
        .collect();
    assert_eq!(
        section[1].split_whitespace().collect::<Vec<_>>(),
        [
            "algorithm",
            "admitted",
            "denied",
            "max/10s",
            "mean",
            "retry",
            "worst",
            "retry",
            "bytes/key"
        ]
    );
    let row = |algorithm: &str| -> Vec<&str> {
        section
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells[0] == algorithm)
            .unwrap_or_else(|| panic!("no row for {algorithm}"))
    };
    // admitted, denied, max/10s
    assert_eq!(row("fixed-window")[1..4], ["200", "0", "200"]);
    assert_eq!(row("sliding-log")[1..4], ["100", "100", "100"]);
    for scenario in ["steady-over-limit", "on-off-bursts", "many-keys"] {
        assert!(table.contains(&format!("\n{scenario} (")), "{table}");
    }
}

#[test]
fn decisions_per_second_is_in_the_table_only_with_timing() {
    // By default no table has it: 200 decisions take tens of microseconds.
    let table = compare(&[]);
    assert!(!table.contains("decisions/s"), "{table}");
    let headers: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("  algorithm"))
        .collect();
    assert_eq!(headers.len(), 4, "{table}");

    // --timing adds the column, with a figure in every row.
    let timed = compare(&["--scenario", "boundary-burst", "--timing"]);
    let lines: Vec<Vec<&str>> = timed
        .lines()
        .skip(1)
        .take(6)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let column = lines[0].len() - 2;
    assert_eq!(lines[0][column], "decisions/s", "{timed}");
    assert_eq!(lines[0][column + 1], "bytes/key", "{timed}");
    for row in &lines[1..] {
        let figure = row[row.len() - 2];
        assert!(
            figure.trim_end_matches(['k', 'M']).parse::<f64>().unwrap() > 0.0,
            "{timed}"
        );
    }
    // The other figures are the same with and without it.
    let untimed = compare(&["--scenario", "boundary-burst"]);
    let without_timing = |text: &str, timing: bool| -> Vec<Vec<String>> {
        text.lines()
            .skip(2)
            .take(5)
            .map(|l| {
                let mut cells: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
                if timing {
                    cells.remove(cells.len() - 2);
                }
                cells
            })
            .collect()
    };
    assert_eq!(
        without_timing(&timed, true),
        without_timing(&untimed, false)
    );

    // JSON keeps the figure, with or without --timing.
    for args in [&[][..], &["--timing"][..]] {
        let mut all = vec!["--scenario", "boundary-burst"];
        all.extend_from_slice(args);
        let doc = compare_json(&all);
        for result in results(&doc, "boundary-burst").values() {
            // The run's wall time, in whole µs: measured, so above 0 (200
            // decisions by this test build take tens of µs at least), and
            // the time the rate is taken from. A wall time left at 0, in
            // other units, or not the rate's, fails below.
            let wall_us = result.field("wall_time_us").num();
            assert!(
                wall_us.is_finite() && wall_us >= 1.0 && wall_us.fract() == 0.0,
                "{result:?}"
            );
            let decisions = result.field("admitted").num()
                + result.field("denied").num()
                + result.field("errors").num();
            assert_eq!(decisions, 200.0, "{result:?}");
            // The rate is the decisions over the exact time, which is in
            // [wall_us, wall_us + 1) µs, written to one decimal (within
            // 0.05, 0.1 with the doubles' rounding).
            let rate = result.field("decisions_per_second").num();
            let (slowest, fastest) = (decisions * 1e6 / (wall_us + 1.0), decisions * 1e6 / wall_us);
            assert!(
                rate > 0.0 && rate >= slowest - 0.1 && rate <= fastest + 0.1,
                "{rate} decisions/s, not {decisions} in {wall_us} µs: {result:?}"
            );
        }
    }
}

#[test]
fn json_holds_every_scenario_and_the_articles_figures() {
    let doc = compare_json(&[]);
    assert_eq!(doc.field("backend").str(), "memory");
    let names: Vec<&str> = doc
        .field("scenarios")
        .array()
        .iter()
        .map(|s| s.field("name").str())
        .collect();
    assert_eq!(
        names,
        [
            "boundary-burst",
            "steady-over-limit",
            "on-off-bursts",
            "many-keys"
        ]
    );
    for scenario in doc.field("scenarios").array() {
        let order: Vec<&str> = scenario
            .field("results")
            .array()
            .iter()
            .map(|r| r.field("algorithm").str())
            .collect();
        assert_eq!(order, algorithms());
        let requests = scenario.field("requests").num();
        for result in scenario.field("results").array() {
            let decided = result.field("admitted").num()
                + result.field("denied").num()
                + result.field("errors").num();
            assert_eq!(decided, requests);
            assert!(result.field("bytes_per_key").num() >= 16.0);
            assert!(result.field("decisions_per_second").num() > 0.0);
        }
    }

    let burst = results(&doc, "boundary-burst");
    let figure = |algorithm: &str, field: &str| burst[algorithm].field(field).num();
    assert_eq!(figure("fixed-window", "admitted"), 200.0);
    assert_eq!(figure("fixed-window", "max_units_in_window"), 200.0);
    assert_eq!(
        burst["fixed-window"].field("retry_after_mean_us"),
        &Value::Null
    );
    assert_eq!(figure("sliding-log", "admitted"), 100.0);
    assert_eq!(figure("sliding-log", "denied"), 100.0);
    assert_eq!(figure("sliding-log", "max_units_in_window"), 100.0);
    // Denied at 11 s + i µs, the slot of request i (at 9 s + i µs) frees 8 s later.
    assert_eq!(figure("sliding-log", "retry_after_max_us"), 8_000_000.0);
    // A sliding log stores an entry per admission tick.
    assert_eq!(
        figure("sliding-log", "bytes_per_key") - figure("fixed-window", "bytes_per_key"),
        24.0 + 100.0 * 16.0
    );
    // The leaky bucket admits a burst into its queue, but they leave smoothly.
    assert!(figure("leaky-bucket", "max_units_in_window") <= 101.0);

    // A burst straddling a boundary: the fixed window lets 150 through
    // within one second, the sliding log never more than the limit.
    let bursts = results(&doc, "on-off-bursts");
    assert_eq!(
        bursts["fixed-window"].field("max_units_in_window").num(),
        150.0
    );
    assert_eq!(
        bursts["sliding-log"].field("max_units_in_window").num(),
        100.0
    );
}

#[test]
fn a_scenario_can_be_chosen() {
    // Named twice, run once (twice under one --redis-prefix, the second
    // would start from the first's state).
    let doc = compare_json(&["--scenario", "many-keys", "--scenario", "many-keys"]);
    let scenarios = doc.field("scenarios").array();
    assert_eq!(scenarios.len(), 1);
    assert_eq!(scenarios[0].field("keys").num(), 1000.0);
    // Per key, a sliding log never lets more than the limit through a window.
    assert_eq!(
        results(&doc, "many-keys")["sliding-log"]
            .field("max_units_in_window")
            .num(),
        10.0
    );
}

/// `--lease N`: each lane followed by the same lane decided through N
/// leased limiters, whose over-admission stays within docs/spec.md
/// section 8's bound (for the sliding log, `L + N*M` in any window).
#[test]
fn leased_lanes_follow_their_exact_lanes_within_the_bound() {
    let doc = compare_json(&[
        "--scenario",
        "on-off-bursts",
        "--lease",
        "4",
        "--lease-max",
        "20",
        "--lease-lifetime",
        "500ms",
    ]);
    let scenario = &doc.field("scenarios").array()[0];
    let lanes = scenario.field("results").array();
    assert_eq!(lanes.len(), 2 * Algorithm::ALL.len());
    for (pair, algorithm) in lanes.chunks(2).zip(algorithms()) {
        assert_eq!(pair[0].field("policy").str(), algorithm);
        assert_eq!(
            pair[0].field("leased_instances"),
            &Value::Null,
            "{algorithm}"
        );
        assert_eq!(pair[1].field("algorithm").str(), algorithm);
        assert_eq!(
            pair[1].field("policy").str(),
            format!("{algorithm} leased x4")
        );
        assert_eq!(pair[1].field("leased_instances").num(), 4.0);
        assert!(pair[1].field("admitted").num() > 0.0, "{algorithm}");
    }
    let leased_log = &lanes[3];
    assert_eq!(leased_log.field("policy").str(), "sliding-log leased x4");
    assert!(
        leased_log.field("max_units_in_window").num() <= 100.0 + 4.0 * 20.0,
        "{}",
        leased_log.field("max_units_in_window").num()
    );
}

#[test]
fn a_user_trace_is_compared_with_its_own_policy() {
    let trace = vectors_dir().join("traces/trace-000.csv");
    let trace = trace.to_str().unwrap();
    let doc = compare_json(&["--trace", trace, "--limit", "100", "--window", "10s"]);
    let burst = results(&doc, trace);
    assert_eq!(burst["fixed-window"].field("admitted").num(), 200.0);
    assert_eq!(burst["sliding-log"].field("admitted").num(), 100.0);

    // From stdin, with a capacity for the token bucket only.
    let text = std::fs::read_to_string(trace).unwrap();
    let output = run(
        &[
            "compare",
            "--trace",
            "-",
            "--limit",
            "100",
            "--window",
            "10s",
            "--capacity",
            "150",
            "--format",
            "json",
        ],
        &text,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = parse_json(&stdout(&output));
    let scenario = &doc.field("scenarios").array()[0];
    assert_eq!(scenario.field("name").str(), "<stdin>");
    assert_eq!(scenario.field("capacity").num(), 150.0);
    let results = results(&doc, "<stdin>");
    assert_eq!(results["token-bucket"].field("admitted").num(), 170.0);
    assert_eq!(results["sliding-log"].field("admitted").num(), 100.0);
}

#[test]
fn a_user_trace_in_epoch_seconds_gets_one_warning_and_the_same_table() {
    let seconds: String = (0..200)
        .map(|i| format!("{},a,1\n", 1_700_000_000 + i))
        .collect();
    let flags = ["compare", "--trace", "-", "--limit", "10", "--window", "1s"];
    let output = run(&flags, &format!("t_us,key,cost\n{seconds}"));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "warning: <stdin>: t_us values look like seconds since the epoch (1700000000 to \
         1700000199; as seconds from 2023-11-14 22:13:20 UTC); t_us is microseconds: \
         multiply by 1000000\n"
    );
    // The table is the one the same times give without the warning: shifted
    // by a real microsecond date (so no warning), the decisions are alike.
    let shifted: String = (0..200)
        .map(|i| format!("{},a,1\n", 1_700_000_000_000_000u64 + i))
        .collect();
    let quiet = run(&flags, &format!("t_us,key,cost\n{shifted}"));
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "");
    let admitted = |text: &str| -> Vec<String> {
        text.lines()
            .skip(2)
            .take(5)
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(admitted(&stdout(&output)), admitted(&stdout(&quiet)));
    assert_eq!(admitted(&stdout(&output))[0], "fixed-window 10 190");

    // Milliseconds, in JSON: stdout is still one JSON document.
    let millis: String = (0..50)
        .map(|i| format!("{},a\n", 1_700_000_000_000u64 + i * 100))
        .collect();
    let mut json_flags = flags.to_vec();
    json_flags.extend(["--format", "json"]);
    let output = run(&json_flags, &format!("t_us,key\n{millis}"));
    assert!(output.status.success(), "{}", stderr(&output));
    parse_json(&stdout(&output));
    let warnings = stderr(&output);
    assert_eq!(warnings.lines().count(), 1, "{warnings}");
    assert!(
        warnings.contains("look like milliseconds since the epoch")
            && warnings.ends_with("multiply by 1000\n"),
        "{warnings}"
    );
}

/// The same figures on Redis as in memory, under a fresh prefix and under
/// one given with `--redis-prefix`: each lane of each scenario keeps its
/// own keys (steady-over-limit and on-off-bursts use the same key and
/// policy, so lanes sharing a prefix would carry one's state into the
/// other).
#[test]
fn compare_gives_the_same_decisions_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let scenarios = [
        "--scenario",
        "boundary-burst",
        "--scenario",
        "steady-over-limit",
        "--scenario",
        "on-off-bursts",
    ];
    let on_memory = compare_json(&scenarios);
    for prefix in [&[][..], &["--redis-prefix", "cmp"][..]] {
        let mut flags = scenarios.to_vec();
        flags.extend(["--backend", "redis", "--redis-url", url.as_ref()]);
        flags.extend(prefix);
        let on_redis = compare_json(&flags);
        assert_eq!(on_redis.field("backend").str(), "redis");
        for name in ["boundary-burst", "steady-over-limit", "on-off-bursts"] {
            let (redis, memory) = (results(&on_redis, name), results(&on_memory, name));
            for algorithm in algorithms() {
                for field in [
                    "admitted",
                    "denied",
                    "max_units_in_window",
                    "retry_after_mean_us",
                    "retry_after_max_us",
                ] {
                    assert_eq!(
                        redis[algorithm].field(field),
                        memory[algorithm].field(field),
                        "{prefix:?} {name} {algorithm} {field}"
                    );
                }
                assert_eq!(redis[algorithm].field("bytes_per_key"), &Value::Null);
            }
        }
    }
}

#[test]
fn an_empty_trace_gives_zeros_and_valid_json() {
    let output = run(
        &["compare", "--trace", "-", "--format", "json"],
        "t_us,key,cost\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = parse_json(&stdout(&output));
    for (_, result) in results(&doc, "<stdin>") {
        assert_eq!(result.field("admitted").num(), 0.0);
        assert_eq!(result.field("max_units_in_window").num(), 0.0);
        assert_eq!(result.field("retry_after_mean_us"), &Value::Null);
        assert_eq!(result.field("decisions_per_second"), &Value::Null);
    }
}

/// `(lane, units within a window holding the change, the new limit)` of
/// the one scenario of a comparison across a policy change.
fn around_change(doc: &Value) -> Vec<(String, f64, f64)> {
    let scenarios = doc.field("scenarios").array();
    assert_eq!(scenarios.len(), 1);
    scenarios[0]
        .field("results")
        .array()
        .iter()
        .map(|result| {
            let around = result.field("around_change");
            (
                result.field("policy").str().to_owned(),
                around.field("units").num(),
                around.field("limit").num(),
            )
        })
        .collect()
}

/// 100 per minute used fully, then 120 per minute from 30 s: with state
/// per policy a minute holding the change admits both limits, carried
/// (docs/spec.md section 9) only the new one; and `--trace` with
/// `--change-at` on the same requests shows the same.
#[test]
fn a_policy_change_bursts_with_per_policy_state_and_not_when_carried() {
    let expected = vec![
        ("per-policy state".to_owned(), 220.0, 120.0),
        ("carried (docs/spec.md section 9)".to_owned(), 120.0, 120.0),
    ];
    let doc = compare_json(&["--scenario", "policy-change"]);
    assert_eq!(around_change(&doc), expected);
    assert_eq!(
        doc.field("scenarios").array()[0].field("requests").num(),
        700.0
    );

    let mut trace = String::from("t_us,key,cost\n");
    for i in 0..100 {
        trace.push_str(&format!("{},client,1\n", i * 10_000));
    }
    for i in 0..600 {
        trace.push_str(&format!("{},client,1\n", 30_000_000 + i * 100_000));
    }
    let args = [
        "compare",
        "--trace",
        "-",
        "--set",
        "sliding-log:100/1m",
        "--change-at",
        "30000000=sliding-log:120/1m",
    ];
    let output = run(&[&args[..], &["--format", "json"]].concat(), &trace);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(around_change(&parse_json(&stdout(&output))), expected);

    let table = stdout(&run(&args, &trace));
    assert!(table.contains("max/1m at change  new limit"), "{table}");
    let carried = table
        .lines()
        .find(|line| line.trim_start().starts_with("carried"))
        .unwrap_or_else(|| panic!("a carried lane:\n{table}"));
    let figures: Vec<&str> = carried.split_whitespace().collect();
    // label (4 words), admitted, denied, max/1m, max/1m at change, new limit
    assert_eq!(figures[6..9], ["120", "120", "120"], "{carried}");
}

/// A change that leased lanes cannot make, or that compares nothing, is
/// refused before anything runs.
#[test]
fn a_policy_change_is_refused_where_it_cannot_be_compared() {
    for (args, message) in [
        (
            &["--scenario", "policy-change", "--lease", "2"][..],
            "--lease does not apply to a policy change",
        ),
        (
            &[
                "--scenario",
                "policy-change",
                "--set",
                "sliding-log:1/1s",
                "--set",
                "fixed-window:1/1s",
            ],
            "a policy change compares one policy set before it",
        ),
    ] {
        let output = limiter().arg("compare").args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{args:?}");
    }
}
