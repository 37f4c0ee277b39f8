//! Hostile input through the real binary (huge numbers, long lines, bad
//! bytes, quoting): every run must end within a deadline, and bad input
//! must name its line and field.

mod support;

use support::JsonShape;

use std::process::Output;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A run that takes longer has hung: each run here ends in well under a
/// second, so a minute leaves room for a heavily loaded host.
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `limiter ARGS…` on `stdin` bytes, killing it (and failing) if it
/// has not ended within [`DEADLINE`].
fn run_bytes(args: &[&str], stdin: Vec<u8>) -> Output {
    let (mut child, writer) = support::spawn(args, stdin);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("limiter {args:?} did not end within {DEADLINE:?}");
        }
        sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().expect("write the trace to limiter");
    output
}

/// `limiter replay --algorithm ALGORITHM --limit LIMIT --window WINDOW -`
/// on `trace`.
fn replay(algorithm: &str, limit: &str, window: &str, trace: &[u8]) -> Output {
    let args = [
        "replay",
        "--algorithm",
        algorithm,
        "--limit",
        limit,
        "--window",
        window,
        "-",
    ];
    run_bytes(&args, trace.to_vec())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The plot's time axis ends on a trace row at `t_us = u64::MAX` (its
/// counter must not wrap there and run forever).
#[test]
fn compare_plot_ends_on_a_trace_row_at_u64_max() {
    let dir = std::env::temp_dir().join(format!("limiter-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("x.svg");
    let output = run_bytes(
        &["compare", "--trace", "-", "--plot", plot.to_str().unwrap()],
        b"t_us,key,cost\n18446744073709551615,a,1\n".to_vec(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.ends_with("</svg>\n"));
    assert!(svg.len() < 1 << 20, "a plot of {} bytes", svg.len());
    // A request at 2^53 µs and one after it: the first is drawn, the second
    // is an error row that stretches nothing.
    let output = run_bytes(
        &["compare", "--trace", "-", "--plot", plot.to_str().unwrap()],
        b"t_us,key,cost\n9007199254740992,a,1\n18446744073709551615,a,1\n".to_vec(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `admitted_units` is exact past u64 (20,000 requests of 2^51 units, one
/// a microsecond: each algorithm admits at least half, 10,000 * 2^51 =
/// 2.25 * 10^19, above 2^64).
#[test]
fn compare_json_admitted_units_are_exact_past_u64() {
    let cost = 1u64 << 51;
    let mut trace = String::from("t_us,key,cost\n");
    for t in 0..20_000u64 {
        trace.push_str(&format!("{t},a,{cost}\n"));
    }
    let limit = cost.to_string();
    let output = run_bytes(
        &[
            "compare", "--trace", "-", "--limit", &limit, "--window", "1us", "--format", "json",
        ],
        trace.into_bytes(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let json = text(&output.stdout);
    let document = support::parse_json(&json);
    let results = document.field("scenarios").array()[0]
        .field("results")
        .array();
    assert_eq!(results.len(), 5);
    for result in results {
        let admitted = result.field("admitted").num() as u128;
        assert!(admitted >= 10_000, "{json}");
        let exact = admitted * u128::from(cost);
        assert!(exact > u128::from(u64::MAX));
        let fields = format!("\"admitted\": {admitted}, \"admitted_units\": {exact},");
        assert!(json.contains(&fields), "{fields} not in {json}");
        assert!(result.field("admitted_units_note").str().contains("2^53"));
    }
}

/// A line over 64 KiB is refused by its number, never read whole.
#[test]
fn replay_refuses_a_line_over_64_kib_and_names_it() {
    let mut trace = b"t_us,key,cost\n1,a,1\n2,".to_vec();
    trace.extend(std::iter::repeat_n(b'k', 8 << 20));
    trace.extend_from_slice(b",1\n3,b,1\n");
    let output = replay("fixed-window", "5", "1s", &trace);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("line 3, field row: longer than the limit of 65536 bytes"),
        "{stderr}"
    );
    // The rows before it were decided and printed.
    assert!(text(&output.stdout).contains("\n1,a,1,allowed,"));
}

/// Invalid UTF-8 is reported with its line and field.
#[test]
fn replay_names_the_line_and_field_of_invalid_utf8() {
    let output = replay(
        "sliding-log",
        "5",
        "1s",
        b"t_us,key,cost\n1,a,1\n2,\xffb,1\n",
    );
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("line 3, field key: invalid UTF-8"),
        "{stderr}"
    );
}

/// A byte order mark and RFC 4180 quoting are accepted. A quoted key
/// comes back quoted in the decisions.
#[test]
fn replay_accepts_a_bom_and_quoted_fields() {
    let output = replay(
        "fixed-window",
        "1",
        "1s",
        b"\xEF\xBB\xBF\"t_us\",\"key\",\"cost\"\r\n1,\"user,1\",1\r\n2,\"say \"\"hi\"\"\",1\r\n3,\"user,1\",1\r\n",
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[0].starts_with("1,\"user,1\",1,allowed,"), "{stdout}");
    assert!(
        rows[1].starts_with("2,\"say \"\"hi\"\"\",1,allowed,"),
        "{stdout}"
    );
    assert!(rows[2].starts_with("3,\"user,1\",1,denied,"), "{stdout}");
}

/// A time or cost above `u64::MAX` is a whole number out of range: an
/// `error` row (docs/spec.md section 6) printed as written, and the replay
/// goes on.
#[test]
fn replay_answers_numbers_above_u64_with_error_rows() {
    let output = replay(
        "token-bucket",
        "5",
        "1s",
        b"t_us,key,cost\n18446744073709551616,a,1\n1,a,0099999999999999999999\n2,a,1\n",
    );
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        rows[..2],
        [
            "18446744073709551616,a,1,error,,,,,",
            "1,a,99999999999999999999,error,,,,,"
        ]
    );
    assert!(rows[2].starts_with("2,a,1,allowed,5,4,"), "{stdout}");
}

/// A step back deeper than the memory backend keeps keys (an hour) may
/// make its decisions differ from Redis's: the replay says so on stderr,
/// and still prints every row.
#[test]
fn replay_on_memory_warns_of_a_step_back_deeper_than_an_hour() {
    let deep = replay("fixed-window", "1", "1s", b"t_us,key\n7200000000,a\n0,a\n");
    assert!(deep.status.success());
    assert_eq!(text(&deep.stdout).lines().count(), 3);
    let stderr = text(&deep.stderr);
    assert!(
        stderr.starts_with("warning: <stdin>: request 2 (t_us=0) steps back 7200s"),
        "{stderr}"
    );
    let shallow = replay("fixed-window", "1", "1s", b"t_us,key\n3600000000,a\n0,a\n");
    assert_eq!(text(&shallow.stderr), "");
}

/// A row whose cost is never decided (0, above every maximum, above
/// `u64::MAX`) still has a time: it counts towards the epoch warning,
/// which needs every `t_us` to look like a date (here one is 5), in
/// `replay` and `compare --trace` alike.
#[test]
fn a_row_never_decided_keeps_its_time_for_the_epoch_warning() {
    for cost in ["0", "101", "99999999999999999999999"] {
        let trace = format!("t_us,key,cost\n1700000000,a,1\n5,a,{cost}\n1700000001,a,1\n");
        let replay = replay("sliding-log", "5", "1s", trace.as_bytes());
        let compare = run_bytes(&["compare", "--trace", "-"], trace.into_bytes());
        for (command, output) in [("replay", replay), ("compare", compare)] {
            assert!(output.status.success(), "{command}, cost {cost}");
            assert_eq!(text(&output.stderr), "", "{command}, cost {cost}");
        }
    }
}

/// A row whose cost is never decided touches no key, so its time steps
/// nowhere: neither `replay` nor `compare --trace` warns of a step back,
/// as both do when the row is decided (cost 1).
#[test]
fn a_row_never_decided_is_no_step_back() {
    for cost in ["1", "0", "101", "99999999999999999999999"] {
        let trace = format!("t_us,key,cost\n7300000000,a,1\n5,a,{cost}\n7300000001,a,1\n");
        let replay = replay("sliding-log", "5", "1s", trace.as_bytes());
        let compare = run_bytes(&["compare", "--trace", "-"], trace.into_bytes());
        for (command, output) in [("replay", replay), ("compare", compare)] {
            assert!(output.status.success(), "{command}, cost {cost}");
            let stderr = text(&output.stderr);
            assert_eq!(
                stderr.starts_with("warning: <stdin>: request 2 (t_us=5) steps back"),
                cost == "1",
                "{command}, cost {cost}: {stderr}"
            );
        }
    }
}
