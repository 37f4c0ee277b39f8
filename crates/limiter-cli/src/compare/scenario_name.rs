//! [`ScenarioName`]: the names of `limiter compare`'s built-in scenarios,
//! apart from the scenarios themselves so that the command line can name
//! them without reaching into the comparison.

use clap::ValueEnum;

/// The built-in scenarios of `limiter compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioName {
    /// The article's case: 100 per 10 s; 100 requests at 9 s, 100 at 11 s.
    BoundaryBurst,
    /// 100 per 10 s; one request every 50 ms for 60 s (twice the rate).
    SteadyOverLimit,
    /// 100 per 10 s; 150 requests within 1 s, every 13 s from 9.5 s, six times.
    OnOffBursts,
    /// 10 per 1 s on each of 1000 keys, 40 requests per key within 2 s.
    ManyKeys,
    /// Tiered limits: 5 per second and 100 per minute, one request every
    /// 150 ms for 2 minutes; each lane one algorithm for both tiers. Run
    /// when named (`--scenario tiered`).
    Tiered,
    /// A policy change: 100 per minute used fully, then 120 per minute
    /// from 30 s; a lane with per-policy state (a fresh limiter at the
    /// change) beside one that carries what each key used (docs/spec.md
    /// section 9). Run when named (`--scenario policy-change`).
    PolicyChange,
}

impl ScenarioName {
    /// Every built-in scenario, in the order they are run.
    pub const ALL: [ScenarioName; 4] = [
        Self::BoundaryBurst,
        Self::SteadyOverLimit,
        Self::OnOffBursts,
        Self::ManyKeys,
    ];
}
