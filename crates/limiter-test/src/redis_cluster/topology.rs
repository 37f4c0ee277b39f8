//! The cluster as a live node sees it (`CLUSTER NODES`, one [`NodeLine`]
//! per node): which primaries and replicas run, which primary serves a slot
//! or a key, and which keys a node holds.

use super::node::ClusterNode;
use super::RedisCluster;
use crate::resp::Reply;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub(super) struct NodeLine {
    pub(super) id: String,
    port: u16,
    flags: Vec<String>,
    /// The primary's id, for a replica.
    primary: Option<String>,
    pub(super) connected: bool,
    /// Slot ranges (importing/migrating markers left out).
    pub(super) slots: Vec<(u16, u16)>,
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

    pub(super) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub(super) fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    pub(super) fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }
}

impl RedisCluster {
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

    /// `CLUSTER NODES` as `node` sees it.
    pub(super) fn view_of(&self, node: &ClusterNode) -> Vec<NodeLine> {
        self.try_view_of(node)
            .unwrap_or_else(|| panic!("CLUSTER NODES on node {} failed", node.port))
    }

    /// `CLUSTER NODES` as `node` sees it, if it answers.
    pub(super) fn try_view_of(&self, node: &ClusterNode) -> Option<Vec<NodeLine>> {
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
    pub(super) fn any_live(&self) -> ClusterNode {
        self.live_nodes()
            .into_iter()
            .next()
            .expect("every node of the cluster was killed")
    }
}

/// A key as the text this harness's commands carry: the tests' keys are text.
fn as_text(key: &[u8]) -> &str {
    std::str::from_utf8(key).expect("the cluster harness sends text keys")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
