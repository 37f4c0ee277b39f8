//! A reference of docs/spec.md section 3 in u128 arithmetic, written from
//! the text and nothing else: no running totals, no reciprocals, no clamps
//! beyond the contract's. Shared by `tests/reference.rs` (proptest) and the
//! fuzz target `fuzz/fuzz_targets/algorithms.rs` (which includes this file).
//!
//! u128 cannot overflow here: every value is a sum of a few products of
//! two numbers below 2^64, so any overflow or rounding in the u64 core
//! shows as a difference.

use std::time::Duration;

use limiter_core::{Algorithm, Decision, Error, Policy, MAX_TIME_US};

/// A decision of the reference, durations in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub(crate) allowed: bool,
    pub(crate) limit: u128,
    pub(crate) remaining: u128,
    pub(crate) retry_after_us: u128,
    pub(crate) reset_after_us: u128,
    pub(crate) wait_us: u128,
}

impl Expected {
    /// Whether `decision` says exactly this.
    pub(crate) fn matches(&self, decision: &Decision) -> bool {
        let us = |d: Duration| d.as_micros();
        *self
            == Expected {
                allowed: decision.allowed,
                limit: u128::from(decision.limit),
                remaining: u128::from(decision.remaining),
                retry_after_us: us(decision.retry_after),
                reset_after_us: us(decision.reset_after),
                wait_us: us(decision.wait),
            }
    }
}

#[derive(Debug, Clone)]
enum State {
    FixedWindow {
        idx: u128,
        count: u128,
    },
    SlidingLog {
        entries: Vec<(u128, u128)>,
    },
    SlidingCounter {
        idx: Option<u128>,
        prev: u128,
        curr: u128,
    },
    TokenBucket {
        s: u128,
        last: u128,
    },
    LeakyBucket {
        s: u128,
        last: u128,
    },
}

/// An error of the reference: the request errors of docs/spec.md section 1,
/// checked in the order it lists them (cost 0, cost above the maximum,
/// time), which is the core's: a request breaking two rules is the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpectedError {
    ZeroCost,
    CostExceedsCapacity { cost: u64, max_cost: u64 },
    TimeOutOfRange { time_us: u64 },
}

impl ExpectedError {
    /// Whether `error` is exactly this one, fields included.
    pub(crate) fn matches(&self, error: &Error) -> bool {
        match (*self, error) {
            (Self::ZeroCost, Error::ZeroCost) => true,
            (
                Self::CostExceedsCapacity { cost, max_cost },
                &Error::CostExceedsCapacity {
                    cost: got_cost,
                    max_cost: got_max,
                },
            ) => cost == got_cost && max_cost == got_max,
            (Self::TimeOutOfRange { time_us }, &Error::TimeOutOfRange { time_us: got }) => {
                time_us == got
            }
            _ => false,
        }
    }
}

/// One key under one policy, decided by the contract's text.
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    /// L, W (ticks), M (the max cost: L, C or Q), q (µs per tick).
    l: u128,
    w: u128,
    m: u128,
    q: u128,
    state: State,
}

fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b)
}

impl Reference {
    /// A fresh key. The tick is the policy's (its choice is tested on its own).
    pub(crate) fn new(policy: &Policy) -> Self {
        let (l, w, m) = (
            u128::from(policy.limit()),
            u128::from(policy.window_ticks()),
            u128::from(policy.max_cost()),
        );
        let algorithm = policy.algorithm();
        let state = if algorithm == Algorithm::FixedWindow {
            State::FixedWindow { idx: 0, count: 0 }
        } else if algorithm == Algorithm::SlidingLog {
            State::SlidingLog {
                entries: Vec::new(),
            }
        } else if algorithm == Algorithm::SlidingCounter {
            State::SlidingCounter {
                idx: None,
                prev: 0,
                curr: 0,
            }
        } else if algorithm == Algorithm::TokenBucket {
            State::TokenBucket { s: m * w, last: 0 }
        } else if algorithm == Algorithm::LeakyBucket {
            State::LeakyBucket { s: 0, last: 0 }
        } else {
            panic!("no reference for {algorithm}")
        };
        Self {
            l,
            w,
            m,
            q: u128::from(policy.tick_us()),
            state,
        }
    }

    fn stamp(&self) -> u128 {
        match &self.state {
            State::FixedWindow { idx, .. } => idx * self.w,
            State::SlidingLog { entries } => entries.last().map_or(0, |e| e.0),
            State::SlidingCounter { idx, .. } => idx.map_or(0, |i| i * self.w),
            State::TokenBucket { last, .. } | State::LeakyBucket { last, .. } => *last,
        }
    }

    /// Decides a request of `n` at `t_us` (committing it if `commit` and
    /// admitted); the error where the contract has one (section 1, rules
    /// 2.2 and 2.4), changing nothing.
    pub(crate) fn decide(
        &mut self,
        t_us: u64,
        n: u64,
        commit: bool,
    ) -> Result<Expected, ExpectedError> {
        if n == 0 {
            return Err(ExpectedError::ZeroCost);
        }
        if u128::from(n) > self.m {
            return Err(ExpectedError::CostExceedsCapacity {
                cost: n,
                max_cost: u64::try_from(self.m).expect("the max cost is a u64"),
            });
        }
        if t_us > MAX_TIME_US {
            return Err(ExpectedError::TimeOutOfRange { time_us: t_us });
        }
        let (l, w, m, n) = (self.l, self.w, self.m, u128::from(n));
        let t = (u128::from(t_us) / self.q).max(self.stamp());
        let idx = t / w;
        let e = t - idx * w;
        // (allowed, remaining, retry_after, reset_after, wait) in ticks.
        let (allowed, remaining, retry, reset, wait) = match &mut self.state {
            State::FixedWindow { idx: idx_s, count } => {
                let c = if idx == *idx_s { *count } else { 0 };
                let next_window = (idx + 1) * w - t;
                if c + n <= l {
                    if commit {
                        (*idx_s, *count) = (idx, c + n);
                    }
                    (true, l - c - n, 0, next_window, 0)
                } else {
                    let reset = if c > 0 { next_window } else { 0 };
                    (false, l - c, next_window, reset, 0)
                }
            }
            State::SlidingLog { entries } => {
                let live: Vec<(u128, u128)> = entries
                    .iter()
                    .copied()
                    .filter(|&(ts, _)| ts + w > t)
                    .collect();
                let count: u128 = live.iter().map(|e| e.1).sum();
                if count + n <= l {
                    if commit {
                        *entries = live;
                        entries.push((t, n));
                    }
                    (true, l - count - n, 0, w, 0)
                } else {
                    let need = count + n - l;
                    let mut sum = 0;
                    let leaving = live
                        .iter()
                        .find(|e| {
                            sum += e.1;
                            sum >= need
                        })
                        .expect("the window holds more than need");
                    let newest = live.last().expect("a denial has entries").0;
                    (false, l - count, leaving.0 + w - t, newest + w - t, 0)
                }
            }
            State::SlidingCounter {
                idx: idx_s,
                prev,
                curr,
            } => {
                let (p, c) = match *idx_s {
                    Some(s) if s == idx => (*prev, *curr),
                    Some(s) if s + 1 == idx => (*curr, 0),
                    _ => (0, 0),
                };
                let weighted = p * (w - e);
                let reset_of = |c: u128| {
                    if c > 0 {
                        (idx + 2) * w - t
                    } else if p > 0 {
                        (idx + 1) * w - t
                    } else {
                        0
                    }
                };
                let remaining_of = |c: u128| ((l * w - weighted) / w).saturating_sub(c);
                if weighted + (c + n) * w <= l * w {
                    if commit {
                        (*idx_s, *prev, *curr) = (Some(idx), p, c + n);
                    }
                    (true, remaining_of(c + n), 0, reset_of(c + n), 0)
                } else {
                    let retry = if c + n <= l {
                        w - ((l - c - n) * w) / p - e
                    } else {
                        let e2 = w - ((l - n) * w) / c;
                        (w - e) + e2.min(w)
                    };
                    (false, remaining_of(c), retry, reset_of(c), 0)
                }
            }
            State::TokenBucket { s, last } => {
                let elapsed = (t - *last).min(ceil_div(m * w, l));
                let tokens = (m * w).min(*s + elapsed * l);
                if tokens >= n * w {
                    let after = tokens - n * w;
                    if commit {
                        (*s, *last) = (after, t);
                    }
                    (true, after / w, 0, ceil_div(m * w - after, l), 0)
                } else {
                    let retry = ceil_div(n * w - tokens, l);
                    (false, tokens / w, retry, ceil_div(m * w - tokens, l), 0)
                }
            }
            State::LeakyBucket { s, last } => {
                let elapsed = (t - *last).min(ceil_div(m * w, l));
                let queued = s.saturating_sub(elapsed * l);
                if queued + n * w <= m * w {
                    let wait = ceil_div(queued, l);
                    let after = queued + n * w;
                    if commit {
                        (*s, *last) = (after, t);
                    }
                    (true, (m * w - after) / w, 0, ceil_div(after, l), wait)
                } else {
                    let retry = ceil_div(queued + n * w - m * w, l);
                    (false, (m * w - queued) / w, retry, ceil_div(queued, l), 0)
                }
            }
        };
        // docs/spec.md section 5: D ticks are (t_eff + D) * q - t µs; 0 stays
        // 0. Computed in 128 bits (below 2^54 * 2^64 here) and saturating,
        // as a `Duration` does, at `Duration::MAX`: a bucket's refill may
        // outlast even that (a tick of 10^15 µs, 2^51 ticks).
        let us = |d: u128| {
            if d == 0 {
                0
            } else {
                ((t + d) * self.q - u128::from(t_us)).min(Duration::MAX.as_micros())
            }
        };
        Ok(Expected {
            allowed,
            limit: m,
            remaining,
            retry_after_us: us(retry),
            reset_after_us: us(reset),
            wait_us: us(wait),
        })
    }
}
