//! Whether the cluster is healthy, waiting until it is (or until any
//! condition holds), and every node's view for the message when it never is.

use std::thread;
use std::time::{Duration, Instant};

use super::{RedisCluster, SETTLE_TIMEOUT, SLOTS};
use crate::resp::Reply;

impl RedisCluster {
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

    /// Polls `condition` every 20 ms for up to `timeout`; panics with every
    /// node's view if it never holds.
    pub(super) fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut condition: impl FnMut() -> bool,
    ) {
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
    pub(super) fn describe(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_maps_cover_every_slot_or_not() {
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
}
