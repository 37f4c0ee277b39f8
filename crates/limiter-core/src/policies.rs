//! [`Policies`]: the policies a key is limited by, one or a tiered set
//! (docs/spec.md section 7), and their text form `P1;P2;...`.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use crate::error::PolicyError;
use crate::policy::Policy;

/// The policies every key of a limiter is limited by: one [`Policy`], or a
/// tiered set of up to [`MAX_PARTS`](Self::MAX_PARTS) ("5 per second and 100
/// per minute"), any algorithms in any mix (docs/spec.md section 7).
///
/// A request is admitted only if every part admits, and then every part
/// counts it; a denial counts nothing. A set of one policy decides exactly
/// as that policy. Every limiter builder takes `impl Into<Policies>`, so a
/// [`Policy`] is accepted wherever a set is.
///
/// It dereferences to the slice of its parts, in the order given (the
/// order the decision's [`bound_by`](crate::Decision::bound_by) indexes).
///
/// # Text form
///
/// The parts' [policy strings](Policy#impl-FromStr-for-Policy) joined by
/// `;` (spaces around them ignored): `sliding-log:5/1s;sliding-log:100/1m`.
///
/// ```
/// use limiter_core::{Policies, Policy};
///
/// let tiers: Policies = "sliding-log:5/1s; sliding-log:100/1m".parse()?;
/// assert_eq!(tiers.len(), 2);
/// assert_eq!(tiers.to_string(), "sliding-log:5/1s;sliding-log:100/1m");
/// assert_eq!(tiers.max_cost(), 5);
///
/// let one = Policies::from("token-bucket:2/1s,capacity=10".parse::<Policy>()?);
/// assert_eq!(one.single().map(Policy::max_cost), Some(10));
///
/// assert!("".parse::<Policies>().is_err());
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Policies {
    /// 1 to `MAX_PARTS` parts.
    parts: Box<[Policy]>,
    /// The smallest part's max cost.
    max_cost: u64,
}

impl Policies {
    /// The most parts a set may have.
    pub const MAX_PARTS: usize = 8;

    /// A set of `parts`, in order: at least one, at most
    /// [`MAX_PARTS`](Self::MAX_PARTS).
    pub fn new(parts: impl IntoIterator<Item = Policy>) -> Result<Self, PolicyError> {
        let parts: Box<[Policy]> = parts.into_iter().collect();
        match parts.len() {
            0 => Err(PolicyError::NoPolicies),
            count if count > Self::MAX_PARTS => Err(PolicyError::TooManyPolicies { count }),
            _ => {
                let max_cost = parts.iter().map(Policy::max_cost).min().unwrap_or(0);
                Ok(Self { parts, max_cost })
            }
        }
    }

    /// The parts, in order.
    #[inline]
    pub fn parts(&self) -> &[Policy] {
        &self.parts
    }

    /// The only policy of a set of one; `None` for a tiered set.
    pub fn single(&self) -> Option<&Policy> {
        match &*self.parts {
            [policy] => Some(policy),
            _ => None,
        }
    }

    /// A 64-bit digest of the set's numbers (FNV-1a of its text form, which
    /// is one string per set): what a backend stores beside a key's state,
    /// so that a state made under other numbers is converted before it
    /// decides (docs/spec.md section 9). Equal sets have equal
    /// fingerprints; the digest of a set is fixed, so stored fingerprints
    /// stay valid across versions.
    ///
    /// ```
    /// use limiter_core::Policies;
    ///
    /// let free: Policies = "sliding-log:100/1m".parse()?;
    /// let pro: Policies = "sliding-log:1000/1m".parse()?;
    /// assert_ne!(free.fingerprint(), pro.fingerprint());
    /// assert_eq!(free.fingerprint(), "sliding-log:100/60s".parse::<Policies>()?.fingerprint());
    /// # Ok::<(), limiter_core::PolicyError>(())
    /// ```
    pub fn fingerprint(&self) -> u64 {
        crate::fnv::fnv1a_64(self.to_string().as_bytes())
    }

    /// The most one request may cost: the smallest of the parts' max costs.
    /// A larger cost is an error (docs/spec.md rule 2.2 and section 7).
    #[inline]
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }
}

impl Deref for Policies {
    type Target = [Policy];

    #[inline]
    fn deref(&self) -> &[Policy] {
        &self.parts
    }
}

impl From<Policy> for Policies {
    fn from(policy: Policy) -> Self {
        Self {
            max_cost: policy.max_cost(),
            parts: Box::new([policy]),
        }
    }
}

impl From<&Policy> for Policies {
    fn from(policy: &Policy) -> Self {
        Self::from(policy.clone())
    }
}

impl TryFrom<Vec<Policy>> for Policies {
    type Error = PolicyError;

    fn try_from(parts: Vec<Policy>) -> Result<Self, PolicyError> {
        Self::new(parts)
    }
}

impl<'a> IntoIterator for &'a Policies {
    type Item = &'a Policy;
    type IntoIter = std::slice::Iter<'a, Policy>;

    fn into_iter(self) -> Self::IntoIter {
        self.parts.iter()
    }
}

impl fmt::Display for Policies {
    /// The parts' policy strings joined by `;`; it parses back to an equal set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, policy) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{policy}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Policies {
    /// `Policies(sliding-log:5/1s;sliding-log:100/1m)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Policies({self})")
    }
}

impl FromStr for Policies {
    type Err = PolicyError;

    /// Parses policy strings joined by `;` (docs/spec.md section 7). An
    /// empty string is [`PolicyError::NoPolicies`], more than
    /// [`MAX_PARTS`](Self::MAX_PARTS) parts [`PolicyError::TooManyPolicies`],
    /// an empty part (`a;;b`, a trailing `;`) a syntax error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            return Err(PolicyError::NoPolicies);
        }
        let count = s.split(';').count();
        if count > Self::MAX_PARTS {
            return Err(PolicyError::TooManyPolicies { count });
        }
        let parts = s
            .split(';')
            .map(|part| {
                if part.trim().is_empty() {
                    Err(PolicyError::InvalidPolicyString {
                        input: s.to_owned(),
                        reason: "a policy between ';' is empty".to_owned(),
                    })
                } else {
                    part.parse()
                }
            })
            .collect::<Result<Vec<Policy>, _>>()?;
        Self::new(parts)
    }
}

/// A set serializes as its policy strings joined by `;`. Available with the
/// `serde` feature.
#[cfg(feature = "serde")]
impl serde::Serialize for Policies {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A set deserializes from policy strings joined by `;`. Available with
/// the `serde` feature.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Policies {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PoliciesString;

        impl serde::de::Visitor<'_> for PoliciesString {
            type Value = Policies;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "policy strings joined by ';', e.g. \"sliding-log:5/1s;sliding-log:100/1m\"",
                )
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Policies, E> {
                s.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_str(PoliciesString)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_sets_round_trip() {
        for text in [
            "sliding-log:5/1s",
            "sliding-log:5/1s;sliding-log:100/1m",
            "token-bucket:3/250ms,capacity=6;sliding-log:10/250ms;leaky-bucket:5/250ms,queue=10",
        ] {
            let set: Policies = text.parse().unwrap();
            assert_eq!(set.to_string(), text);
            assert_eq!(set.to_string().parse::<Policies>().unwrap(), set);
            assert_eq!(format!("{set:?}"), format!("Policies({text})"));
        }
        let one: Policies = "fixed-window:5/1s".parse().unwrap();
        assert_eq!(
            one,
            Policies::from("fixed-window:5/1s".parse::<Policy>().unwrap())
        );
        let spaced: Policies = " sliding-log:5/1s ; fixed-window:9/1m ".parse().unwrap();
        assert_eq!(spaced.to_string(), "sliding-log:5/1s;fixed-window:9/1m");
        assert_eq!(spaced.max_cost(), 5);
        assert!(spaced.single().is_none());
    }

    #[test]
    fn each_bad_policy_set_has_its_own_readable_error() {
        let nine = ["fixed-window:1/1s"; 9].join(";");
        let cases = [
            ("", "at least one policy"),
            ("  ", "at least one policy"),
            (nine.as_str(), "at most 8 policies, got 9"),
            (
                "sliding-log:5/1s;;fixed-window:1/1s",
                "a policy between ';' is empty",
            ),
            ("sliding-log:5/1s;", "a policy between ';' is empty"),
            ("sliding-log:5/1s;sliding-logs:1/1s", "unknown algorithm"),
            (
                "sliding-log:5/1s,capacity=3;fixed-window:1/1s",
                "capacity does not apply to sliding-log",
            ),
            (
                "fixed-window:1/1s;token-bucket:1/1s,burst=2",
                "unknown option \"burst\"",
            ),
        ];
        for (input, expected) in cases {
            let message = input.parse::<Policies>().unwrap_err().to_string();
            assert!(
                message.contains(expected),
                "{input:?}: {message:?} lacks {expected:?}"
            );
        }
        assert_eq!(Policies::new([]).unwrap_err(), PolicyError::NoPolicies);
    }
}
