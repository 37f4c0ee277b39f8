//! Building a `Registry` warns, once, of a configuration that serves but
//! most likely not as meant: a trusted proxy block or an allowlist that
//! holds every address, policies that trust different proxies, a
//! `ban_status` no ban list answers and a `max_key_bytes` that bounds no
//! key. The warnings are read by a subscriber of this test's own.

mod support;

use limiter_tower::{Config, Registry};
use support::events::Events;
use tracing::Level;

/// The warnings logged while a memory registry of `text` is built.
fn warnings_of(text: &str) -> Vec<String> {
    let config = Config::from_toml("limits.toml", text).unwrap();
    let warnings = Events::at(Level::WARN);
    tracing::subscriber::with_default(warnings.clone(), || Registry::memory(&config));
    warnings.lines()
}

#[test]
fn a_trusted_proxy_block_of_every_address_is_warned_of() {
    for block in ["0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96"] {
        let text = format!(
            "[policies.login]\nlimits = [\"sliding-log:10/5m\"]\ntrusted_proxies = [\"10.0.0.0/8\", \"{block}\"]\n"
        );
        let warnings = warnings_of(&text);
        assert_eq!(warnings.len(), 1, "{block}: {warnings:?}");
        assert!(
            warnings[0].starts_with("trusted_proxies holds every address: any client can write"),
            "{warnings:?}"
        );
        assert!(
            warnings[0].contains("file=limits.toml policy=login block="),
            "{warnings:?}"
        );
    }
}

#[test]
fn an_allowlist_of_every_address_is_warned_of() {
    let warnings = warnings_of(
        "[policies.login]\nlimits = [\"sliding-log:10/5m\"]\nallow_ips = [\"192.0.2.10\", \"::/0\"]\n",
    );
    assert_eq!(
        warnings,
        [
            "allow_ips holds every address: this policy limits no request of that family \
          file=limits.toml policy=login block=::/0"
        ]
    );
}

#[test]
fn policies_that_trust_different_proxies_are_warned_of_once() {
    let warnings = warnings_of(
        r#"
[policies.a]
limits = ["sliding-log:10/5m"]
trusted_proxies = ["10.0.0.0/8", "192.168.0.1"]

[policies.b]
limits = ["sliding-log:10/5m"]
trusted_proxies = ["192.168.0.1", "10.0.0.0/8"]

[policies.c]
limits = ["sliding-log:10/5m"]
trusted_proxies = ["10.0.0.0/8"]

[policies.d]
limits = ["sliding-log:10/5m"]
"#,
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("the policies trust different proxies"),
        "{warnings:?}"
    );
    assert!(
        warnings[0].ends_with(
            "file=limits.toml trusted_proxies=a, b: 10.0.0.0/8 192.168.0.1/32; c: 10.0.0.0/8; d: none"
        ),
        "{warnings:?}"
    );
}

#[test]
fn a_configuration_that_trusts_alike_and_allows_some_is_not_warned_of() {
    let warnings = warnings_of(
        r#"
[policies.a]
limits = ["sliding-log:10/5m"]
trusted_proxies = ["10.0.0.0/8"]
allow_ips = ["192.0.2.0/24"]

[policies.b]
limits = ["sliding-log:10/5m"]
trusted_proxies = ["10.0.0.0/8"]

[policies.c]
limits = ["sliding-log:10/5m"]
# The same block, written from another of its addresses.
trusted_proxies = ["10.20.30.40/8"]
"#,
    );
    assert_eq!(warnings, Vec::<String>::new());
    // None without proxies at all.
    assert_eq!(
        warnings_of("[policies.a]\nlimits = [\"sliding-log:10/5m\"]\n[policies.b]\nlimits = [\"fixed-window:1/1s\"]\n"),
        Vec::<String>::new()
    );
}

#[test]
fn defaults_trusted_by_every_policy_are_not_warned_of_and_an_empty_override_on_purpose_neither() {
    let defaults = r#"
[defaults]
trusted_proxies = ["10.0.0.0/8"]

[policies.a]
limits = ["sliding-log:10/5m"]

[policies.b]
limits = ["sliding-log:10/5m"]
"#;
    assert_eq!(warnings_of(defaults), Vec::<String>::new());
    let on_purpose = format!(
        "{defaults}\n[policies.internal]\nlimits = [\"fixed-window:1/1s\"]\ntrusted_proxies = []\n"
    );
    assert_eq!(warnings_of(&on_purpose), Vec::<String>::new());
    // Another list is a mismatch still.
    let other = format!("{defaults}\n[policies.c]\nlimits = [\"fixed-window:1/1s\"]\ntrusted_proxies = [\"192.168.0.1\"]\n");
    let warnings = warnings_of(&other);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with("trusted_proxies=a, b: 10.0.0.0/8; c: 192.168.0.1/32"),
        "{warnings:?}"
    );
}

#[test]
fn a_ban_status_without_bans_is_warned_of() {
    let login = "[policies.login]\nlimits = [\"sliding-log:10/5m\"]\nban_status = 429\n";
    assert_eq!(
        warnings_of(login),
        [
            "ban_status without penalty or bans: this policy bans no one, so no request is \
             answered with it file=limits.toml policy=login ban_status=429"
        ]
    );
    // With a ban list it answers, it is not; nor is one `[defaults]` sets
    // for the policies that ban.
    assert_eq!(
        warnings_of(&format!("{login}bans = true\n")),
        Vec::<String>::new()
    );
    let defaults = "[defaults]\nban_status = 429\n\
                    [policies.login]\nlimits = [\"sliding-log:10/5m\"]\n\
                    [policies.api]\nlimits = [\"sliding-log:10/5m\"]\n\
                    penalty = { denials = \"5/1m\", ban_for = \"15m\" }\n";
    assert_eq!(warnings_of(defaults), Vec::<String>::new());
}

#[test]
fn a_max_key_bytes_that_bounds_no_key_is_warned_of() {
    let policy = |bytes: usize| {
        format!(
            "[policies.login]\nlimits = [\"sliding-log:10/5m\"]\nmax_keys = 1000\nmax_key_bytes = {bytes}\n"
        )
    };
    assert_eq!(
        warnings_of(&policy(1 << 20)),
        [
            "max_key_bytes is beyond any key a request carries: every key is held whole, not \
             as its digest, so the in-process keys may hold up to 1048576000 bytes \
             file=limits.toml policy=login max_key_bytes=1048576"
        ]
    );
    assert_eq!(warnings_of(&policy(4_096)), Vec::<String>::new());
}
