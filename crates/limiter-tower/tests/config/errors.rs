//! Every configuration error names the file, the entry and the reason.

use super::*;

/// The error of a file holding `text`, and the file's path.
fn error_of(name: &str, text: &str) -> (ConfigError, String) {
    let file = TomlFile::new(name, text);
    let error = Config::from_file(&file.0).unwrap_err();
    (error, file.path())
}

/// The error for `allow_keys` entry `$entry`, which the `ip` key never writes.
macro_rules! never_an_ip_key {
    ($entry:literal) => {
        concat!(
            "\"",
            $entry,
            "\" is never a key of \"ip\", whose keys are ip:ADDRESS (one address, as the key \
             writes it: 10.0.0.1, 2001:db8::1, or its network under ipv6_prefix, 2001:db8::/64; \
             blocks go in allow_ips)"
        )
    };
}

#[test]
fn every_configuration_error_names_the_file_the_entry_and_the_reason() {
    let cases: [(&str, String, ConfigErrorKind, &str, &str); 66] = [
        (
            "unknown-algorithm",
            login(r#"["sliding-lgo:10/5m"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[0]",
            "unknown algorithm \"sliding-lgo\"; expected one of: fixed-window, sliding-log, \
             sliding-counter, token-bucket, leaky-bucket",
        ),
        (
            "bad-policy",
            login(r#"["sliding-log:10/5m", "token-bucket:ten/1s"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[1]",
            "invalid rate \"ten/1s\": limit \"ten\" is not a whole number \
             (examples: 100/10s, 10/minute, 1000/1d)",
        ),
        (
            "not-applicable",
            login(r#"["sliding-log:10/5m,capacity=20"]"#, ""),
            ConfigErrorKind::Policy,
            "policies.login.limits[0]",
            "capacity does not apply to sliding-log (capacity is for token-bucket, queue for \
             leaky-bucket)",
        ),
        (
            "no-limits",
            login("[]", ""),
            ConfigErrorKind::Policy,
            "policies.login.limits",
            "a policy set needs at least one policy, got none \
             (example: sliding-log:5/1s;sliding-log:100/1m)",
        ),
        (
            "bad-cidr",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"trusted_proxies = ["10.0.0.0/8", "10.0.0.0/33"]"#,
            ),
            ConfigErrorKind::Address,
            "policies.login.trusted_proxies[1]",
            "invalid address block \"10.0.0.0/33\": expected an address or ADDRESS/PREFIX",
        ),
        (
            "unknown-key",
            login(r#"["sliding-log:10/5m"]"#, r#"key = "cookie:sid""#),
            ConfigErrorKind::Key,
            "policies.login.key",
            "unknown key kind \"cookie:sid\"; expected ip, global, route or header:NAME",
        ),
        (
            "bad-header",
            login(r#"["sliding-log:10/5m"]"#, r#"key = "header:x user""#),
            ConfigErrorKind::Key,
            "policies.login.key",
            "invalid header name \"x user\"",
        ),
        (
            "fallback-on-ip",
            login(r#"["sliding-log:10/5m"]"#, r#"fallback = "ip""#),
            ConfigErrorKind::Key,
            "policies.login.fallback",
            "a fallback is for a header key, and the key is \"ip\"",
        ),
        (
            "unknown-fallback",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"header:x-api-key\"\nfallback = \"allow\"",
            ),
            ConfigErrorKind::Key,
            "policies.login.fallback",
            "unknown fallback \"allow\"; expected reject, ip or skip",
        ),
        (
            "prefix-on-global",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"global\"\nipv6_prefix = 64",
            ),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "an IPv6 prefix groups ip keys, and the key is \"global\"",
        ),
        (
            "prefix-too-long",
            login(r#"["sliding-log:10/5m"]"#, "ipv6_prefix = 129"),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "129 is not a prefix length: expected 0 to 128 bits",
        ),
        (
            "prefix-beyond-a-byte",
            login(r#"["sliding-log:10/5m"]"#, "ipv6_prefix = 300"),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "300 is not a prefix length: expected 0 to 128 bits",
        ),
        (
            "negative-prefix",
            login(r#"["sliding-log:10/5m"]"#, "ipv6_prefix = -1"),
            ConfigErrorKind::Key,
            "policies.login.ipv6_prefix",
            "-1 is not a prefix length: expected 0 to 128 bits",
        ),
        (
            "wrong-type",
            login(r#"["sliding-log:10/5m"]"#, "on_failure = true"),
            ConfigErrorKind::Schema,
            "policies.login.on_failure",
            "invalid type: boolean `true`, expected a string",
        ),
        (
            "wrong-type-in-a-list",
            login(r#"["sliding-log:10/5m", 5]"#, ""),
            ConfigErrorKind::Schema,
            "policies.login.limits[1]",
            "invalid type: integer `5`, expected a string",
        ),
        (
            "wrong-type-in-a-table",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"penalty = { denials = 5, ban_for = "15m" }"#,
            ),
            ConfigErrorKind::Schema,
            "policies.login.penalty.denials",
            "invalid type: integer `5`, expected a string",
        ),
        (
            "allow-key-naming-the-header",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"header:x-user-id\"\nallow_keys = [\"header:partner\", \"header:x-user-id:monitor\"]",
            ),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[1]",
            "\"header:x-user-id:monitor\" is never a key of \"header:x-user-id\", whose keys are \
             header:VALUE (the header's value alone, without its name)",
        ),
        (
            "allow-key-of-another-kind",
            login(r#"["sliding-log:10/5m"]"#, r#"allow_keys = ["header:monitor"]"#),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[0]",
            never_an_ip_key!("header:monitor"),
        ),
        (
            "allow-key-a-block",
            login(r#"["sliding-log:10/5m"]"#, r#"allow_keys = ["ip:10.0.0.0/8"]"#),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[0]",
            never_an_ip_key!("ip:10.0.0.0/8"),
        ),
        (
            "allow-key-not-as-the-key-writes-it",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"allow_keys = ["ip:2001:db8::1", "ip:2001:DB8::2"]"#,
            ),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[1]",
            never_an_ip_key!("ip:2001:DB8::2"),
        ),
        (
            "allow-key-of-an-ipv4-mapped-address",
            login(r#"["sliding-log:10/5m"]"#, r#"allow_keys = ["ip:::ffff:10.0.0.1"]"#),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[0]",
            never_an_ip_key!("ip:::ffff:10.0.0.1"),
        ),
        (
            "allow-key-of-an-address-under-a-prefix",
            login(
                r#"["sliding-log:10/5m"]"#,
                "ipv6_prefix = 64\nallow_keys = [\"ip:2001:db8::/64\", \"ip:10.0.0.1\", \"ip:2001:db8::1\"]",
            ),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[2]",
            never_an_ip_key!("ip:2001:db8::1"),
        ),
        (
            "allow-key-of-a-route-without-a-method",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"route\"\nallow_keys = [\"route:GET /health\", \"route:/health\"]",
            ),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[1]",
            "\"route:/health\" is never a key of \"route\", whose keys are route:METHOD PATH \
             (GET, POST, ..., or OTHER; HEAD is GET)",
        ),
        (
            "allow-key-of-a-fallback",
            login(
                r#"["sliding-log:10/5m"]"#,
                "key = \"header:k\"\nfallback = \"ip\"\nallow_keys = [\"ip:10.0.0.1\", \"global\"]",
            ),
            ConfigErrorKind::Key,
            "policies.login.allow_keys[1]",
            "\"global\" is never a key of \"header:k\", whose keys are header:VALUE (the \
             header's value alone, without its name), or without it ip:ADDRESS (one address, \
             as the key writes it: 10.0.0.1, 2001:db8::1, or its network under ipv6_prefix, \
             2001:db8::/64; blocks go in allow_ips)",
        ),
        (
            "unknown-style",
            login(r#"["sliding-log:10/5m"]"#, r#"headers = "draft""#),
            ConfigErrorKind::Headers,
            "policies.login.headers",
            "unknown header style \"draft\"; expected none, legacy, ietf or both",
        ),
        (
            "syntax",
            "[policies.login]\nlimits = [\"sliding-log:10/5m\"\n".to_owned(),
            ConfigErrorKind::Syntax,
            "line 2, column 30",
            "unclosed array, expected `]`",
        ),
        (
            "unknown-field",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"limit = ["sliding-log:1/1s"]"#,
            ),
            ConfigErrorKind::Schema,
            "policies.login.limit",
            "unknown field `limit`, expected one of `limits`, `key`, `fallback`, \
             `trusted_proxies`, `ipv6_prefix`, `headers`, `allow_ips`, `allow_keys`, \
             `on_failure`, `bans`, `penalty`, `ban_status`, `max_keys`, `max_key_bytes`, \
             `mask_addresses`, `cost`, `charge_after`, `default_plan`, `plan_header`",
        ),
        (
            "no-keys",
            login(r#"["sliding-log:10/5m"]"#, "max_keys = 0"),
            ConfigErrorKind::Memory,
            "policies.login.max_keys",
            "0 is not a max_keys: expected 1 or more",
        ),
        (
            "negative-key-bytes",
            login(r#"["sliding-log:10/5m"]"#, "max_key_bytes = -1"),
            ConfigErrorKind::Memory,
            "policies.login.max_key_bytes",
            "-1 is not a max_key_bytes: expected 0 or more",
        ),
        (
            "bad-allowed-address",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"allow_ips = ["192.0.2.10:8080"]"#,
            ),
            ConfigErrorKind::Address,
            "policies.login.allow_ips[0]",
            "invalid address block \"192.0.2.10:8080\": expected an address or ADDRESS/PREFIX",
        ),
        (
            "unknown-failure-policy",
            login(r#"["sliding-log:10/5m"]"#, r#"on_failure = "open""#),
            ConfigErrorKind::Failure,
            "policies.login.on_failure",
            "unknown failure policy \"open\"; expected return-error, fail-open, fail-closed or \
             fallback",
        ),
        (
            "bad-penalty-denials",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"penalty = { denials = "5 a minute", ban_for = "15m" }"#,
            ),
            ConfigErrorKind::Bans,
            "policies.login.penalty.denials",
            "invalid rate \"5 a minute\": expected LIMIT/WINDOW (examples: 100/10s, 10/minute, \
             1000/1d)",
        ),
        (
            "bad-penalty-length",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"penalty = { denials = "5/1m", ban_for = "a while" }"#,
            ),
            ConfigErrorKind::Bans,
            "policies.login.penalty.ban_for",
            "invalid duration \"a while\": missing number (examples: 500ms, 10s, 1m, 1h, 1d)",
        ),
        (
            "no-penalty-length",
            login(
                r#"["sliding-log:10/5m"]"#,
                r#"penalty = { denials = "5/1m", ban_for = "0s" }"#,
            ),
            ConfigErrorKind::Bans,
            "policies.login.penalty.ban_for",
            "a ban of no time bans no one",
        ),
        (
            "bad-ban-status",
            login(r#"["sliding-log:10/5m"]"#, "ban_status = 404"),
            ConfigErrorKind::Bans,
            "policies.login.ban_status",
            "404 is not a ban's status; expected 403 or 429",
        ),
        (
            "missing-field",
            "[policies.login]\nkey = \"ip\"\n".to_owned(),
            ConfigErrorKind::Schema,
            "policies.login",
            "missing field `limits`",
        ),
        (
            "unknown-table",
            "[policy.login]\nlimits = [\"sliding-log:10/5m\"]\n".to_owned(),
            ConfigErrorKind::Schema,
            "policy",
            "unknown table; expected `defaults`, `policies`, `plans` or `key_plans`",
        ),
        (
            "inherited-bad-address",
            "[defaults]\ntrusted_proxies = [\"10.0.0.0/33\"]\n\
             [policies.login]\nlimits = [\"sliding-log:10/5m\"]\n"
                .to_owned(),
            ConfigErrorKind::Address,
            "defaults.trusted_proxies[0]",
            "invalid address block \"10.0.0.0/33\": expected an address or ADDRESS/PREFIX",
        ),
        (
            "inherited-prefix-too-long",
            "[defaults]\nipv6_prefix = 200\n\
             [policies.total]\nlimits = [\"sliding-log:10/5m\"]\nkey = \"global\"\n"
                .to_owned(),
            ConfigErrorKind::Key,
            "defaults.ipv6_prefix",
            "200 is not a prefix length: expected 0 to 128 bits",
        ),
        (
            "own-prefix-beside-defaults",
            "[defaults]\nipv6_prefix = 64\n\
             [policies.total]\nlimits = [\"sliding-log:10/5m\"]\nkey = \"global\"\n\
             ipv6_prefix = 56\n"
                .to_owned(),
            ConfigErrorKind::Key,
            "policies.total.ipv6_prefix",
            "an IPv6 prefix groups ip keys, and the key is \"global\"",
        ),
        (
            "own-fallback-beside-defaults",
            "[defaults]\nfallback = \"ip\"\n\
             [policies.total]\nlimits = [\"sliding-log:10/5m\"]\nkey = \"global\"\n\
             fallback = \"skip\"\n"
                .to_owned(),
            ConfigErrorKind::Key,
            "policies.total.fallback",
            "a fallback is for a header key, and the key is \"global\"",
        ),
        (
            "inherited-wrong-type",
            "[defaults]\nmax_keys = \"many\"\n[policies.login]\nlimits = [\"sliding-log:10/5m\"]\n"
                .to_owned(),
            ConfigErrorKind::Schema,
            "defaults.max_keys",
            "invalid type: string \"many\", expected i64",
        ),
        (
            "unknown-default",
            "[defaults]\ntrusted_proxy = [\"10.0.0.1\"]\n".to_owned(),
            ConfigErrorKind::Schema,
            "defaults.trusted_proxy",
            "unknown field `trusted_proxy`, expected one of `limits`, `key`, `fallback`, \
             `trusted_proxies`, `ipv6_prefix`, `headers`, `allow_ips`, `allow_keys`, \
             `on_failure`, `bans`, `penalty`, `ban_status`, `max_keys`, `max_key_bytes`, \
             `mask_addresses`, `cost`, `charge_after`, `default_plan`, `plan_header`",
        ),
        (
            "zero-cost",
            login(r#"["fixed-window:10/1m"]"#, "cost = 0"),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "0 is not a weight: expected a whole number from 1",
        ),
        (
            "negative-cost",
            login(r#"["fixed-window:10/1m"]"#, "cost = -2"),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "-2 is not a weight: expected a whole number from 1",
        ),
        (
            "fractional-cost",
            login(r#"["fixed-window:10/1m"]"#, "cost = 1.5"),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "1.5 is not a cost; expected a weight (a whole number from 1), \
             \"content-length:UNIT_BYTES\" or \"header:NAME\"",
        ),
        (
            "weight-above-the-limit",
            login(r#"["fixed-window:10/1m", "fixed-window:100/1h"]"#, "cost = 11"),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "a weight of 11 is above the most a request of these limits may cost, 10: every \
             request would be refused",
        ),
        (
            "unknown-cost",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "ten""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "unknown cost \"ten\"; expected a weight (a whole number from 1), \
             content-length:UNIT_BYTES or header:NAME",
        ),
        (
            "non-numeric-weight",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "5x""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "\"5x\" is not a weight: expected a whole number from 1",
        ),
        (
            "content-length-without-unit",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "content-length""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "content-length needs its unit: content-length:UNIT_BYTES (content-length:1024 for \
             one unit per KiB)",
        ),
        (
            "content-length-of-zero-bytes",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "content-length:0""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "\"content-length:0\": the unit \"0\" is not a whole number of bytes from 1",
        ),
        (
            "bad-cost-header",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "header:x cost""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "invalid header name \"x cost\"",
        ),
        (
            "bad-unstated-cost",
            login(r#"["fixed-window:10/1m"]"#, r#"cost = "header:x-cost,or=0""#),
            ConfigErrorKind::Cost,
            "policies.login.cost",
            "\"header:x-cost,or=0\": \"or=0\" is not a weight: expected or= a whole number \
             from 1",
        ),
        (
            "plan-of-an-undefined-policy",
            "[policies.api]\nlimits = [\"fixed-window:10/1m\"]\n\
             [plans.pro]\napii = [\"fixed-window:100/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "plans.pro.apii",
            "no policy is named \"apii\" (the file has: api)",
        ),
        (
            "key-plan-undefined",
            "[policies.api]\nlimits = [\"fixed-window:10/1m\"]\n\
             [plans.pro]\napi = [\"fixed-window:100/1m\"]\n\
             [key_plans]\n\"header:acme\" = \"gold\"\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "key_plans.\"header:acme\"",
            "no plan is named \"gold\" (the file has: default, pro)",
        ),
        (
            "plan-of-the-default-plan",
            "[policies.api]\nlimits = [\"fixed-window:10/1m\"]\ndefault_plan = \"free\"\n\
             [plans.free]\napi = [\"fixed-window:100/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "plans.free.api",
            "\"free\" is the policy's default plan, whose limits are its own `limits` \
             (policies.api.limits)",
        ),
        (
            "plan-limits-bad",
            "[policies.api]\nlimits = [\"fixed-window:10/1m\"]\n\
             [plans.pro]\napi = [\"fixed-windw:100/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "plans.pro.api[0]",
            "unknown algorithm \"fixed-windw\"; expected one of: fixed-window, sliding-log, \
             sliding-counter, token-bucket, leaky-bucket",
        ),
        (
            "plan-below-the-weight",
            "[policies.api]\nlimits = [\"fixed-window:100/1m\"]\ncost = 20\n\
             [plans.tiny]\napi = [\"fixed-window:10/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "plans.tiny.api",
            "a request of this policy weighs 20 units, above the most a request of these \
             limits may cost, 10: every request would be refused",
        ),
        (
            "bad-plan-header",
            "[defaults]\nplan_header = \"x plan\"\n\
             [policies.api]\nlimits = [\"fixed-window:10/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "defaults.plan_header",
            "\"x plan\" is not a header name",
        ),
        (
            "bad-plan-name",
            "[policies.api]\nlimits = [\"fixed-window:10/1m\"]\n\
             [plans.\"pro\\\"\"]\napi = [\"fixed-window:100/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Plan,
            "plans.\"pro\\\"\"",
            "not a plan name: one or more printable ASCII characters but `\"` and `\\`",
        ),
        (
            "unknown-charge-after",
            login(r#"["fixed-window:10/1m"]"#, r#"charge_after = "tokens""#),
            ConfigErrorKind::Cost,
            "policies.login.charge_after",
            "unknown charge after the response \"tokens\"; expected actual-cost or \
             response-bytes:UNIT_BYTES",
        ),
        (
            "response-bytes-without-unit",
            login(r#"["fixed-window:10/1m"]"#, r#"charge_after = "response-bytes""#),
            ConfigErrorKind::Cost,
            "policies.login.charge_after",
            "response-bytes needs its unit: response-bytes:UNIT_BYTES (response-bytes:1024 for \
             one unit per KiB)",
        ),
        (
            "response-bytes-of-zero-bytes",
            login(r#"["fixed-window:10/1m"]"#, r#"charge_after = "response-bytes:0""#),
            ConfigErrorKind::Cost,
            "policies.login.charge_after",
            "\"response-bytes:0\": the unit \"0\" is not a whole number of bytes from 1",
        ),
        (
            "charge-after-not-a-string",
            login(r#"["fixed-window:10/1m"]"#, "charge_after = 1024"),
            ConfigErrorKind::Schema,
            "policies.login.charge_after",
            "invalid type: integer `1024`, expected a string",
        ),
        (
            "inherited-bad-charge-after",
            "[defaults]\ncharge_after = \"response-bytes:1k\"\n[policies.login]\n\
             limits = [\"fixed-window:10/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Cost,
            "defaults.charge_after",
            "\"response-bytes:1k\": the unit \"1k\" is not a whole number of bytes from 1",
        ),
        (
            "inherited-bad-cost",
            "[defaults]\ncost = 0\n[policies.login]\nlimits = [\"fixed-window:10/1m\"]\n"
                .to_owned(),
            ConfigErrorKind::Cost,
            "defaults.cost",
            "0 is not a weight: expected a whole number from 1",
        ),
    ];
    for (name, text, kind, entry, reason) in cases {
        let (error, path) = error_of(name, &text);
        assert_eq!(error.file(), path, "{name}");
        assert_eq!(error.kind(), kind, "{name}: {error}");
        assert_eq!(error.entry(), entry, "{name}: {error}");
        assert_eq!(error.reason(), reason, "{name}");
        assert_eq!(
            error.to_string(),
            format!("{path}: {entry}: {}", error.reason()),
            "{name}"
        );
        // `?` in `main` prints the Debug form: the same one line.
        assert_eq!(format!("{error:?}"), error.to_string(), "{name}");
        assert!(format!("{error:#?}").starts_with("ConfigError {"), "{name}");
    }
}

#[test]
fn a_policy_that_is_not_configured_fails_where_the_router_is_built() {
    let file = TomlFile::new("missing-name", LIMITS);
    let registry = Registry::memory(&Config::from_file(&file.0).unwrap());
    let error = registry.layer("signup").unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::NotConfigured);
    assert_eq!(
        error.to_string(),
        format!(
            "{}: policies.signup: not configured (the file has: login, user)",
            file.path()
        )
    );
}

#[test]
fn an_unreadable_file_is_named() {
    let path = std::env::temp_dir().join("limiter-tower-no-such-file.toml");
    let error = Config::from_file(&path).unwrap_err();
    assert_eq!(error.kind(), ConfigErrorKind::Io);
    assert_eq!(
        error.to_string(),
        format!("{}: No such file or directory (os error 2)", path.display())
    );
}
