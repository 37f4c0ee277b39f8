//! The requests a comparison runs on: four built-in scenarios, or a user's
//! trace read into memory (each algorithm replays it once).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use limiter_core::{Algorithm, Policies, Policy, PolicyError, Rate};

use super::scenario_name::ScenarioName;
use crate::compare::compact_duration;
use crate::failure::Failure;
use crate::input::{open_trace, trace_name};
use crate::policy_change::PolicyChange;
use clap::ValueEnum;
use limiter_core::trace::{SplitMix64, TraceReader};

/// One lane of a comparison: a label, the algorithm whose colour it is
/// drawn in, and the policies it decides by.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    pub(crate) label: String,
    pub(crate) algorithm: Algorithm,
    pub(crate) policies: Policies,
    /// The leased limiters the lane's requests are dealt to (`--lease`),
    /// or `None`: the backend's limiter decides them.
    pub(crate) leased: Option<u32>,
    /// Under a scenario's policy change, what the lane's keys hold across it.
    pub(crate) at_change: Option<StateAtChange>,
}

/// What a key holds across a policy change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateAtChange {
    /// Nothing: a fresh limiter of the new policies decides from the
    /// change on, as a limiter whose state is keyed by its numbers does, or
    /// one restarted with the new numbers.
    PerPolicy,
    /// What each key used, taken over by the new policies (docs/spec.md
    /// section 9, `set_policies`).
    Carried,
}

impl StateAtChange {
    /// The lane's label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::PerPolicy => "per-policy state",
            Self::Carried => "carried (docs/spec.md section 9)",
        }
    }
}

/// One request, its key interned as an index into [`Requests::keys`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) time_us: u64,
    pub(crate) key: u32,
    pub(crate) cost: u64,
}

/// The most requests `compare` holds from a trace: it keeps a trace in
/// memory, since every algorithm replays it (`replay` streams instead).
/// The trace is 24 bytes a request (240 MB at most); each lane also keeps
/// its admissions' times and costs until its figures are taken (16 bytes
/// an admission), so a trace of 10 million admitted requests on five lanes
/// needs about 1 GB in all.
const MAX_TRACE_REQUESTS: usize = 10_000_000;
/// The most bytes of distinct keys `compare` holds from a trace.
const MAX_TRACE_KEY_BYTES: usize = 256 << 20;

/// A trace held in memory, keys interned.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requests {
    pub(crate) keys: Vec<String>,
    pub(crate) requests: Vec<Request>,
    index: HashMap<String, u32>,
    /// The bytes of `keys`.
    key_bytes: usize,
}

impl Requests {
    /// Whether one more request on `key` would pass the bounds of a trace
    /// held in memory; `Some(what)` names the bound.
    fn would_overflow(&self, key: &str) -> Option<String> {
        if self.requests.len() >= MAX_TRACE_REQUESTS {
            return Some(format!("more than {MAX_TRACE_REQUESTS} requests"));
        }
        if !self.index.contains_key(key) && self.key_bytes + key.len() > MAX_TRACE_KEY_BYTES {
            return Some(format!(
                "more than {} MiB of distinct keys",
                MAX_TRACE_KEY_BYTES >> 20
            ));
        }
        None
    }

    pub(crate) fn push(&mut self, time_us: u64, key: &str, cost: u64) {
        let key = match self.index.get(key) {
            Some(&id) => id,
            None => {
                // Traces are bounded far below 2^32 keys (would_overflow);
                // the built-in scenarios hold a few thousand.
                let id = u32::try_from(self.keys.len()).expect("fewer than 2^32 keys");
                self.key_bytes += key.len();
                self.keys.push(key.to_owned());
                self.index.insert(key.to_owned(), id);
                id
            }
        };
        self.requests.push(Request { time_us, key, cost });
    }
}

/// What a comparison runs: the requests and the numbers every algorithm
/// shares.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) rate: Rate,
    /// The token bucket's capacity (`None`: the limit).
    pub(crate) capacity: Option<u64>,
    /// The leaky bucket's queue (`None`: the limit).
    pub(crate) queue: Option<u64>,
    pub(crate) requests: Requests,
    /// The policy sets to compare instead of one lane per algorithm
    /// (`--set`, or the tiered scenario's).
    pub(crate) sets: Option<Vec<Policies>>,
    /// Whether `sets` came from `--set`: its lanes run under none of the
    /// scenario's rate, where the tiered scenario's run under it.
    pub(crate) sets_given: bool,
    /// The policies put in force from the first request at or after a
    /// time, over the one set of `sets` (`--change-at`, or the
    /// policy-change scenario's): two lanes, [`StateAtChange::PerPolicy`]
    /// and [`StateAtChange::Carried`].
    pub(crate) change: Option<PolicyChange>,
}

impl Scenario {
    /// The lanes: one per algorithm under the shared numbers, or one per
    /// policy set (labelled by its policy string, drawn in its first part's
    /// colour).
    pub(crate) fn lanes(&self) -> Result<Vec<Lane>, PolicyError> {
        if let (Some(sets), Some(_)) = (&self.sets, &self.change) {
            return Ok([StateAtChange::PerPolicy, StateAtChange::Carried]
                .into_iter()
                .map(|state| Lane {
                    label: state.label().to_owned(),
                    algorithm: sets[0][0].algorithm(),
                    policies: sets[0].clone(),
                    leased: None,
                    at_change: Some(state),
                })
                .collect());
        }
        match &self.sets {
            Some(sets) => Ok(sets
                .iter()
                .map(|set| Lane {
                    label: set.to_string(),
                    algorithm: set[0].algorithm(),
                    policies: set.clone(),
                    leased: None,
                    at_change: None,
                })
                .collect()),
            None => Algorithm::ALL
                .into_iter()
                .map(|algorithm| {
                    Ok(Lane {
                        label: algorithm.name().to_owned(),
                        algorithm,
                        policies: Policies::from(self.policy(algorithm)?),
                        leased: None,
                        at_change: None,
                    })
                })
                .collect(),
        }
    }

    /// The windows (µs) whose largest admitted sum is reported: the shared
    /// window, or every window of the sets' policies, shortest first.
    pub(crate) fn windows(&self) -> Vec<u64> {
        let mut windows: Vec<u64> = match &self.sets {
            Some(sets) => sets
                .iter()
                .chain(self.change.iter().map(|change| &change.policies))
                .flat_map(|s| s.iter().map(Policy::window_us))
                .collect(),
            None => vec![u64::try_from(self.rate.window.as_micros()).unwrap_or(u64::MAX)],
        };
        windows.sort_unstable();
        windows.dedup();
        windows
    }

    /// What the lanes run under, for a heading: the shared numbers (`100
    /// per 10s, capacity 50`, the tiered scenario's first tier), or, under
    /// `--set`, that each lane has its own (the scenario's rate is then
    /// none of theirs).
    pub(crate) fn headline(&self) -> String {
        if let (Some(sets), Some(change)) = (&self.sets, &self.change) {
            return format!(
                "{}, then {} from {}",
                sets[0],
                change.policies,
                compact_duration(change.at)
            );
        }
        if self.sets_given {
            return "each lane under its --set".to_owned();
        }
        let window = compact_duration(self.rate.window.as_micros() as u64);
        let mut policy = format!("{} per {window}", self.rate.limit);
        if let Some(capacity) = self.capacity {
            policy.push_str(&format!(", capacity {capacity}"));
        }
        if let Some(queue) = self.queue {
            policy.push_str(&format!(", queue {queue}"));
        }
        policy
    }

    /// The window whose boundaries a plot draws: the shared one, or under
    /// `--set` the shortest of every set's (at least 1 µs).
    pub(crate) fn boundary_window_us(&self) -> u64 {
        self.windows().first().copied().unwrap_or(1).max(1)
    }

    /// The policy `algorithm` runs under: the shared rate, plus the capacity
    /// for the token bucket and the queue for the leaky bucket.
    pub(crate) fn policy(&self, algorithm: Algorithm) -> Result<Policy, PolicyError> {
        let capacity = self
            .capacity
            .filter(|_| algorithm == Algorithm::TokenBucket);
        let queue = self.queue.filter(|_| algorithm == Algorithm::LeakyBucket);
        Policy::from_options(algorithm, self.rate, capacity, queue)
    }

    /// The built-in scenario `name`.
    pub(crate) fn builtin(name: ScenarioName) -> Self {
        let per_10s = Rate::new(100, Duration::from_secs(10));
        let mut requests = Requests::default();
        let mut sets = None;
        let mut change = None;
        let (rate, description) = match name {
            ScenarioName::BoundaryBurst => {
                // As trace 000 of the shared vectors: 1 µs apart.
                for start in [9_000_000, 11_000_000] {
                    for i in 0..100 {
                        requests.push(start + i, "sms:13800000000", 1);
                    }
                }
                (
                    per_10s,
                    "the article's case: 100 requests at 9 s and 100 at 11 s, one key",
                )
            }
            ScenarioName::SteadyOverLimit => {
                for i in 0..1200 {
                    requests.push(i * 50_000, "client", 1);
                }
                (
                    per_10s,
                    "one request every 50 ms for 60 s (twice the rate), one key",
                )
            }
            ScenarioName::OnOffBursts => {
                for burst in 0..6u64 {
                    // From 9.5 s: the first burst straddles a window boundary.
                    let start = 9_500_000 + burst * 13_000_000;
                    for i in 0..150u64 {
                        requests.push(start + i * 1_000_000 / 150, "client", 1);
                    }
                }
                (
                    per_10s,
                    "150 requests within 1 s, every 13 s from 9.5 s, six times, one key",
                )
            }
            ScenarioName::ManyKeys => {
                let mut random = SplitMix64::new(0x5eed_1234_abcd_0001);
                let mut all = Vec::with_capacity(40_000);
                for key in 0..1000u32 {
                    for _ in 0..40 {
                        all.push((random.next_u64() % 2_000_000, key));
                    }
                }
                all.sort_unstable();
                let names: Vec<String> = (0..1000).map(|k| format!("user:{k}")).collect();
                for (time_us, key) in all {
                    requests.push(time_us, &names[key as usize], 1);
                }
                (
                    Rate::new(10, Duration::from_secs(1)),
                    "1000 keys, each sending 40 requests at random times within 2 s (twice the rate)",
                )
            }
            ScenarioName::Tiered => {
                for i in 0..800 {
                    requests.push(i * 150_000, "user:42", 1);
                }
                sets = Some(
                    Algorithm::ALL
                        .into_iter()
                        .map(|algorithm| {
                            format!("{algorithm}:5/1s;{algorithm}:100/1m")
                                .parse()
                                .expect("valid tiers")
                        })
                        .collect(),
                );
                (
                    Rate::new(5, Duration::from_secs(1)),
                    "tiered limits, 5 per second and 100 per minute: one request every 150 ms for 2 minutes, one key",
                )
            }
            ScenarioName::PolicyChange => {
                for i in 0..100 {
                    requests.push(i * 10_000, "client", 1);
                }
                for i in 0..600 {
                    requests.push(30_000_000 + i * 100_000, "client", 1);
                }
                sets = Some(vec!["sliding-log:100/1m".parse().expect("a valid policy")]);
                change = Some(PolicyChange {
                    at: 30_000_000,
                    policies: "sliding-log:120/1m".parse().expect("a valid policy"),
                });
                (
                    Rate::new(100, Duration::from_secs(60)),
                    "100 requests in the first second, then one every 100 ms from 30 s to 90 s, one key; \
                     the limit goes from 100 to 120 per minute at 30 s",
                )
            }
        };
        Self {
            name: name
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_owned()),
            description: description.to_owned(),
            rate,
            capacity: None,
            queue: None,
            requests,
            sets,
            sets_given: false,
            change,
        }
    }

    /// A scenario from the trace at `path` (`-`: standard input).
    pub(crate) fn from_trace(
        path: &Path,
        rate: Rate,
        capacity: Option<u64>,
        queue: Option<u64>,
    ) -> Result<Self, Failure> {
        let name = trace_name(path);
        let mut requests = Requests::default();
        for request in TraceReader::new(open_trace(path)?) {
            let request = request.map_err(|e| Failure::runtime(name.clone()).with_source(e))?;
            if let Some(bound) = requests.would_overflow(&request.key) {
                return Err(Failure::runtime(format!(
                    "{name}: {bound}: compare holds a trace in memory (every algorithm replays \
                     it); compare a sample of it, or replay it with `limiter replay`, which \
                     streams any length"
                )));
            }
            requests.push(request.time_us, &request.key, request.cost);
        }
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let description = format!(
            "{} on {}",
            plural(requests.requests.len(), "request", "requests"),
            plural(requests.keys.len(), "key", "keys")
        );
        Ok(Self {
            name,
            description,
            rate,
            capacity,
            queue,
            requests,
            sets: None,
            sets_given: false,
            change: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_held_in_memory_is_bounded_in_requests_and_key_bytes() {
        let mut requests = Requests::default();
        assert_eq!(requests.would_overflow("k"), None);
        requests.key_bytes = MAX_TRACE_KEY_BYTES;
        let bound = requests
            .would_overflow("new")
            .expect("a new key passes the bound");
        assert!(bound.contains("MiB of distinct keys"), "{bound}");
        requests.push(0, "known", 1);
        requests.key_bytes = MAX_TRACE_KEY_BYTES + 5;
        assert_eq!(
            requests.would_overflow("known"),
            None,
            "a known key adds no bytes"
        );
        requests.requests = vec![requests.requests[0]; MAX_TRACE_REQUESTS];
        let bound = requests
            .would_overflow("known")
            .expect("at the request bound");
        assert!(bound.contains("10000000 requests"), "{bound}");
    }

    #[test]
    fn the_boundary_burst_is_the_shared_vector_trace() {
        let scenario = Scenario::builtin(ScenarioName::BoundaryBurst);
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/vectors/traces");
        let text = std::fs::read_to_string(format!("{dir}/trace-000.csv")).unwrap();
        let vector: Vec<_> = TraceReader::new(text.as_bytes())
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(vector.len(), scenario.requests.requests.len());
        for (v, s) in vector.iter().zip(&scenario.requests.requests) {
            assert_eq!(
                (v.time_us, v.key.as_str(), v.cost),
                (
                    s.time_us,
                    scenario.requests.keys[s.key as usize].as_str(),
                    s.cost
                )
            );
        }
        assert_eq!(scenario.name, "boundary-burst");
    }

    #[test]
    fn capacity_and_queue_go_to_their_own_algorithm_only() {
        let mut scenario = Scenario::builtin(ScenarioName::SteadyOverLimit);
        scenario.capacity = Some(300);
        scenario.queue = Some(7);
        for algorithm in Algorithm::ALL {
            let policy = scenario.policy(algorithm).unwrap();
            assert_eq!(
                policy.max_cost(),
                match algorithm {
                    Algorithm::TokenBucket => 300,
                    Algorithm::LeakyBucket => 7,
                    _ => 100,
                }
            );
        }
    }

    #[test]
    fn many_keys_is_sorted_by_time_and_has_a_thousand_keys() {
        let scenario = Scenario::builtin(ScenarioName::ManyKeys);
        assert_eq!(scenario.requests.keys.len(), 1000);
        assert_eq!(scenario.requests.requests.len(), 40_000);
        assert!(scenario
            .requests
            .requests
            .windows(2)
            .all(|w| w[0].time_us <= w[1].time_us));
    }
}
