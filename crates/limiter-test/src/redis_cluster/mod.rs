//! [`RedisCluster`]: a real Redis Cluster of six `redis-server`s (three
//! primaries, three replicas) on free loopback ports, for tests.
//!
//! Each node is a [`RedisServer`] (its own temporary directory, persistence
//! off, and the wrapper that stops it when this process exits for any
//! reason), started with `--cluster-enabled yes` and a one-second
//! `cluster-node-timeout`; `redis-cli --cluster create` then joins them and
//! [`start`](RedisCluster::start) returns once every node reports
//! `cluster_state:ok`, every node's view covers all 16384 slots with the same
//! owners and the same replicas, and every replica is in sync with its primary.
//!
//! Topology changes for tests: [`migrate_slot`](RedisCluster::migrate_slot)
//! (live resharding, the sequence `redis-cli --cluster reshard` runs;
//! [`migrate_slot_source_first`](RedisCluster::migrate_slot_source_first)
//! with its last step reaching the nodes out of order),
//! [`kill_primary`](RedisCluster::kill_primary) (`SIGKILL`),
//! [`wait_for_failover`](RedisCluster::wait_for_failover) and
//! [`kill_shard`](RedisCluster::kill_shard) (a primary and its replicas). Inspection:
//! [`primaries`](RedisCluster::primaries), [`node_for_key`](RedisCluster::node_for_key),
//! [`keys_on`](RedisCluster::keys_on), and any command on any node
//! ([`command`](RedisCluster::command)).
//!
//! ```no_run
//! use limiter_test::redis_cluster::RedisCluster;
//!
//! let cluster = RedisCluster::start();
//! println!("seeds: {:?}", cluster.seed_urls());
//! let owner = cluster.node_for_key("{user:1}:x");
//! assert!(cluster.primaries().contains(&owner));
//! // dropped here: every node is stopped and its directory removed
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use self::node::{start_node, Node};
use crate::redis_server::{ensure_installed, free_ports, unique_dir, RedisServer};
use crate::resp::call;

mod faults;
mod health;
mod node;
mod reshard;
mod topology;

pub use self::node::{ClusterNode, NODE_TIMEOUT_MS};
pub use crate::resp::Reply;

/// What a missing `redis-cli` panics with: how to install it.
pub const CLI_INSTALL_HINT: &str =
    "redis-cli not found: install it with `apt-get update && apt-get install -y redis-tools`";

/// How long the cluster has to form, or to settle after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Every slot of a Redis Cluster, as the slot numbers the harness takes
/// (`u16`): limiter-core's count.
pub const SLOTS: u16 = limiter_core::backend::CLUSTER_SLOTS as u16;

/// How many primaries (each with one replica) a cluster has.
pub const PRIMARIES: usize = 3;

/// A running Redis Cluster of three primaries and three replicas on
/// `127.0.0.1`, stopped on drop (and, through each node's wrapper, when this
/// process exits).
///
/// Every method takes `&self` (the nodes are behind locks), so a cluster in
/// a `static` or an `Arc` can be changed from a blocking task while other
/// tasks use it.
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// Every node's `requirepass` (and `masterauth`), if any.
    password: Option<String>,
    /// The throwaway CA and node certificate, when the nodes serve TLS.
    tls_dir: Option<PathBuf>,
    /// Whether every node loads limiter-redis-module.
    module: bool,
    /// The slot ranges of the primary [`kill_primary`](Self::kill_primary)
    /// killed last, for [`wait_for_failover`](Self::wait_for_failover).
    last_killed: Mutex<Option<Killed>>,
}

/// A killed primary and the slot ranges it served.
#[derive(Debug, Clone)]
struct Killed {
    node: ClusterNode,
    slots: Vec<(u16, u16)>,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if let Some(dir) = &self.tls_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl RedisCluster {
    /// Starts six nodes on free loopback ports, creates the cluster with
    /// `redis-cli --cluster create ... --cluster-replicas 1`, and waits until
    /// it is healthy (see the module's documentation).
    ///
    /// # Panics
    ///
    /// If `redis-server` or `redis-cli` is missing (with the install
    /// command), or if the cluster does not form within 30 seconds (with
    /// every node's view).
    pub fn start() -> Self {
        Self::start_inner(None, false, false)
    }

    /// [`start`](Self::start), every node requiring `password` (`requirepass`,
    /// and `masterauth` for its replica): clients must authenticate.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_inner(Some(password.to_owned()), false, false)
    }

    /// [`start`](Self::start), every node also serving TLS on a port of its
    /// own with a certificate of a throwaway CA ([`ca_pem`](Self::ca_pem)),
    /// the cluster bus and replication over TLS too (`tls-cluster`,
    /// `tls-replication`). A TLS client learns the nodes' TLS ports from
    /// `CLUSTER SLOTS`; the harness itself keeps to the plain ports.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if `openssl` is missing or fails.
    pub fn start_tls() -> Self {
        Self::start_inner(None, true, false)
    }

    /// [`start`](Self::start), every node with limiter-redis-module loaded
    /// ([`RedisServer::start_with_module`]).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if the module cannot be built.
    pub fn start_with_module() -> Self {
        Self::start_inner(None, false, true)
    }

    fn start_inner(password: Option<String>, tls: bool, module: bool) -> Self {
        ensure_installed("redis-cli", CLI_INSTALL_HINT);
        let tls_dir = tls.then(|| {
            let dir = unique_dir().with_extension("cluster-tls");
            crate::certificates::generate(&dir);
            dir
        });
        let ports = free_ports::<{ 3 * 2 * PRIMARIES }>();
        let (ports, rest) = ports.split_at(2 * PRIMARIES);
        let (bus_ports, tls_ports) = rest.split_at(2 * PRIMARIES);
        let tls_ports: Vec<Option<u16>> = tls_ports
            .iter()
            .map(|&p| tls_dir.as_ref().map(|_| p))
            .collect();
        let servers: Vec<RedisServer> = thread::scope(|scope| {
            let starting: Vec<_> = ports
                .iter()
                .zip(bus_ports)
                .zip(&tls_ports)
                .map(|((&port, &bus_port), &tls_port)| {
                    let password = password.as_deref();
                    let tls = tls_port.zip(tls_dir.as_deref());
                    scope.spawn(move || start_node(port, bus_port, password, tls, module))
                })
                .collect();
            starting
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|e| std::panic::resume_unwind(e))
                })
                .collect()
        });
        let nodes: Vec<Node> = servers
            .into_iter()
            .zip(bus_ports)
            .zip(tls_ports)
            .map(|((server, &bus_port), tls_port)| {
                let port = server.port();
                let id = call(port, password.as_deref(), &["CLUSTER", "MYID"])
                    .unwrap_or_else(|e| panic!("CLUSTER MYID on port {port}: {e}"))
                    .text();
                Node {
                    port,
                    tls_port,
                    bus_port,
                    id,
                    server: Mutex::new(server),
                }
            })
            .collect();
        let cluster = Self {
            nodes,
            password,
            tls_dir,
            module,
            last_killed: Mutex::new(None),
        };
        cluster.create();
        cluster.wait_until_healthy();
        cluster
    }

    /// `redis-cli --cluster create` over every node, within
    /// [`SETTLE_TIMEOUT`] (redis-cli itself waits for the nodes to join
    /// without end: nodes that cannot talk to each other would hang the test).
    fn create(&self) {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut cli = Command::new("redis-cli");
        if let Some(password) = &self.password {
            cli.args(["-a", password, "--no-auth-warning"]);
        }
        let mut child = cli
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{CLI_INSTALL_HINT} (running it failed: {e})"));
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let output = child.wait_with_output().ok();
                panic!(
                    "redis-cli --cluster create {} did not finish within {SETTLE_TIMEOUT:?}:\n{}\n{}",
                    addresses.join(" "),
                    output.map_or_else(String::new, |o| String::from_utf8_lossy(&o.stdout).into_owned()),
                    self.describe()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        let output = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("reading redis-cli's output: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("All 16384 slots covered"),
            "redis-cli --cluster create {} failed ({}):\n{stdout}{}",
            addresses.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Every node's URL (`redis://127.0.0.1:PORT/`), primaries and replicas,
    /// killed ones included: seeds for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// Every node's TLS URL (`rediss://127.0.0.1:TLS_PORT/`), for a cluster
    /// started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the cluster does not serve TLS.
    pub fn tls_seed_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let port = n.tls_port.expect("not a TLS cluster: use start_tls");
                format!("rediss://127.0.0.1:{port}/")
            })
            .collect()
    }

    /// The PEM of the CA that signed the nodes' certificate, for a cluster
    /// started with [`start_tls`](Self::start_tls).
    ///
    /// # Panics
    ///
    /// If the cluster does not serve TLS.
    pub fn ca_pem(&self) -> Vec<u8> {
        let dir = self
            .tls_dir
            .as_ref()
            .expect("not a TLS cluster: use start_tls");
        let path = dir.join("ca.crt");
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// Every node, as started (killed ones included).
    pub fn nodes(&self) -> Vec<ClusterNode> {
        self.nodes.iter().map(Node::identity).collect()
    }

    /// The nodes still running (not [`kill_primary`](Self::kill_primary)ed).
    pub fn live_nodes(&self) -> Vec<ClusterNode> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(Node::identity)
            .collect()
    }

    /// Sends one command to `node` and returns its reply (an error reply is
    /// returned, not a panic).
    ///
    /// # Panics
    ///
    /// If the node cannot be reached within 5 seconds.
    pub fn command(&self, node: &ClusterNode, args: &[&str]) -> Reply {
        self.call(node.port, args)
            .unwrap_or_else(|e| panic!("{} on node {}: {e}", args.join(" "), node.port))
    }

    /// One command on the node at `port`, authenticated when the cluster
    /// has a password.
    fn call(&self, port: u16, args: &[&str]) -> std::io::Result<Reply> {
        call(port, self.password.as_deref(), args)
    }
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: BTreeMap<u16, (u16, bool)> = self
            .nodes
            .iter()
            .map(|n| (n.port, (n.bus_port, n.is_running())))
            .collect();
        f.debug_struct("RedisCluster")
            .field("nodes (port: bus port, running)", &nodes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::node::lock;
    use super::*;

    /// The whole life of a cluster: start, keys on their slots'
    /// primaries, a live slot migration, a primary killed and its replica
    /// promoted with the data, and every process gone after drop.
    #[test]
    fn starts_reshards_fails_over_and_stops() {
        let started = Instant::now();
        let cluster = RedisCluster::start();
        eprintln!("cluster started in {:?}", started.elapsed());

        let primaries = cluster.primaries();
        assert_eq!(primaries.len(), PRIMARIES);
        assert_eq!(cluster.replicas().len(), PRIMARIES);
        assert_eq!(cluster.node_of_slot(0), primaries[0]);
        assert_eq!(cluster.node_of_slot(SLOTS - 1), primaries[2]);
        assert_eq!(cluster.seed_urls().len(), 2 * PRIMARIES);

        // Keys land on their slot's primary; the others redirect.
        let keys: Vec<String> = (0..60).map(|i| format!("{{user:{i}}}:x")).collect();
        for key in &keys {
            let owner = cluster.node_for_key(key);
            assert_eq!(
                cluster.command(&owner, &["SET", key, "1"]),
                Reply::Status("OK".into())
            );
            let other = primaries.iter().find(|p| **p != owner).unwrap();
            let moved = cluster.command(other, &["GET", key]);
            assert!(
                matches!(&moved, Reply::Error(e) if e.starts_with("MOVED")),
                "{moved:?}"
            );
        }
        let on: Vec<u64> = primaries.iter().map(|p| cluster.keys_on(p)).collect();
        assert_eq!(on.iter().sum::<u64>(), 60);
        assert!(on.iter().all(|&n| n > 0), "keys on each primary: {on:?}");
        let owner = cluster.node_for_key(&keys[0]);
        assert_eq!(
            cluster.keys_matching(&owner, "{user:0}*"),
            vec![keys[0].clone()]
        );

        // Live resharding: the slot and its keys move.
        let slot = cluster.slot_of(&keys[0]);
        let extra: Vec<String> = (0..250).map(|i| format!("{{user:0}}:{i}")).collect();
        for key in &extra {
            cluster.command(&owner, &["SET", key, "2"]);
        }
        let to = primaries.iter().find(|p| **p != owner).unwrap().clone();
        assert_eq!(cluster.migrate_slot(slot, &to), 251);
        assert_eq!(cluster.node_of_slot(slot), to);
        assert_eq!(
            cluster.command(&to, &["GET", &keys[0]]),
            Reply::Bulk(Some(b"1".to_vec()))
        );
        let moved = cluster.command(&owner, &["GET", &keys[0]]);
        assert!(
            matches!(&moved, Reply::Error(e) if e.starts_with("MOVED")),
            "{moved:?}"
        );
        cluster.wait_until_healthy();

        // Failover: the replica of a killed primary takes over, with its keys.
        let victim_keys: Vec<&String> = keys
            .iter()
            .filter(|k| cluster.node_for_key(k) == primaries[1])
            .collect();
        let pids: Vec<u32> = cluster
            .nodes
            .iter()
            .filter_map(|n| lock(&n.server).pid())
            .collect();
        let replica = cluster.replicas_of(&primaries[1]);
        assert_eq!(replica.len(), 1, "{replica:?}");
        // Replication is asynchronous: the keys just moved to this primary
        // survive its death only once its replica has them.
        assert_eq!(
            cluster.command(&primaries[1], &["WAIT", "1", "5000"]),
            Reply::Integer(1),
            "the replica acknowledged every write"
        );
        let killed_at = Instant::now();
        let killed = cluster.kill_primary(1);
        assert_eq!(killed, primaries[1]);
        let promoted = cluster.wait_for_failover();
        eprintln!("failover took {:?}", killed_at.elapsed());
        assert_eq!(promoted, replica[0], "the replica is promoted");
        assert_eq!(cluster.primaries().len(), PRIMARIES);
        assert!(!cluster.live_nodes().contains(&killed));
        for key in victim_keys {
            assert_eq!(cluster.node_for_key(key), promoted);
            assert_eq!(
                cluster.command(&promoted, &["GET", key]),
                Reply::Bulk(Some(b"1".to_vec()))
            );
        }

        let dirs: Vec<_> = cluster
            .nodes
            .iter()
            .map(|n| lock(&n.server).dir().to_owned())
            .collect();
        drop(cluster);
        for pid in pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists()
                    || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .is_ok_and(|s| s.contains(") Z")),
                "redis-server {pid} outlived its cluster"
            );
        }
        assert!(
            dirs.iter().all(|d| !d.exists()),
            "directories left: {dirs:?}"
        );
    }
}
