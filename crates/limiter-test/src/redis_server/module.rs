//! limiter-redis-module for the tests: built once per test process (a
//! `cargo build -p limiter-redis-module`, quick when nothing changed), so
//! a server started with [`RedisServer::start_with_module`] runs the
//! module of the checkout under test. Benches load the optimized build
//! ([`optimized_module_path`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::RedisServer;

/// The module's shared library, built from this checkout (once per
/// process). Panics, saying why, if it cannot be built: a test that needs
/// the module never passes without it.
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build(Profile::Debug)).clone()
}

/// As [`module_path()`], built with `--release`: what a server in
/// production loads, and what a bench of server CPU measures.
pub fn optimized_module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build(Profile::Release)).clone()
}

/// Cargo's build profile.
#[derive(Clone, Copy)]
enum Profile {
    Debug,
    Release,
}

fn build(profile: Profile) -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A relative CARGO_TARGET_DIR is read from the workspace's root, where
    // scripts/test runs cargo.
    let target = workspace.join(
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from),
    );
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "--quiet", "-p", "limiter-redis-module"]);
    let directory = match profile {
        Profile::Debug => "debug",
        Profile::Release => {
            cargo.arg("--release");
            "release"
        }
    };
    let status = cargo
        .current_dir(&workspace)
        .status()
        .unwrap_or_else(|e| panic!("cargo build -p limiter-redis-module: {e}"));
    assert!(
        status.success(),
        "cargo build -p limiter-redis-module failed ({status}): it needs libclang \
         (scripts/install-deps installs Debian's libclang-dev)"
    );
    let path = target.join(directory).join("liblimiter_redis_module.so");
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
