//! A fresh temporary directory for each server, and the sweep of those
//! that dead test processes left behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory name under the system temp dir, unique per process
/// and per call. The first call of a process removes the directories left
/// by test processes that died without dropping their servers (killed, or
/// aborted by a timeout).
pub(crate) fn unique_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SWEPT: Once = Once::new();
    SWEPT.call_once(|| remove_dirs_of_dead_processes(&std::env::temp_dir()));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "limiter-redis-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Removes every `limiter-redis-PID-…` directory under `parent` whose
/// process is gone (no `/proc/PID`). A directory of a live process, or of a
/// process that reused a dead one's PID, is left alone.
fn remove_dirs_of_dead_processes(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("limiter-redis-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_dead_processes_are_removed_and_live_ones_kept() {
        let parent = unique_dir().with_extension("sweep");
        // No process has PID 4294967295 (Linux PIDs stop at 2^22).
        let dead = parent.join("limiter-redis-4294967295-0-1.ca");
        let live = parent.join(format!("limiter-redis-{}-0-1", std::process::id()));
        let other = parent.join("not-ours-4294967295");
        for dir in [&dead, &live, &other] {
            std::fs::create_dir_all(dir.join("inside")).unwrap();
        }
        remove_dirs_of_dead_processes(&parent);
        assert!(!dead.exists(), "a dead process's directory is removed");
        assert!(live.exists(), "a live process's directory is kept");
        assert!(other.exists(), "another name is left alone");
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
