use limiter_core::{Clock, SystemClock};
use limiter_memory::AnchoredClock;
#[test]
fn drift() {
    let a = AnchoredClock::new();
    let d0 = a.now_us() as i64 - SystemClock.now_us() as i64;
    for i in 1..=6 {
        std::thread::sleep(std::time::Duration::from_secs(20));
        let d = a.now_us() as i64 - SystemClock.now_us() as i64;
        eprintln!(
            "after {}s: anchored - system = {} us (drift {} us, {:.2} ppm)",
            i * 20,
            d,
            d - d0,
            (d - d0) as f64 / (i as f64 * 20e6) * 1e6
        );
    }
}
