//! Two threads on one hot key: limiter-memory's token bucket (the full
//! `try_acquire`) against governor (aHash, quanta clock, the same `String`
//! key), in alternating blocks, so both see the same machine.
//!
//! The criterion rows (`peers/threads/one-hot-key/*/2`) run each library
//! for seconds, one after the other; on a shared VM whose speed drifts,
//! two runs seconds apart see different machines, and governor's figure
//! there is bimodal. Here both threads switch limiter together, block by
//! block (one block: `DECISIONS` decisions on each thread, a few ms): a
//! barrier starts and ends each block, the first thread times it, and
//! which limiter goes first alternates pair by pair. Each pair gives a
//! ratio; the median ratio is the figure (above 1: we decide more per
//! second than governor).
//!
//! `cargo bench -p limiter-benches --bench hot_key_interleaved -- [PAIRS] [THREADS]`
//! (default 200 pairs, 2 threads).
#![allow(missing_docs)]

// Shared with the other peer benches; this one uses two of its limiters.
#[allow(dead_code)]
mod peer_limiters;

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use limiter_core::Algorithm;
use peer_limiters::{governor_ahash, limiter_memory};

/// Decisions each thread makes in one block.
const DECISIONS: usize = 20_000;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    let usage = "usage: hot_key_interleaved [PAIRS] [THREADS]";
    let pairs: usize = args.first().map_or(200, |n| n.parse().expect(usage));
    let threads: usize = args.get(1).map_or(2, |n| n.parse().expect(usage));
    assert!(pairs > 0 && threads > 0, "{usage}");

    let key = "user:0".to_owned();
    let ours = limiter_memory(Algorithm::TokenBucket);
    let governor = governor_ahash();
    assert!(ours.try_acquire(key.as_bytes(), 1).unwrap().allowed);
    assert!(governor.check_key(&key).is_ok());
    let decide_ours = || {
        let answer = ours.try_acquire(key.as_bytes(), 1);
        black_box(&answer);
        answer.unwrap().allowed
    };
    let decide_governor = || {
        let answer = governor.check_key(&key);
        black_box(&answer);
        answer.is_ok()
    };

    let barrier = Barrier::new(threads);
    let (ours_blocks, governor_blocks) = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut times = (Vec::new(), Vec::new());
                    for pair in 0..pairs {
                        for turn in 0..2 {
                            let ours_turn = (pair + turn) % 2 == 0;
                            barrier.wait();
                            let start = Instant::now();
                            let admitted = if ours_turn {
                                block(&decide_ours)
                            } else {
                                block(&decide_governor)
                            };
                            assert_eq!(admitted, DECISIONS, "every request admitted");
                            barrier.wait();
                            let elapsed = start.elapsed();
                            if ours_turn {
                                times.0.push(elapsed);
                            } else {
                                times.1.push(elapsed);
                            }
                        }
                    }
                    times
                })
            })
            .collect();
        let mut timed = workers.into_iter().map(|worker| worker.join().unwrap());
        // Every thread sees the block end at the same barrier: the first's
        // times are the blocks'.
        let first = timed.next().unwrap();
        timed.for_each(drop);
        first
    });

    let per_second =
        |elapsed: &Duration| (threads * DECISIONS) as f64 / elapsed.as_secs_f64() / 1e6;
    let mut ratios: Vec<f64> = ours_blocks
        .iter()
        .zip(&governor_blocks)
        .map(|(ours, governor)| governor.as_secs_f64() / ours.as_secs_f64())
        .collect();
    let mut ours_rates: Vec<f64> = ours_blocks.iter().map(per_second).collect();
    let mut governor_rates: Vec<f64> = governor_blocks.iter().map(per_second).collect();
    let [low, median, high] = quartiles(&mut ratios);
    println!(
        "{threads} threads on one hot key, {pairs} pairs of blocks of {DECISIONS} decisions a thread"
    );
    println!(
        "{:<40} {:>14} {:>14} {:>8} {:>15}",
        "M decisions/s (median)", "ours", "governor", "ratio", "quartiles"
    );
    println!(
        "{:<40} {:>14.2} {:>14.2} {:>8.3} {:>7.3}-{:<7.3}",
        "limiter-memory/token-bucket",
        quartiles(&mut ours_rates)[1],
        quartiles(&mut governor_rates)[1],
        median,
        low,
        high
    );
}

/// `DECISIONS` decisions by `decide`: how many were admitted.
fn block(decide: &impl Fn() -> bool) -> usize {
    (0..DECISIONS).filter(|_| decide()).count()
}

fn quartiles(values: &mut [f64]) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}
