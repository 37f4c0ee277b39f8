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
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::redis_server::{connect_local, free_ports, tls_args, unique_dir, RedisServer};

/// What a missing `redis-cli` panics with: how to install it.
pub const CLI_INSTALL_HINT: &str =
    "redis-cli not found: install it with `apt-get update && apt-get install -y redis-tools`";

/// The `cluster-node-timeout` of every node, in ms: how long a primary may
/// be unreachable before its replica takes over (a failover takes about
/// twice this).
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// How long the cluster has to form, or to settle after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Every slot of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How many primaries (each with one replica) a cluster has.
pub const PRIMARIES: usize = 3;

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

/// A reply of the Redis protocol (RESP2), as [`RedisCluster::command`]
/// returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`, without the dash.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$...`; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*...`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// A status or bulk reply as text.
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn text(&self) -> String {
        match self {
            Self::Status(s) => s.clone(),
            Self::Bulk(Some(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("expected text, got {other:?}"),
        }
    }

    /// An integer reply.
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn integer(&self) -> i64 {
        match self {
            Self::Integer(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    /// An array reply's elements (empty for the null array).
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn array(&self) -> &[Reply] {
        match self {
            Self::Array(Some(items)) => items,
            Self::Array(None) => &[],
            other => panic!("expected an array, got {other:?}"),
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }
}

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

/// One node: its server (stopped once killed) and its identity.
struct Node {
    port: u16,
    /// The TLS port, when the cluster serves TLS.
    tls_port: Option<u16>,
    bus_port: u16,
    id: String,
    server: Mutex<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The primary's id, for a replica.
    primary: Option<String>,
    connected: bool,
    /// Slot ranges (importing/migrating markers left out).
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return None;
        }
        // ip:port@cport[,hostname]
        let address = fields[1].split('@').next()?;
        let port = address.rsplit(':').next()?.parse().ok()?;
        let slots = fields[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|n| (n, n)),
            })
            .collect();
        Some(Self {
            id: fields[0].to_owned(),
            port,
            flags: fields[2].split(',').map(str::to_owned).collect(),
            primary: (fields[3] != "-").then(|| fields[3].to_owned()),
            connected: fields[7] == "connected",
            slots,
        })
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
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
        Self::start_inner(None, false)
    }

    /// [`start`](Self::start), every node requiring `password` (`requirepass`,
    /// and `masterauth` for its replica): clients must authenticate.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_inner(Some(password.to_owned()), false)
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
        Self::start_inner(None, true)
    }

    fn start_inner(password: Option<String>, tls: bool) -> Self {
        ensure_cli_installed();
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
                    scope.spawn(move || start_node(port, bus_port, password, tls))
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

    /// The primaries that serve slots, by their first slot (so index 0
    /// serves slot 0, as long as no slot moved), as a live node sees them.
    pub fn primaries(&self) -> Vec<ClusterNode> {
        let view = self.view_of(&self.any_live());
        let mut primaries: Vec<&NodeLine> = view
            .iter()
            .filter(|n| n.is_primary() && !n.slots.is_empty() && !n.is_failing())
            .collect();
        primaries.sort_by_key(|n| n.slots.iter().map(|r| r.0).min());
        primaries
            .into_iter()
            .map(|n| ClusterNode {
                port: n.port,
                id: n.id.clone(),
            })
            .collect()
    }

    /// The replicas (of any primary) that are running.
    pub fn replicas(&self) -> Vec<ClusterNode> {
        let view = self.view_of(&self.any_live());
        view.iter()
            .filter(|n| n.has_flag("slave") && !n.is_failing())
            .map(|n| ClusterNode {
                port: n.port,
                id: n.id.clone(),
            })
            .collect()
    }

    /// The running replicas of `primary`.
    pub fn replicas_of(&self, primary: &ClusterNode) -> Vec<ClusterNode> {
        let view = self.view_of(&self.any_live());
        view.iter()
            .filter(|n| n.primary.as_deref() == Some(primary.id.as_str()) && !n.is_failing())
            .map(|n| ClusterNode {
                port: n.port,
                id: n.id.clone(),
            })
            .collect()
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`: its hash tag's, if it has one),
    /// a text key or a limiter's `redis_key`.
    pub fn slot_of(&self, key: impl AsRef<[u8]>) -> u16 {
        let key = as_text(key.as_ref());
        let slot = self.command(&self.any_live(), &["CLUSTER", "KEYSLOT", key]);
        u16::try_from(slot.integer()).expect("a slot below 16384")
    }

    /// The primary serving `slot`, as a live node sees it.
    ///
    /// # Panics
    ///
    /// If no primary serves it.
    pub fn node_of_slot(&self, slot: u16) -> ClusterNode {
        self.view_of(&self.any_live())
            .iter()
            .find(|n| {
                n.is_primary()
                    && !n.is_failing()
                    && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .map(|n| ClusterNode {
                port: n.port,
                id: n.id.clone(),
            })
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }

    /// The primary serving `key`'s slot.
    pub fn node_for_key(&self, key: impl AsRef<[u8]>) -> ClusterNode {
        self.node_of_slot(self.slot_of(key))
    }

    /// The slot ranges `node` serves, as a live node sees them.
    pub fn slots_of(&self, node: &ClusterNode) -> Vec<(u16, u16)> {
        self.view_of(&self.any_live())
            .into_iter()
            .find(|n| n.id == node.id)
            .map(|n| n.slots)
            .unwrap_or_default()
    }

    /// How many keys `node` holds (`DBSIZE`; a replica holds its primary's).
    pub fn keys_on(&self, node: &ClusterNode) -> u64 {
        let n = self.command(node, &["DBSIZE"]).integer();
        u64::try_from(n).expect("DBSIZE is not negative")
    }

    /// Every key on `node` matching the glob `pattern` (by `SCAN`).
    pub fn keys_matching(&self, node: &ClusterNode, pattern: impl AsRef<[u8]>) -> Vec<String> {
        let pattern = as_text(pattern.as_ref());
        let mut cursor = "0".to_owned();
        let mut keys = Vec::new();
        loop {
            let reply = self.command(node, &["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]);
            let [next, batch] = reply.array() else {
                panic!("unexpected SCAN reply {reply:?}");
            };
            keys.extend(batch.array().iter().map(Reply::text));
            cursor = next.text();
            if cursor == "0" {
                return keys;
            }
        }
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

    /// Moves `slot` and its keys from the primary that serves it to `to`
    /// while clients keep using it, as `redis-cli --cluster reshard` does:
    /// `CLUSTER SETSLOT IMPORTING` on `to`, `MIGRATING` on the owner,
    /// `MIGRATE` of the slot's keys in batches of 100 (meanwhile the owner
    /// answers `ASK` for keys it no longer holds and `TRYAGAIN` for commands
    /// whose keys are split), then `SETSLOT NODE` on `to`, on the owner and
    /// on every other primary. Returns the number of keys moved, once every
    /// node sees `to` as the owner.
    ///
    /// # Panics
    ///
    /// If `to` is not a primary, if a step fails (with its reply), or if the
    /// cluster does not settle within 30 seconds.
    pub fn migrate_slot(&self, slot: u16, to: &ClusterNode) -> usize {
        self.migrate_slot_paced(slot, to, 100, Duration::ZERO)
    }

    /// As [`migrate_slot`](Self::migrate_slot), `batch` keys per `MIGRATE`
    /// with a `pause` after each batch (which keeps the slot half-moved
    /// longer, for `ASK` redirections).
    pub fn migrate_slot_paced(
        &self,
        slot: u16,
        to: &ClusterNode,
        batch: usize,
        pause: Duration,
    ) -> usize {
        self.migrate(slot, to, batch, pause, None)
    }

    /// As [`migrate_slot`](Self::migrate_slot), the last step reaching the
    /// nodes out of order: `SETSLOT NODE` on the owner first, and only
    /// `lag` later on `to` and on every other primary. Meanwhile the owner
    /// redirects the slot's keys to `to` (`MOVED`), and `to`, still
    /// importing, redirects them back.
    pub fn migrate_slot_source_first(&self, slot: u16, to: &ClusterNode, lag: Duration) -> usize {
        self.migrate(slot, to, 100, Duration::ZERO, Some(lag))
    }

    /// A migration of `slot` to `to` (see [`migrate_slot_paced`](Self::migrate_slot_paced)),
    /// with the owner told of the new owner `lag` before the other nodes,
    /// if given.
    fn migrate(
        &self,
        slot: u16,
        to: &ClusterNode,
        batch: usize,
        pause: Duration,
        source_first: Option<Duration>,
    ) -> usize {
        let from = self.node_of_slot(slot);
        let primaries = self.primaries();
        // A primary without slots yet (see `add_primary`) may take one.
        let to_is_primary = self
            .view_of(&self.any_live())
            .iter()
            .any(|n| n.id == to.id && n.is_primary() && !n.is_failing());
        assert!(to_is_primary, "migrate_slot: {to:?} is not a primary");
        if &from == to {
            return 0;
        }
        let slot_text = slot.to_string();
        let batch_text = batch.max(1).to_string();
        let to_port = to.port.to_string();
        self.ok(
            to,
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from.id],
        );
        self.ok(
            &from,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to.id],
        );
        let mut moved = 0;
        loop {
            let keys = self.command(
                &from,
                &["CLUSTER", "GETKEYSINSLOT", &slot_text, &batch_text],
            );
            let keys: Vec<String> = keys.array().iter().map(Reply::text).collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000"];
            if let Some(password) = &self.password {
                migrate.extend(["AUTH", password.as_str()]);
            }
            migrate.push("KEYS");
            migrate.extend(keys.iter().map(String::as_str));
            let reply = self.command(&from, &migrate);
            // NOKEY: every key expired or was deleted meanwhile.
            assert!(
                reply == Reply::Status("OK".to_owned())
                    || reply == Reply::Status("NOKEY".to_owned()),
                "MIGRATE of slot {slot} from {} to {}: {reply:?}",
                from.port,
                to.port
            );
            moved += keys.len();
            if !pause.is_zero() {
                thread::sleep(pause);
            }
        }
        let assign = ["CLUSTER", "SETSLOT", &slot_text, "NODE", &to.id];
        match source_first {
            Some(lag) => {
                self.ok(&from, &assign);
                thread::sleep(lag);
                self.ok(to, &assign);
            }
            None => {
                self.ok(to, &assign);
                self.ok(&from, &assign);
            }
        }
        for primary in primaries.iter().filter(|p| *p != to && **p != from) {
            self.ok(primary, &assign);
        }
        self.wait_until(
            SETTLE_TIMEOUT,
            &format!("every node to see slot {slot} on {}", to.port),
            || {
                self.live_nodes().iter().all(|node| {
                    self.try_view_of(node).is_some_and(|view| {
                        view.iter().any(|n| {
                            n.id == to.id && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
                        })
                    })
                })
            },
        );
        moved
    }

    /// Kills the `index`th of the [`primaries`](Self::primaries) with
    /// `SIGKILL`, as a crash (when this returns, it has exited), and
    /// returns it. Its replica takes over within about two
    /// [`NODE_TIMEOUT_MS`]: see [`wait_for_failover`](Self::wait_for_failover).
    /// A killed node stays down.
    ///
    /// # Panics
    ///
    /// If there is no such primary.
    pub fn kill_primary(&self, index: usize) -> ClusterNode {
        let primaries = self.primaries();
        let victim = primaries
            .get(index)
            .unwrap_or_else(|| panic!("kill_primary({index}): only {} primaries", primaries.len()))
            .clone();
        let slots = self.slots_of(&victim);
        *lock(&self.last_killed) = Some(Killed {
            node: victim.clone(),
            slots,
        });
        lock(&self.server_of(&victim).server).kill();
        victim
    }

    /// Kills the `index`th of the [`primaries`](Self::primaries) and every
    /// replica of it with `SIGKILL`, as the loss of a whole shard: no node
    /// is left to serve its slots, and no failover brings them back.
    /// Returns the killed nodes, the primary first.
    ///
    /// # Panics
    ///
    /// If there is no such primary.
    pub fn kill_shard(&self, index: usize) -> Vec<ClusterNode> {
        let primaries = self.primaries();
        let primary = primaries
            .get(index)
            .unwrap_or_else(|| panic!("kill_shard({index}): only {} primaries", primaries.len()))
            .clone();
        let mut shard = vec![primary.clone()];
        shard.extend(self.replicas_of(&primary));
        // Its replicas first: none of them can start a failover after.
        for node in shard.iter().rev() {
            lock(&self.server_of(node).server).kill();
        }
        shard
    }

    /// The process behind `node`.
    fn server_of(&self, node: &ClusterNode) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == node.id)
            .unwrap_or_else(|| panic!("{node:?} is not one of the cluster's nodes"))
    }

    /// Starts one more node, empty, and joins it to the cluster as a
    /// primary without slots (`CLUSTER MEET`); returns it once every node
    /// sees it and its own view is whole (`cluster_state:ok`). Move slots to it with [`migrate_slot`](Self::migrate_slot).
    ///
    /// # Panics
    ///
    /// If the node does not start, or the cluster does not see it within
    /// 30 seconds.
    pub fn add_primary(&mut self) -> ClusterNode {
        let [port, bus_port, tls_port] = free_ports::<3>();
        let tls = self.tls_dir.as_deref().map(|dir| (tls_port, dir));
        let server = start_node(port, bus_port, self.password.as_deref(), tls);
        let id = self
            .call(port, &["CLUSTER", "MYID"])
            .unwrap_or_else(|e| panic!("CLUSTER MYID on port {port}: {e}"))
            .text();
        let (port_text, bus_text) = (port.to_string(), bus_port.to_string());
        let meet = self.command(
            &self.any_live(),
            &["CLUSTER", "MEET", "127.0.0.1", &port_text, &bus_text],
        );
        assert_eq!(meet, Reply::Status("OK".to_owned()), "CLUSTER MEET {port}");
        self.nodes.push(Node {
            port,
            tls_port: tls.map(|(p, _)| p),
            bus_port,
            id: id.clone(),
            server: Mutex::new(server),
        });
        let node = ClusterNode { port, id };
        self.wait_until(SETTLE_TIMEOUT, "the new node to join", || {
            let state_ok = self
                .call(port, &["CLUSTER", "INFO"])
                .is_ok_and(|info| info.text().contains("cluster_state:ok"));
            state_ok
                && self.live_nodes().iter().all(|n| {
                    self.try_view_of(n).is_some_and(|view| {
                        view.iter()
                            .any(|line| line.id == node.id && line.is_primary() && line.connected)
                    })
                })
        });
        node
    }

    /// Suspends `node` with `SIGSTOP`, as a hung node: it accepts
    /// connections and answers nothing until [`resume`](Self::resume). Held
    /// for less than [`NODE_TIMEOUT_MS`], no failover starts.
    ///
    /// # Panics
    ///
    /// If `node` is not one of the cluster's nodes.
    pub fn pause(&self, node: &ClusterNode) {
        lock(&self.server_of(node).server).pause();
    }

    /// Resumes a node [`pause`](Self::pause)d with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If `node` is not one of the cluster's nodes.
    pub fn resume(&self, node: &ClusterNode) {
        lock(&self.server_of(node).server).resume();
    }

    /// Waits until the slots of the primary [`kill_primary`](Self::kill_primary)
    /// killed last are served by another node (its replica, promoted) and
    /// the cluster is healthy again (as after [`start`](Self::start), the
    /// killed node apart), and returns the new primary.
    ///
    /// # Panics
    ///
    /// If no primary was killed, or if the cluster does not settle within
    /// 30 seconds (with every node's view).
    pub fn wait_for_failover(&self) -> ClusterNode {
        let Killed {
            node: killed,
            slots,
        } = lock(&self.last_killed)
            .clone()
            .expect("wait_for_failover: no primary was killed");
        let first = slots.first().expect("the killed primary served slots").0;
        self.wait_until(SETTLE_TIMEOUT, "a replica to take over", || {
            self.try_view_of(&self.any_live()).is_some_and(|view| {
                view.iter().any(|n| {
                    n.id != killed.id
                        && n.is_primary()
                        && n.slots.iter().any(|&(a, b)| a <= first && first <= b)
                })
            })
        });
        self.wait_until_healthy();
        self.node_of_slot(first)
    }

    /// Waits until every running node reports `cluster_state:ok`, sees
    /// every running node connected, and sees all 16384 slots served by
    /// running primaries with the same owners as every other node, and
    /// every running replica's link to its primary is up.
    ///
    /// # Panics
    ///
    /// If that takes more than 30 seconds (with every node's view).
    pub fn wait_until_healthy(&self) {
        self.wait_until(SETTLE_TIMEOUT, "the cluster to be healthy", || {
            self.is_healthy()
        });
    }

    fn is_healthy(&self) -> bool {
        let live = self.live_nodes();
        let live_ids: Vec<&str> = live.iter().map(|n| n.id.as_str()).collect();
        let mut agreed: Option<Vec<(u16, u16, String)>> = None;
        // Who says it is a replica, and who every view says is one: they
        // must agree (gossip spreads a new replica's role after it knows).
        let mut replicas_by_themselves: Vec<String> = Vec::new();
        let mut replicas_by_view: Vec<Vec<String>> = Vec::new();
        for node in &live {
            let Ok(info) = self.call(node.port, &["CLUSTER", "INFO"]) else {
                return false;
            };
            if !matches!(&info, Reply::Bulk(Some(_))) || !info.text().contains("cluster_state:ok") {
                return false;
            }
            let Some(view) = self.try_view_of(node) else {
                return false;
            };
            // Every running node known, connected and not suspected.
            let seen_ok = |id: &str| {
                view.iter().any(|n| {
                    n.id == id
                        && !n.is_failing()
                        && !n.has_flag("handshake")
                        && (n.has_flag("myself") || n.connected)
                })
            };
            if !live_ids.iter().all(|id| seen_ok(id)) {
                return false;
            }
            let mut map: Vec<(u16, u16, String)> = view
                .iter()
                .filter(|n| n.is_primary() && !n.is_failing())
                .flat_map(|n| n.slots.iter().map(|&(a, b)| (a, b, n.id.clone())))
                .collect();
            map.sort();
            if !covers_every_slot(&map)
                || !map.iter().all(|(_, _, id)| live_ids.contains(&id.as_str()))
            {
                return false;
            }
            match &agreed {
                None => agreed = Some(map),
                Some(other) if *other == map => {}
                Some(_) => return false,
            }
            let mut replicas: Vec<String> = view
                .iter()
                .filter(|n| n.has_flag("slave") && !n.is_failing())
                .map(|n| n.id.clone())
                .collect();
            replicas.sort();
            replicas_by_view.push(replicas);
            let me = view.iter().find(|n| n.has_flag("myself"));
            if let Some(me) = me.filter(|me| me.has_flag("slave")) {
                replicas_by_themselves.push(me.id.clone());
                let Ok(replication) = self.call(node.port, &["INFO", "replication"]) else {
                    return false;
                };
                if !replication.text().contains("master_link_status:up") {
                    return false;
                }
            }
        }
        replicas_by_themselves.sort();
        replicas_by_view
            .iter()
            .all(|replicas| *replicas == replicas_by_themselves)
    }

    /// `CLUSTER NODES` as `node` sees it.
    fn view_of(&self, node: &ClusterNode) -> Vec<NodeLine> {
        self.try_view_of(node)
            .unwrap_or_else(|| panic!("CLUSTER NODES on node {} failed", node.port))
    }

    fn try_view_of(&self, node: &ClusterNode) -> Option<Vec<NodeLine>> {
        match self.call(node.port, &["CLUSTER", "NODES"]).ok()? {
            Reply::Bulk(Some(text)) => Some(
                String::from_utf8_lossy(&text)
                    .lines()
                    .filter_map(NodeLine::parse)
                    .collect(),
            ),
            _ => None,
        }
    }

    /// A running node (the first).
    fn any_live(&self) -> ClusterNode {
        self.live_nodes()
            .into_iter()
            .next()
            .expect("every node of the cluster was killed")
    }

    /// Sends a command that must answer `+OK`.
    fn ok(&self, node: &ClusterNode, args: &[&str]) {
        let reply = self.command(node, args);
        assert_eq!(
            reply,
            Reply::Status("OK".to_owned()),
            "{} on node {}",
            args.join(" "),
            node.port
        );
    }

    /// Polls `condition` every 20 ms for up to `timeout`; panics with every
    /// node's view if it never holds.
    fn wait_until(&self, timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !condition() {
            if Instant::now() > deadline {
                panic!(
                    "waited {timeout:?} for {what}; the nodes' views:\n{}",
                    self.describe()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every running node's `CLUSTER INFO` state and `CLUSTER NODES`, for
    /// failure messages.
    fn describe(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            if !node.is_running() {
                out.push_str(&format!("-- node {} (killed)\n", node.port));
                continue;
            }
            let state = self
                .call(node.port, &["CLUSTER", "INFO"])
                .map(|r| {
                    r.text()
                        .lines()
                        .find(|l| l.starts_with("cluster_state"))
                        .unwrap_or("?")
                        .to_owned()
                })
                .unwrap_or_else(|e| e.to_string());
            let nodes = self
                .call(node.port, &["CLUSTER", "NODES"])
                .map(|r| r.text())
                .unwrap_or_else(|e| e.to_string());
            out.push_str(&format!("-- node {} {state}\n{nodes}", node.port));
        }
        out
    }
}

impl Node {
    fn identity(&self) -> ClusterNode {
        ClusterNode {
            port: self.port,
            id: self.id.clone(),
        }
    }

    fn is_running(&self) -> bool {
        lock(&self.server).is_running()
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts one cluster node on `port`, its cluster bus on `bus_port`.
/// One node on `port`, its bus on `bus_port`; with `tls`, also serving TLS
/// on its port with the certificates in its directory.
fn start_node(
    port: u16,
    bus_port: u16,
    password: Option<&str>,
    tls: Option<(u16, &Path)>,
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
    RedisServer::start_on_port(port, &args)
}

/// Whether sorted, `(first, last, owner)` ranges cover 0..16384 exactly.
fn covers_every_slot(map: &[(u16, u16, String)]) -> bool {
    let mut next = 0u32;
    for &(first, last, _) in map {
        if u32::from(first) != next || last < first {
            return false;
        }
        next = u32::from(last) + 1;
    }
    next == u32::from(SLOTS)
}

/// Panics with [`CLI_INSTALL_HINT`] unless `redis-cli --version` runs.
fn ensure_cli_installed() {
    match Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{CLI_INSTALL_HINT} (`redis-cli --version` exited with {status})"),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{CLI_INSTALL_HINT}"),
        Err(e) => panic!("{CLI_INSTALL_HINT} (running it failed: {e})"),
    }
}

/// Sends one command (as a RESP array, so any argument works) on a new
/// connection and reads its reply, within 5 seconds.
fn call(port: u16, password: Option<&str>, args: &[&str]) -> std::io::Result<Reply> {
    let stream = connect_local(port)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut request = Vec::new();
    let mut encode = |args: &[&str]| {
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
    };
    if let Some(password) = password {
        encode(&["AUTH", password]);
    }
    encode(args);
    (&stream).write_all(&request)?;
    let mut reader = BufReader::new(stream);
    if password.is_some() {
        let auth = read_reply(&mut reader)?;
        if auth.is_error() {
            return Err(std::io::Error::other(format!(
                "AUTH on port {port}: {auth:?}"
            )));
        }
    }
    read_reply(&mut reader)
}

/// Reads one RESP2 reply.
fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let invalid =
        || std::io::Error::new(ErrorKind::InvalidData, format!("bad reply line {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(invalid)?;
    let number = || rest.parse::<i64>().map_err(|_| invalid());
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut body = vec![0; len + 2];
                reader.read_exact(&mut body)?;
                body.truncate(len);
                Reply::Bulk(Some(body))
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(len) => Reply::Array(Some(
                (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<std::io::Result<_>>()?,
            )),
        },
        _ => return Err(invalid()),
    })
}

/// A key as the text this harness's commands carry: the tests' keys are text.
fn as_text(key: &[u8]) -> &str {
    std::str::from_utf8(key).expect("the cluster harness sends text keys")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn replies_parse() {
        let mut input: &[u8] =
            b"*3\r\n+OK\r\n:-2\r\n*2\r\n$4\r\na\r\nb\r\n$-1\r\n-ERR no\r\n*-1\r\n";
        let reply = read_reply(&mut input).unwrap();
        assert_eq!(
            reply,
            Reply::Array(Some(vec![
                Reply::Status("OK".into()),
                Reply::Integer(-2),
                Reply::Array(Some(vec![
                    Reply::Bulk(Some(b"a\r\nb".to_vec())),
                    Reply::Bulk(None)
                ])),
            ]))
        );
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Array(None));
        assert!(read_reply(&mut input).is_err());
    }

    #[test]
    fn node_lines_parse() {
        let line = NodeLine::parse(
            "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host replica,slave \
             e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected",
        )
        .unwrap();
        assert_eq!(line.port, 30004);
        assert!(line.has_flag("slave") && !line.is_primary());
        assert_eq!(
            line.primary.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        let line = NodeLine::parse(
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 \
             connected 0-5460 7000 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]",
        )
        .unwrap();
        assert!(line.is_primary() && line.connected);
        assert_eq!(line.slots, vec![(0, 5460), (7000, 7000)]);
        assert!(covers_every_slot(&[
            (0, 5460, "a".into()),
            (5461, 10922, "b".into()),
            (10923, 16383, "c".into())
        ]));
        assert!(!covers_every_slot(&[
            (0, 5460, "a".into()),
            (5462, 16383, "b".into())
        ]));
    }

    /// The whole life of a cluster: start (timed), keys on their slots'
    /// primaries, a live slot migration, a primary killed and its replica
    /// promoted with the data, and every process gone after drop.
    #[test]
    fn starts_reshards_fails_over_and_stops() {
        let started = Instant::now();
        let cluster = RedisCluster::start();
        let start_time = started.elapsed();
        eprintln!("cluster started in {start_time:?}");
        assert!(start_time < Duration::from_secs(20), "{start_time:?}");

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
