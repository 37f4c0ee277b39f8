//! One node of the cluster: who it is ([`ClusterNode`]), the
//! `redis-server` behind it ([`Node`]), and how it is started.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::redis_server::{tls_args, RedisServer};

/// The `cluster-node-timeout` of every node, in ms: how long a primary may
/// be unreachable before its replica takes over (a failover takes about
/// twice this).
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// One node of the cluster, as seen at the time of the call: its port on
/// `127.0.0.1` and its cluster node id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterNode {
    /// The node's port on `127.0.0.1`.
    pub port: u16,
    /// The node's 40-character cluster id.
    pub id: String,
}

impl ClusterNode {
    /// The node's URL, e.g. `redis://127.0.0.1:7000/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// One node: its server (stopped once killed) and its identity.
pub(super) struct Node {
    pub(super) port: u16,
    /// The TLS port, when the cluster serves TLS.
    pub(super) tls_port: Option<u16>,
    pub(super) bus_port: u16,
    pub(super) id: String,
    pub(super) server: Mutex<RedisServer>,
}

impl Node {
    /// Its port and id.
    pub(super) fn identity(&self) -> ClusterNode {
        ClusterNode {
            port: self.port,
            id: self.id.clone(),
        }
    }

    /// Whether its server runs (it was not killed).
    pub(super) fn is_running(&self) -> bool {
        lock(&self.server).is_running()
    }
}

/// Starts one cluster node on `port`, its cluster bus on `bus_port`; with
/// `tls`, also serving TLS on its port with the certificates in its
/// directory.
pub(super) fn start_node(
    port: u16,
    bus_port: u16,
    password: Option<&str>,
    tls: Option<(u16, &Path)>,
    module: bool,
) -> RedisServer {
    let bus_port = bus_port.to_string();
    let node_timeout = NODE_TIMEOUT_MS.to_string();
    let config_file = format!("nodes-{port}.conf");
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        &bus_port,
        "--cluster-node-timeout",
        &node_timeout,
        "--cluster-config-file",
        &config_file,
        // A replica takes over however long it was cut off.
        "--cluster-replica-validity-factor",
        "0",
        // Replicas sync at once (the default waits 5 s for others).
        "--repl-diskless-sync-delay",
        "0",
    ];
    if let Some(password) = password {
        args.extend(["--requirepass", password, "--masterauth", password]);
    }
    let tls_args: Vec<String> = match tls {
        // The bus and replication over TLS too.
        Some((tls_port, dir)) => tls_args(tls_port, dir)
            .into_iter()
            .chain(["--tls-cluster", "yes", "--tls-replication", "yes"].map(str::to_owned))
            .collect(),
        None => Vec::new(),
    };
    args.extend(tls_args.iter().map(String::as_str));
    let module = module.then(crate::redis_server::module_path);
    if let Some(path) = &module {
        // `MODULE UNLOAD` and `MODULE LOAD` allowed: a test takes the
        // module away from a live node and gives it back.
        args.extend([
            "--loadmodule",
            path.to_str().expect("a UTF-8 path"),
            "--enable-module-command",
            "yes",
        ]);
    }
    RedisServer::start_on_port(port, &args)
}

/// Locks `mutex`, a poisoned one too: a test that panicked while holding
/// it leaves the data whole.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
