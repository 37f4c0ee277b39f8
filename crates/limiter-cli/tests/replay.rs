//! `limiter replay` through the real binary: every shared vector, byte for
//! byte, on the memory backend and on a real Redis server.

mod support;

use support::{replay_every_vector, run, stderr, stdout, vectors_dir};

#[test]
fn replay_matches_every_shared_vector_on_memory() {
    assert_eq!(replay_every_vector(&[]), 32);
    // Memory is the default; naming it changes nothing.
    assert_eq!(replay_every_vector(&["--backend", "memory"]), 32);
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
