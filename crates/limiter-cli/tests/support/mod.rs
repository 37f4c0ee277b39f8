//! Shared by the integration tests: running the real binary, the shared
//! vectors, and reading its JSON output.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;

use serde_json::Value;

/// The `limiter` binary built by cargo for these tests.
pub fn limiter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_limiter"))
}

/// Runs `limiter ARGS…` with `stdin` as standard input.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let (child, writer) = spawn(args, stdin.as_bytes().to_vec());
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().expect("write the trace to limiter");
    output
}

/// Starts `limiter ARGS…` and writes `stdin` to it from another thread, so
/// a large output cannot block the child while we still write; a child
/// that exits without reading its input (a usage error) is no failure of
/// ours. Join the thread after the child has ended.
pub fn spawn(args: &[&str], stdin: Vec<u8>) -> (Child, JoinHandle<std::io::Result<()>>) {
    let mut child = limiter()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the limiter binary runs");
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || match input.write_all(&stdin) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    });
    (child, writer)
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors")
}

/// One row of `cases.csv`.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub trace: PathBuf,
    pub flags: Vec<String>,
    pub expected: PathBuf,
}

/// Every shared conformance case, as `limiter replay` flags.
pub fn cases() -> Vec<Case> {
    let dir = vectors_dir();
    let text = std::fs::read_to_string(dir.join("cases.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("case,trace,algorithm,limit,window,capacity,queue,expected")
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 8, "{line}");
            let mut flags = vec![
                "--algorithm".to_owned(),
                f[2].to_owned(),
                "--limit".into(),
                f[3].into(),
                "--window".into(),
                f[4].into(),
            ];
            if !f[5].is_empty() {
                flags.extend(["--capacity".to_owned(), f[5].to_owned()]);
            }
            if !f[6].is_empty() {
                flags.extend(["--queue".to_owned(), f[6].to_owned()]);
            }
            Case {
                name: f[0].to_owned(),
                trace: dir.join(f[1]),
                flags,
                expected: dir.join(f[7]),
            }
        })
        .collect()
}

/// Replays every case with `extra` flags and asserts each prints exactly
/// its expected file; returns how many were checked.
pub fn replay_every_vector(extra: &[&str]) -> usize {
    let cases = cases();
    for case in &cases {
        let output = limiter()
            .arg("replay")
            .args(&case.flags)
            .args(extra)
            .arg(&case.trace)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "case {} failed: {}",
            case.name,
            stderr(&output)
        );
        assert_eq!(
            stderr(&output),
            "",
            "case {}: no warning (nor progress) on a shared vector",
            case.name
        );
        let expected = std::fs::read(&case.expected).unwrap();
        if output.stdout != expected {
            let actual = stdout(&output);
            let expected = String::from_utf8(expected).unwrap();
            let first = actual
                .lines()
                .zip(expected.lines())
                .enumerate()
                .find(|(_, (a, e))| a != e)
                .map(|(i, (a, e))| format!("line {}:\n  got      {a}\n  expected {e}", i + 1))
                .unwrap_or_else(|| {
                    format!(
                        "{} lines, expected {}",
                        actual.lines().count(),
                        expected.lines().count()
                    )
                });
            panic!("case {} differs: {first}", case.name);
        }
    }
    cases.len()
}

/// Parses a JSON document the binary printed, or fails showing it.
pub fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{text}"))
}

/// Reading a document whose shape a test knows: each accessor fails,
/// showing what it found, on another shape, and a missing field is a
/// failure rather than `null` (as `value["field"]` would read it).
pub trait JsonShape {
    /// The field `key` of an object.
    fn field(&self, key: &str) -> &Value;
    /// The items of an array.
    fn array(&self) -> &[Value];
    /// A string's text.
    fn str(&self) -> &str;
    /// A number, as a double.
    fn num(&self) -> f64;
}

impl JsonShape for Value {
    fn field(&self, key: &str) -> &Value {
        self.as_object()
            .unwrap_or_else(|| panic!("not an object: {self}"))
            .get(key)
            .unwrap_or_else(|| panic!("no field {key:?} in {self}"))
    }
    fn array(&self) -> &[Value] {
        self.as_array()
            .unwrap_or_else(|| panic!("not an array: {self}"))
    }
    fn str(&self) -> &str {
        self.as_str()
            .unwrap_or_else(|| panic!("not a string: {self}"))
    }
    fn num(&self) -> f64 {
        self.as_f64()
            .unwrap_or_else(|| panic!("not a number: {self}"))
    }
}
