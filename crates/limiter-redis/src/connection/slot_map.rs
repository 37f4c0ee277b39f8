//! Where a Redis Cluster keeps each key: a node's address, and which
//! primary serves each slot (`CLUSTER SLOTS`); a key's slot is
//! limiter-core's
//! [`cluster_slot`](limiter_core::backend::cluster_slot).

use std::sync::Arc;

use limiter_core::backend::CLUSTER_SLOTS;
use redis::Value;

/// A node's `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Address {
    pub(crate) host: Arc<str>,
    pub(crate) port: u16,
}

impl Address {
    pub(crate) fn new(host: &str, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }

    /// `host:port` as a redirect from `sender` names it (`[::1]:7000` for
    /// IPv6). A node that announces no endpoint of its peers
    /// (`cluster-preferred-endpoint-type`) leaves the host empty or `?`: the
    /// sender's, as in a `CLUSTER SLOTS` reply.
    pub(crate) fn parse(text: &str, sender: &Address) -> Option<Self> {
        let (host, port) = text.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() || host == "?" {
            &sender.host
        } else {
            host
        };
        Some(Self::new(host, port.parse().ok()?))
    }
}

/// Which primary serves each slot.
pub(crate) struct SlotMap {
    /// Per slot, an index into `primaries` ([`u16::MAX`] when none does).
    owners: Box<[u16]>,
    pub(crate) primaries: Vec<Address>,
}

impl SlotMap {
    pub(crate) fn owner(&self, slot: u16) -> Option<&Address> {
        self.primaries
            .get(usize::from(self.owners[usize::from(slot)]))
    }

    /// The index of `slot`'s primary ([`u16::MAX`] when none serves it):
    /// the same for every slot of one primary while the map stands.
    pub(crate) fn owner_index(&self, slot: u16) -> u16 {
        self.owners[usize::from(slot)]
    }

    /// `slot` is served by `node` (a `MOVED` said so).
    pub(crate) fn assign(&mut self, slot: u16, node: Address) {
        let index = match self.primaries.iter().position(|p| *p == node) {
            Some(index) => index,
            None => {
                self.primaries.push(node);
                self.primaries.len() - 1
            }
        };
        self.owners[usize::from(slot)] = u16::try_from(index).unwrap_or(u16::MAX);
    }

    /// The map in a `CLUSTER SLOTS` reply from `asked` (whose own address a
    /// node may leave empty).
    pub(crate) fn parse(reply: &Value, asked: &Address) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = Self {
            owners: vec![u16::MAX; CLUSTER_SLOTS].into_boxed_slice(),
            primaries: Vec::new(),
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [Value::Int(start), Value::Int(end), Value::Array(primary), ..] = &fields[..]
            else {
                return None;
            };
            let [host, Value::Int(port), ..] = &primary[..] else {
                return None;
            };
            let host = match host {
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                Value::SimpleString(text) => text.clone(),
                _ => return None,
            };
            let host = if host.is_empty() || host == "?" {
                asked.host.to_string()
            } else {
                host
            };
            let (start, end) = (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?);
            if usize::from(end) >= CLUSTER_SLOTS || start > end {
                return None;
            }
            let node = Address::new(&host, u16::try_from(*port).ok()?);
            for slot in start..=end {
                map.assign(slot, node.clone());
            }
        }
        Some(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_name_their_node() {
        let sender = Address::new("10.0.0.1", 7000);
        assert_eq!(
            Address::parse("127.0.0.1:7001", &sender),
            Some(Address::new("127.0.0.1", 7001))
        );
        assert_eq!(
            Address::parse("[::1]:7001", &sender),
            Some(Address::new("::1", 7001))
        );
        for unknown in [":7001", "?:7001"] {
            assert_eq!(
                Address::parse(unknown, &sender),
                Some(Address::new("10.0.0.1", 7001))
            );
        }
        assert_eq!(Address::parse("nonsense", &sender), None);
    }

    #[test]
    fn slot_maps_are_read_from_cluster_slots() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |start: i64, end: i64, primary: Value, replica: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), primary, replica])
        };
        let reply = Value::Array(vec![
            range(0, 5460, node("10.0.0.1", 7000), node("10.0.0.4", 7000)),
            // A node may leave its own host empty: the one asked.
            range(5461, 10922, node("", 7001), node("10.0.0.5", 7001)),
            range(10923, 16383, node("10.0.0.3", 7002), node("10.0.0.6", 7002)),
        ]);
        let asked = Address::new("10.0.0.2", 7001);
        let mut map = SlotMap::parse(&reply, &asked).unwrap();
        assert_eq!(map.owner(0), Some(&Address::new("10.0.0.1", 7000)));
        assert_eq!(map.owner(5461), Some(&asked));
        assert_eq!(map.owner(16383), Some(&Address::new("10.0.0.3", 7002)));
        assert_eq!(map.primaries.len(), 3);
        map.assign(0, Address::new("10.0.0.9", 7000));
        assert_eq!(map.owner(0), Some(&Address::new("10.0.0.9", 7000)));
        assert_eq!(map.owner(1), Some(&Address::new("10.0.0.1", 7000)));
        // A slot no range names has no owner; a reply of another shape is no map.
        let partial = Value::Array(vec![range(0, 10, node("10.0.0.1", 7000), Value::Nil)]);
        assert_eq!(SlotMap::parse(&partial, &asked).unwrap().owner(11), None);
        assert!(SlotMap::parse(&Value::Int(1), &asked).is_none());
    }
}
