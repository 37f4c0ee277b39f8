//! Shared by the memory-measuring examples, the memory bound tests (this
//! crate's and limiter-lease's) and the `bytes_per_key` bench: each
//! measures in a fresh child process.

use std::process::Command;

/// The resident set size in bytes (Linux), from `/proc/self/status`.
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs this same binary with `args` in a fresh process that hands freed
/// memory back to the system (glibc's `MALLOC_MMAP_THRESHOLD_=65536`, one
/// arena), so that its resident set is what it holds; its standard output.
/// Panics, with `what` and the child's standard error, if it fails.
#[allow(dead_code, reason = "key_spray measures in its own process")]
pub(crate) fn run_child(args: &[&str], what: &str) -> String {
    let exe = std::env::current_exe().expect("own path");
    let output = Command::new(exe)
        .args(args)
        .env("MALLOC_MMAP_THRESHOLD_", "65536")
        .env("MALLOC_ARENA_MAX", "1")
        .output()
        .expect("run the measuring child");
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the child writes text")
}
