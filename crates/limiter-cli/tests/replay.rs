//! `limiter replay` through the real binary: every shared vector, byte for
//! byte, on the memory backend and on a real Redis server.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::thread::sleep;
use std::time::{Duration, Instant};

use limiter_test::cases::{policy_change_cases, PolicyChangeCase};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::RedisServer;
use support::{limiter, replay_every_vector, run, stderr, stdout, vectors_dir};

#[test]
fn replay_matches_every_shared_vector_on_memory() {
    assert_eq!(replay_every_vector(&[]), 32);
    // Memory is the default; naming it changes nothing.
    assert_eq!(replay_every_vector(&["--backend", "memory"]), 32);
}

#[test]
fn replay_matches_every_shared_vector_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    assert_eq!(
        replay_every_vector(&["--backend", "redis", "--redis-url", url.as_ref()]),
        32
    );
    // Each run has a fresh key prefix: replaying again on the same server
    // starts from empty keys and gives the same bytes.
    assert_eq!(
        replay_every_vector(&["--backend", "redis", "--redis-url", url.as_ref()]),
        32
    );
}

/// The vectors decided by limiter-redis-module (`--redis-engine module`)
/// on a server that loaded it.
#[test]
fn replay_matches_every_shared_vector_on_redis_with_the_module() {
    let server = RedisServer::start_with_module(&[]);
    let url = server.url();
    let flags = ["--backend", "redis", "--redis-url", url.as_ref()];
    assert_eq!(
        replay_every_vector(&[&flags[..], &["--redis-engine", "module"]].concat()),
        32
    );
    let stats = server.query("INFO commandstats");
    assert!(stats.contains("cmdstat_limiter.decide:calls="), "{stats}");
    assert!(!stats.contains("cmdstat_fcall:"), "{stats}");
}

/// Replays `case` on memory with its schedule given by `schedule_flags`
/// (the first policies by `--policy`) and returns its stdout, checking the
/// run succeeded without a word on stderr.
fn replay_policy_change(
    case: &PolicyChangeCase,
    schedule_flags: &[String],
    backend: &[&str],
) -> String {
    let first = case.schedule[0].1.to_string();
    let mut args = vec!["replay", "--policy", &first];
    args.extend(schedule_flags.iter().map(String::as_str));
    args.extend(backend);
    args.push("-");
    let output = run(&args, &case.trace);
    assert!(
        output.status.success(),
        "case {}: {}",
        case.name,
        stderr(&output)
    );
    assert_eq!(stderr(&output), "", "case {}", case.name);
    stdout(&output)
}

/// Every policy-change vector, its schedule given by request numbers
/// (`--change-at-request`, the case's 0-based row plus one), prints its
/// expected file byte for byte; and so does every case whose schedule
/// times can say: a change before a row whose time is above every time
/// since the change before it is `--change-at` that row's time. (A change
/// between rows of one time, or just after a step back, has no time of
/// its own.)
#[test]
fn replay_matches_every_policy_change_vector_on_memory() {
    replay_every_policy_change_vector(&["--backend", "memory"]);
}

/// The same on a real redis-server (`RedisLimiter::set_policies`), each
/// run under a fresh key prefix.
#[test]
fn replay_matches_every_policy_change_vector_on_redis() {
    let server = RedisServer::start();
    let url = server.url();
    replay_every_policy_change_vector(&["--backend", "redis", "--redis-url", url.as_ref()]);
}

fn replay_every_policy_change_vector(backend: &[&str]) {
    let cases = policy_change_cases();
    let mut by_time = 0;
    for case in &cases {
        let times: Vec<u64> = case
            .trace
            .lines()
            .skip(1)
            .map(|line| line.split(',').next().unwrap().parse().unwrap())
            .collect();
        let changes = &case.schedule[1..];
        let by_request: Vec<String> = changes
            .iter()
            .flat_map(|(row, policies)| {
                [
                    "--change-at-request".to_owned(),
                    format!("{}={policies}", row + 1),
                ]
            })
            .collect();
        assert_eq!(
            replay_policy_change(case, &by_request, backend),
            case.expected,
            "case {} by request number",
            case.name
        );
        let froms: Vec<usize> = case.schedule.iter().map(|(row, _)| *row).collect();
        let timed = changes
            .iter()
            .zip(&froms)
            .all(|((row, _), previous)| times[*previous..*row].iter().all(|t| *t < times[*row]));
        if timed {
            let by_times: Vec<String> = changes
                .iter()
                .flat_map(|(row, policies)| {
                    [
                        "--change-at".to_owned(),
                        format!("{}={policies}", times[*row]),
                    ]
                })
                .collect();
            assert_eq!(
                replay_policy_change(case, &by_times, backend),
                case.expected,
                "case {} by time",
                case.name
            );
            by_time += 1;
        }
    }
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    assert!(by_time >= 10, "only {by_time} cases by time");
}

#[test]
fn replay_reads_the_trace_from_stdin_given_a_dash() {
    let dir = vectors_dir();
    let trace = std::fs::read_to_string(dir.join("traces/trace-000.csv")).unwrap();
    let expected = std::fs::read_to_string(dir.join("expected/fixed-window-000.csv")).unwrap();
    let output = run(
        &[
            "replay",
            "--algorithm",
            "fixed-window",
            "--limit",
            "100",
            "--window",
            "10s",
            "-",
        ],
        &trace,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), expected);
    assert_eq!(
        stderr(&output),
        "",
        "no progress when stderr is not a terminal"
    );
}

#[test]
fn replay_prints_error_rows_for_requests_that_can_never_be_admitted() {
    let output = run(
        &[
            "replay",
            "--algorithm",
            "token-bucket",
            "--limit",
            "5",
            "--window",
            "1s",
            "--capacity",
            "3",
            "-",
        ],
        "t_us,key,cost\n0,a,4\n1,a,0\n2,a,3\n3,a,1\n9007199254740993,a,1\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
         0,a,4,error,,,,,\n\
         1,a,0,error,,,,,\n\
         2,a,3,allowed,3,0,0,600000,0\n\
         3,a,1,denied,3,0,199999,599999,0\n\
         9007199254740993,a,1,error,,,,,\n"
    );
}

#[test]
fn replay_accepts_a_trace_without_a_cost_column() {
    let output = run(
        &[
            "replay",
            "--algorithm",
            "sliding-log",
            "--limit",
            "1",
            "--window",
            "1s",
            "-",
        ],
        "t_us,key\n0,a\n1,a\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).lines().skip(1).collect::<Vec<_>>(),
        [
            "0,a,1,allowed,1,0,0,1000000,0",
            "1,a,1,denied,1,0,999999,999999,0"
        ]
    );
}

#[test]
fn a_redis_failure_mid_replay_stops_with_a_clear_message() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut child = limiter()
        .args([
            "replay",
            "--algorithm",
            "fixed-window",
            "--limit",
            "5",
            "--window",
            "1s",
            "--backend",
            "redis",
            "--redis-url",
            url.as_str(),
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"t_us,key,cost\n1,a,1\n").unwrap();
    stdin.flush().unwrap();
    // Wait until the first request has been decided (its key exists), then
    // take the server away before the second.
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.command("DBSIZE") == ":0" {
        assert!(
            Instant::now() < deadline,
            "the first request never reached Redis"
        );
        sleep(Duration::from_millis(10));
    }
    server.stop();
    stdin.write_all(b"2,a,1\n3,a,1\n").unwrap();
    drop(stdin);

    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message
            .starts_with("error: Redis backend failed on request 2 of <stdin> (t_us=2, key=a): "),
        "{message}"
    );
    // The decision made before the failure was printed; nothing after it.
    assert_eq!(
        stdout(&output),
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
         1,a,1,allowed,5,4,0,999999,0\n"
    );
}

/// Two runs (two processes) under one `--redis-prefix` share state on
/// purpose; without it each run starts afresh.
#[test]
fn replays_under_one_redis_prefix_share_state() {
    let server = RedisServer::start();
    let url = server.url();
    let trace = "t_us,key,cost\n1000000,user,1\n1000001,user,1\n";
    let replay = |prefix: Option<&str>| {
        let mut args = vec![
            "replay",
            "--algorithm",
            "sliding-log",
            "--limit",
            "3",
            "--window",
            "1m",
            "--backend",
            "redis",
            "--redis-url",
            url.as_str(),
        ];
        if let Some(prefix) = prefix {
            args.extend(["--redis-prefix", prefix]);
        }
        args.push("-");
        let output = run(&args, trace);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
            .lines()
            .skip(1)
            .map(|row| row.split(',').nth(3).unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(replay(Some("shared")), ["allowed", "allowed"]);
    // Its one key outlives the window by real time: a second run an hour
    // later still continues it (the Redis limiter's own floor, a minute,
    // lost the state of keys touched further apart than that).
    let key = server.query("RANDOMKEY");
    let ttl_ms: u64 = server.command(&format!("PTTL {key}"))[1..].parse().unwrap();
    assert!(
        (3_500_000..=3_600_000).contains(&ttl_ms),
        "{key} expires in {ttl_ms} ms"
    );
    assert_eq!(
        replay(Some("shared")),
        ["allowed", "denied"],
        "the second run continues the first"
    );
    assert_eq!(
        replay(None),
        ["allowed", "allowed"],
        "a fresh prefix by default"
    );
    assert_eq!(replay(None), ["allowed", "allowed"]);
}

#[test]
fn times_in_epoch_seconds_or_milliseconds_get_one_warning_and_the_same_rows() {
    let flags = [
        "replay",
        "--algorithm",
        "fixed-window",
        "--limit",
        "2",
        "--window",
        "1s",
        "-",
    ];
    // Unix seconds: read as microseconds, all three fall in one window.
    let output = run(
        &flags,
        "t_us,key\n1700000000,a\n1700000001,a\n1700000002,a\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us\n\
         1700000000,a,1,allowed,2,1,0,1000000,0\n\
         1700000001,a,1,allowed,2,0,0,999999,0\n\
         1700000002,a,1,denied,2,0,999998,999998,0\n"
    );
    assert_eq!(
        stderr(&output),
        "warning: <stdin>: t_us values look like seconds since the epoch (1700000000 to \
         1700000002; as seconds from 2023-11-14 22:13:20 UTC); t_us is microseconds: \
         multiply by 1000000\n"
    );

    // Unix milliseconds, over many rows: still one warning.
    let mut trace = String::from("t_us,key,cost\n");
    for i in 0..1000u64 {
        trace.push_str(&format!("{},k{},1\n", 1_700_000_000_000 + i * 50, i % 3));
    }
    let output = run(&flags, &trace);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).lines().count(), 1001);
    let warnings = stderr(&output);
    assert_eq!(warnings.lines().count(), 1, "{warnings}");
    assert!(
        warnings
            .starts_with("warning: <stdin>: t_us values look like milliseconds since the epoch")
            && warnings.ends_with("t_us is microseconds: multiply by 1000\n"),
        "{warnings}"
    );

    // Microseconds since the epoch, and relative times: no warning.
    for trace in [
        "t_us,key\n1700000000000000,a\n1700000000000001,a\n",
        "t_us,key\n0,a\n1700000000,a\n",
    ] {
        let output = run(&flags, trace);
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(stderr(&output), "", "{trace}");
    }
}

/// The shared vectors on a Redis Cluster started as docs/backends.md
/// documents it (3 primaries, 3 replicas), found from one seed node.
#[test]
fn replay_matches_every_shared_vector_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let seed = &cluster.seed_urls()[0];
    assert_eq!(
        replay_every_vector(&["--backend", "redis-cluster", "--redis-url", seed]),
        32
    );
}
