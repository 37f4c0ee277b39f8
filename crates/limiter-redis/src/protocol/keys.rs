//! Where a user key's state lives in Redis: `{prefix}:{{user_key}}:{policy}`,
//! the user key the Redis Cluster hash tag, so every part of a tiered set
//! sits in one slot. A user key that would leave the tag empty (empty, or
//! starting with `}`) lives at `{prefix}:#{{digest}}{user_key}}:{policy}`
//! instead, the tag a digest of it (docs/backends.md, "Key layout").
//!
//! The policy part is the algorithm's short name and a stable digest of the
//! policy's numbers, so two policies never share state, and the same policy
//! on every app instance always does. A part of a tiered set has the set's
//! digest before it (`{prefix}:{{user_key}}:set-{digest}:{policy}`): a
//! limiter's state is named by its whole policy set, so a set never shares
//! state with one of its policies alone, nor with another set.

use limiter_core::backend::PerAlgorithm;
use limiter_core::{Policies, Policy};
use redis::{RedisWrite, ToRedisArgs};

use crate::connection::slot_map::slot_of_tag;
use crate::protocol::state::keeps_packed_log;

/// Each algorithm's short name in keys.
const SHORT_NAMES: PerAlgorithm<&str> = PerAlgorithm {
    fixed_window: "fw",
    sliding_log: "sl",
    sliding_counter: "sc",
    token_bucket: "tb",
    leaky_bucket: "lb",
};

/// Each algorithm's state encoding, in the digest from the second on: a
/// new encoding moves the keys, so an app instance never reads a state
/// written in another. 2 is the string states' packed doubles (see
/// scripts/prelude.lua); 1, the sliding log's sorted set.
const STATE_ENCODINGS: PerAlgorithm<u32> = PerAlgorithm {
    fixed_window: 2,
    sliding_log: 1,
    sliding_counter: 2,
    token_bucket: 2,
    leaky_bucket: 2,
};

/// The encoding of a sliding log kept in one string (a small limit, see
/// scripts/packed_log.lua): 2, so that its keys never meet a sorted set's
/// (encoding 1).
const PACKED_LOG_ENCODING: u32 = 2;

/// The policy part of a key, e.g. `sl-e77675966f00`: the algorithm's short
/// name and 48 bits of an FNV-1a digest of the policy's identity (algorithm,
/// limit, window in µs, capacity or queue, state encoding).
///
/// The identity is written out here, not taken from `Policy`'s `Display`,
/// so that no change of how policies print can move every key.
pub(crate) fn policy_tag(policy: &Policy) -> String {
    let short = SHORT_NAMES[policy.algorithm()];
    let mut identity = format!(
        "{}:{}/{}us",
        policy.algorithm().name(),
        policy.limit(),
        policy.window_us()
    );
    let encoding = if keeps_packed_log(policy) {
        PACKED_LOG_ENCODING
    } else {
        STATE_ENCODINGS[policy.algorithm()]
    };
    if encoding > 1 {
        identity = format!("v{encoding}:{identity}");
    }
    if let Some(capacity) = policy.capacity() {
        identity.push_str(&format!(",capacity={capacity}"));
    }
    if let Some(queue) = policy.queue() {
        identity.push_str(&format!(",queue={queue}"));
    }
    format!("{short}-{:012x}", fnv1a(identity.as_bytes()) >> 16)
}

/// The set part of a tiered set's keys, e.g. `set-5d0c1e2f3a4b`: 48 bits
/// of an FNV-1a digest of its parts' tags, sorted, so the same policies in
/// another order name the same state.
fn set_tag(policies: &Policies) -> String {
    let mut tags: Vec<String> = policies.iter().map(policy_tag).collect();
    tags.sort_unstable();
    format!("set-{:012x}", fnv1a(tags.join(";").as_bytes()) >> 16)
}

/// The 64-bit FNV-1a digest: tiny, stable across versions and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Builds the Redis keys of one policy under one prefix.
///
/// The user key is wrapped in braces, a Redis Cluster hash tag, so every key
/// a script touches for one user key hashes to one slot. The prefix may not
/// contain braces (checked when building), so the tag is the user key, up
/// to its first `}` if it has one (such keys still get their own Redis key,
/// only a coarser slot).
///
/// A user key that is empty or starts with `}` would leave the tag empty,
/// and Redis would then hash each whole key: the parts of a tiered set
/// would land in different slots and every call on them would fail with
/// `CROSSSLOT`. Such a key is laid out as `{prefix}:#{digest}{user_key}}:{policy}`
/// instead, its tag a digest of the user key, which every part shares. The
/// `#` keeps the two forms apart, and the digest has a fixed length, so
/// distinct user keys or policies never share a Redis key.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    /// `{prefix}:{`
    head: String,
    /// `{prefix}:#{`, the head of a user key that has no tag of its own.
    digest_head: String,
    /// `}:{policy_tag}`
    tail: String,
}

/// The length of a digest tag in hex digits, as of `{3f50e54ee2b6}`.
const DIGEST_TAG_LEN: usize = 12;

impl KeyLayout {
    pub(crate) fn new(prefix: &str, policy: &Policy) -> Self {
        Self::with_tail(prefix, format!("}}:{}", policy_tag(policy)))
    }

    /// The layout of each part of `policies`, in the set's order: a single
    /// policy's as [`new`](Self::new) makes it; a tiered set's parts with
    /// the set's tag before their own, so that the limiter's state is named
    /// by its whole set.
    pub(crate) fn for_set(prefix: &str, policies: &Policies) -> Box<[Self]> {
        if policies.len() == 1 {
            return policies.iter().map(|p| Self::new(prefix, p)).collect();
        }
        let set = set_tag(policies);
        policies
            .iter()
            .map(|policy| Self::with_tail(prefix, format!("}}:{set}:{}", policy_tag(policy))))
            .collect()
    }

    fn with_tail(prefix: &str, tail: String) -> Self {
        Self {
            head: format!("{prefix}:{{"),
            digest_head: format!("{prefix}:#{{"),
            tail,
        }
    }

    /// The length of `user_key`'s state key in bytes.
    pub(crate) fn len(&self, user_key: &[u8]) -> usize {
        let head = match digest_tag(user_key) {
            Some(_) => self.digest_head.len() + DIGEST_TAG_LEN + 1,
            None => self.head.len(),
        };
        head + user_key.len() + self.tail.len()
    }

    /// `user_key`'s state key as a command argument, written straight into
    /// the command (no `String` per decision).
    pub(crate) fn arg<'a>(&'a self, user_key: &'a [u8]) -> StateKey<'a> {
        StateKey {
            layout: self,
            user_key,
        }
    }

    /// The Redis Cluster slot of `user_key`'s state key, without making
    /// the key: its hash tag is the user key up to its first `}` (the
    /// prefix has no braces), or the digest when that is empty.
    pub(crate) fn slot(&self, user_key: &[u8]) -> u16 {
        if let Some(tag) = digest_tag(user_key) {
            return slot_of_tag(&tag);
        }
        let end = user_key
            .iter()
            .position(|&b| b == b'}')
            .unwrap_or(user_key.len());
        slot_of_tag(&user_key[..end])
    }

    /// The Redis key of `user_key`'s state, e.g. `limiter:{user:42}:sl-e77675966f00`.
    pub(crate) fn state_key(&self, user_key: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.len(user_key));
        self.write(user_key, &mut key);
        key
    }

    /// Writes `user_key`'s state key.
    fn write(&self, user_key: &[u8], out: &mut impl std::io::Write) {
        // Writing into a buffer in memory cannot fail.
        match digest_tag(user_key) {
            Some(tag) => {
                let _ = out.write_all(self.digest_head.as_bytes());
                let _ = out.write_all(&tag);
                let _ = out.write_all(b"}");
            }
            None => {
                let _ = out.write_all(self.head.as_bytes());
            }
        }
        let _ = out.write_all(user_key);
        let _ = out.write_all(self.tail.as_bytes());
    }
}

/// The hash tag of a user key that would leave its own tag empty (it is
/// empty or starts with `}`): 48 bits of its FNV-1a digest in hex. `None`
/// for every other key, whose tag is the key itself.
fn digest_tag(user_key: &[u8]) -> Option<[u8; DIGEST_TAG_LEN]> {
    if !(user_key.is_empty() || user_key.starts_with(b"}")) {
        return None;
    }
    let digest = fnv1a(user_key) >> 16;
    let mut tag = [0; DIGEST_TAG_LEN];
    for (i, digit) in tag.iter_mut().enumerate() {
        let nibble = (digest >> (4 * (DIGEST_TAG_LEN - 1 - i))) & 0xf;
        *digit = b"0123456789abcdef"[nibble as usize];
    }
    Some(tag)
}

/// A state key as a command argument (see [`KeyLayout::arg`]).
pub(crate) struct StateKey<'a> {
    layout: &'a KeyLayout,
    user_key: &'a [u8],
}

impl ToRedisArgs for StateKey<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        self.layout
            .write(self.user_key, &mut out.writer_for_next_arg());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use limiter_core::{Algorithm, Rate};

    use super::*;

    impl KeyLayout {
        /// The state key of a text key, as text.
        fn state_text(&self, user_key: &str) -> String {
            String::from_utf8(self.state_key(user_key.as_bytes())).unwrap()
        }
    }
    use crate::connection::slot_map::slot_of;

    #[test]
    fn a_user_keys_slot_is_its_state_keys() {
        let policy = Policy::token_bucket(Rate::per_hour(100)).unwrap();
        let layout = KeyLayout::new("limiter", &policy);
        for user_key in [
            "user:42",
            "",
            "}",
            "}x",
            "a}b",
            "{x}",
            "a{b}c",
            "{",
            "ü:ключ",
            "ip:::1",
        ] {
            assert_eq!(
                layout.slot(user_key.as_bytes()),
                slot_of(layout.state_text(user_key).as_bytes()),
                "{user_key:?}"
            );
        }
    }

    #[test]
    fn keys_carry_the_user_key_as_hash_tag_and_the_policy() {
        let policy = Policy::sliding_log(Rate::per_hour(100)).unwrap();
        let key = KeyLayout::new("limiter", &policy).state_text("user:42");
        assert!(key.starts_with("limiter:{user:42}:sl-"), "{key}");
        assert_eq!(key.len(), "limiter:{user:42}:sl-".len() + 12);
    }

    #[test]
    fn a_key_without_a_tag_of_its_own_gets_a_digest_tag_every_policy_shares() {
        let per_second = KeyLayout::new("app", &Policy::token_bucket(Rate::per_second(5)).unwrap());
        let per_hour = KeyLayout::new("app", &Policy::sliding_log(Rate::per_hour(100)).unwrap());
        let empty = per_second.state_text("");
        assert!(empty.starts_with("app:#{"), "{empty}");
        assert_eq!(
            empty.len(),
            "app:#{".len() + DIGEST_TAG_LEN + "}}:tb-".len() + 12
        );
        for user_key in ["", "}", "}x", "}}"] {
            // What Redis hashes: the tag between the first `{` and the next `}`.
            let key = per_second.state_text(user_key);
            let open = key.find('{').unwrap();
            let close = open + key[open..].find('}').unwrap();
            assert!(close > open + 1, "{key} has an empty tag");
            assert_eq!(
                per_second.slot(user_key.as_bytes()),
                per_hour.slot(user_key.as_bytes())
            );
        }
        let keys: HashSet<String> = ["", "}", "}x", "x", "#", "#{", "x}"]
            .into_iter()
            .map(|user_key| per_second.state_text(user_key))
            .collect();
        assert_eq!(
            keys.len(),
            7,
            "distinct user keys keep distinct keys: {keys:?}"
        );
    }

    #[test]
    fn a_sets_part_never_shares_a_key_with_the_same_policy_alone_or_in_another_set() {
        let per_second: Policy = "fixed-window:5/10s".parse().unwrap();
        let per_minute: Policy = "sliding-log:100/1m".parse().unwrap();
        let per_hour: Policy = "token-bucket:1000/1h".parse().unwrap();
        let key = |policies: Policies| {
            KeyLayout::for_set("app", &policies)
                .iter()
                .map(|layout| layout.state_text("user:7"))
                .collect::<Vec<_>>()
        };
        let alone = key(Policies::from(per_second.clone()));
        assert_eq!(
            alone,
            [KeyLayout::new("app", &per_second).state_text("user:7")]
        );
        let set = key(Policies::new([per_second.clone(), per_minute.clone()]).unwrap());
        let other = key(Policies::new([per_second.clone(), per_hour]).unwrap());
        let reordered = key(Policies::new([per_minute, per_second]).unwrap());
        assert!(set[0].starts_with("app:{user:7}:set-"), "{set:?}");
        assert_ne!(set[0], alone[0]);
        assert_ne!(set[0], other[0]);
        assert_eq!((&set[0], &set[1]), (&reordered[1], &reordered[0]));
    }

    #[test]
    fn a_key_written_into_a_command_is_the_state_key() {
        let policy = Policy::token_bucket(Rate::per_second(5)).unwrap();
        let layout = KeyLayout::new("app", &policy);
        let mut cmd = redis::cmd("GET");
        cmd.arg(layout.arg(b"user:{7}"));
        let mut expected = redis::cmd("GET");
        expected.arg(layout.state_text("user:{7}"));
        assert_eq!(cmd.get_packed_command(), expected.get_packed_command());
        assert_eq!(layout.len(b"user:{7}"), layout.state_text("user:{7}").len());
    }

    #[test]
    fn the_policy_tag_is_stable_and_tells_policies_apart() {
        // Pinned: a change here moves every key of every deployment. (A
        // sliding log of 10 moved on purpose when small logs became
        // strings: it was sl-e77675966f00 as a sorted set.)
        let pinned = Policy::sliding_log(Rate::per_minute(10)).unwrap();
        assert_eq!(policy_tag(&pinned), policy_tag(&pinned.clone()));
        assert_eq!(policy_tag(&pinned), "sl-3f50e54ee2b6");
        let sorted_set = Policy::sliding_log(Rate::per_minute(1000)).unwrap();
        assert_eq!(policy_tag(&sorted_set), "sl-95bbaa395c4f");
        let packed = Policy::token_bucket(Rate::per_minute(10)).unwrap();
        assert_eq!(policy_tag(&packed), "tb-10456c6c3435");
        let mut tags = HashSet::new();
        for algorithm in Algorithm::ALL {
            for (limit, window) in [(5, 10), (100, 60), (5, 60), (100, 10)] {
                let rate = Rate::new(limit, Duration::from_secs(window));
                tags.insert(policy_tag(&Policy::new(algorithm, rate).unwrap()));
            }
        }
        let bucket = Policy::token_bucket(Rate::per_second(5)).unwrap();
        tags.insert(policy_tag(&bucket.clone().with_capacity(10).unwrap()));
        tags.insert(policy_tag(
            &Policy::leaky_bucket(Rate::per_second(5))
                .unwrap()
                .with_queue(10)
                .unwrap(),
        ));
        assert_eq!(tags.len(), 5 * 4 + 2, "every policy has its own tag");
    }
}
