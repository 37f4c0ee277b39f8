//! Where a user key's state lives in Redis.

use limiter_core::Algorithm;

/// The Redis key holding `user_key`'s state under `algorithm`:
/// `{prefix}:{{user_key}}:{suffix}`, e.g. `limiter:{user:42}:sl`.
///
/// The user key is wrapped in braces, a Redis Cluster hash tag, so every key
/// a script touches for one user key hashes to one slot (today each script
/// touches one key; companion keys must use this function with another
/// suffix). The prefix may not contain braces (checked when building), so
/// the tag is the user key (up to its first `}`, if it has one: such keys
/// still get their own Redis key, only a coarser slot), and distinct user
/// keys or algorithms never share a Redis key.
pub(crate) fn state_key(prefix: &str, algorithm: Algorithm, user_key: &str) -> String {
    let suffix = match algorithm {
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingLog => "sl",
        Algorithm::SlidingCounter => "sc",
        Algorithm::TokenBucket => "tb",
        Algorithm::LeakyBucket => "lb",
    };
    format!("{prefix}:{{{user_key}}}:{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_user_key_as_hash_tag() {
        assert_eq!(
            state_key("limiter", Algorithm::SlidingLog, "user:42"),
            "limiter:{user:42}:sl"
        );
        assert_eq!(state_key("app", Algorithm::TokenBucket, ""), "app:{}:tb");
        let suffixes: std::collections::HashSet<_> = Algorithm::ALL
            .into_iter()
            .map(|a| state_key("p", a, "k"))
            .collect();
        assert_eq!(suffixes.len(), 5, "one key per algorithm");
    }
}
