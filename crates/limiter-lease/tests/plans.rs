//! Leases under plans (docs/spec.md section 9.5): each plan's leased
//! limiter wraps that plan's global limiter, so a lease is sized by the
//! plan in force, and the global limiters share the key's state, so a
//! customer moved between plans keeps what it used, units in hand
//! included: within one window, every unit admitted under either plan was
//! counted once against the plan of the larger limit.

use std::time::Duration;

use limiter_core::{Limiter, ManualClock, Policy};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;

const T0: u64 = 1_700_000_000_000_000;

fn policy(text: &str) -> Policy {
    text.parse().unwrap()
}

fn leased(global: MemoryLimiter, clock: &ManualClock) -> Leased<MemoryLimiter> {
    Leased::builder(global)
        .lifetime(Duration::from_secs(3_600))
        .clock(clock.clone())
        .build()
}

/// Admits requests of one unit on `key` until `limiter` denies one; how
/// many it admitted.
async fn admitted_until_denied(limiter: &impl Limiter, key: &[u8]) -> u64 {
    let mut admitted = 0;
    while limiter.acquire(key, 1).await.unwrap().allowed {
        admitted += 1;
        assert!(admitted <= 1_000_000, "never denied");
    }
    admitted
}

#[tokio::test]
async fn a_lease_is_sized_by_its_plan_and_a_move_keeps_what_was_used() {
    let clock = ManualClock::new(T0);
    let free_global = MemoryLimiter::builder(policy("sliding-log:1000/1h"))
        .clock(clock.clone())
        .build();
    let pro_global = free_global.plan(policy("sliding-log:5000/1h"));
    let (free, pro) = (leased(free_global, &clock), leased(pro_global, &clock));
    // Each plan's lease follows its own limits, as a leased limiter of
    // that plan alone would.
    let alone = |text: &str| Leased::new(MemoryLimiter::new(policy(text))).max_lease();
    assert_eq!(free.max_lease(), alone("sliding-log:1000/1h"));
    assert_eq!(pro.max_lease(), alone("sliding-log:5000/1h"));
    assert!(pro.max_lease() > free.max_lease());

    // Free's 1,000 spent, then the customer upgrades in the same window:
    // pro admits what its 5,000 leave, not 5,000 more.
    let on_free = admitted_until_denied(&free, b"acme").await;
    assert_eq!(on_free, 1_000);
    let on_pro = admitted_until_denied(&pro, b"acme").await;
    assert!(
        on_pro <= 4_000,
        "{on_pro} admitted on pro after 1,000 on free"
    );
    // At most one lease's units lapse in hand on the way.
    assert!(on_pro >= 4_000 - pro.max_lease(), "{on_pro}");
    // And back on free: refused until its window allows it.
    assert!(!free.acquire(b"acme", 1).await.unwrap().allowed);
    clock.advance(Duration::from_secs(3_600));
    assert!(free.acquire(b"acme", 1).await.unwrap().allowed);
}
