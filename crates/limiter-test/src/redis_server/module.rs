//! limiter-redis-module for the tests: built once per test process (a
//! `cargo build -p limiter-redis-module`, quick when nothing changed), so
//! a server started with [`RedisServer::start_with_module`] runs the
//! module of the checkout under test.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::RedisServer;

/// The module's shared library, built from this checkout (once per
/// process). Panics, saying why, if it cannot be built: a test that needs
/// the module never passes without it.
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A relative CARGO_TARGET_DIR is read from the workspace's root, where
    // scripts/test runs cargo.
    let target = workspace.join(
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from),
    );
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "limiter-redis-module"])
        .current_dir(&workspace)
        .status()
        .unwrap_or_else(|e| panic!("cargo build -p limiter-redis-module: {e}"));
    assert!(
        status.success(),
        "cargo build -p limiter-redis-module failed ({status}): it needs libclang \
         (scripts/install-deps installs Debian's libclang-dev)"
    );
    let path = target.join("debug/liblimiter_redis_module.so");
    assert!(path.exists(), "{} missing after the build", path.display());
    path
}

impl RedisServer {
    /// As [`start_with_args`](Self::start_with_args), with limiter-redis-module
    /// loaded (`--loadmodule`, [`module_path()`]).
    pub fn start_with_module(args: &[&str]) -> Self {
        let path = module_path();
        let mut all = vec!["--loadmodule", path.to_str().expect("a UTF-8 path")];
        all.extend_from_slice(args);
        Self::start_with_args(&all)
    }
}
