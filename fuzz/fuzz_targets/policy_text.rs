//! Policy strings, rates, durations and algorithm names (docs/spec.md
//! section 7): any text parses or is an error, never a panic, and a policy
//! that parses writes a string that parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use limiter_core::{parse_duration, Algorithm, Policy, Rate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_duration(text);
    let _ = text.parse::<Algorithm>();
    if let Ok(rate) = text.parse::<Rate>() {
        for algorithm in Algorithm::ALL {
            let _ = Policy::new(algorithm, rate);
        }
    }
    if let Ok(policy) = text.parse::<Policy>() {
        let written = policy.to_string();
        let back: Policy = written
            .parse()
            .unwrap_or_else(|e| panic!("{written:?} (from {text:?}) does not parse: {e}"));
        assert_eq!(back, policy, "{text:?} -> {written:?}");
        assert_eq!(back.to_string(), written);
    }
});
