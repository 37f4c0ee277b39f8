//! `limiter bench` through the real binary: on memory, on a real
//! redis-server and on a real cluster for about a second each, the table's
//! and the JSON's shape and sane figures; bad input is a usage error (exit
//! status 2).

mod support;

use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::RedisServer;
use serde_json::Value;
use support::{limiter, stderr, stdout};
use support::{parse_json, JsonShape};

/// Every field of the JSON document.
const FIELDS: [&str; 45] = [
    "backend",
    "server",
    "engine",
    "policy",
    "concurrency",
    "duration_s",
    "keys",
    "on_failure",
    "elapsed_s",
    "decisions",
    "decisions_per_s",
    "admitted",
    "denied",
    "fail_open",
    "fail_closed",
    "errors",
    "first_error",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
    "ceiling_per_s",
    "ceiling_calls",
    "ceiling_errors",
    "ceiling_p50_us",
    "ceiling_p99_us",
    "ceiling_p999_us",
    "ratio",
    "server_cpu_us_per_decision",
    "lease_lifetime_s",
    "lease_max",
    "lease_min",
    "lease_budget_percent",
    "lease_requests",
    "mean_lease",
    "exact_requests",
    "decisions_per_call",
    "leased_decisions",
    "redis_calls",
    "redis_calls_per_1000",
    "most_in_window",
    "exact_most_in_window",
    "over_admission",
    "over_admission_bound",
    "lease_warning",
];

fn bench(args: &[&str]) -> String {
    let output = limiter().arg("bench").args(args).output().unwrap();
    assert!(
        output.status.success(),
        "limiter bench {args:?} failed: {}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), "");
    stdout(&output)
}

fn bench_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let text = bench(&all);
    let doc = parse_json(&text);
    let Value::Object(map) = &doc else {
        panic!("not an object:\n{text}");
    };
    let names: Vec<&str> = map.keys().map(String::as_str).collect();
    let mut expected = FIELDS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "{text}");
    doc
}

/// The figures every run must have: decisions made, counts that add up,
/// ordered percentiles.
fn assert_sane(doc: &Value, concurrency: f64, keys: f64) {
    let n = |field: &str| doc.field(field).num();
    assert_eq!(n("concurrency"), concurrency);
    assert_eq!(n("keys"), keys);
    assert_eq!(n("duration_s"), 1.0);
    assert!(n("decisions") > 0.0, "{doc:?}");
    assert!(n("decisions_per_s") > 0.0, "{doc:?}");
    // At least the duration; under a minute, a bound on hanging only: the
    // tasks stop at the deadline, and their last calls end soon after on
    // any host.
    assert!(n("elapsed_s") >= 1.0 && n("elapsed_s") < 60.0, "{doc:?}");
    assert_eq!(n("admitted") + n("denied"), n("decisions"));
    assert_eq!(n("fail_closed"), 0.0);
    assert_eq!(n("errors"), 0.0, "{doc:?}");
    assert_eq!(doc.field("first_error"), &Value::Null);
    assert_eq!(n("fail_open"), 0.0);
    assert!(n("p50_us") > 0.0, "{doc:?}");
    assert!(n("p50_us") <= n("p99_us"), "{doc:?}");
    assert!(n("p99_us") <= n("p999_us"), "{doc:?}");
    assert!(n("p999_us") <= n("max_us"), "{doc:?}");
    // decisions_per_s is decisions over the elapsed time.
    let rate = n("decisions") / n("elapsed_s");
    assert!((n("decisions_per_s") / rate - 1.0).abs() < 0.01, "{doc:?}");
}

#[test]
fn memory_json_has_every_field_and_no_ceiling() {
    let doc = bench_json(&[
        "--policy",
        "token-bucket:100/1h",
        "--concurrency",
        "8",
        "--duration",
        "1s",
        "--keys",
        "10",
    ]);
    assert_sane(&doc, 8.0, 10.0);
    assert_eq!(doc.field("backend").str(), "memory");
    assert_eq!(doc.field("policy").str(), "token-bucket:100/1h");
    assert_eq!(doc.field("on_failure").str(), "error");
    assert_eq!(doc.field("server"), &Value::Null);
    assert_eq!(doc.field("engine"), &Value::Null);
    for field in [
        "ceiling_per_s",
        "ceiling_calls",
        "ceiling_errors",
        "ceiling_p50_us",
        "ceiling_p99_us",
        "ceiling_p999_us",
        "ratio",
        "server_cpu_us_per_decision",
    ] {
        assert_eq!(doc.field(field), &Value::Null, "{field}");
    }
    // Ten keys of a token bucket of 100 an hour: 100 each at once and
    // nothing refilled within the run, however many decisions it made.
    let (admitted, decisions) = (doc.field("admitted").num(), doc.field("decisions").num());
    assert!(admitted <= 1000.0, "{doc:?}");
    assert!(admitted >= decisions.min(100.0), "{doc:?}");
}

#[test]
fn memory_table_shows_dashes_for_the_ceiling() {
    let text = bench(&["--policy", "sliding-log:100/1h", "--duration", "1s"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("limiter bench: sliding-log:100/1h on memory, concurrency 64"),
        "{text}"
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let header = lines
        .iter()
        .find(|l| l.contains("per second"))
        .unwrap_or_else(|| panic!("no header in:\n{text}"));
    for column in ["per second", "total", "errors", "p50", "p99", "p99.9"] {
        assert!(header.contains(column), "{column} missing from:\n{text}");
    }
    let decisions = row("decisions");
    assert_eq!(decisions.len(), 7, "{text}");
    assert!(decisions[1].parse::<u64>().unwrap() > 0, "{text}");
    assert_eq!(decisions[3], "0", "{text}");
    assert_eq!(row("ceiling (return 1)")[3..], ["-"; 6], "{text}");
    assert_eq!(row("ratio"), ["ratio", "-"], "{text}");
    // One hot key of a sliding log of 100 an hour: the first 100 decisions
    // admitted, however many the run made.
    let total: u64 = decisions[2].parse().unwrap();
    let admitted = total.min(100);
    assert!(
        text.contains(&format!(
            "admitted {admitted}, denied {}, ",
            total - admitted
        )),
        "expected {admitted} admitted of {total}:\n{text}"
    );
}

/// A duration under a millisecond is printed as given: in the table as
/// `--duration` takes it, in JSON to the µs.
#[test]
fn a_sub_millisecond_duration_is_reported_as_given() {
    let args = [
        "--policy",
        "sliding-log:10/1s",
        "--concurrency",
        "1",
        "--duration",
        "400us",
    ];
    let table = bench(&args);
    assert!(
        table.contains(", concurrency 1, 400us per phase, "),
        "{table}"
    );
    let doc = bench_json(&args);
    assert_eq!(doc.field("duration_s").num(), 0.0004, "{doc:?}");
}

#[test]
fn redis_json_reports_the_ceiling_and_a_ratio() {
    let server = RedisServer::start();
    let url = server.url();
    let doc = bench_json(&[
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--policy",
        "sliding-log:100/1h",
        "--concurrency",
        "16",
        "--duration",
        "1s",
    ]);
    assert_sane(&doc, 16.0, 1.0);
    assert_eq!(doc.field("backend").str(), "redis");
    assert_eq!(doc.field("server").str(), url);
    assert_eq!(doc.field("engine").str(), "lua");
    // Redis TIME decides: one key, 100 an hour, the first 100 decisions
    // admitted, however many the run made.
    let decisions = doc.field("decisions").num();
    assert_eq!(doc.field("admitted").num(), decisions.min(100.0), "{doc:?}");
    let n = |field: &str| doc.field(field).num();
    assert!(n("ceiling_per_s") > 0.0, "{doc:?}");
    assert!(n("ceiling_calls") > 0.0, "{doc:?}");
    assert_eq!(n("ceiling_errors"), 0.0, "{doc:?}");
    assert!(n("ceiling_p50_us") <= n("ceiling_p99_us"), "{doc:?}");
    assert!(n("ceiling_p99_us") <= n("ceiling_p999_us"), "{doc:?}");
    assert!(n("ratio") > 0.0, "{doc:?}");
    let ratio = n("decisions_per_s") / n("ceiling_per_s");
    assert!((n("ratio") - ratio).abs() < 0.002, "{doc:?}");
    assert!(n("server_cpu_us_per_decision") > 0.0, "{doc:?}");
    // The run's keys (under a fresh prefix) are deleted at the end.
    assert_eq!(server.command("DBSIZE"), ":0");
}

/// A leased run on one hot key of the Redis at `url` on `engine`
/// (`sliding-log:1000/1s`, 16 callers, 1 s, leases of at most 50 units),
/// checked sane.
fn leased_hot_key_run(url: &str, engine: &str) -> Value {
    let doc = bench_json(&[
        "--backend",
        "redis",
        "--redis-url",
        url,
        "--redis-engine",
        engine,
        "--policy",
        "sliding-log:1000/1s",
        "--concurrency",
        "16",
        "--duration",
        "1s",
        "--lease",
        "--lease-max",
        "50",
    ]);
    assert_sane(&doc, 16.0, 1.0);
    doc
}

/// On a server with limiter-redis-module, `--redis-engine module`: the
/// module decides (the report names it, and the server ran its command,
/// not a function), the leases' Redis calls are its commands, and the
/// server's CPU per decision is reported.
#[test]
fn redis_json_on_the_module_names_it_and_counts_its_calls() {
    let server = RedisServer::start_with_module(&[]);
    let doc = leased_hot_key_run(&server.url(), "module");
    let n = |field: &str| doc.field(field).num();
    assert_eq!(doc.field("engine").str(), "module");
    assert!(n("redis_calls") > 0.0, "{doc:?}");
    assert!(n("redis_calls") < n("decisions"), "{doc:?}");
    assert!(n("server_cpu_us_per_decision") > 0.0, "{doc:?}");
    let stats = server.query("INFO commandstats");
    assert!(stats.contains("cmdstat_limiter.decide:"), "{stats}");
    assert!(!stats.contains("cmdstat_fcall:"), "{stats}");
}

/// `--lease` with leases of one unit: every admitted unit costs a call to
/// the global limiter (a lease holds at most one unit, the one in flight
/// included), so the table warns that leases did not take off and names
/// the budget.
#[test]
fn a_table_warns_when_leases_do_not_take_off() {
    let table = bench(&[
        "--policy",
        "token-bucket:1000000/1s",
        "--concurrency",
        "4",
        "--duration",
        "200ms",
        "--lease",
        "--lease-max",
        "1",
    ]);
    assert!(
        table.contains("leases: lifetime 250ms, 1 to 1 units (over-admission budget 0.0001% of the limit per instance)"),
        "{table}"
    );
    assert!(
        table.contains("lease requests of 1 units on average"),
        "{table}"
    );
    let warning = table
        .lines()
        .find(|line| line.starts_with("  warning: leases did not take off"))
        .unwrap_or_else(|| panic!("no warning:\n{table}"));
    assert!(warning.contains("--lease-budget"), "{table}");
}

/// `--lease` on Redis: most admissions come from leases, far fewer Redis
/// calls than decisions, and the most units of the key in one window stay
/// within the exact algorithm's most plus the bound; one key, a hot one.
#[test]
fn redis_json_with_leases_reports_calls_and_the_bound() {
    let server = RedisServer::start();
    let doc = leased_hot_key_run(&server.url(), "lua");
    let n = |field: &str| doc.field(field).num();
    assert_eq!(n("lease_max"), 50.0, "{doc:?}");
    // The largest lease's share of the default lifetime: 50 * 250 ms / 1 s.
    assert_eq!(n("lease_min"), 12.0, "{doc:?}");
    assert_eq!(n("lease_budget_percent"), 5.0, "50 of 1,000: {doc:?}");
    assert!(n("lease_requests") > 0.0, "{doc:?}");
    assert!(n("mean_lease") >= 1.0 && n("mean_lease") <= 50.0, "{doc:?}");
    assert!(n("leased_decisions") > 0.0, "{doc:?}");
    assert!(n("leased_decisions") <= n("admitted"), "{doc:?}");
    assert!(n("redis_calls") > 0.0, "{doc:?}");
    assert!(n("redis_calls") < n("decisions"), "{doc:?}");
    assert_eq!(n("exact_most_in_window"), 1000.0, "{doc:?}");
    assert_eq!(n("over_admission_bound"), 50.0, "{doc:?}");
    assert!(n("over_admission") <= n("over_admission_bound"), "{doc:?}");
    assert_eq!(
        n("over_admission"),
        (n("most_in_window") - 1000.0).max(0.0),
        "{doc:?}"
    );
}

/// On a cluster the ceiling goes where the decisions go: over the same
/// keys' slots, so to every primary, each sent the script on its first
/// call (no server has it before), without an error.
#[test]
fn cluster_ceiling_calls_every_primary_without_error() {
    let cluster = RedisCluster::start();
    let seed = &cluster.seed_urls()[0];
    let doc = bench_json(&[
        "--backend",
        "redis-cluster",
        "--redis-url",
        seed,
        "--policy",
        "token-bucket:1000/1s",
        "--keys",
        "64",
        "--concurrency",
        "8",
        "--duration",
        "1s",
    ]);
    assert_sane(&doc, 8.0, 64.0);
    let n = |field: &str| doc.field(field).num();
    assert!(n("ceiling_calls") > 0.0, "{doc:?}");
    assert_eq!(n("ceiling_errors"), 0.0, "{doc:?}");
    assert_eq!(n("errors"), 0.0, "{doc:?}");
    for primary in cluster.primaries() {
        let stats = cluster.command(&primary, &["INFO", "commandstats"]).text();
        assert!(
            stats.contains("cmdstat_evalsha:calls="),
            "no ceiling call reached {primary:?}: {stats}"
        );
    }
}

#[test]
fn redis_table_keeps_a_given_prefix_and_counts_fail_open() {
    let server = RedisServer::start();
    let url = server.url();
    let text = bench(&[
        "--backend",
        "redis",
        "--redis-url",
        &url,
        "--redis-prefix",
        "mine",
        "--policy",
        "token-bucket:5/1s,capacity=10",
        "--concurrency",
        "4",
        "--duration",
        "1s",
        "--keys",
        "3",
        "--on-failure",
        "open",
    ]);
    assert!(
        text.starts_with(&format!(
            "limiter bench: token-bucket:5/1s,capacity=10 on redis ({url}, engine lua), concurrency 4, 1s per phase, 3 keys, on failure: open"
        )),
        "{text}"
    );
    let ratio = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("ratio"))
        .unwrap_or_else(|| panic!("no ratio in:\n{text}"))
        .trim()
        .parse::<f64>()
        .unwrap();
    assert!(ratio > 0.0, "{text}");
    assert!(
        text.contains("fail-open 0, fail-closed 0, errors 0"),
        "{text}"
    );
    // A prefix the user gave is theirs: the keys stay (until their TTL),
    // each key's state and its record (docs/backends.md, "Key layout").
    assert_eq!(server.command("KEYS mine:*"), "*6");
}

fn usage_error(args: &[&str]) -> String {
    let output = limiter().arg("bench").args(args).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
    assert_eq!(stdout(&output), "");
    stderr(&output)
}

#[test]
fn bad_input_is_a_usage_error() {
    let error = usage_error(&["--policy", "token-bucket:100"]);
    assert!(error.contains("--policy <POLICY>"), "{error}");
    let error = usage_error(&["--policy", "sliding-log:100/1s,capacity=5"]);
    assert!(error.contains("capacity does not apply"), "{error}");
    let error = usage_error(&["--policy", "token-bucket:1/1s", "--concurrency", "0"]);
    assert!(error.contains("--concurrency <N>"), "{error}");
    let error = usage_error(&["--policy", "token-bucket:1/1s", "--duration", "0s"]);
    assert!(error.contains("more than zero"), "{error}");
    let error = usage_error(&["--policy", "token-bucket:1/1s", "--keys", "0"]);
    assert!(error.contains("--keys <K>"), "{error}");
    let error = usage_error(&["--concurrency", "4"]);
    assert!(error.contains("--policy <POLICY>"), "{error}");
    // A tiered set has at most 8 policies (a set of 2 is benchmarked).
    let nine = ["fixed-window:1/1s"; 9].join(";");
    let error = usage_error(&["--policy", &nine]);
    assert!(error.contains("at most 8 policies, got 9"), "{error}");
    let error = usage_error(&[
        "--policy",
        "token-bucket:1/1s",
        "--backend",
        "redis",
        "--redis-url",
        "localhost:6379",
    ]);
    assert!(error.contains("invalid Redis URL"), "{error}");
}

#[test]
fn an_unreachable_redis_is_a_runtime_error() {
    // A port nothing listens on (a server started and stopped).
    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let output = limiter()
        .args(["bench", "--backend", "redis", "--redis-url", &url])
        .args(["--policy", "token-bucket:1/1s", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).starts_with("error: "), "{output:?}");
}

#[test]
fn help_explains_the_ceiling_with_examples() {
    let output = limiter().args(["bench", "--help"]).output().unwrap();
    assert!(output.status.success());
    let text = stdout(&output);
    for needle in [
        "--policy <POLICY>",
        "--concurrency <N>",
        "[default: 64]",
        "--duration <DUR>",
        "[default: 5s]",
        "--keys <K>",
        "[default: 1]",
        "--on-failure <WHAT>",
        "- error:",
        "- open:",
        "- closed:",
        "--backend <BACKEND>",
        "--redis-url <URL>",
        "--redis-prefix <PREFIX>",
        "--format <FORMAT>",
        "EVALSHA",
        "return 1",
        "Examples:",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// A reader that closes its end before the report (`limiter bench … |
/// true`) ends the run quietly, exit status 0, as replay and compare do:
/// no panic on the broken pipe.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = limiter()
        .args([
            "bench",
            "--policy",
            "token-bucket:100/1s",
            "--duration",
            "200ms",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        stderr(&output)
    );
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
}
