//! Throwaway TLS certificates for tests, made with the `openssl` command
//! line: a CA and a server certificate for `127.0.0.1` and `localhost`
//! (the TLS `redis-server`, a tonic server over TLS).

use std::io::ErrorKind;
use std::path::Path;
use std::process::{Command, Stdio};

/// What a missing `openssl` panics with: how to install it.
pub const OPENSSL_HINT: &str =
    "openssl not found: install it with `apt-get update && apt-get install -y openssl`";

/// Writes `ca.key`/`ca.crt` (a throwaway CA) and `server.key`/`server.crt`
/// (for `127.0.0.1` and `localhost`, signed by it) into `dir`: ECDSA P-256,
/// valid for two days. `dir` is created if missing. The server certificate
/// is good for clients too (`clientAuth`): cluster nodes present it to each
/// other on the TLS cluster bus, which always checks the peer's.
///
/// # Panics
///
/// If `openssl` is missing (with the install command) or fails (with its
/// output).
pub fn generate(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    generate_ca(dir, "limiter throwaway test CA");
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth,clientAuth\n\
         subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("write server.ext");
    request_with_new_key(
        dir,
        &[
            "-new",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

/// Writes `ca.key` and `ca.crt`, a self-signed CA called `name`, into `dir`.
pub(crate) fn generate_ca(dir: &Path, name: &str) {
    let subject = format!("/CN={name}");
    request_with_new_key(
        dir,
        &[
            "-x509",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-sha256",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// Runs `openssl req` in `dir` with a new ECDSA P-256 key (unencrypted)
/// and `args`.
fn request_with_new_key(dir: &Path, args: &[&str]) {
    let key = [
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(dir, &[&key[..], args].concat());
}

/// Runs `openssl args` in `dir`, panicking with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| match e.kind() {
            ErrorKind::NotFound => panic!("{OPENSSL_HINT}"),
            _ => panic!("{OPENSSL_HINT} (running it failed: {e})"),
        });
    assert!(
        output.status.success(),
        "openssl {} failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
