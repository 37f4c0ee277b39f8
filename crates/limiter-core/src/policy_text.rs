//! A [`Policy`] as text, the policy strings of docs/spec.md section 7:
//! `ALG:LIMIT/WINDOW`, plus `,capacity=C` (token bucket) or `,queue=Q`
//! (leaky bucket). With the `serde` feature, a policy serializes as its
//! string.

use std::fmt;
use std::str::FromStr;

use crate::algorithm::Algorithm;
use crate::error::PolicyError;
use crate::policy::Policy;
use crate::rate::{whole_number, Rate};

/// An algorithm's name in a policy string.
impl FromStr for Algorithm {
    type Err = PolicyError;

    /// Parses a name as [`Algorithm::name`] gives it; case and `_` for `-`
    /// do not matter.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| PolicyError::UnknownAlgorithm {
                input: s.to_owned(),
            })
    }
}

impl fmt::Display for Policy {
    /// The policy string: `sliding-log:100/1h`, `token-bucket:2/1s,capacity=10`.
    /// The window is written in the largest unit that divides it exactly; a
    /// capacity or queue equal to the limit (the default) is left out. The
    /// string parses back to an equal policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm(), self.rate())?;
        if let Some(capacity) = self.capacity().filter(|&c| c != self.limit()) {
            write!(f, ",capacity={capacity}")?;
        }
        if let Some(queue) = self.queue().filter(|&q| q != self.limit()) {
            write!(f, ",queue={queue}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Policy {
    /// `Policy(sliding-log:100/1h)`: the policy string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Policy({self})")
    }
}

impl FromStr for Policy {
    type Err = PolicyError;

    /// Parses a policy string (docs/spec.md section 7): `ALG:LIMIT/WINDOW`,
    /// then optionally `,capacity=C` for a token bucket or `,queue=Q` for a
    /// leaky bucket. Spaces around the parts are ignored.
    ///
    /// ```
    /// use limiter_core::{Algorithm, Policy};
    ///
    /// let api: Policy = "token-bucket:2/1s,capacity=10".parse()?;
    /// assert_eq!((api.algorithm(), api.limit(), api.capacity()), (Algorithm::TokenBucket, 2, Some(10)));
    /// assert_eq!(api.to_string(), "token-bucket:2/1s,capacity=10");
    /// assert_eq!("sliding-log:100/3600s".parse::<Policy>()?.to_string(), "sliding-log:100/1h");
    ///
    /// let error = "sliding-log:100/1h,capacity=5".parse::<Policy>().unwrap_err();
    /// assert_eq!(error.to_string(), "capacity does not apply to sliding-log (capacity is for token-bucket, queue for leaky-bucket)");
    /// # Ok::<(), limiter_core::PolicyError>(())
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = |reason: String| PolicyError::InvalidPolicyString {
            input: s.to_owned(),
            reason,
        };
        let (algorithm, rest) = s.split_once(':').ok_or_else(|| {
            syntax("expected ALG:LIMIT/WINDOW, e.g. sliding-log:100/1h".to_owned())
        })?;
        let algorithm: Algorithm = algorithm.parse()?;
        let mut parts = rest.split(',');
        let rate: Rate = parts.next().unwrap_or_default().parse()?;
        let (mut capacity, mut queue) = (None, None);
        for option in parts {
            let (name, value) = option.split_once('=').ok_or_else(|| {
                syntax(format!(
                    "option {:?} is not NAME=VALUE, e.g. capacity=10",
                    option.trim()
                ))
            })?;
            let (name, value) = (name.trim(), value.trim());
            let slot = match name {
                "capacity" => &mut capacity,
                "queue" => &mut queue,
                _ => {
                    return Err(PolicyError::UnknownOption {
                        option: name.to_owned(),
                    })
                }
            };
            if slot.is_some() {
                return Err(syntax(format!("{name} is given twice")));
            }
            let value = whole_number(value)
                .ok_or_else(|| syntax(format!("{name} {value:?} is not a whole number")))?;
            *slot = Some(value);
        }
        Self::from_options(algorithm, rate, capacity, queue)
    }
}

/// A policy serializes as its policy string. Available with the `serde`
/// feature.
#[cfg(feature = "serde")]
impl serde::Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A policy deserializes from its policy string. Available with the
/// `serde` feature.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PolicyString;

        impl serde::de::Visitor<'_> for PolicyString {
            type Value = Policy;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a policy string such as \"sliding-log:100/1h\"")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Policy, E> {
                s.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_str(PolicyString)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn policy_strings_round_trip() {
        for text in [
            "sliding-log:100/1h",
            "fixed-window:5/1s",
            "sliding-counter:1000000/1d",
            "token-bucket:2/1s,capacity=10",
            "token-bucket:2/1s",
            "leaky-bucket:10/250ms,queue=20",
            "fixed-window:7/90s",
            "fixed-window:7/1500us",
        ] {
            let policy: Policy = text.parse().unwrap();
            assert_eq!(policy.to_string(), text);
            assert_eq!(policy.to_string().parse::<Policy>().unwrap(), policy);
            assert_eq!(format!("{policy:?}"), format!("Policy({text})"));
        }
        let spaced: Policy = " token-bucket : 2 / 1s , capacity = 10 ".parse().unwrap();
        assert_eq!(spaced.to_string(), "token-bucket:2/1s,capacity=10");
        // Every spelling docs/spec.md section 6 lists for a duration.
        for (text, written) in [
            ("fixed-window:10/minute", "fixed-window:10/1m"),
            ("fixed-window:5/s", "fixed-window:5/1s"),
            ("sliding-log:5/2 hours", "sliding-log:5/2h"),
            ("sliding-log:5/3 sec", "sliding-log:5/3s"),
            ("sliding-log:5/7µs", "sliding-log:5/7us"),
            ("sliding-log:5/1 day", "sliding-log:5/1d"),
        ] {
            assert_eq!(text.parse::<Policy>().unwrap().to_string(), written);
        }
        let default_options: Policy = "leaky-bucket:10/1s,queue=10".parse().unwrap();
        assert_eq!(default_options.to_string(), "leaky-bucket:10/1s");
        let built = Policy::sliding_log(Rate::new(100, Duration::from_secs(3600))).unwrap();
        assert_eq!(built.to_string(), "sliding-log:100/1h");
    }

    #[test]
    fn each_bad_policy_string_has_its_own_readable_error() {
        let cases = [
            ("sliding-log", "expected ALG:LIMIT/WINDOW"),
            ("sliding-logs:100/1h", "unknown algorithm \"sliding-logs\""),
            ("sliding-log:100", "expected LIMIT/WINDOW"),
            (
                "sliding-log:100/1h,capacity=5",
                "capacity does not apply to sliding-log",
            ),
            (
                "leaky-bucket:1/1s,capacity=5",
                "capacity does not apply to leaky-bucket",
            ),
            (
                "token-bucket:1/1s,queue=5",
                "queue does not apply to token-bucket",
            ),
            ("token-bucket:1/1s,burst=5", "unknown option \"burst\""),
            ("token-bucket:1/1s,capacity", "is not NAME=VALUE"),
            (
                "token-bucket:1/1s,capacity=ten",
                "capacity \"ten\" is not a whole number",
            ),
            (
                "token-bucket:1/1s,capacity=2,capacity=3",
                "capacity is given twice",
            ),
            (
                "token-bucket:1/1s,capacity=0",
                "capacity must be at least 1",
            ),
            ("fixed-window:0/1s", "limit must be at least 1"),
        ];
        // Digits only: no sign, though `u64::from_str` takes a `+`.
        for input in ["sliding-log:+5/1s", "token-bucket:2/1s,capacity=+10"] {
            let message = input.parse::<Policy>().unwrap_err().to_string();
            assert!(
                message.contains("is not a whole number"),
                "{input}: {message}"
            );
        }
        let count = cases.len();
        let mut seen = std::collections::HashSet::new();
        for (input, expected) in cases {
            let message = input.parse::<Policy>().unwrap_err().to_string();
            assert!(
                message.contains(expected),
                "{input}: {message:?} lacks {expected:?}"
            );
            seen.insert(message);
        }
        assert_eq!(seen.len(), count, "every bad string has its own message");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn a_policy_serializes_as_its_string() {
        let policy: Policy = "token-bucket:2/1s,capacity=10".parse().unwrap();
        let json = serde_json::to_string(&policy).unwrap();
        assert_eq!(json, "\"token-bucket:2/1s,capacity=10\"");
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), policy);
        let error = serde_json::from_str::<Policy>("\"sliding-log:1/1s,queue=2\"").unwrap_err();
        assert!(
            error.to_string().contains("queue does not apply"),
            "{error}"
        );
    }
}
