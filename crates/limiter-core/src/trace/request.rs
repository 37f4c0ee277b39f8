//! A request of a trace, as read.

/// One request of a trace: `t_us,key,cost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Request time in µs since the Unix epoch (`u64::MAX` when written
    /// larger: see `oversized`).
    pub time_us: u64,
    /// The key limited.
    pub key: String,
    /// Units asked for (1 when the trace has no `cost` column; `u64::MAX`
    /// when written larger).
    pub cost: u64,
    /// The time and cost as written, when either is a whole number above
    /// `u64::MAX`. Such a time is beyond 2^53 µs and such a cost above every
    /// maximum cost, so the request is an `error` row (section 6), which
    /// prints them as written rather than as `u64::MAX`.
    pub oversized: Option<Box<WrittenNumbers>>,
}

/// A request's time and cost in decimal, as a trace wrote them (leading
/// zeros dropped, as for every number printed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenNumbers {
    /// The `t_us` field.
    pub time_us: String,
    /// The `cost` field (`1` when the trace has no `cost` column).
    pub cost: String,
}
