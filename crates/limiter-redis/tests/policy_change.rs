//! Changing a Redis limiter's policies while it serves, and plans (limiters
//! of one prefix under different policies) sharing each key's state
//! (docs/spec.md section 9): each key keeps what it used, exactly as the
//! core's rule says, on both engines, and a peek writes nothing.

mod common;

use limiter_core::backend::SetState;
use limiter_core::{Algorithm, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_redis::{Engine, RedisLimiter};
use limiter_test::Rng;

const T0: u64 = 1_700_000_000_000_000;
const ENGINES: [Engine; 2] = [Engine::Lua, Engine::Module];

/// A limiter deciding with `engine` on the module's server under `prefix`.
async fn limiter(
    policies: impl Into<Policies>,
    engine: Engine,
    prefix: &str,
    clock: &ManualClock,
) -> RedisLimiter {
    common::builder_at(&common::module_server().url(), policies)
        .key_prefix(prefix)
        .engine(engine)
        .clock(clock.clone())
        .build()
        .await
        .unwrap()
}

fn per_minute(algorithm: Algorithm, limit: u64) -> Policy {
    Policy::new(algorithm, Rate::per_minute(limit)).unwrap()
}

/// Every key under `prefix` with its type, value (`DUMP`, which holds a
/// sorted set's entries too) and TTL.
async fn snapshot(prefix: &str) -> Vec<(String, Vec<u8>, i64)> {
    let url = common::module_server().url();
    let mut conn = common::connection_at(&url).await;
    let mut keys = common::keys_under_at(&url, prefix).await;
    keys.sort();
    let mut held = Vec::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        held.push((key, dump, ttl));
    }
    held
}

/// The policy-change vectors (docs/spec.md section 6a), replayed with
/// `set_policies` before each row from which a case changes the policies,
/// on each engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_change_vectors_replay_byte_for_byte_on_redis() {
    for engine in ENGINES {
        limiter_test::cases::policy_change_vectors_replay_byte_for_byte(
            |policies, clock| async move {
                limiter(policies, engine, &common::fresh_prefix("vectors"), &clock).await
            },
            |limiter, policies| limiter.set_policies(policies).unwrap(),
        )
        .await;
    }
}

/// 90 of 100 used this minute on the free plan: the client, on a limiter
/// of the same prefix under a plan of 50 a minute, is refused, and under
/// one of 1,000 a minute has 910 left, on every algorithm and engine;
/// another prefix keeps its own state.
#[tokio::test]
async fn plans_on_redis_share_what_each_key_used() {
    for engine in ENGINES {
        for algorithm in Algorithm::ALL {
            for (plan, left) in [(50, 0), (1_000, 910)] {
                let clock = ManualClock::new(T0);
                let prefix = common::fresh_prefix("plans");
                let free = limiter(per_minute(algorithm, 100), engine, &prefix, &clock).await;
                let paid = limiter(per_minute(algorithm, plan), engine, &prefix, &clock).await;
                let elsewhere =
                    limiter(per_minute(algorithm, plan), engine, "other-plans", &clock).await;
                assert!(free.acquire(b"client", 90).await.unwrap().allowed);
                clock.set(T0 + 1);
                let what = format!("{engine:?} {algorithm} to {plan}");
                let peek = paid.peek(b"client", 1).await.unwrap();
                assert_eq!(peek.allowed, left > 0, "{what}");
                if left > 0 {
                    assert!(!paid.acquire(b"client", left + 1).await.unwrap().allowed);
                    assert!(
                        paid.acquire(b"client", left).await.unwrap().allowed,
                        "{what}"
                    );
                }
                let refused = paid.acquire(b"client", 1).await.unwrap();
                assert!(!refused.allowed, "{what}: {refused:?}");
                assert_eq!(refused.limit, plan);
                let own = elsewhere.peek(b"client", plan).await.unwrap();
                assert!(own.allowed, "{what}: another prefix shares nothing");
            }
        }
    }
}

/// A peek after a change answers what the new policies take over and
/// writes nothing: every key, value and TTL stays as it was; the next
/// acquire takes the state over.
#[tokio::test]
async fn a_peek_after_a_change_on_redis_writes_nothing() {
    for engine in ENGINES {
        for (from, to) in [
            ("sliding-log:100/1m", "sliding-log:80/1m"),
            ("sliding-log:300/1m", "token-bucket:80/1m"),
            ("token-bucket:100/1m", "sliding-log:300/1m"),
            (
                "fixed-window:100/1m;sliding-counter:90/10s",
                "fixed-window:100/1m",
            ),
        ] {
            let clock = ManualClock::new(T0);
            let prefix = common::fresh_prefix("peek");
            let limiter = limiter(from.parse::<Policies>().unwrap(), engine, &prefix, &clock).await;
            assert!(limiter.acquire(b"quiet", 60).await.unwrap().allowed);
            let before = snapshot(&prefix).await;
            limiter
                .set_policies(to.parse::<Policies>().unwrap())
                .unwrap();
            let mut core = SetState::fresh(&from.parse().unwrap());
            core.acquire(&from.parse().unwrap(), T0, 60).unwrap();
            let taken = core.change_policies(&from.parse().unwrap(), &to.parse().unwrap(), T0);
            let expected = taken.peek(&to.parse().unwrap(), T0, 1).unwrap();
            for _ in 0..3 {
                assert_eq!(
                    limiter.peek(b"quiet", 1).await.unwrap(),
                    expected,
                    "{engine:?} {from} to {to}"
                );
            }
            let after = snapshot(&prefix).await;
            // TTLs run down meanwhile: the same keys and values, no TTL longer.
            assert_eq!(before.len(), after.len(), "{engine:?} {from} to {to}");
            for ((key, dump, ttl), (key_after, dump_after, ttl_after)) in before.iter().zip(&after)
            {
                assert_eq!(
                    (key, dump),
                    (key_after, dump_after),
                    "{engine:?} {from} to {to}"
                );
                assert!(ttl_after <= ttl, "{key}");
            }
            assert!(limiter.acquire(b"quiet", 1).await.unwrap().allowed);
            assert_ne!(snapshot(&prefix).await, after);
        }
    }
}

/// Random acquires, peeks and charges on a few keys, with random changes
/// of policy between them, each sent to either engine in turn, decide
/// exactly as a memory limiter given the same: each key's state taken over
/// by the rule at its first request after a change, each charge counted
/// as limiter-core counts it (docs/spec.md sections 9 and 10).
#[tokio::test]
async fn decides_on_redis_as_memory_across_random_changes_and_charges() {
    let sets: Vec<Policies> = [
        "fixed-window:5/1s",
        "fixed-window:8/2s",
        "sliding-log:4/500ms",
        "sliding-log:9/1s",
        "sliding-log:150/1s",
        "sliding-counter:6/1s",
        "token-bucket:3/1s,capacity=8",
        "token-bucket:6/1s,capacity=4",
        "leaky-bucket:4/1s,queue=6",
        "sliding-log:3/200ms;sliding-counter:7/1s",
        "token-bucket:5/1s;fixed-window:9/2s;sliding-log:4/300ms",
        "sliding-counter:1000000/1d",
    ]
    .iter()
    .map(|text| text.parse().unwrap())
    .collect();
    let mut rng = Rng::new(55);
    let (mut decisions, mut charges) = (0, 0);
    for _ in 0..6 {
        let clock = ManualClock::new(T0);
        let prefix = common::fresh_prefix("random");
        let mut policies = sets[rng.below(sets.len() as u64) as usize].clone();
        let mut limiters = Vec::new();
        for engine in ENGINES {
            limiters.push(limiter(policies.clone(), engine, &prefix, &clock).await);
        }
        let memory = MemoryLimiter::builder(policies.clone())
            .clock(clock.clone())
            .build();
        let mut now = T0;
        for step in 0..300 {
            if rng.below(25) == 0 {
                policies = sets[rng.below(sets.len() as u64) as usize].clone();
                for limiter in &limiters {
                    limiter.set_policies(policies.clone()).unwrap();
                }
                memory.set_policies(policies.clone());
            }
            now += match rng.below(10) {
                0..=5 => rng.below(50_000),
                6..=8 => rng.below(500_000),
                _ => 1_000_000 + rng.below(2_000_000),
            };
            clock.set(now);
            let key = format!("k{}", rng.below(4));
            let cost = 1 + rng.below(4);
            let limiter = &limiters[step % limiters.len()];
            let what = format!("{:?} {policies} at {now}", limiter.engine());
            match rng.below(6) {
                0 => assert_eq!(
                    limiter.peek(key.as_bytes(), cost).await.ok(),
                    memory.try_peek(key.as_bytes(), cost).ok(),
                    "{what}"
                ),
                1 => {
                    // Up to three times the largest limit: into debt.
                    let units = 1 + rng.below(30);
                    memory.charge(key.as_bytes(), units).unwrap();
                    limiter.charge(key.as_bytes(), units).await.unwrap();
                    charges += 1;
                }
                _ => {
                    let expected = memory.try_acquire(key.as_bytes(), cost).ok();
                    assert_eq!(
                        limiter.acquire(key.as_bytes(), cost).await.ok(),
                        expected,
                        "{what}"
                    );
                    decisions += usize::from(expected.is_some());
                }
            }
        }
    }
    assert!(
        decisions > 1_000 && charges > 200,
        "{decisions} decisions, {charges} charges"
    );
}

/// Tasks race on one key while its policy flips between a fixed window of
/// an hour and a sliding counter of two, at 2,000 a window, on each
/// engine: every decision is one policy's (an admission leaves less than
/// its limit), and the units counted carry exactly through each take-over
/// (at one time, no count is above the other policy's limit), so once the
/// key is exhausted exactly 2,000 were admitted in all. Concurrent
/// acquires on one key share calls (a hot key's batch), so take-overs
/// happen inside batches too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_on_redis_is_decided_under_a_mix_of_policies() {
    let hour = std::time::Duration::from_secs(3_600);
    let (small, large) = (
        Policy::fixed_window(Rate::new(2_000, hour)).unwrap(),
        Policy::sliding_counter(Rate::new(2_000, 2 * hour)).unwrap(),
    );
    for engine in ENGINES {
        let clock = ManualClock::new(T0);
        let prefix = common::fresh_prefix("mix");
        let limiter = std::sync::Arc::new(limiter(small.clone(), engine, &prefix, &clock).await);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let limiter = std::sync::Arc::clone(&limiter);
                tokio::spawn(async move {
                    let mut admitted = 0u64;
                    for _ in 0..150 {
                        let decision = limiter.acquire(b"shared", 1).await.unwrap();
                        assert_eq!(decision.limit, 2_000, "{decision:?}");
                        if decision.allowed {
                            assert!(decision.remaining < decision.limit, "{decision:?}");
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        // Flips every millisecond while the tasks decide.
        let mut flips = 0;
        while !tasks.iter().all(|task| task.is_finished()) {
            let policy = if flips % 2 == 0 { &large } else { &small };
            limiter.set_policies(policy.clone()).unwrap();
            flips += 1;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        limiter.set_policies(large.clone()).unwrap();
        while limiter.acquire(b"shared", 1).await.unwrap().allowed {
            admitted += 1;
        }
        assert_eq!(admitted, 2_000, "{engine:?} over {flips} flips");
    }
}

/// Policies the builder would refuse (a sliding log above its maximum)
/// are refused by `set_policies` too, and those in force stay.
#[tokio::test]
async fn set_policies_on_redis_refuses_what_the_builder_refuses() {
    let clock = ManualClock::new(T0);
    let in_force: Policies = "sliding-log:100/1m".parse().unwrap();
    let limiter = limiter(
        in_force.clone(),
        Engine::Lua,
        &common::fresh_prefix("refused"),
        &clock,
    )
    .await;
    let too_long: Policies = "sliding-log:100/1m;sliding-log:20000/1h".parse().unwrap();
    assert!(matches!(
        limiter.set_policies(too_long),
        Err(limiter_core::Error::InvalidPolicy(_))
    ));
    assert_eq!(limiter.policies(), &in_force);
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().limit, 100);
}

/// A record of another version of the state encodings (a later release's,
/// which also ends the state with a tag not ours) says the state beside it
/// is none of ours: a request takes the key as fresh, on each engine, and
/// writes its own state and record, rather than reading bytes it does not
/// know.
#[tokio::test]
async fn a_record_of_another_encoding_on_redis_is_read_as_fresh() {
    for engine in ENGINES {
        let clock = ManualClock::new(T0);
        let prefix = common::fresh_prefix("version");
        let policy = per_minute(Algorithm::TokenBucket, 10);
        let limiter = limiter(policy, engine, &prefix, &clock).await;
        assert!(limiter.acquire(b"k", 9).await.unwrap().allowed);
        let record_key = limiter.redis_record_key(b"k");
        let mut conn = common::connection_at(&common::module_server().url()).await;
        let mut record: Vec<u8> = redis::cmd("GET")
            .arg(&record_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(record[0], 2, "{engine:?}: the version first");
        record[0] = 3;
        let state_key = limiter.redis_key(b"k");
        let mut state: Vec<u8> = redis::cmd("GET")
            .arg(&state_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let last = state.len() - 1;
        state[last] ^= 1;
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(&record_key)
            .arg(&record)
            .cmd("SET")
            .arg(&state_key)
            .arg(&state)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            limiter.peek(b"k", 1).await.unwrap().remaining,
            9,
            "{engine:?}"
        );
        assert_eq!(
            limiter.acquire(b"k", 10).await.unwrap().remaining,
            0,
            "{engine:?}"
        );
        let written: Vec<u8> = redis::cmd("GET")
            .arg(&record_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(written[0], 2, "{engine:?}: the record written anew");
    }
}

/// A state whose record is gone (evicted, say) while it lives, made under
/// another set: its first part's tag says it is none of the set in force's,
/// so each part starts fresh on each engine, rather than another set's
/// bytes being read as this set's (which would leave 0, and a take-over
/// by the record 10).
#[tokio::test]
async fn a_state_beside_no_record_made_by_another_set_starts_fresh() {
    for engine in ENGINES {
        let clock = ManualClock::new(T0);
        let prefix = common::fresh_prefix("orphan");
        let small = per_minute(Algorithm::TokenBucket, 10);
        let large = per_minute(Algorithm::TokenBucket, 20);
        let made = limiter(small, engine, &prefix, &clock).await;
        assert_eq!(made.acquire(b"k", 9).await.unwrap().remaining, 1);
        let mut conn = common::connection_at(&common::module_server().url()).await;
        let deleted: u64 = redis::cmd("DEL")
            .arg(made.redis_record_key(b"k"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, 1, "{engine:?}");
        let now = limiter(large, engine, &prefix, &clock).await;
        assert_eq!(now.peek(b"k", 1).await.unwrap().remaining, 19, "{engine:?}");
        assert_eq!(
            now.acquire(b"k", 1).await.unwrap().remaining,
            19,
            "{engine:?}"
        );
        // Its own state now, with a record again.
        assert_eq!(
            now.acquire(b"k", 1).await.unwrap().remaining,
            18,
            "{engine:?}"
        );
        let record: Option<Vec<u8>> = redis::cmd("GET")
            .arg(now.redis_record_key(b"k"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(record.is_some(), "{engine:?}: the record written anew");
    }
}
