//! Swap backends: application code written against `Arc<dyn Limiter>`, run
//! here on the in-memory backend with a manual clock, as a test of that
//! code would. In production the same code is handed a Redis limiter (same
//! policy) and decides identically, because both follow the same contract.
//!
//! ```sh
//! cargo run -p limiter-examples --example swap_backends
//! ```
//!
//! The decisions printed are checked against `limiter-core`'s algorithm run
//! directly on the same requests.

use std::sync::Arc;
use std::time::Duration;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Decision, Error, Limiter, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

/// The application: an API that lets each user make a request costing
/// `cost` units, answering with the headers a client needs. It knows only
/// `dyn Limiter`.
struct Api {
    limiter: Arc<dyn Limiter>,
}

impl Api {
    async fn handle(&self, user: &str, cost: u64) -> Result<(u16, Decision), Error> {
        let decision = self
            .limiter
            .acquire(format!("api:{user}").as_bytes(), cost)
            .await?;
        let status = if decision.allowed { 200 } else { 429 };
        Ok((status, decision))
    }
}

/// One request of the scenario: (µs after the start, user, cost).
const REQUESTS: [(u64, &str, u64); 10] = [
    (0, "alice", 3),
    (1_000, "alice", 2),
    (2_000, "alice", 1),
    (2_000, "bob", 5),
    (400_000, "alice", 1),
    (500_000, "alice", 1),
    (500_000, "bob", 1),
    (1_500_000, "alice", 4),
    (3_000_000, "alice", 5),
    (3_000_001, "alice", 1),
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = 1_700_000_000_000_000; // µs since the epoch
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::new(5, Duration::from_secs(1)))?;

        // What a test does: the in-memory backend on a clock it controls.
        let clock = ManualClock::new(start);
        let limiter = MemoryLimiter::builder(policy.clone())
            .clock(clock.clone())
            .build();
        let api = Api {
            limiter: Arc::new(limiter),
        };

        // The reference: the core's algorithm, one state per key.
        let mut alice = KeyState::fresh(&policy);
        let mut bob = KeyState::fresh(&policy);

        println!("{policy}");
        for (offset, user, cost) in REQUESTS {
            clock.set(start + offset);
            let (status, decision) = api.handle(user, cost).await?;
            let state = if user == "alice" {
                &mut alice
            } else {
                &mut bob
            };
            let expected = state.acquire(&policy, start + offset, cost)?;
            assert_eq!(decision, expected, "{policy}: {user} at +{offset}µs");
            println!(
                "  +{:>9}µs {user:<5} cost {cost}: {status}  remaining {}  retry after {:?}  wait {:?}",
                offset, decision.remaining, decision.retry_after, decision.wait
            );
        }
    }
    println!("every decision matched limiter-core's");
    Ok(())
}
