//! [`ConfigError`]: what is wrong in a configuration, and where: the
//! file, the entry (a TOML key, or a line and column) and the reason.

use std::fmt;

/// `name` as a TOML key: bare when it may be, else quoted.
pub(crate) fn toml_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// `line L, column C` (from 1) of byte `offset` in `text`.
pub(crate) fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    format!("line {line}, column {column}")
}

/// What kind of thing is wrong in a configuration.
///
/// Available with the `config` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not TOML.
    Syntax,
    /// An unknown table or field, a missing field, or a value of the wrong type.
    Schema,
    /// A policy string that does not parse (an unknown algorithm, a bad
    /// rate, an option that does not apply), or an empty or too long set.
    Policy,
    /// A trusted proxy that is not an address or an address block.
    Address,
    /// An unknown key kind, a bad header name, a fallback or IPv6 prefix
    /// that does not apply.
    Key,
    /// An unknown header style.
    Headers,
    /// An unknown failure policy.
    Failure,
    /// A penalty or a ban status that does not parse.
    Bans,
    /// A `max_keys` or `max_key_bytes` out of range.
    Memory,
    /// A `cost` that is not a weight from 1, `content-length:UNIT_BYTES`
    /// or `header:NAME`, or a weight above the limits' max cost; a
    /// `charge_after` that is not `actual-cost` nor
    /// `response-bytes:UNIT_BYTES`.
    Cost,
    /// A plan that does not parse or refers to what the file does not
    /// define: a policy a `[plans.NAME]` table names, a plan a `[key_plans]`
    /// entry names, a bad plan name or plan header.
    Plan,
    /// A reload that changes what only a restart can: a policy added or
    /// removed, or a field other than the limits and plans.
    Reload,
    /// A policy asked for by name that the file does not configure.
    NotConfigured,
    /// The backend refused the policy (e.g. a Redis sliding log above its
    /// maximum limit).
    Backend,
}

/// A configuration that cannot be served: the file, the entry
/// (`policies.login.limits[0]`, or the line and column of a syntax error)
/// and the reason, all three in its `Display`:
/// `limits.toml: policies.login.limits[0]: unknown algorithm "sliding-lgo"; expected one of: …`.
///
/// Its `Debug` is that line too, so `main` returning it with `?` prints
/// the line; `{:#?}` shows the fields.
///
/// Available with the `config` feature.
pub struct ConfigError {
    file: String,
    entry: String,
    kind: ConfigErrorKind,
    reason: String,
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return fmt::Display::fmt(self, f);
        }
        f.debug_struct("ConfigError")
            .field("file", &self.file)
            .field("entry", &self.entry)
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .finish()
    }
}

impl ConfigError {
    pub(crate) fn new(
        file: &str,
        entry: impl Into<String>,
        kind: ConfigErrorKind,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            file: file.to_owned(),
            entry: entry.into(),
            kind,
            reason: reason.into(),
        }
    }

    /// The file, as given to [`Config::from_file`](crate::Config::from_file) or
    /// [`Config::from_toml`](crate::Config::from_toml).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The entry at fault: `policies.login.limits[0]`, `policies.login`
    /// (an unknown or missing field), `line 3, column 7` (a syntax error),
    /// or empty when the file could not be read.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// What kind of thing is wrong.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// Why, in words (with the causes of the error that said so).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entry.is_empty() {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.file, self.entry, self.reason)
        }
    }
}

/// The reason holds the whole story (the policy's or the backend's error
/// with its causes), so there is no `source` to print twice.
impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_toml_keys_and_offsets_are_lines_and_columns() {
        assert_eq!(toml_key("login"), "login");
        assert_eq!(toml_key("a.b"), "\"a.b\"");
        assert_eq!(toml_key(""), "\"\"");
        assert_eq!(line_and_column("a\nbc\nd", 4), "line 2, column 3");
        assert_eq!(line_and_column("abc", 0), "line 1, column 1");
    }
}
