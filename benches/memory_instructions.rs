//! The in-memory decision's cost in instructions beside governor's
//! (docs/benchmarks.md, "Where the time goes"): the `peers` bench's
//! limiters (`peer_limiters.rs`), one decision per call, round-robin over
//! 10,000 `String` keys already held, on one thread.
//! `scripts/instructions memory` runs it under callgrind, counting only
//! the measured loop (not the fill, nor the clock's calibration), for N and
//! 2N decisions, and prints the difference per decision. Unlike ns per
//! decision on this shared 2-core machine, the figure does not move with
//! the load (only with the map's random hash keys, by a few instructions).
//!
//! `cargo bench -p limiter-benches --bench memory_instructions -- VARIANT DECISIONS`
//! (`VARIANT` is an index, `list` lists them).
#![allow(missing_docs)]

mod peer_limiters;

use peer_limiters::{args_unless_list, keys, visit, Decide, Visit, VARIANTS};

fn main() {
    let Some(args) = args_unless_list() else {
        return;
    };
    let usage = "usage: memory_instructions VARIANT DECISIONS";
    let index: usize = args.first().expect(usage).parse().expect(usage);
    let decisions: u64 = args.get(1).expect(usage).parse().expect(usage);
    let keys = keys();
    let admitted = visit(
        index,
        &keys,
        Measure {
            keys: &keys,
            decisions,
        },
    );
    assert_eq!(admitted, decisions, "every request admitted");
    println!("{}: {decisions} decisions", VARIANTS[index]);
}

struct Measure<'a> {
    keys: &'a [String],
    decisions: u64,
}

impl Visit for Measure<'_> {
    type Output = u64;

    fn visit<D: Decide>(self, mut limiter: D) -> u64 {
        measured(self.keys, self.decisions, &mut limiter)
    }
}

/// `n` decisions round-robin over `keys`: the only part callgrind counts
/// (`--toggle-collect`).
#[inline(never)]
fn measured(keys: &[String], n: u64, limiter: &mut impl Decide) -> u64 {
    let mut admitted = 0;
    let mut i = 0;
    for _ in 0..n {
        i += 1;
        if i == keys.len() {
            i = 0;
        }
        admitted += u64::from(limiter.decide(&keys[i]));
    }
    admitted
}
