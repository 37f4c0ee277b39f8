//! Every command's help names every flag, its default and examples.

mod support;

use support::{limiter, stdout};

fn help(args: &[&str]) -> String {
    let output = limiter().args(args).arg("--help").output().unwrap();
    assert!(output.status.success());
    stdout(&output)
}

#[test]
fn the_main_help_lists_the_commands_and_examples() {
    let text = help(&[]);
    for needle in ["replay", "compare", "Examples:", "Exit status", "--version"] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn replay_help_has_every_flag_with_its_default() {
    let text = help(&["replay"]);
    for needle in [
        "--algorithm <ALG>",
        "[possible values: fixed-window, sliding-log, sliding-counter, token-bucket, leaky-bucket]",
        "--limit <L>",
        "--window <DUR>",
        "--capacity <C>",
        "[default: the limit]",
        "--queue <Q>",
        "--backend <BACKEND>",
        "[default: memory]",
        "--redis-url <URL>",
        "[default: redis://127.0.0.1:6379]",
        "<TRACE.csv>",
        "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us",
        "Examples:",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn compare_help_has_every_flag_with_its_default_and_explains_the_columns() {
    let text = help(&["compare"]);
    for needle in [
        "--scenario <NAME>",
        "boundary-burst",
        "many-keys",
        "--trace <FILE>",
        "--limit <L>",
        "[default: 100]",
        "--window <DUR>",
        "[default: 10s]",
        "--capacity <C>",
        "--queue <Q>",
        "--backend <BACKEND>",
        "--redis-url <URL>",
        "--format <FORMAT>",
        "[default: table]",
        "--plot <FILE.svg>",
        "--timing",
        "only with --timing",
        "bytes/key",
        "ONE SVG file with a section per scenario",
        "Examples:",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}
