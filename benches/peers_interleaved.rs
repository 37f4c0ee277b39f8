//! Time per decision, each limiter of the `peers` bench (`peer_limiters.rs`)
//! against governor (aHash) in alternating blocks: one block is one pass
//! over the 10,000 keys (10,000 decisions, about half a millisecond), the
//! two limiters take turns block by block (which goes first alternates),
//! and each pair of blocks gives a ratio. On a machine whose speed drifts
//! from second to second (a shared VM), two criterion benches run seconds
//! apart see different machines; two blocks a millisecond apart see the
//! same one, so the median ratio holds where criterion's do not.
//!
//! `cargo bench -p limiter-benches --bench peers_interleaved -- [PAIRS] [VARIANT...]`
//! (default 400 pairs, every variant; `list` lists them). Prints, per
//! variant, both medians in ns and the ratio's median and quartiles
//! (above 1: slower than governor).
#![allow(missing_docs)]

mod peer_limiters;

use std::time::Instant;

use peer_limiters::{
    args_unless_list, filled, governor_ahash, keys, visit, Decide, Visit, VARIANTS,
};

fn main() {
    let Some(args) = args_unless_list() else {
        return;
    };
    let usage = "usage: peers_interleaved [PAIRS] [VARIANT...]";
    let pairs: usize = args.first().map_or(400, |n| n.parse().expect(usage));
    let mut variants: Vec<usize> = args
        .iter()
        .skip(1)
        .map(|v| v.parse().expect(usage))
        .collect();
    if variants.is_empty() {
        variants = (1..VARIANTS.len()).collect();
    }
    let keys = keys();
    println!(
        "{:<45} {:>10} {:>10} {:>8} {:>15}",
        "against governor-gcra/ahash", "ns", "governor", "ratio", "quartiles"
    );
    for index in variants {
        let report = visit(index, &keys, Interleave { keys: &keys, pairs });
        println!(
            "{:<45} {:>10.1} {:>10.1} {:>8.3} {:>7.3}-{:<7.3}",
            VARIANTS[index],
            report.ours_ns,
            report.governor_ns,
            report.ratio[1],
            report.ratio[0],
            report.ratio[2]
        );
    }
}

struct Interleave<'a> {
    keys: &'a [String],
    pairs: usize,
}

struct Report {
    ours_ns: f64,
    governor_ns: f64,
    /// First quartile, median, third quartile.
    ratio: [f64; 3],
}

impl Visit for Interleave<'_> {
    type Output = Report;

    fn visit<D: Decide>(self, mut ours: D) -> Report {
        let mut governor = filled(governor_ahash(), self.keys);
        let (mut ours_ns, mut governor_ns, mut ratios) = (vec![], vec![], vec![]);
        for pair in 0..self.pairs {
            let (a, b) = if pair % 2 == 0 {
                let a = block(&mut ours, self.keys);
                (a, block(&mut governor, self.keys))
            } else {
                let b = block(&mut governor, self.keys);
                (block(&mut ours, self.keys), b)
            };
            ours_ns.push(a);
            governor_ns.push(b);
            ratios.push(a / b);
        }
        Report {
            ours_ns: quartiles(&mut ours_ns)[1],
            governor_ns: quartiles(&mut governor_ns)[1],
            ratio: quartiles(&mut ratios),
        }
    }
}

/// One decision on every key, in order: ns per decision.
fn block(limiter: &mut impl Decide, keys: &[String]) -> f64 {
    let start = Instant::now();
    for key in keys {
        assert!(limiter.decide(key), "every request admitted");
    }
    start.elapsed().as_nanos() as f64 / keys.len() as f64
}

fn quartiles(values: &mut [f64]) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}
