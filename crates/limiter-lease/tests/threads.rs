//! Several threads deciding on the same keys through one leased limiter:
//! with nothing refilled during the run, every key admits at most its
//! limit, and every unit the global limiter counted is admitted, held or
//! lapsed (one lease in flight per key, never lost or counted twice).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Limiter, Policy, Rate};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;

const KEYS: [&str; 2] = ["a", "b"];
const LIMIT: u64 = 1_000;

#[test]
fn racing_threads_admit_each_counted_unit_once() {
    for refill_percent in [0, 25, 100] {
        let policy = Policy::sliding_log(Rate::new(LIMIT, Duration::from_secs(10_000))).unwrap();
        let leased = Arc::new(
            Leased::builder(MemoryLimiter::new(policy))
                .max_lease(16)
                .refill_percent(refill_percent)
                .lifetime(Duration::from_secs(3_600))
                .build(),
        );
        let admitted: Arc<[AtomicU64; 2]> = Arc::new(Default::default());
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let (leased, admitted) = (Arc::clone(&leased), Arc::clone(&admitted));
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    for i in 0..800usize {
                        let k = (i + thread) % KEYS.len();
                        let cost = 1 + (i % 3) as u64;
                        let decided = match leased.acquire_now(KEYS[k].as_bytes(), cost) {
                            Some(decided) => decided,
                            None => runtime.block_on(leased.acquire(KEYS[k].as_bytes(), cost)),
                        };
                        if decided.unwrap().allowed {
                            admitted[k].fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(leased.lapsed(), 0);
        for (k, key) in KEYS.iter().enumerate() {
            let admitted = admitted[k].load(Ordering::Relaxed);
            let peeked = leased.inner().try_peek(key.as_bytes(), 1).unwrap();
            let available = peeked.remaining + u64::from(peeked.allowed);
            assert!(admitted <= LIMIT, "{key}: {admitted} admitted");
            assert_eq!(
                admitted + leased.held(key.as_bytes()),
                LIMIT - available,
                "{key} at refill {refill_percent}%: admitted and held make the count"
            );
            assert!(
                available < 3,
                "{key}: demand (1,600 per key) took nearly every unit"
            );
        }
    }
}
