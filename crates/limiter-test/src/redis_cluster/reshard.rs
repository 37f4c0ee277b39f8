//! Resharding: a primary added to the cluster, and slots moved live from
//! one primary to another, as `redis-cli --cluster add-node` and
//! `redis-cli --cluster reshard` do.

use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use super::node::{start_node, ClusterNode, Node};
use super::{RedisCluster, SETTLE_TIMEOUT};
use crate::redis_server::free_ports;
use crate::resp::Reply;

impl RedisCluster {
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

    /// Starts one more node, empty, and joins it to the cluster as a
    /// primary without slots (`CLUSTER MEET`); returns it once every node
    /// sees it and its own view is whole (`cluster_state:ok`). Move slots
    /// to it with [`migrate_slot`](Self::migrate_slot).
    ///
    /// # Panics
    ///
    /// If the node does not start, or the cluster does not see it within
    /// 30 seconds.
    pub fn add_primary(&mut self) -> ClusterNode {
        let [port, bus_port, tls_port] = free_ports::<3>();
        let tls = self.tls_dir.as_deref().map(|dir| (tls_port, dir));
        let server = start_node(port, bus_port, self.password.as_deref(), tls, self.module);
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
}
