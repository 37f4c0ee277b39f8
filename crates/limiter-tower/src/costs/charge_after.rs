//! [`ChargeAfter`]: a request's true cost, known only once its response
//! is out, charged on top of what its [`Cost`](crate::Cost) reserved; and
//! [`ActualCost`], the count a handler writes in its response.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use crate::costs::cost::CostFormError;

/// What an admitted request truly costs, read once its response is
/// complete, for [`LimiterLayer::charge_after`](crate::LimiterLayer::charge_after):
/// the [`ActualCost`] its handler wrote in the response's extensions, or
/// the bytes of the response's body.
///
/// A request is admitted at an **estimate**, the units its
/// [`Cost`](crate::Cost) reserved (1 by default). Once its response is
/// complete, the layer charges the **true cost less the estimate**, when
/// the true cost is the larger: a charge is always counted, never
/// refused, and may take the key into debt (up to one full bucket, or a
/// window's limit), which refuses the key until time has paid it back
/// (docs/spec.md section 10). A true cost below the estimate is **not
/// refunded**: the estimate's units were admitted, and what a limiter
/// admitted stays counted (an admission other requests were refused
/// for cannot be undone).
///
/// ```
/// use std::num::NonZeroU64;
/// use limiter_tower::ChargeAfter;
///
/// let tokens = ChargeAfter::actual_cost(); // the handler's `ActualCost`
/// let per_kib = ChargeAfter::response_bytes(NonZeroU64::new(1024).unwrap());
/// assert_eq!("actual-cost".parse::<ChargeAfter>()?, tokens);
/// assert_eq!("response-bytes:1024".parse::<ChargeAfter>()?, per_kib);
/// # Ok::<(), limiter_tower::cost::CostFormError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeAfter {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ActualCost,
    ResponseBytes(NonZeroU64),
}

impl ChargeAfter {
    /// The [`ActualCost`] the handler wrote in its response's extensions
    /// (the tokens a language model used). A response without one is not
    /// charged: its estimate stands.
    pub fn actual_cost() -> Self {
        Self {
            kind: Kind::ActualCost,
        }
    }

    /// The bytes of the response's body, in units of `unit_bytes`,
    /// rounded up (with 1024: 1 to 1024 bytes are 1 unit, 1025 are 2),
    /// counted as the body streams: the bytes it gave the server before it
    /// ended, or before the server dropped it (a client gone mid-body is
    /// charged what was sent until then).
    pub fn response_bytes(unit_bytes: NonZeroU64) -> Self {
        Self {
            kind: Kind::ResponseBytes(unit_bytes),
        }
    }

    pub(crate) fn kind(self) -> Kind {
        self.kind
    }
}

/// `"actual-cost"` or `"response-bytes:UNIT_BYTES"`, as a configuration
/// file's `charge_after` writes them.
impl FromStr for ChargeAfter {
    type Err = CostFormError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "actual-cost" {
            return Ok(Self::actual_cost());
        }
        if s == "response-bytes" {
            return Err(CostFormError::new(
                "response-bytes needs its unit: response-bytes:UNIT_BYTES (response-bytes:1024 \
                 for one unit per KiB)",
            ));
        }
        if let Some(unit) = s.strip_prefix("response-bytes:") {
            return unit
                .parse::<u64>()
                .ok()
                .filter(|_| unit.bytes().all(|b| b.is_ascii_digit()))
                .and_then(NonZeroU64::new)
                .map(Self::response_bytes)
                .ok_or_else(|| {
                    CostFormError::new(format!(
                        "{s:?}: the unit {unit:?} is not a whole number of bytes from 1"
                    ))
                });
        }
        Err(CostFormError::new(format!(
            "unknown charge after the response {s:?}; expected actual-cost or \
             response-bytes:UNIT_BYTES"
        )))
    }
}

impl fmt::Display for ChargeAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::ActualCost => f.write_str("actual-cost"),
            Kind::ResponseBytes(unit) => write!(f, "response-bytes:{unit}"),
        }
    }
}

/// A request's true cost in units, written by its handler in the
/// response's extensions and charged, less the estimate its
/// [`Cost`](crate::Cost) reserved, once the response is complete (with
/// [`ChargeAfter::actual_cost`]).
///
/// In axum it is a response part: `(ActualCost(tokens), body)`.
///
/// ```
/// use http::Response;
/// use limiter_tower::ActualCost;
///
/// let mut response = Response::new("the completion");
/// response.extensions_mut().insert(ActualCost(1_250)); // the tokens the model used
/// # assert_eq!(response.extensions().get::<ActualCost>(), Some(&ActualCost(1_250)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActualCost(pub u64);

/// `(ActualCost(units), body)` from an axum handler. Available with the
/// `axum` feature.
#[cfg(feature = "axum")]
impl axum::response::IntoResponseParts for ActualCost {
    type Error = std::convert::Infallible;

    fn into_response_parts(
        self,
        mut parts: axum::response::ResponseParts,
    ) -> Result<axum::response::ResponseParts, Self::Error> {
        parts.extensions_mut().insert(self);
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_text_form_is_its_charge_and_displays_as_written() {
        for text in ["actual-cost", "response-bytes:1", "response-bytes:1024"] {
            assert_eq!(text.parse::<ChargeAfter>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn a_bad_text_form_says_what_is_expected() {
        let reason = |text: &str| text.parse::<ChargeAfter>().unwrap_err().to_string();
        assert_eq!(
            reason("response-bytes"),
            "response-bytes needs its unit: response-bytes:UNIT_BYTES (response-bytes:1024 for \
             one unit per KiB)"
        );
        for unit in ["0", "-1", "+5", "1k", ""] {
            assert_eq!(
                reason(&format!("response-bytes:{unit}")),
                format!(
                    "\"response-bytes:{unit}\": the unit \"{unit}\" is not a whole number of \
                     bytes from 1"
                )
            );
        }
        assert_eq!(
            reason("tokens"),
            "unknown charge after the response \"tokens\"; expected actual-cost or \
             response-bytes:UNIT_BYTES"
        );
    }
}
