//! [`Rate`] and durations as text: `100/10s`, `250ms`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::PolicyError;

/// `limit` units per `window`: the numbers shared by every algorithm.
///
/// A `Rate` is not validated by itself; [`Policy::new`](crate::Policy::new)
/// validates it. As text it is `LIMIT/WINDOW` (see [`FromStr`] below), and
/// it displays with the largest unit that divides the window exactly.
///
/// ```
/// use limiter_core::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "100/10s".parse()?;
/// assert_eq!(rate, Rate::new(100, Duration::from_secs(10)));
/// assert_eq!("10/minute".parse::<Rate>()?, Rate::per_minute(10));
/// assert_eq!(Rate::new(5, Duration::from_millis(90_000)).to_string(), "5/90s");
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Units admitted per window: `L` (docs/spec.md section 1).
    pub limit: u64,
    /// The window: `W`.
    pub window: Duration,
}

impl Rate {
    /// `limit` units per `window`.
    pub const fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window }
    }
    /// `limit` units per second.
    pub const fn per_second(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }
    /// `limit` units per minute.
    pub const fn per_minute(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }
    /// `limit` units per hour.
    pub const fn per_hour(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }
    /// `limit` units per day.
    pub const fn per_day(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(86_400))
    }
}

impl FromStr for Rate {
    type Err = PolicyError;

    /// Parses `LIMIT/DURATION`, where the duration may omit its number:
    /// `100/10s`, `10/minute`, `1000/1d`, `5/s`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| PolicyError::InvalidRate {
            input: s.to_owned(),
            reason,
        };
        let (limit, window) = s
            .split_once('/')
            .ok_or_else(|| invalid("expected LIMIT/WINDOW".into()))?;
        let limit = limit.trim();
        let limit = whole_number(limit)
            .ok_or_else(|| invalid(format!("limit {limit:?} is not a whole number")))?;
        let window = window.trim();
        let window = if window.starts_with(|c: char| c.is_ascii_digit()) {
            parse_duration(window)
        } else {
            // One of the unit: `10/minute`. The error quotes the window as
            // written.
            in_units(1, window).map_err(|reason| PolicyError::InvalidDuration {
                input: window.to_owned(),
                reason,
            })
        }
        .map_err(|e| invalid(e.to_string()))?;
        Ok(Self::new(limit, window))
    }
}

impl fmt::Display for Rate {
    /// `LIMIT/WINDOW`, the window in the largest unit that divides it exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.limit, DisplayDuration(self.window))
    }
}

/// The units of durations as text, largest first, in microseconds.
const UNITS: [(&str, u64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// Parses an integer followed by a unit: `us`, `ms`, `s`, `m`, `h`, `d`
/// (also `µs`, `sec`, `min`, `second(s)`, `minute(s)`, `hour(s)`, `day(s)`).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(limiter_core::parse_duration("250ms")?, Duration::from_millis(250));
/// assert!(limiter_core::parse_duration("10").is_err()); // a unit is required
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, PolicyError> {
    let invalid = |reason| PolicyError::InvalidDuration {
        input: s.to_owned(),
        reason,
    };
    let trimmed = s.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| invalid("missing unit"))?;
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(invalid("missing number"));
    }
    let number: u64 = number.parse().map_err(|_| invalid("number too large"))?;
    in_units(number, unit).map_err(invalid)
}

/// `number` of `unit` (trimmed; any spelling [`parse_duration`] takes), or
/// what is wrong.
fn in_units(number: u64, unit: &str) -> Result<Duration, &'static str> {
    let unit = match unit.trim() {
        "µs" => "us",
        "sec" | "second" | "seconds" => "s",
        "min" | "minute" | "minutes" => "m",
        "hour" | "hours" => "h",
        "day" | "days" => "d",
        unit => unit,
    };
    let (_, micros_per_unit) = UNITS
        .into_iter()
        .find(|(name, _)| *name == unit)
        .ok_or("expected a whole number and a unit: us, ms, s, m, h or d")?;
    let micros = number
        .checked_mul(micros_per_unit)
        .ok_or("duration too large")?;
    Ok(Duration::from_micros(micros))
}

/// A duration as [`parse_duration`] reads it, in the largest unit that
/// divides it exactly: `1h`, `90s`, `250ms`; below a microsecond, `ns`
/// (which no policy accepts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DisplayDuration(pub(crate) Duration);

impl fmt::Display for DisplayDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if !nanos.is_multiple_of(1_000) || nanos == 0 {
            return write!(f, "{nanos}ns");
        }
        let micros = nanos / 1_000;
        let (unit, per) = UNITS
            .into_iter()
            .find(|(_, per)| micros.is_multiple_of(u128::from(*per)))
            .unwrap_or(("us", 1));
        write!(f, "{}{unit}", micros / u128::from(per))
    }
}

/// `text` as a whole number: decimal digits only (`u64::from_str` also
/// takes a leading `+`, which no policy string writes).
pub(crate) fn whole_number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_and_without_a_number_before_the_unit() {
        assert_eq!(
            "100/10s".parse::<Rate>().unwrap(),
            Rate::new(100, Duration::from_secs(10))
        );
        assert_eq!("10/minute".parse::<Rate>().unwrap(), Rate::per_minute(10));
        assert_eq!("1000/1d".parse::<Rate>().unwrap(), Rate::per_day(1000));
        assert_eq!(" 5 / s ".parse::<Rate>().unwrap(), Rate::per_second(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7us").unwrap(), Duration::from_micros(7));
        assert_eq!(parse_duration("7µs").unwrap(), Duration::from_micros(7));
        assert_eq!(
            parse_duration("2 hours").unwrap(),
            Duration::from_secs(7200)
        );
    }

    #[test]
    fn durations_display_in_the_largest_exact_unit_and_parse_back() {
        for (micros, text) in [
            (86_400_000_000, "1d"),
            (3_600_000_000, "1h"),
            (5_400_000_000, "90m"),
            (90_000_000, "90s"),
            (250_000, "250ms"),
            (1_500, "1500us"),
            (1, "1us"),
        ] {
            let duration = Duration::from_micros(micros);
            assert_eq!(DisplayDuration(duration).to_string(), text);
            assert_eq!(parse_duration(text).unwrap(), duration);
        }
        assert_eq!(
            DisplayDuration(Duration::from_nanos(1500)).to_string(),
            "1500ns"
        );
    }
}
