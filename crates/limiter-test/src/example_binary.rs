//! [`example_binary`]: an example program of a package, found beside the
//! test that runs it (for tests that start an example as a process).

use std::path::PathBuf;

/// The example `name` of `package`, built beside the running test:
/// `target/<profile>/deps/TEST-…` is the test, `target/<profile>/examples/NAME`
/// the example (`cargo test -p PACKAGE` builds both).
///
/// # Panics
///
/// If it is not there, saying how to build it.
pub fn example_binary(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test under target/<profile>/deps");
    let example = profile.join("examples").join(name);
    assert!(
        example.exists(),
        "{} is missing: `cargo test -p {package}` builds it (or `cargo build -p {package} \
         --example {name}`)",
        example.display()
    );
    example
}
