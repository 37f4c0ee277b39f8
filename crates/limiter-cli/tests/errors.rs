//! Bad input through the real binary: each error is clear, names what is
//! wrong, prints nothing on stdout but the rows decided before it, and
//! exits non-zero.

mod support;

use std::net::TcpListener;

use support::{run, stderr, stdout};

const REPLAY: [&str; 7] = [
    "replay",
    "--algorithm",
    "sliding-log",
    "--limit",
    "10",
    "--window",
    "1s",
];

fn replay_with(extra: &[&str], stdin: &str) -> std::process::Output {
    let args: Vec<&str> = REPLAY.iter().chain(extra).copied().collect();
    run(&args, stdin)
}

#[test]
fn a_malformed_row_names_its_line_and_field() {
    let output = replay_with(&["-"], "t_us,key,cost\n1,a,1\n2,a,1\nsoon,a,1\n4,a,1\n");
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: <stdin>: line 4, field t_us: \"soon\" is not a whole number"),
        "{message}"
    );
    // The rows before the bad line were decided and printed.
    assert_eq!(stdout(&output).lines().count(), 3);

    let output = replay_with(&["-"], "t_us,key,cost\n1,a,many\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("line 2, field cost"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn numbers_are_digits_only_as_in_a_policy_string() {
    let output = replay_with(&["-"], "t_us,key,cost\n+1,a,1\n");
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("line 2, field t_us: \"+1\" is not a whole number"),
        "{message}"
    );
    let output = replay_with(&["-"], "t_us,key,cost\n1,a,+1\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("line 2, field cost"),
        "{}",
        stderr(&output)
    );
    for (limit, capacity) in [("+5", "5"), ("5", "+5")] {
        let args = [
            "replay",
            "--algorithm",
            "token-bucket",
            "--limit",
            limit,
            "--window",
            "1s",
            "--capacity",
            capacity,
            "-",
        ];
        let output = run(&args, "t_us,key,cost\n");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let message = stderr(&output);
        assert!(
            message.contains("\"+5\" is not a whole number"),
            "{args:?}: {message}"
        );
    }
}

/// `compare` takes `--limit`, `--capacity` and `--queue` as `replay` does.
#[test]
fn compare_numbers_are_digits_only_as_replays_are() {
    for flag in ["--limit", "--capacity", "--queue"] {
        let output = run(&["compare", "--trace", "-", flag, "+5"], "t_us,key,cost\n");
        assert_eq!(output.status.code(), Some(2), "{flag}");
        let message = stderr(&output);
        assert!(
            message.contains("\"+5\" is not a whole number"),
            "{flag}: {message}"
        );
        assert_eq!(stdout(&output), "", "{flag}");
    }
}

#[test]
fn a_bad_header_is_reported() {
    let output = replay_with(&["-"], "time,key\n1,a\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("line 1: expected the header `t_us,key,cost`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_unknown_algorithm_lists_the_valid_ones() {
    let output = run(
        &[
            "replay",
            "--algorithm",
            "gcra",
            "--limit",
            "1",
            "--window",
            "1s",
            "-",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains("unknown algorithm \"gcra\""), "{message}");
    assert!(
        message.contains(
            "expected one of: fixed-window, sliding-log, sliding-counter, token-bucket, leaky-bucket"
        ),
        "{message}"
    );
    assert_eq!(stdout(&output), "");
}

#[test]
fn an_invalid_policy_gives_the_cores_message() {
    let output = run(
        &[
            "replay",
            "--algorithm",
            "fixed-window",
            "--limit",
            "0",
            "--window",
            "10s",
            "-",
        ],
        "t_us,key,cost\n1,a,1\n",
    );
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        "error: invalid policy: limit must be at least 1, got 0\n"
    );
    assert_eq!(stdout(&output), "");

    let output = replay_with(&["--capacity", "5", "-"], "t_us,key,cost\n");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("capacity does not apply to sliding-log"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_bad_window_names_the_unit_problem() {
    let output = run(
        &[
            "replay",
            "--algorithm",
            "fixed-window",
            "--limit",
            "1",
            "--window",
            "10",
            "-",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("invalid duration \"10\": missing unit"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_missing_trace_file_is_named() {
    let output = replay_with(&["/nonexistent/trace.csv"], "");
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: cannot open trace /nonexistent/trace.csv: No such file"),
        "{message}"
    );
    assert_eq!(stdout(&output), "");
}

/// A trace that opens but cannot be read (a directory) names the read
/// error once, after the trace's name, in `replay` and `compare` alike.
#[test]
fn an_unreadable_trace_names_its_cause_once() {
    let dir = std::env::temp_dir();
    let dir = dir.to_str().unwrap();
    for output in [
        replay_with(&[dir], ""),
        run(&["compare", "--trace", dir], ""),
    ] {
        assert_eq!(output.status.code(), Some(1));
        let message = stderr(&output);
        assert!(
            message.starts_with(&format!("error: {dir}: cannot read trace: ")),
            "{message}"
        );
        let parts: Vec<&str> = message.trim_end().split(": ").collect();
        for (i, part) in parts.iter().enumerate() {
            assert!(!parts[i + 1..].contains(part), "{part:?} twice: {message}");
        }
    }
}

#[test]
fn an_unreachable_redis_fails_fast_with_a_clear_message() {
    // A port that was free a moment ago: nothing listens there.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("redis://127.0.0.1:{port}");
    let output = replay_with(
        &["--backend", "redis", "--redis-url", &url, "-"],
        "t_us,key,cost\n1,a,1\n",
    );
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.starts_with("error: "), "{message}");
    assert!(message.contains(&url), "names the server: {message}");
    assert!(message.contains("cannot connect"), "{message}");
    assert_eq!(message.lines().count(), 1, "one line: {message}");
    assert_eq!(stdout(&output), "");

    let output = run(
        &[
            "compare",
            "--scenario",
            "boundary-burst",
            "--backend",
            "redis",
            "--redis-url",
            &url,
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains(&url) && message.contains("cannot connect"),
        "{message}"
    );
    assert_eq!(stdout(&output), "");
}

#[test]
fn redis_flags_beside_the_memory_backend_are_a_usage_error() {
    for flags in [
        &["--redis-url", "redis://10.0.0.5:6379"][..],
        // The default URL named: still a Redis flag (a forgotten
        // `--backend redis` in a copied command line).
        &["--redis-url", "redis://127.0.0.1:6379"][..],
        &["--redis-prefix", "app"][..],
        &["--redis-engine", "module"][..],
    ] {
        let output = replay_with(&[flags, &["-"]].concat(), "t_us,key,cost\n1,a,1\n");
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(message.contains("--backend redis"), "{message}");
        assert_eq!(stdout(&output), "");
    }
}

#[test]
fn a_malformed_redis_url_is_a_usage_error() {
    let output = replay_with(
        &["--backend", "redis", "--redis-url", "localhost:6379", "-"],
        "t_us,key,cost\n1,a,1\n",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("invalid Redis URL"), "{message}");
    assert!(message.contains("localhost:6379"), "{message}");
    assert_eq!(stdout(&output), "");
}

#[test]
fn compare_rejects_a_bad_trace_and_a_bad_policy() {
    let output = run(&["compare", "--trace", "-"], "t_us,key,cost\n1,a\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("<stdin>: line 2, field row"),
        "{}",
        stderr(&output)
    );

    let output = run(
        &["compare", "--trace", "-", "--limit", "0"],
        "t_us,key,cost\n",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("limit must be at least 1, got 0"),
        "{}",
        stderr(&output)
    );

    let output = run(&["compare", "--limit", "5"], "");
    assert_eq!(output.status.code(), Some(2), "--limit needs --trace");
}

/// A set carries its own numbers: `--capacity` (or `--limit`, …) beside
/// `--set` is a usage error naming both.
#[test]
fn compare_refuses_policy_numbers_beside_a_set() {
    for flag in [
        ["--capacity", "9"],
        ["--queue", "9"],
        ["--limit", "9"],
        ["--window", "9s"],
    ] {
        let mut args = vec!["compare", "--trace", "-", "--set", "token-bucket:5/1s"];
        args.extend(flag);
        let output = run(&args, "t_us,key,cost\n1,a,1\n");
        assert_eq!(output.status.code(), Some(2), "{flag:?}");
        let message = stderr(&output);
        assert!(
            message.contains("cannot be used with"),
            "{flag:?}: {message}"
        );
        assert!(message.contains("--set"), "{flag:?}: {message}");
    }
}

/// Each bad `--change-at` names what is wrong, before any row is decided.
#[test]
fn a_bad_policy_change_is_a_usage_error_that_names_it() {
    let trace = "t_us,key,cost\n1,a,1\n";
    for (flags, message) in [
        (
            &["--change-at", "30s=sliding-log:20/1s"][..],
            "\"30s\" is not a whole number (digits only)",
        ),
        (
            &["--change-at", "sliding-log:20/1s"],
            "\"sliding-log:20/1s\" is not AT=POLICIES",
        ),
        (
            &["--change-at", "5=sliding-log:0/1s"],
            "invalid policies \"sliding-log:0/1s\"",
        ),
        (
            &[
                "--change-at",
                "20=sliding-log:20/1s",
                "--change-at",
                "10=sliding-log:30/1s",
            ],
            "--change-at 10 after --change-at 20: the changes must come in increasing order",
        ),
        (
            &["--change-at-request", "0=sliding-log:20/1s"],
            "--change-at-request 0: requests are numbered from 1",
        ),
        (
            &[
                "--change-at",
                "5=sliding-log:20/1s",
                "--change-at-request",
                "2=sliding-log:20/1s",
            ],
            "cannot be used with",
        ),
    ] {
        let mut extra = flags.to_vec();
        extra.push("-");
        let output = replay_with(&extra, trace);
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        assert!(
            stderr(&output).contains(message),
            "{flags:?}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{flags:?}");
    }
}
