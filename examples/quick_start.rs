//! Quick start: limit SMS codes to 10 a minute per phone number, in process.
//!
//! ```sh
//! cargo run -p limiter-examples --example quick_start
//! ```

use limiter_core::{Limiter, Policy, Rate};
use limiter_memory::MemoryLimiter;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A sliding log: at most 10 in any 60 s, with no burst at a minute boundary.
    let sms = MemoryLimiter::new(Policy::sliding_log(Rate::per_minute(10))?);

    let phone = "sms:+8613800000000";
    let mut sent = 0;
    for attempt in 1..=12 {
        let decision = sms.acquire(phone.as_bytes(), 1).await?;
        if decision.allowed {
            sent += 1;
            println!(
                "attempt {attempt:>2}: sent, {} left this minute",
                decision.remaining
            );
        } else {
            println!(
                "attempt {attempt:>2}: refused, retry in {:?} (RateLimit-Reset in {:?})",
                decision.retry_after, decision.reset_after
            );
        }
    }
    assert_eq!(sent, 10, "10 codes a minute, no more");

    // Other keys are not affected.
    assert!(sms.acquire(b"sms:+8613900000000", 1).await?.allowed);

    // The same decisions without a future, for synchronous code.
    let peek = sms.try_peek(phone.as_bytes(), 1)?;
    assert!(!peek.allowed);
    println!("{} keys held", sms.len());
    Ok(())
}
