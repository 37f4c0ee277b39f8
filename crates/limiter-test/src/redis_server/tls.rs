//! TLS for `redis-server`: the arguments that serve it with a directory of
//! [`certificates`](crate::certificates), and a CA that signed nothing, for
//! clients that must refuse every server.

use std::path::Path;

use super::dirs::unique_dir;

/// The PEM certificate of a fresh throwaway CA that signed nothing: a
/// client trusting only it must refuse every server.
///
/// # Panics
///
/// If `openssl` is missing or fails.
pub fn unrelated_ca_pem() -> Vec<u8> {
    let dir = unique_dir().with_extension("ca");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    crate::certificates::generate_ca(&dir, "limiter unrelated test CA");
    let pem = std::fs::read(dir.join("ca.crt")).expect("the CA certificate was written");
    let _ = std::fs::remove_dir_all(&dir);
    pem
}

/// The arguments serving TLS on `tls_port` with the certificates
/// [`generate`](crate::certificates::generate) wrote into `dir` (clients
/// need no certificate of their own).
pub(crate) fn tls_args(tls_port: u16, dir: &Path) -> Vec<String> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    vec![
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        file("server.crt"),
        "--tls-key-file".to_owned(),
        file("server.key"),
        "--tls-ca-cert-file".to_owned(),
        file("ca.crt"),
        "--tls-auth-clients".to_owned(),
        "no".to_owned(),
    ]
}
