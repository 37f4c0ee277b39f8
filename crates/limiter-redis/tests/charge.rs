//! A charge after the fact on Redis (docs/spec.md section 10), on both
//! engines: counted whatever the key has left, into debt, and refused
//! until time pays it back, exactly as on memory; 0 units is refused and
//! writes nothing. (Random charges among acquires and policy changes:
//! policy_change.rs.)

mod common;

use std::time::Duration;

use limiter_core::{Error, Limiter, ManualClock, Policy};
use limiter_memory::MemoryLimiter;
use limiter_redis::Engine;

const T0: u64 = 1_700_000_000_000_000;

#[tokio::test]
async fn a_charge_on_redis_takes_the_key_into_debt_as_on_memory() {
    let tokens: Policy = "token-bucket:1000/1s".parse().unwrap();
    for engine in [Engine::Lua, Engine::Module] {
        let clock = ManualClock::new(T0);
        let redis = common::builder_at(&common::module_server().url(), tokens.clone())
            .engine(engine)
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        let memory = MemoryLimiter::builder(tokens.clone())
            .clock(clock.clone())
            .build();
        for limiter in [&redis as &dyn Limiter, &memory] {
            assert!(limiter.acquire(b"answer", 100).await.unwrap().allowed);
            // The response used 1,500 in all: 500 owed, then 1.
            limiter.charge(b"answer", 1_400).await.unwrap();
        }
        let refused = redis.peek(b"answer", 1).await.unwrap();
        assert!(!refused.allowed, "{engine:?}");
        assert_eq!(
            refused.retry_after,
            Duration::from_micros(501_000),
            "{engine:?}"
        );
        assert_eq!(refused, memory.peek(b"answer", 1).await.unwrap());
        clock.advance(Duration::from_micros(501_000));
        assert_eq!(
            redis.acquire(b"answer", 1).await.unwrap(),
            memory.acquire(b"answer", 1).await.unwrap()
        );
        assert!(matches!(
            redis.charge(b"other", 0).await,
            Err(Error::ZeroCost)
        ));
        let keys = common::keys_under_at(&common::module_server().url(), redis.key_prefix()).await;
        assert_eq!(
            keys.len(),
            2,
            "{engine:?}: the charged key's state and record: {keys:?}"
        );
    }
}
