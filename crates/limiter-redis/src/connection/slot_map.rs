//! Where a Redis Cluster keeps each key: a key's slot, a node's address,
//! and which primary serves each slot (`CLUSTER SLOTS`).

use std::sync::Arc;

use redis::Value;

/// Slots of a Redis Cluster.
const SLOTS: usize = 16_384;

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
            owners: vec![u16::MAX; SLOTS].into_boxed_slice(),
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
            if usize::from(end) >= SLOTS || start > end {
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

/// A key's slot: CRC16 (XMODEM) of its hash tag (the text between its
/// first `{` and the next `}`, when not empty) or of the whole key.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    slot_of_tag(tag)
}

/// The slot of a key whose hash tag is `tag` (non-empty).
pub(crate) fn slot_of_tag(tag: &[u8]) -> u16 {
    crc16_xmodem(tag) % SLOTS as u16
}

/// CRC16-XMODEM (Redis Cluster's), a byte at a time from a table: several
/// times cheaper than the bit-at-a-time loop, and a decision on a cluster
/// computes its key's slot a few times.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// Each byte's CRC16-XMODEM (polynomial 0x1021).
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(slot_of(b"foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % 16384);
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{hash_tag}"), 2515);
        assert_eq!(slot_of(b"somekey"), 11058);
        // The CRC-16/XMODEM check value.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
    }

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
