//! What a configuration serves, but most likely not as meant: warned at
//! `warn` once, when a [`Registry`](crate::Registry) is built from it.

use std::collections::HashSet;

use crate::client::cidr::IpNet;
use crate::configuration::config::Config;

/// The longest key a request carries in practice: HTTP servers and
/// proxies refuse longer header lines (hyper reads at most about 400 KiB
/// of headers, nginx and Apache 8 KiB a line by default). A
/// `max_key_bytes` beyond it holds every key whole: the per-key bound is
/// off.
const LONGEST_KEY_BYTES: usize = 64 * 1024;

/// Warns of each policy of `config` whose `trusted_proxies` or
/// `allow_ips` holds every address, whose own `ban_status` no ban list
/// answers, or whose `max_key_bytes` bounds no key; and of policies that
/// trust different proxies (but for those that say `trusted_proxies = []`
/// on purpose).
pub(crate) fn warn_about(config: &Config) {
    let file = config.file();
    for (name, policy) in config.iter() {
        if policy.ban_status_unused {
            tracing::warn!(
                target: "limiter_tower",
                file,
                policy = name,
                ban_status = policy.ban_status.as_u16(),
                "ban_status without penalty or bans: this policy bans no one, so no request \
                 is answered with it"
            );
        }
        let max_key_bytes = policy.memory.max_key_bytes;
        if max_key_bytes > LONGEST_KEY_BYTES {
            let most = max_key_bytes.saturating_mul(policy.memory.max_keys);
            tracing::warn!(
                target: "limiter_tower",
                file,
                policy = name,
                max_key_bytes,
                "max_key_bytes is beyond any key a request carries: every key is held whole, \
                 not as its digest, so the in-process keys may hold up to {most} bytes"
            );
        }
        for net in policy.trusted.iter().filter(|net| net.is_everything()) {
            tracing::warn!(
                target: "limiter_tower",
                file,
                policy = name,
                block = %net,
                "trusted_proxies holds every address: any client can write X-Forwarded-For \
                 or Forwarded and be keyed, allowlisted or banned as any address it names"
            );
        }
        for net in policy.allow_ips.iter().filter(|net| net.is_everything()) {
            tracing::warn!(
                target: "limiter_tower",
                file,
                policy = name,
                block = %net,
                "allow_ips holds every address: this policy limits no request of that family"
            );
        }
    }
    let mut trusts: Vec<(HashSet<IpNet>, Vec<&str>)> = Vec::new();
    for (name, policy) in config
        .iter()
        .filter(|(_, policy)| !policy.trusts_none_on_purpose)
    {
        let trusted: HashSet<IpNet> = policy.trusted.iter().copied().collect();
        match trusts.iter_mut().find(|(set, _)| *set == trusted) {
            Some((_, names)) => names.push(name),
            None => trusts.push((trusted, vec![name])),
        }
    }
    if trusts.len() > 1 {
        let listed: Vec<String> = trusts
            .iter()
            .map(|(set, names)| format!("{}: {}", names.join(", "), describe(set)))
            .collect();
        tracing::warn!(
            target: "limiter_tower",
            file,
            trusted_proxies = listed.join("; "),
            "the policies trust different proxies: a request through a proxy that one \
             trusts and another does not is keyed by its client's address under the first, \
             by the proxy's under the second (every client behind it in one budget)"
        );
    }
}

/// The blocks of `set`, sorted, or `none`.
fn describe(set: &HashSet<IpNet>) -> String {
    if set.is_empty() {
        return "none".to_owned();
    }
    let mut blocks: Vec<String> = set.iter().map(ToString::to_string).collect();
    blocks.sort();
    blocks.join(" ")
}
