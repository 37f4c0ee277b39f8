//! Building a leased limiter warns, once a part, of a lease lifetime
//! longer than the policy's window, which turns the over-admission bound
//! into `N * M` in every window (docs/spec.md section 8.2). The warnings
//! are read by a subscriber of this test's own.

// limiter-tower's subscriber for its startup warnings, shared.
#[allow(unreachable_pub)]
#[path = "../../limiter-tower/tests/support/events.rs"]
mod events;

use std::time::Duration;

use events::Events;
use limiter_core::{Policies, Policy};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;
use tracing::Level;

/// The warnings logged while a leased limiter of `policies` with
/// `lifetime` is built.
fn warnings_of(policies: &[&str], lifetime: Duration) -> Vec<String> {
    let parts = policies.iter().map(|text| text.parse::<Policy>().unwrap());
    let global = MemoryLimiter::new(Policies::new(parts).unwrap());
    let warnings = Events::at(Level::WARN);
    tracing::subscriber::with_default(warnings.clone(), || {
        Leased::builder(global).lifetime(lifetime).build()
    });
    warnings.lines()
}

#[test]
fn a_lifetime_longer_than_a_window_is_warned_of() {
    assert_eq!(
        warnings_of(
            &["token-bucket:100/100ms", "sliding-log:1000/1m"],
            Duration::from_secs(1)
        ),
        [
            "the lease lifetime is longer than the policy's window: the over-admission is up \
             to N*M units (instances times maximum lease) in every window, not about rate*T \
             lifetime_us=1000000 policy=token-bucket:100/100ms"
        ]
    );
}

#[test]
fn a_lifetime_within_every_window_or_beyond_a_fixed_one_is_not() {
    let default = limiter_lease::LeasedBuilder::<MemoryLimiter>::DEFAULT_LIFETIME;
    assert_eq!(
        warnings_of(&["sliding-log:10/1s"], default),
        Vec::<String>::new()
    );
    assert_eq!(
        warnings_of(&["sliding-counter:10/250ms"], default),
        Vec::<String>::new(),
        "a lifetime of one window"
    );
    // A fixed window ends each lease with itself.
    assert_eq!(
        warnings_of(&["fixed-window:10/100ms"], default),
        Vec::<String>::new()
    );
}
