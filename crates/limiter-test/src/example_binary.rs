//! [`example_binary`]: an example program of a package, found beside the
//! test that runs it (for tests that start an example as a process), and
//! refused when a source it was built from changed since: `cargo test -p
//! PACKAGE --test NAME` builds the test alone, and a stale example would
//! run code the test was not written for.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The example `name` of `package`, built beside the running test:
/// `target/<profile>/deps/TEST-…` is the test, `target/<profile>/examples/NAME`
/// the example (`cargo test -p PACKAGE` builds both).
///
/// # Panics
///
/// If it is not there, or is older than a source file it was built from
/// (as cargo's dep-info beside it, `NAME.d`, lists them), saying how to
/// build it.
pub fn example_binary(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test under target/<profile>/deps");
    let example = profile.join("examples").join(name);
    let build =
        format!("`cargo build -p {package} --example {name}` (or `cargo test -p {package}`)");
    assert!(
        example.exists(),
        "{} is missing: {build} builds it",
        example.display()
    );
    let dep_info = std::fs::read_to_string(example.with_extension("d")).unwrap_or_default();
    if let Some(newer) = newer_sources(&example, &dep_info).first() {
        panic!(
            "{} is older than {}: `cargo test --test …` does not rebuild examples; run {build}",
            example.display(),
            newer.display()
        );
    }
    example
}

/// The files of `dep_info` (cargo's `.d` file: `TARGET: SOURCE SOURCE …`,
/// a space in a path escaped as `\ `) changed after `binary` was written.
fn newer_sources(binary: &Path, dep_info: &str) -> Vec<PathBuf> {
    let built = modified(binary).unwrap_or(SystemTime::UNIX_EPOCH);
    let Some((_, sources)) = dep_info
        .lines()
        .next()
        .and_then(|line| line.split_once(": "))
    else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    let mut path = String::new();
    let mut escaped = false;
    for c in sources.chars().chain([' ']) {
        match c {
            '\\' if !escaped => escaped = true,
            ' ' if !escaped => {
                if !path.is_empty() {
                    paths.push(PathBuf::from(std::mem::take(&mut path)));
                }
            }
            c => {
                path.push(c);
                escaped = false;
            }
        }
    }
    paths
        .into_iter()
        .filter(|path| modified(path).is_some_and(|at| at > built))
        .collect()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::time::Duration;

    use super::*;

    /// A file at `path` last changed at `at`.
    fn file_at(path: &Path, at: SystemTime) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        File::create(path).unwrap().set_modified(at).unwrap();
    }

    #[test]
    fn sources_listed_and_changed_after_the_binary_are_found() {
        let dir = std::env::temp_dir().join(format!("example-binary-{}", std::process::id()));
        let built = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let later = built + Duration::from_secs(10);
        let earlier = built - Duration::from_secs(10);
        file_at(&dir.join("bin/worker"), built);
        file_at(&dir.join("src/old.rs"), earlier);
        file_at(&dir.join("src/a b/new.rs"), later);
        file_at(&dir.join("src/unlisted.rs"), later);
        let dep_info = format!(
            "{}: {} {}\n",
            dir.join("bin/worker").display(),
            dir.join("src/old.rs").display(),
            dir.join("src/a b/new.rs")
                .display()
                .to_string()
                .replace(' ', "\\ "),
        );
        assert_eq!(
            newer_sources(&dir.join("bin/worker"), &dep_info),
            [dir.join("src/a b/new.rs")],
            "a newer source it lists (a space escaped); not an older one, nor one it does not list"
        );
        assert!(
            newer_sources(&dir.join("bin/worker"), "").is_empty(),
            "no dep-info"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
