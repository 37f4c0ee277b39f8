//! The article's case: "100 per 10 s"; 100 requests at 9 s and 100 at 11 s.
//! A fixed window admits all 200 within two seconds; a sliding log 100.

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policy, Rate};
use std::time::Duration;

fn admitted_in_the_article_case(algorithm: Algorithm) -> usize {
    let policy = Policy::new(algorithm, Rate::new(100, Duration::from_secs(10))).unwrap();
    let mut key = KeyState::fresh(&policy);
    let times = (0..100)
        .map(|i| 9_000_000 + i)
        .chain((0..100).map(|i| 11_000_000 + i));
    times
        .filter(|&t| key.acquire(&policy, t, 1).unwrap().allowed)
        .count()
}

#[test]
fn each_algorithm_admits_what_spec_says_around_the_boundary() {
    let admitted = Algorithm::ALL.map(|a| (a, admitted_in_the_article_case(a)));
    assert_eq!(
        admitted,
        [
            // The boundary burst: a whole second window's quota at 11 s.
            (Algorithm::FixedWindow, 200),
            // Exact: nothing more until the 9 s requests leave at 19 s.
            (Algorithm::SlidingLog, 100),
            // At 11 s the 100 of [0, 10) still weigh 90%: room for 10.
            (Algorithm::SlidingCounter, 110),
            // Full bucket at 9 s, then 2 s of refill at 10/s.
            (Algorithm::TokenBucket, 120),
            // The queue of 100 drained 20 in 2 s.
            (Algorithm::LeakyBucket, 120),
        ]
    );
}
