//! Building a `Registry` warns, once, of a configuration that serves but
//! most likely not as meant: a trusted proxy block or an allowlist that
//! holds every address, and policies that trust different proxies. The
//! warnings are read by a subscriber of this test's own.

use std::sync::{Arc, Mutex};

use limiter_tower::{Config, Registry};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Every event at `warn` or above, as `message key=value …`.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// An event's fields written out.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line(String::new());
        event.record(&mut line);
        self.0.lock().unwrap().push(line.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The warnings logged while a memory registry of `text` is built.
fn warnings_of(text: &str) -> Vec<String> {
    let config = Config::from_toml("limits.toml", text).unwrap();
    let warnings = Warnings::default();
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
"#,
    );
    assert_eq!(warnings, Vec::<String>::new());
    // None without proxies at all.
    assert_eq!(
        warnings_of("[policies.a]\nlimits = [\"sliding-log:10/5m\"]\n[policies.b]\nlimits = [\"fixed-window:1/1s\"]\n"),
        Vec::<String>::new()
    );
}
