//! limiter-redis-module's arguments: whatever a client sends after the
//! command's name (here, `data` as arguments of a length byte and that
//! many bytes each), the module answers a call or an error, never a panic
//! (which would abort the Redis server); a call's keys are all in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use limiter_redis_module::call::Call;

fuzz_target!(|data: &[u8]| {
    let mut args: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (arg, tail) = tail.split_at(len);
        args.push(arg);
        rest = tail;
    }
    for call in [Call::parse(&args), Call::parse_across_slots(&args)]
        .into_iter()
        .flatten()
    {
        assert!(!call.requests.is_empty());
        for r in 0..call.requests.len() {
            for i in 0..call.policies.len() {
                let _ = call.key(r, i);
            }
            let _ = call.record_key(r);
        }
    }
});
