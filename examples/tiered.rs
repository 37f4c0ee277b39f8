//! A tiered set: "5 a second and 100 a minute" for each user, both checked
//! on every request, atomically. A request is admitted only if every part
//! admits it, and a denial counts against none (docs/spec.md section 7).
//! The decision's numbers are the binding part's; `bound_by` says which.
//!
//! ```sh
//! cargo run -p limiter-examples --example tiered
//! ```

use std::time::Duration;

use limiter_core::{Limiter, ManualClock, Policies};
use limiter_memory::MemoryLimiter;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let per_user: Policies = "sliding-log:5/1s;sliding-log:100/1m".parse()?;
    // A clock the example moves, so what it prints never depends on timing.
    let clock = ManualClock::new(1_700_000_000_000_000);
    let limiter = MemoryLimiter::builder(per_user)
        .clock(clock.clone())
        .build();

    // A burst of 7 in one second: the per-second part binds after 5.
    let mut admitted = 0;
    for i in 1..=7 {
        let decision = limiter.acquire(b"user:42", 1).await?;
        println!(
            "request {i}: {} (remaining {} of part {}'s {})",
            if decision.allowed {
                "admitted"
            } else {
                "denied"
            },
            decision.remaining,
            decision.bound_by,
            decision.limit,
        );
        admitted += u64::from(decision.allowed);
        if !decision.allowed {
            assert_eq!(decision.bound_by, 0, "the per-second part binds");
        }
    }
    assert_eq!(admitted, 5);

    // Five a second for 19 more seconds: 100 in the minute, then the
    // per-minute part binds although the second has room.
    for _ in 0..19 {
        clock.advance(Duration::from_secs(1));
        for _ in 0..5 {
            assert!(limiter.acquire(b"user:42", 1).await?.allowed);
        }
    }
    clock.advance(Duration::from_secs(1));
    let decision = limiter.acquire(b"user:42", 1).await?;
    println!(
        "request 101 in the minute: {} (bound by part {}, retry after {:?})",
        if decision.allowed {
            "admitted"
        } else {
            "denied"
        },
        decision.bound_by,
        decision.retry_after,
    );
    assert!(!decision.allowed);
    assert_eq!(decision.bound_by, 1, "the per-minute part binds");
    Ok(())
}
