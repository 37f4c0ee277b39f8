//! What docs/cli.md and the README show the `limiter` command print is
//! what it prints: every `console` block of docs/cli.md (a `$ ` command,
//! then its output) is run through `sh` with this build's `limiter` first
//! on the `PATH`, the README's `compare` output is the start of the real
//! one, and each message of the errors table is the real message of a
//! command that causes it. None of these needs Redis.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{stderr, stdout};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(page: &str) -> String {
    std::fs::read_to_string(root().join(page)).unwrap()
}

/// The fenced blocks of a Markdown page: (language, body).
fn blocks(page: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in page.lines() {
        match (open.take(), line.strip_prefix("```")) {
            (None, Some(language)) => open = Some((language.to_owned(), String::new())),
            (Some(block), Some(_)) => blocks.push(block),
            (Some((language, mut body)), None) => {
                body.push_str(line);
                body.push('\n');
                open = Some((language, body));
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fence is never closed");
    blocks
}

/// Runs `command` through `sh` from the repository's root, with the
/// directory of this build's `limiter` first on the `PATH`.
fn shell(command: &str) -> Output {
    let binary = Path::new(env!("CARGO_BIN_EXE_limiter"));
    let path = format!(
        "{}:{}",
        binary.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root())
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn every_console_block_of_the_cli_page_prints_what_it_shows() {
    let page = read("docs/cli.md");
    let mut checked = 0;
    for (language, body) in blocks(&page) {
        if language != "console" {
            continue;
        }
        // The command: the `$ ` line and the lines its `\` continues.
        let mut lines = body.lines();
        let mut command = lines
            .next()
            .unwrap()
            .strip_prefix("$ ")
            .expect("starts with `$ `")
            .to_owned();
        while command.ends_with('\\') {
            command.pop();
            command.push_str(lines.next().unwrap().trim_start());
        }
        assert!(command.starts_with("limiter "), "{command}");
        let shown: String = lines.map(|line| format!("{line}\n")).collect();
        let output = shell(&command);
        assert!(output.status.success(), "{command}: {}", stderr(&output));
        assert_eq!(
            stdout(&output),
            shown,
            "docs/cli.md shows another output for `{command}`"
        );
        checked += 1;
    }
    // The replay, a replay with a policy change, the tiered scenario, two
    // sets, the policy-change scenario, and the default run.
    assert_eq!(checked, 6);
}

#[test]
fn the_readme_shows_the_start_of_the_compare_output() {
    let readme = read("README.md");
    let blocks = blocks(&readme);
    let at = blocks
        .iter()
        .position(|(_, body)| body.starts_with("cargo run --release -p limiter-cli -- compare\n"))
        .expect("the README runs `compare`");
    let (language, shown) = &blocks[at + 1];
    assert_eq!(language, "text");
    // Up to the line that says the rest follows.
    let shown: Vec<&str> = shown
        .lines()
        .take_while(|line| !line.starts_with('…'))
        .collect();
    assert!(shown.len() > 5, "{shown:?}");
    let output = shell("limiter compare");
    let printed: Vec<&str> = std::str::from_utf8(&output.stdout)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(&printed[..shown.len()], &shown[..]);
}

/// The errors table's rows: status and message, by their `when` cell.
fn error_rows(page: &str) -> Vec<(String, String, String)> {
    let start = page.find("### Errors and exit status").unwrap();
    page[start..]
        .lines()
        .skip_while(|line| !line.starts_with("| status"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            // Cells split at the `|`s that are not escaped as `\|`.
            let line = line.replace("\\|", "\u{0}");
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().replace('\u{0}', "|"))
                .collect();
            let message = cells[2].trim_matches('`').to_owned();
            (cells[0].clone(), cells[1].clone(), message)
        })
        .collect()
}

/// `shown` with each `…` standing for any text.
fn matches(shown: &str, printed: &str) -> bool {
    let mut parts = shown.split('…');
    let first = parts.next().unwrap();
    let Some(mut rest) = printed.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[test]
fn every_message_of_the_errors_table_is_what_the_binary_prints() {
    let page = read("docs/cli.md");
    let dir = std::env::temp_dir().join(format!("limiter-documented-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("trace.csv"),
        "t_us,key,cost\n1,a,1\n2,a,1\nsoon,a,1\n",
    )
    .unwrap();
    // A port nothing listens on: bound, then freed.
    let closed_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed_url = format!("redis://127.0.0.1:{closed_port}");
    let replay = [
        "replay",
        "--algorithm",
        "sliding-log",
        "--limit",
        "10",
        "--window",
        "1s",
    ];
    let nine_policies: Vec<&str> = ["--policy", "sliding-log:1/1s"].repeat(9);
    let rows = error_rows(&page);
    let mut checked = 0;
    for (status, when, message) in &rows {
        let args: Vec<&str> = match when.as_str() {
            "success (also when stdout is closed early, e.g. `| head`)" => continue,
            "malformed trace" => [&replay[..], &["trace.csv"]].concat(),
            "missing file" => [&replay[..], &["x.csv"]].concat(),
            "Redis unreachable (within 5 s at most)" => [
                &replay[..],
                &["--backend", "redis", "--redis-url", &closed_url, "-"],
            ]
            .concat(),
            // Needs a server that fails under the replay: tests/replay.rs
            // checks the message on a real redis-server.
            "Redis fails mid-replay (rows decided so far are printed)" => continue,
            "unknown algorithm" => vec![
                "replay",
                "--algorithm",
                "gcra",
                "--limit",
                "10",
                "--window",
                "1s",
                "-",
            ],
            "invalid policy" => vec![
                "replay",
                "--algorithm",
                "sliding-log",
                "--limit",
                "0",
                "--window",
                "1s",
                "-",
            ],
            "unknown algorithm or option in `--policy`" => {
                vec!["replay", "--policy", "token-bucket:1/1s,burst=2", "-"]
            }
            "an option that does not apply" => {
                vec!["replay", "--policy", "sliding-log:5/1s,capacity=3", "-"]
            }
            "an empty `--policy` (no part)" => vec!["replay", "--policy", "", "-"],
            "more than 8 policies" => [&["replay"][..], &nine_policies, &["-"]].concat(),
            "`--policy` with `--algorithm`/`--limit`/…" => {
                vec![
                    "replay",
                    "--policy",
                    "sliding-log:1/1s",
                    "--limit",
                    "5",
                    "-",
                ]
            }
            "a `--change-at` time that is not a number" => {
                vec![
                    "replay",
                    "--policy",
                    "sliding-log:100/1m",
                    "--change-at",
                    "30s=sliding-log:120/1m",
                    "-",
                ]
            }
            "`--change-at` times not increasing" => vec![
                "replay",
                "--policy",
                "sliding-log:100/1m",
                "--change-at",
                "20=sliding-log:120/1m",
                "--change-at",
                "10=sliding-log:100/1m",
                "-",
            ],
            "an invalid policy in `--change-at`" => {
                vec![
                    "replay",
                    "--policy",
                    "sliding-log:100/1m",
                    "--change-at",
                    "5=sliding-log:0/1m",
                    "-",
                ]
            }
            "malformed Redis URL" => [
                &replay[..],
                &["--backend", "redis", "--redis-url", "localhost:6379", "-"],
            ]
            .concat(),
            other => panic!("docs/cli.md's errors table has a row this test does not run: {other}"),
        };
        let mut command = support::limiter();
        let output = command.args(&args).current_dir(&dir).output().unwrap();
        let printed = stderr(&output);
        let printed = printed.lines().next().unwrap_or_default();
        let shown = message.replace("redis://127.0.0.1:6390", &closed_url);
        assert!(
            matches(&shown, printed),
            "{when}: docs/cli.md shows\n  {shown}\nthe binary prints\n  {printed}"
        );
        assert_eq!(
            output.status.code().map(|code| code.to_string()).as_deref(),
            Some(status.as_str()),
            "{when}"
        );
        checked += 1;
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((rows.len(), checked), (16, 14));
}
