//! Which slot a command is for, computed as a Redis Cluster node does:
//! CRC16 (XMODEM) of its first key's hash tag, modulo 16384
//! (limiter-core's `cluster_slot`, pinned to Redis's own values below).

use limiter_core::backend::cluster_slot;

/// The slot of `args`' first key: `FCALL`, `FCALL_RO`, `EVALSHA` and
/// `EVAL` by their first declared key, limiter-redis-module's commands
/// by their fourth argument; `None` for any other command, or one
/// without keys.
pub(super) fn slot_of_command(args: &[Vec<u8>]) -> Option<u16> {
    let name = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
    let key = match name.as_str() {
        "FCALL" | "FCALL_RO" | "EVALSHA" | "EVAL" => {
            let keys: u64 = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            if keys == 0 {
                return None;
            }
            args.get(3)?
        }
        "LIMITER.DECIDE" | "LIMITER.PEEK" | "LIMITER.DECIDE_ACROSS" | "LIMITER.PEEK_ACROSS" => {
            args.get(4)?
        }
        _ => return None,
    };
    Some(slot_of(key))
}

/// A key's slot: of its hash tag (the text between its first `{` and the
/// next `}`, when not empty), or of the whole key.
pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
    cluster_slot(key.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("foo{hash_tag}"), 2515);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        let fcall = |keys: &str| {
            ["FCALL", "f", keys, "p:{u}:x", "a"]
                .map(|a| a.as_bytes().to_vec())
                .to_vec()
        };
        assert_eq!(slot_of_command(&fcall("1")), Some(slot_of("u")));
        assert_eq!(slot_of_command(&fcall("0")), None);
        assert_eq!(slot_of_command(&[b"PING".to_vec()]), None);
    }
}
