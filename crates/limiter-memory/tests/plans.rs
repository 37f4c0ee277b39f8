//! Plans: limiters on one key space (`MemoryLimiter::plan`), each under its
//! own policies, where a key decided by one and then another keeps what it
//! used (docs/spec.md section 9), however the requests interleave.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use limiter_core::{ManualClock, Policies, Policy};
use limiter_memory::MemoryLimiter;

const T0: u64 = 1_700_000_000_000_000;

fn limiter(policies: impl Into<Policies>, clock: &ManualClock) -> MemoryLimiter {
    MemoryLimiter::builder(policies)
        .clock(clock.clone())
        .eviction_delay(Duration::ZERO)
        .build()
}

fn policy(text: &str) -> Policy {
    text.parse().unwrap()
}

#[test]
fn a_client_moved_between_plans_keeps_what_it_used() {
    let clock = ManualClock::new(T0);
    let free = limiter(policy("sliding-log:100/1m"), &clock);
    let pro = free.plan(policy("sliding-log:1000/1m"));
    assert!(free.try_acquire(b"acme", 90).unwrap().allowed);
    // Upgraded: only the difference.
    assert_eq!(pro.try_peek(b"acme", 1).unwrap().remaining, 909);
    assert!(pro.try_acquire(b"acme", 910).unwrap().allowed);
    assert!(!pro.try_acquire(b"acme", 1).unwrap().allowed);
    // Back to free: refused until the window allows it, a minute after.
    assert!(!free.try_acquire(b"acme", 1).unwrap().allowed);
    clock.advance(Duration::from_secs(60));
    assert_eq!(free.try_acquire(b"acme", 1).unwrap().remaining, 99);
    // One key, counted once between the two plans.
    assert_eq!(free.len(), 1);
    assert_eq!(pro.len(), 1);
}

#[test]
fn plans_of_other_algorithms_and_tiered_sets_carry_the_units_used() {
    let clock = ManualClock::new(T0);
    let base = limiter(policy("token-bucket:100/1m"), &clock);
    let window = base.plan(policy("fixed-window:100/1m"));
    let tiered = base.plan(
        Policies::new([policy("sliding-log:100/1m"), policy("sliding-log:1000/1h")]).unwrap(),
    );
    assert!(base.try_acquire(b"k", 30).unwrap().allowed);
    assert_eq!(window.try_acquire(b"k", 30).unwrap().remaining, 40);
    assert_eq!(tiered.try_acquire(b"k", 30).unwrap().remaining, 10);
    assert_eq!(base.try_peek(b"k", 1).unwrap().remaining, 9);
    assert!(!window.try_acquire(b"k", 11).unwrap().allowed);
}

/// Four threads, each deciding every request under the next of three
/// plans in turn, on eight keys at one instant: whatever the interleaving,
/// every unit used is carried, so each key admits exactly its limit (the
/// take-over of units used at one instant is exact between these
/// algorithms), and no two requests moving a key between plans wait for
/// each other forever.
#[test]
fn concurrent_requests_across_plans_admit_exactly_the_limit_per_key() {
    let clock = ManualClock::new(T0);
    let base = Arc::new(limiter(policy("sliding-log:100/1h"), &clock));
    let plans = Arc::new([
        Arc::clone(&base),
        Arc::new(base.plan(policy("fixed-window:100/1h"))),
        Arc::new(base.plan(policy("sliding-log:100/2h"))),
    ]);
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let plans = Arc::clone(&plans);
            thread::spawn(move || {
                let mut admitted = [0u64; 8];
                for i in 0..3_000usize {
                    let key = (i * 5 + thread) % 8;
                    let plan = &plans[(i + thread) % 3];
                    if plan.try_acquire(&[key as u8], 1).unwrap().allowed {
                        admitted[key] += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = [0u64; 8];
    for thread in threads {
        for (total, each) in admitted.iter_mut().zip(thread.join().unwrap()) {
            *total += each;
        }
    }
    assert_eq!(admitted, [100; 8]);
    assert_eq!(base.len(), 8);
}

#[test]
fn a_plan_changed_while_serving_keeps_sharing_the_keys() {
    let clock = ManualClock::new(T0);
    let free = limiter(policy("fixed-window:100/1m"), &clock);
    let pro = free.plan(policy("fixed-window:1000/1m"));
    assert!(pro.try_acquire(b"k", 500).unwrap().allowed);
    pro.set_policies(policy("fixed-window:2000/1m"));
    assert_eq!(pro.try_peek(b"k", 1).unwrap().remaining, 1_499);
    assert!(!free.try_peek(b"k", 1).unwrap().allowed);
    // A plan dropped leaves its keys to the others.
    drop(pro);
    let enterprise = free.plan(policy("fixed-window:5000/1m"));
    assert_eq!(enterprise.try_peek(b"k", 1).unwrap().remaining, 4_499);
}

#[test]
fn the_cap_on_keys_is_shared_by_the_plans() {
    let clock = ManualClock::new(T0);
    let free = MemoryLimiter::builder(policy("sliding-log:10/1m"))
        .clock(clock.clone())
        .max_keys(2)
        .build();
    let pro = free.plan(policy("sliding-log:100/1m"));
    assert!(free.try_acquire(b"a", 1).unwrap().allowed);
    assert!(pro.try_acquire(b"b", 1).unwrap().allowed);
    // "a" moving to pro takes no new room; a third key finds none.
    assert!(pro.try_acquire(b"a", 1).unwrap().allowed);
    assert!(free.try_acquire(b"c", 1).is_err());
    assert_eq!(free.len(), 2);
}
