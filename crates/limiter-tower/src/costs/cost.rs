//! [`Cost`]: how many units of the limit a request takes, read from the
//! request before it is decided; and [`CostError`], the answer to a
//! request whose cost cannot be read or can never be admitted.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Version};

/// What one request costs the limiter, in units of its policies' limits:
/// 1 by default ([`Cost::one`]), a fixed [weight](Self::weight), the
/// body's [`Content-Length`](Self::content_length) in units of so many
/// bytes, the value of a [header](Self::header) a trusted gateway sets, or
/// a [function](Self::custom) of the request's head.
///
/// A request costs at least one unit: the layer never asks the limiter a
/// cost of 0. A cost the request states wrongly (a header that is not a
/// whole number from 1, a `Content-Length` that is not a length) is
/// answered 400, a body of unknown length 411 (unless
/// [`or_weight`](Self::or_weight)), and a cost above the most a request
/// may cost (the policies' [max cost](limiter_core::Policies::max_cost))
/// 413 for a body's length, 400 otherwise: such a request can never be
/// admitted, so it is an error, not a denial (docs/spec.md rule 2.2).
/// None of these is counted, and none is a 429.
///
/// ```
/// use std::num::NonZeroU64;
/// use limiter_tower::cost::CostError;
/// use limiter_tower::Cost;
///
/// const KIB: NonZeroU64 = NonZeroU64::new(1024).unwrap();
/// let search = Cost::weight(NonZeroU64::new(10).unwrap());
/// let upload = Cost::content_length(KIB); // one unit per KiB, rounded up
/// let stated = Cost::header("x-request-cost").or_weight(NonZeroU64::MIN);
/// let by_query = Cost::custom(|head| match head.uri.query() {
///     Some(query) if query.contains("expand=all") => Ok(5),
///     Some(query) if query.contains("expand=") => {
///         Err(CostError::bad_request("expand takes `all` or nothing"))
///     }
///     _ => Ok(1),
/// });
/// # let _ = (search, upload, stated, by_query);
/// ```
#[derive(Clone, Default)]
pub struct Cost {
    kind: Kind,
    /// What a request costs whose cost it does not state: no header, or a
    /// body of unknown length.
    unstated: Option<NonZeroU64>,
}

/// A request's cost function, as [`Cost::custom`] takes it.
type CostFn = Arc<dyn Fn(&Parts) -> Result<u64, CostError> + Send + Sync>;

#[derive(Clone, Default)]
enum Kind {
    #[default]
    One,
    Weight(NonZeroU64),
    ContentLength(NonZeroU64),
    Header(HeaderName),
    Custom(CostFn),
}

impl Cost {
    /// One unit per request, the default.
    pub fn one() -> Self {
        Self::default()
    }

    /// `units` per request: an expensive route's weight (a layer per
    /// route, over one limiter, gives each route its own weight).
    pub fn weight(units: NonZeroU64) -> Self {
        Self::of(Kind::Weight(units))
    }

    /// The body's length in units of `unit_bytes`, rounded up: with 1024,
    /// a body of 1 to 1024 bytes costs 1 unit, of 1025 bytes 2. A request
    /// without a body (HTTP/1 without `Content-Length` nor
    /// `Transfer-Encoding`) or with an empty one costs 1 unit. A body of
    /// unknown length (chunked, or HTTP/2 without `Content-Length`) is
    /// answered `411 Length Required` unless [`or_weight`](Self::or_weight);
    /// one of more units than a request may cost, `413 Content Too Large`.
    pub fn content_length(unit_bytes: NonZeroU64) -> Self {
        Self::of(Kind::ContentLength(unit_bytes))
    }

    /// The value of header `name`, a whole number from 1, as a gateway in
    /// front states it (trust it only where clients cannot reach the
    /// service but through that gateway). Of several lines of the header,
    /// the last, which a gateway appending its own writes after the
    /// client's. A request without it is answered 400 unless
    /// [`or_weight`](Self::or_weight); a value that is not a whole number
    /// from 1 (negative, 0, not a number) is answered 400, saying why.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn header(name: &str) -> Self {
        let name = HeaderName::from_str(name).expect("a valid header name");
        Self::of(Kind::Header(name))
    }

    /// `f`'s cost for the request's head. An `Err` is answered with the
    /// [`CostError`]'s status and message; `Ok(0)` is the function's
    /// mistake (a request costs at least one unit), answered 500.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Result<u64, CostError> + Send + Sync + 'static,
    {
        Self::of(Kind::Custom(Arc::new(f)))
    }

    /// What a request costs that does not state its cost: a
    /// [`header`](Self::header) cost's request without the header, a
    /// [`content_length`](Self::content_length) cost's body of unknown
    /// length. Without it, such a request is answered 400 or 411. A weight
    /// and a function always give a cost, so it does not change them.
    #[must_use]
    pub fn or_weight(mut self, units: NonZeroU64) -> Self {
        self.unstated = Some(units);
        self
    }

    fn of(kind: Kind) -> Self {
        Self {
            kind,
            unstated: None,
        }
    }

    /// Whether every request costs one unit: the layer then reads nothing.
    #[inline]
    pub(crate) fn is_one(&self) -> bool {
        matches!(self.kind, Kind::One)
    }

    /// A weight's units, which the layer checks against the limiter's
    /// maximum when it is set.
    pub(crate) fn weight_units(&self) -> Option<u64> {
        match self.kind {
            Kind::Weight(units) => Some(units.get()),
            _ => None,
        }
    }

    /// `req`'s cost, from 1 to `max` (the most a request may cost), or the
    /// answer to give instead; `req` is handed back (a function's cost
    /// reads its head apart from its body). Out of line: the default cost
    /// never calls it.
    #[inline(never)]
    pub(crate) fn of_request<B>(
        &self,
        req: Request<B>,
        max: u64,
    ) -> (Request<B>, Result<u64, CostError>) {
        let (req, units) = match &self.kind {
            Kind::One => (req, Ok(1)),
            Kind::Weight(units) => (req, Ok(units.get())),
            Kind::ContentLength(unit_bytes) => {
                let units = self.body_units(&req, *unit_bytes);
                return (
                    req,
                    units.and_then(|units| at_most(units, max, Source::Body)),
                );
            }
            Kind::Header(name) => {
                let units = self.header_units(req.headers(), name);
                (req, units)
            }
            Kind::Custom(f) => {
                let (parts, body) = req.into_parts();
                let units = f(&parts).and_then(|units| {
                    if units == 0 {
                        Err(CostError::of(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "invalid_cost",
                            "the request's cost function answered 0; a request costs at least \
                             1 unit",
                        ))
                    } else {
                        Ok(units)
                    }
                });
                (Request::from_parts(parts, body), units)
            }
        };
        (
            req,
            units.and_then(|units| at_most(units, max, Source::Stated)),
        )
    }

    /// The units of `req`'s body, by its `Content-Length`.
    fn body_units<B>(&self, req: &Request<B>, unit_bytes: NonZeroU64) -> Result<u64, CostError> {
        let headers = req.headers();
        let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
        let Some(first) = lengths.next() else {
            let bodiless =
                req.version() < Version::HTTP_2 && !headers.contains_key(TRANSFER_ENCODING);
            return match (bodiless, self.unstated) {
                (true, _) => Ok(1),
                (false, Some(units)) => Ok(units.get()),
                (false, None) => Err(CostError::of(
                    StatusCode::LENGTH_REQUIRED,
                    "length_required",
                    "the request's cost is its body's length, and it sends no Content-Length",
                )),
            };
        };
        let invalid = || {
            CostError::bad_request("the Content-Length is not a length (a whole number of bytes)")
                .code("invalid_content_length")
        };
        let bytes = decimal(first.as_bytes()).ok_or_else(invalid)?;
        // Several lines are one length repeated, or no length at all.
        for other in lengths {
            if decimal(other.as_bytes()) != Some(bytes) {
                return Err(invalid());
            }
        }
        Ok(bytes.div_ceil(unit_bytes.get()).max(1))
    }

    /// The units header `name` states.
    fn header_units(&self, headers: &HeaderMap, name: &HeaderName) -> Result<u64, CostError> {
        let Some(value) = headers.get_all(name).iter().next_back() else {
            return match self.unstated {
                Some(units) => Ok(units.get()),
                None => Err(CostError::bad_request(format!(
                    "the request lacks the {name} header that states its cost"
                ))),
            };
        };
        let text = String::from_utf8_lossy(value.as_bytes());
        let text = text.trim();
        let why = if text.starts_with('-') {
            "is negative"
        } else if text.is_empty() {
            "is empty"
        } else if !text.bytes().all(|b| b.is_ascii_digit()) {
            "is not a whole number"
        } else {
            match text.parse::<u64>() {
                Ok(0) => "is 0, and a request costs at least 1 unit",
                Ok(units) => return Ok(units),
                // More digits than a u64: above any maximum.
                Err(_) => return Ok(u64::MAX),
            }
        };
        Err(CostError::bad_request(format!(
            "the {name} header's value {text:?} {why}: a cost is a whole number from 1"
        )))
    }
}

/// Where a cost comes from, for its error.
#[derive(Clone, Copy)]
enum Source {
    Body,
    Stated,
}

/// `units`, or the error of a cost above `max`.
fn at_most(units: u64, max: u64, source: Source) -> Result<u64, CostError> {
    if units <= max {
        return Ok(units);
    }
    Err(match source {
        Source::Body => CostError::of(
            StatusCode::PAYLOAD_TOO_LARGE,
            "content_too_large",
            format!(
                "the body costs {units} units, above the most a request may cost, {max}: it \
                 can never be admitted"
            ),
        ),
        Source::Stated => CostError::of(
            StatusCode::BAD_REQUEST,
            "cost_exceeds_maximum",
            format!(
                "the request costs {units} units, above the most a request may cost, {max}: it \
                 can never be admitted"
            ),
        ),
    })
}

/// `bytes` as a decimal number of ASCII digits alone, if they are one.
fn decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::One => "one".to_owned(),
            Kind::Weight(units) => units.to_string(),
            Kind::ContentLength(unit_bytes) => format!("content-length:{unit_bytes}"),
            Kind::Header(name) => format!("header:{name}"),
            Kind::Custom(_) => "custom".to_owned(),
        };
        f.debug_struct("Cost")
            .field("kind", &kind)
            .field("unstated", &self.unstated)
            .finish()
    }
}

/// The text forms a configuration writes: a weight (`"5"`),
/// `"content-length:UNIT_BYTES"` or `"header:NAME"`, the last two with
/// `,or=UNITS` for [`or_weight`](Cost::or_weight).
///
/// ```
/// use limiter_tower::Cost;
///
/// let upload: Cost = "content-length:1024".parse()?;
/// let stated: Cost = "header:x-request-cost".parse()?;
/// let chunked_too: Cost = "content-length:1024,or=64".parse()?;
/// let search: Cost = "10".parse()?;
/// assert!("0".parse::<Cost>().is_err());
/// # let _ = (upload, stated, chunked_too, search);
/// # Ok::<(), limiter_tower::cost::CostFormError>(())
/// ```
impl FromStr for Cost {
    type Err = CostFormError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let whole = |text: &str| decimal(text.as_bytes()).and_then(NonZeroU64::new);
        if s == "content-length" {
            return Err(CostFormError(
                "content-length needs its unit: content-length:UNIT_BYTES (content-length:1024 \
                 for one unit per KiB)"
                    .to_owned(),
            ));
        }
        let stated = s
            .strip_prefix("content-length:")
            .map(|rest| (true, rest))
            .or_else(|| s.strip_prefix("header:").map(|rest| (false, rest)));
        if let Some((by_length, rest)) = stated {
            // A header name holds no comma: what follows one is an option.
            let (form, option) = match rest.split_once(',') {
                Some((form, option)) => (form, Some(option)),
                None => (rest, None),
            };
            let cost = if by_length {
                whole(form).map(Self::content_length).ok_or_else(|| {
                    CostFormError(format!(
                        "{s:?}: the unit {form:?} is not a whole number of bytes from 1"
                    ))
                })?
            } else {
                HeaderName::from_str(form)
                    .map(|name| Self::of(Kind::Header(name)))
                    .map_err(|_| CostFormError(format!("invalid header name {form:?}")))?
            };
            return match option {
                None => Ok(cost),
                Some(option) => match option.strip_prefix("or=").map(whole) {
                    Some(Some(units)) => Ok(cost.or_weight(units)),
                    Some(None) => Err(CostFormError(format!(
                        "{s:?}: {option:?} is not a weight: expected or= a whole number from 1"
                    ))),
                    None => Err(CostFormError(format!(
                        "{s:?}: unknown option {option:?}; expected or=UNITS, the cost of a \
                         request that does not state its own"
                    ))),
                },
            };
        }
        if s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'-')
        {
            return whole(s).map(Self::weight).ok_or_else(|| {
                CostFormError(format!(
                    "{s:?} is not a weight: expected a whole number from 1"
                ))
            });
        }
        Err(CostFormError(format!(
            "unknown cost {s:?}; expected a weight (a whole number from 1), \
             content-length:UNIT_BYTES or header:NAME"
        )))
    }
}

/// Why a string is not a [`Cost`]'s text form, nor a
/// [`ChargeAfter`](crate::ChargeAfter)'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostFormError(String);

impl CostFormError {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

impl fmt::Display for CostFormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CostFormError {}

/// Why a request's cost is not one the limiter can be asked: the status
/// it is answered with, and a message saying why, sent in its body (as
/// JSON, `{"error":"invalid_cost","message":"…"}`, when the request
/// accepts JSON; as text otherwise). Such a request is not counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl CostError {
    /// `status` (a 4xx: the client's mistake) with `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self::of(status, "invalid_cost", message)
    }

    /// `400 Bad Request` with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn of(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// The same error under the JSON body's `error` code `code`.
    fn code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// The status the request is answered with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Why, as the answer's body says it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The layer's answer: JSON if `json`, else text
    /// (`Bad Request: the x-cost header's value "-3" is negative: …`).
    pub(crate) fn respond(&self, json: bool) -> Response<Bytes> {
        let body = if json {
            format!(
                "{{\"error\":\"{}\",\"message\":\"{}\"}}",
                self.code,
                json_escaped(&self.message)
            )
        } else {
            // RFC 9110's name of 413 (`http` keeps RFC 7231's).
            let reason = match self.status {
                StatusCode::PAYLOAD_TOO_LARGE => "Content Too Large",
                status => status.canonical_reason().unwrap_or("Error"),
            };
            format!("{reason}: {}\n", self.message)
        };
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.status;
        let content_type = if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    }
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for CostError {}

/// `text` as the inside of a JSON string.
fn json_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost_of(cost: &Cost, request: http::request::Builder, max: u64) -> Result<u64, CostError> {
        cost.of_request(request.body(()).unwrap(), max).1
    }

    fn with_length(length: &str) -> http::request::Builder {
        Request::post("/upload").header(CONTENT_LENGTH, length)
    }

    #[test]
    fn a_body_costs_its_length_in_units_rounded_up_and_at_least_one() {
        let kib = Cost::content_length(NonZeroU64::new(1024).unwrap());
        assert_eq!(cost_of(&kib, with_length("0"), 100), Ok(1));
        assert_eq!(cost_of(&kib, with_length("1"), 100), Ok(1));
        assert_eq!(cost_of(&kib, with_length("1024"), 100), Ok(1));
        assert_eq!(cost_of(&kib, with_length("1025"), 100), Ok(2));
        assert_eq!(cost_of(&kib, with_length("102400"), 100), Ok(100));
        assert_eq!(cost_of(&kib, Request::get("/"), 100), Ok(1));
        let too_large = cost_of(&kib, with_length("102401"), 100).unwrap_err();
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            too_large.message(),
            "the body costs 101 units, above the most a request may cost, 100: it can never be \
             admitted"
        );
        let huge = cost_of(&kib, with_length("18446744073709551615"), 100).unwrap_err();
        assert_eq!(huge.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn a_body_of_unknown_length_is_411_or_the_fallback_weight() {
        let kib = Cost::content_length(NonZeroU64::new(1024).unwrap());
        let chunked = || Request::post("/upload").header(TRANSFER_ENCODING, "chunked");
        let error = cost_of(&kib, chunked(), 100).unwrap_err();
        assert_eq!(error.status(), StatusCode::LENGTH_REQUIRED);
        let h2 = || Request::post("/upload").version(Version::HTTP_2);
        assert_eq!(
            cost_of(&kib, h2(), 100).unwrap_err().status(),
            StatusCode::LENGTH_REQUIRED
        );
        let fallback = kib.or_weight(NonZeroU64::new(50).unwrap());
        assert_eq!(cost_of(&fallback, chunked(), 100), Ok(50));
        assert_eq!(cost_of(&fallback, h2(), 100), Ok(50));
    }

    #[test]
    fn a_content_length_that_is_not_one_length_is_400() {
        let kib = Cost::content_length(NonZeroU64::new(1024).unwrap());
        for bad in ["", "-1", "1e3", " 12", "0x10"] {
            let error = cost_of(&kib, with_length(bad), 100).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad:?}");
            assert_eq!(error.code, "invalid_content_length");
        }
        let twice = |a, b| with_length(a).header(CONTENT_LENGTH, b);
        assert_eq!(cost_of(&kib, twice("2048", "2048"), 100), Ok(2));
        assert!(cost_of(&kib, twice("2048", "10"), 100).is_err());
    }

    #[test]
    fn a_header_states_a_whole_number_from_one_or_is_told_why_not() {
        let stated = Cost::header("x-cost");
        let with = |value: &str| Request::get("/").header("x-cost", value);
        assert_eq!(cost_of(&stated, with("7"), 100), Ok(7));
        assert_eq!(cost_of(&stated, with(" 7 "), 100), Ok(7));
        let why = |value: &str| cost_of(&stated, with(value), 100).unwrap_err().to_string();
        assert_eq!(
            why("-3"),
            "400 Bad Request: the x-cost header's value \"-3\" is negative: a cost is a whole \
             number from 1"
        );
        assert_eq!(
            why("0"),
            "400 Bad Request: the x-cost header's value \"0\" is 0, and a request costs at least \
             1 unit: a cost is a whole number from 1"
        );
        assert_eq!(
            why("2.5"),
            "400 Bad Request: the x-cost header's value \"2.5\" is not a whole number: a cost is \
             a whole number from 1"
        );
        assert_eq!(
            why("101"),
            "400 Bad Request: the request costs 101 units, above the most a request may cost, \
             100: it can never be admitted"
        );
        assert!(why("99999999999999999999999").contains("above the most a request may cost"));
        assert_eq!(
            cost_of(&stated, Request::get("/"), 100)
                .unwrap_err()
                .message(),
            "the request lacks the x-cost header that states its cost"
        );
        let fallback = stated.or_weight(NonZeroU64::new(3).unwrap());
        assert_eq!(cost_of(&fallback, Request::get("/"), 100), Ok(3));
        // The gateway's line, after the client's.
        let both = with("1").header("x-cost", "40");
        assert_eq!(cost_of(&fallback, both, 100), Ok(40));
    }

    #[test]
    fn a_function_answering_zero_is_500_and_its_errors_are_its_own() {
        let zero = Cost::custom(|_| Ok(0));
        let error = cost_of(&zero, Request::get("/"), 100).unwrap_err();
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let by_path = Cost::custom(|head| match head.uri.path() {
            "/teapot" => Err(CostError::new(
                StatusCode::IM_A_TEAPOT,
                "short and \"stout\"",
            )),
            _ => Ok(9),
        });
        assert_eq!(cost_of(&by_path, Request::get("/"), 100), Ok(9));
        assert_eq!(
            cost_of(&by_path, Request::get("/"), 8)
                .unwrap_err()
                .status(),
            400
        );
        let teapot = cost_of(&by_path, Request::get("/teapot"), 100).unwrap_err();
        assert_eq!(
            std::str::from_utf8(teapot.respond(true).body()).unwrap(),
            r#"{"error":"invalid_cost","message":"short and \"stout\""}"#
        );
        assert_eq!(
            std::str::from_utf8(teapot.respond(false).body()).unwrap(),
            "I'm a teapot: short and \"stout\"\n"
        );
    }

    #[test]
    fn text_forms_parse_and_bad_ones_say_why() {
        assert_eq!(
            format!("{:?}", "12".parse::<Cost>().unwrap()),
            "Cost { kind: \"12\", unstated: None }"
        );
        let err = |s: &str| s.parse::<Cost>().unwrap_err().to_string();
        assert_eq!(
            err("0"),
            "\"0\" is not a weight: expected a whole number from 1"
        );
        assert_eq!(
            err("-2"),
            "\"-2\" is not a weight: expected a whole number from 1"
        );
        assert_eq!(
            err("content-length:0"),
            "\"content-length:0\": the unit \"0\" is not a whole number of bytes from 1"
        );
        assert_eq!(
            err("content-length:1KiB"),
            "\"content-length:1KiB\": the unit \"1KiB\" is not a whole number of bytes from 1"
        );
        assert_eq!(
            err("content-length"),
            "content-length needs its unit: content-length:UNIT_BYTES (content-length:1024 for \
             one unit per KiB)"
        );
        assert_eq!(err("header:x cost"), "invalid header name \"x cost\"");
        assert_eq!(
            format!("{:?}", "header:x-cost,or=3".parse::<Cost>().unwrap()),
            "Cost { kind: \"header:x-cost\", unstated: Some(3) }"
        );
        assert_eq!(
            format!("{:?}", "content-length:100,or=7".parse::<Cost>().unwrap()),
            "Cost { kind: \"content-length:100\", unstated: Some(7) }"
        );
        assert_eq!(
            err("content-length:100,or=0"),
            "\"content-length:100,or=0\": \"or=0\" is not a weight: expected or= a whole number \
             from 1"
        );
        assert_eq!(
            err("header:x-cost,else=2"),
            "\"header:x-cost,else=2\": unknown option \"else=2\"; expected or=UNITS, the cost of a \
             request that does not state its own"
        );
        assert_eq!(
            err("bytes"),
            "unknown cost \"bytes\"; expected a weight (a whole number from 1), \
             content-length:UNIT_BYTES or header:NAME"
        );
    }
}
