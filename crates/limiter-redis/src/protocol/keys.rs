//! Where a user key's state lives in Redis: one key per part of the
//! limiter's policy set, `{prefix}:{{user_key}}:{position}` (`:0` for a
//! single policy), and beside them the record of the set that state was
//! made under, `{prefix}:{{user_key}}:p`
//! ([`encode_policy_record`](limiter_core::backend::encode_policy_record)),
//! the user key the Redis Cluster hash tag, so every key of a user key
//! sits in one slot. A user key that would leave the tag empty (empty, or starting
//! with `}`) lives at `{prefix}:#{{digest}}{user_key}}:…` instead, the tag
//! a digest of it (docs/backends.md, "Key layout").
//!
//! The names hold the limiter (its prefix) and the user key, never the
//! policies' numbers: limiters of one prefix and different policies (a
//! change of limits, plans) share each key's state, which a request
//! decided under another set than the record's takes over by docs/spec.md
//! section 9. A policy repeated in a set keeps one state, at the position
//! of its first occurrence.

use limiter_core::backend::fnv1a_64;
use limiter_core::Policies;
use redis::{RedisWrite, ToRedisArgs};

use limiter_core::backend::cluster_slot_of_tag;

/// Builds one Redis key of every user key under one prefix: a part's state
/// or the record.
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
/// `CROSSSLOT`. Such a key is laid out as `{prefix}:#{digest}{user_key}}:{position}`
/// instead, its tag a digest of the user key, which every part shares. The
/// `#` keeps the two forms apart, and the digest has a fixed length, so
/// distinct user keys or positions never share a Redis key.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    /// `{prefix}:{`
    head: String,
    /// `{prefix}:#{`, the head of a user key that has no tag of its own.
    digest_head: String,
    /// `}:{position}`, or `}:p` for the record.
    tail: String,
}

/// The length of a digest tag in hex digits, as of `{3f50e54ee2b6}`.
const DIGEST_TAG_LEN: usize = 12;

impl KeyLayout {
    /// The layout of each part of `policies` in the set's order (a
    /// repeated policy at the position of its first occurrence), then the
    /// record's: the keys one request passes.
    pub(crate) fn for_set(prefix: &str, policies: &Policies) -> Box<[Self]> {
        let parts = policies.parts();
        parts
            .iter()
            .enumerate()
            .map(|(i, policy)| {
                let position = parts[..i].iter().position(|p| p == policy).unwrap_or(i);
                Self::with_tail(prefix, format!("}}:{position}"))
            })
            .chain([Self::with_tail(prefix, "}:p".to_owned())])
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
            return cluster_slot_of_tag(&tag);
        }
        let end = user_key
            .iter()
            .position(|&b| b == b'}')
            .unwrap_or(user_key.len());
        cluster_slot_of_tag(&user_key[..end])
    }

    /// The Redis key of `user_key`'s state, e.g. `limiter:{user:42}:0`.
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
    let digest = fnv1a_64(user_key) >> 16;
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

    use super::*;
    use limiter_core::backend::cluster_slot;

    impl KeyLayout {
        /// The state key of a text key, as text.
        fn state_text(&self, user_key: &str) -> String {
            String::from_utf8(self.state_key(user_key.as_bytes())).unwrap()
        }
    }

    /// The keys of `policies` under `prefix` for `user_key`, as text.
    fn keys(prefix: &str, policies: &str, user_key: &str) -> Vec<String> {
        KeyLayout::for_set(prefix, &policies.parse().unwrap())
            .iter()
            .map(|layout| layout.state_text(user_key))
            .collect()
    }

    #[test]
    fn a_user_keys_slot_is_its_state_keys() {
        let layouts = KeyLayout::for_set("limiter", &"token-bucket:100/1h".parse().unwrap());
        for layout in layouts.iter() {
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
                    cluster_slot(layout.state_text(user_key).as_bytes()),
                    "{user_key:?}"
                );
            }
        }
    }

    #[test]
    fn keys_name_the_limiter_and_the_user_key_never_the_numbers() {
        assert_eq!(
            keys("limiter", "sliding-log:100/1h", "user:42"),
            ["limiter:{user:42}:0", "limiter:{user:42}:p"]
        );
        for other in ["sliding-log:5/1s", "token-bucket:9/1m,capacity=20"] {
            assert_eq!(
                keys("limiter", other, "user:42"),
                keys("limiter", "sliding-log:100/1h", "user:42")
            );
        }
        assert_eq!(
            keys("other", "sliding-log:100/1h", "user:42"),
            ["other:{user:42}:0", "other:{user:42}:p"]
        );
    }

    #[test]
    fn a_sets_parts_are_named_by_position_a_repeated_policy_by_its_first() {
        assert_eq!(
            keys("app", "fixed-window:5/10s;sliding-log:100/1m", "user:7"),
            ["app:{user:7}:0", "app:{user:7}:1", "app:{user:7}:p"]
        );
        assert_eq!(
            keys(
                "app",
                "fixed-window:5/10s;sliding-log:100/1m;fixed-window:5/10s",
                "u"
            ),
            ["app:{u}:0", "app:{u}:1", "app:{u}:0", "app:{u}:p"]
        );
    }

    #[test]
    fn a_key_without_a_tag_of_its_own_gets_a_digest_tag_every_key_shares() {
        let layouts = KeyLayout::for_set(
            "app",
            &"token-bucket:5/1s;sliding-log:9/1m".parse().unwrap(),
        );
        let empty = layouts[0].state_text("");
        assert!(empty.starts_with("app:#{"), "{empty}");
        assert_eq!(empty.len(), "app:#{".len() + DIGEST_TAG_LEN + "}}:0".len());
        for user_key in ["", "}", "}x", "}}"] {
            // What Redis hashes: the tag between the first `{` and the next `}`.
            let key = layouts[0].state_text(user_key);
            let open = key.find('{').unwrap();
            let close = open + key[open..].find('}').unwrap();
            assert!(close > open + 1, "{key} has an empty tag");
            for layout in &layouts[1..] {
                assert_eq!(
                    layouts[0].slot(user_key.as_bytes()),
                    layout.slot(user_key.as_bytes())
                );
            }
        }
        let keys: HashSet<String> = ["", "}", "}x", "x", "#", "#{", "x}"]
            .into_iter()
            .map(|user_key| layouts[0].state_text(user_key))
            .collect();
        assert_eq!(
            keys.len(),
            7,
            "distinct user keys keep distinct keys: {keys:?}"
        );
    }

    #[test]
    fn a_key_written_into_a_command_is_the_state_key() {
        let layout = &KeyLayout::for_set("app", &"token-bucket:5/1s".parse().unwrap())[0];
        let mut cmd = redis::cmd("GET");
        cmd.arg(layout.arg(b"user:{7}"));
        let mut expected = redis::cmd("GET");
        expected.arg(layout.state_text("user:{7}"));
        assert_eq!(cmd.get_packed_command(), expected.get_packed_command());
        assert_eq!(layout.len(b"user:{7}"), layout.state_text("user:{7}").len());
    }
}
