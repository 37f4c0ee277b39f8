//! The two engines side by side on a server with limiter-redis-module
//! loaded: the Lua functions and the module write the same bytes with the
//! same TTLs, answer a key of another type and a full Redis alike, and the
//! module's writes reach a replica as the state itself. Their decisions
//! agree with the core in `differential.rs`.

mod common;

use std::time::{Duration, Instant};

use limiter_core::{Decision, Error, Limiter, ManualClock, Policies, Policy};
use limiter_redis::{Engine, RedisLimiter};
use limiter_test::redis_server::RedisServer;

/// A limiter deciding with `engine` on the server at `url`, under `prefix`.
async fn limiter(
    url: &str,
    policies: &Policies,
    engine: Engine,
    prefix: &str,
    clock: Option<&ManualClock>,
) -> RedisLimiter {
    let mut builder = common::builder_at(url, policies.clone())
        .key_prefix(prefix)
        .engine(engine)
        // The TTLs then follow the decisions alone.
        .ttl_floor(Duration::from_millis(1));
    if let Some(clock) = clock {
        builder = builder.clock(clock.clone());
    }
    builder.build().await.unwrap()
}

/// An error and its sources, one after the other.
fn chain(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// What a key holds, as text: its type, and its string or its sorted
/// set's members and scores.
async fn contents(url: &str, key: &[u8]) -> (String, Vec<Vec<u8>>) {
    let mut conn = common::connection_at(url).await;
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let value: Vec<Vec<u8>> = match kind.as_str() {
        "string" => vec![redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap()],
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .unwrap(),
        _ => Vec::new(),
    };
    (kind, value)
}

const POLICIES: [&str; 7] = [
    "fixed-window:5/10s",
    "sliding-counter:5/10s",
    "token-bucket:3/10s,capacity=5",
    "leaky-bucket:3/10s,queue=5",
    "sliding-log:5/10s",
    // Above PACKED_LOG_MAX: a sorted set.
    "sliding-log:200/10s",
    "sliding-log:4/10s;token-bucket:2/1s;sliding-log:300/1m",
];

/// The same trace by each engine, on keys of their own, caller time, its
/// policies then changed to the next of [`POLICIES`] (each key's state
/// taken over, docs/spec.md section 9) and a key charged (section 10):
/// the keys and their records hold the same bytes, and TTLs that differ by
/// no more than the time between the two writes or the two reads.
#[tokio::test]
async fn on_redis_both_engines_write_the_same_bytes_and_ttls() {
    let url = common::module_server().url();
    for (index, text) in POLICIES.into_iter().enumerate() {
        let next: Policies = POLICIES[(index + 1) % POLICIES.len()].parse().unwrap();
        let policies: Policies = text.parse().unwrap();
        let prefixes = [common::fresh_prefix("lua"), common::fresh_prefix("module")];
        let mut written = Vec::new();
        for (engine, prefix) in [Engine::Lua, Engine::Module].into_iter().zip(&prefixes) {
            let clock = ManualClock::new(1_700_000_000_000_000);
            let limiter = limiter(&url, &policies, engine, prefix, Some(&clock)).await;
            // Admissions, a denial, edges dropped, two keys.
            // (Costs up to 2: the set's max cost.)
            for (dt, key, cost) in [(0, "a", 1), (5, "a", 2), (5, "b", 1), (0, "a", 1)]
                .into_iter()
                .chain([
                    (1_000_000, "a", 2),
                    (9_000_001, "a", 1),
                    (10_000_000, "a", 1),
                ])
                .chain([(20_000_000, "a", 2), (1, "a", 2), (2, "b", 2), (0, "a", 2)])
            {
                clock.advance(Duration::from_micros(dt));
                let _ = limiter.acquire(key.as_bytes(), cost).await.unwrap();
            }
            limiter.set_policies(next.clone()).unwrap();
            clock.advance(Duration::from_micros(3));
            let _ = limiter.acquire(b"a", 1).await.unwrap();
            limiter.charge(b"b", 7).await.unwrap();
            clock.advance(Duration::from_micros(1));
            let _ = limiter.acquire(b"b", 2).await.unwrap();
            limiter.charge(b"a", 1).await.unwrap();
            written.push((limiter, Instant::now()));
        }
        let since = written[0].1.elapsed().as_millis() as i64 + 50;
        for key in [b"a".as_slice(), b"b"] {
            let [lua, module] = [0, 1].map(|i| {
                let mut keys = written[i].0.redis_keys(key);
                keys.push(written[i].0.redis_record_key(key));
                keys
            });
            for (lua, module) in lua.iter().zip(&module) {
                let (want, got) = (contents(&url, lua).await, contents(&url, module).await);
                assert_ne!(want.0, "none", "{text}: {}", common::text(lua.clone()));
                assert_eq!(
                    got,
                    want,
                    "{text} to {next}: {}",
                    common::text(module.clone())
                );
                // The module's key is written after Lua's (by `since` at
                // most) and read after it (by `read_gap`, whole ms rounded
                // up): its PTTL is within those of Lua's, however long a
                // loaded machine takes between the steps.
                let read_lua = Instant::now();
                let ttl_lua = common::pttl_at(&url, lua.as_slice()).await;
                let ttl_module = common::pttl_at(&url, module.as_slice()).await;
                let read_gap = read_lua.elapsed().as_millis() as i64 + 1;
                assert!(
                    ttl_lua > 0 && (-read_gap..=since).contains(&(ttl_module - ttl_lua)),
                    "{text}: PTTL {ttl_lua} by Lua, {ttl_module} by the module, written {since} ms \
                     and read {read_gap} ms apart"
                );
            }
        }
    }
}

/// On Redis time the state carries its TTL's deadline, so its bytes
/// differ with the time; the TTLs a first write and a later one set are
/// the same by both engines (a margin over the reset, kept while the
/// deadline covers the writes).
#[tokio::test]
async fn on_redis_time_both_engines_set_the_same_ttls() {
    let url = common::module_server().url();
    let policies: Policies = "token-bucket:1/10s,capacity=5".parse().unwrap();
    let mut ttls = Vec::new();
    for engine in [Engine::Lua, Engine::Module] {
        let prefix = common::fresh_prefix("time");
        let limiter = limiter(&url, &policies, engine, &prefix, None).await;
        let mut each = Vec::new();
        for _ in 0..3 {
            assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
            let key = limiter.redis_key(b"k");
            let (kind, value) = contents(&url, &key).await;
            assert_eq!(
                (kind.as_str(), value[0].len()),
                ("string", 32),
                "{engine:?}"
            );
            each.push(common::pttl_at(&url, key).await);
        }
        ttls.push(each);
    }
    // 10 s a token: the first write grants its 10 s reset (+1 ms) and as
    // much again; the second, 20 s of reset, past that deadline, grants
    // anew; the third, 30 s, is covered by it and keeps the TTL.
    for each in &ttls {
        assert!(
            each[1] > each[0] + 10_000 && each[2] <= each[1],
            "renewed, then kept: {ttls:?}"
        );
    }
    // Generous by 5 s for a loaded machine between a write and its PTTL.
    for (lua, module) in ttls[0].iter().zip(&ttls[1]) {
        assert!((lua - module).abs() <= 5_000, "{ttls:?}");
    }
}

/// Decisions of `policies` on a key of `key`'s user that holds a list,
/// by each engine: both read the list as no state of theirs.
#[tokio::test]
async fn on_redis_a_key_of_another_type_is_answered_alike_by_both_engines() {
    let url = common::module_server().url();
    let clock = ManualClock::new(1_000_000);
    for text in [
        "sliding-log:200/10s",
        "token-bucket:3/10s",
        "sliding-log:5/10s",
    ] {
        let policies: Policies = text.parse().unwrap();
        let mut answers = Vec::new();
        for engine in [Engine::Lua, Engine::Module] {
            let prefix = common::fresh_prefix("type");
            let limiter = limiter(&url, &policies, engine, &prefix, Some(&clock)).await;
            let key = limiter.redis_key(b"k");
            redis::cmd("RPUSH")
                .arg(&key)
                .arg("x")
                .query_async::<()>(&mut common::connection_at(&url).await)
                .await
                .unwrap();
            let answer = limiter.acquire(b"k", 1).await.map_err(|e| chain(&e));
            answers.push((answer, contents(&url, &key).await.0));
        }
        assert_eq!(answers[0], answers[1], "{text}");
    }
}

/// A full Redis (`maxmemory` reached, `noeviction`) refuses every acquire
/// by either engine with the same error, and both still peek.
#[tokio::test]
async fn on_a_full_redis_both_engines_answer_alike() {
    let server = RedisServer::start_with_module(&["--maxmemory-policy", "noeviction"]);
    let url = server.url();
    let policies: Policies = "token-bucket:3/10s".parse().unwrap();
    let clock = ManualClock::new(1_000_000);
    let prefix = common::fresh_prefix("full");
    let lua = limiter(&url, &policies, Engine::Lua, &prefix, Some(&clock)).await;
    let module = limiter(&url, &policies, Engine::Module, &prefix, Some(&clock)).await;
    assert!(lua.acquire(b"k", 1).await.unwrap().allowed);
    server.command("CONFIG SET maxmemory 1");
    let refused = |result: Result<Decision, Error>| {
        chain(&result.expect_err("a full Redis refuses to write"))
    };
    let by_lua = refused(lua.acquire(b"k", 1).await);
    let by_module = refused(module.acquire(b"k", 1).await);
    assert!(by_lua.contains("OOM"), "{by_lua}");
    assert_eq!(by_module, by_lua);
    let peeks = [lua.peek(b"k", 1).await, module.peek(b"k", 1).await];
    assert_eq!(peeks[0].as_ref().unwrap(), peeks[1].as_ref().unwrap());
    assert_eq!(peeks[0].as_ref().unwrap().remaining, 1);
}

/// A replica without the module holds exactly the primary's state after
/// the module decided: it receives the writes, never the command.
#[tokio::test]
async fn a_redis_replica_holds_the_state_the_module_wrote() {
    let primary = RedisServer::start_with_module(&[]);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    // Generous for a loaded machine: a link comes up in well under a second.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !replica
        .query("INFO replication")
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never linked");
        std::thread::sleep(Duration::from_millis(50));
    }
    let policies: Policies = "token-bucket:3/10s;sliding-log:5/10s;sliding-log:200/1m"
        .parse()
        .unwrap();
    let prefix = common::fresh_prefix("replica");
    let module = limiter(&primary.url(), &policies, Engine::Module, &prefix, None).await;
    for key in [b"a".as_slice(), b"b", b"a", b"a"] {
        assert!(module.acquire(key, 1).await.unwrap().allowed);
    }
    assert_eq!(primary.command("WAIT 1 60000"), ":1");
    for key in [b"a".as_slice(), b"b"] {
        for state in module.redis_keys(key) {
            let on_primary = contents(&primary.url(), &state).await;
            assert_ne!(on_primary.0, "none");
            assert_eq!(contents(&replica.url(), &state).await, on_primary);
            assert!(common::pttl_at(&replica.url(), state.as_slice()).await > 0);
        }
    }
}

/// Forcing the module on a server without it fails the build, naming the
/// line that loads it.
#[tokio::test]
async fn a_redis_without_the_module_refuses_the_module_engine() {
    let policy: Policy = "token-bucket:3/10s".parse().unwrap();
    let error = common::builder(policy)
        .engine(Engine::Module)
        .build()
        .await
        .expect_err("no module on the shared server");
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
    assert!(chain(&error).contains("--loadmodule"), "{}", chain(&error));
}

/// The module's commands declare their keys (every argument from the
/// fourth on), so that Redis Cluster routes a call by them and checks
/// they share a slot, and ACL key patterns apply to them.
#[tokio::test]
async fn on_redis_the_module_commands_declare_their_keys() {
    let mut conn = common::connection_at(&common::module_server().url()).await;
    for command in ["LIMITER.DECIDE", "LIMITER.PEEK"] {
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(command)
            .arg("token-bucket:3/10s;sliding-log:5/1s")
            .arg(0)
            .arg([0u8; 24].as_slice())
            .arg("p:{a}:x")
            .arg("p:{a}:y")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(keys, ["p:{a}:x", "p:{a}:y"], "{command}");
    }
}

/// By default a limiter decides with the module when the server has it
/// at build, and with the Lua functions when it has not.
#[tokio::test]
async fn on_redis_the_default_engine_is_the_module_when_loaded() {
    let policy: Policy = "token-bucket:3/10s".parse().unwrap();
    let url = common::module_server().url();
    let with = common::builder_at(&url, policy.clone())
        .build()
        .await
        .unwrap();
    assert_eq!(with.engine(), Engine::Module);
    let without = common::builder(policy).build().await.unwrap();
    assert_eq!(without.engine(), Engine::Lua);
    assert!(without.acquire(b"k", 1).await.unwrap().allowed);
}

/// A server that loses the module (here unloaded; a restart without
/// `--loadmodule` alike): a limiter that detected it decides with the Lua
/// functions from then on, the same call included; one forced on the
/// module fails.
#[tokio::test]
async fn on_redis_without_the_module_any_more_a_detected_module_gives_way() {
    let server = RedisServer::start_with_module(&["--enable-module-command", "yes"]);
    let url = server.url();
    let policies: Policies = "token-bucket:3/10s".parse().unwrap();
    let prefix = common::fresh_prefix("gone");
    let clock = ManualClock::new(1_000_000);
    let detected = common::builder_at(&url, policies.clone())
        .key_prefix(&prefix)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let forced = limiter(&url, &policies, Engine::Module, &prefix, Some(&clock)).await;
    assert_eq!(detected.engine(), Engine::Module);
    assert_eq!(detected.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(server.command("MODULE UNLOAD limiter"), "+OK");
    assert_eq!(detected.acquire(b"k", 1).await.unwrap().remaining, 1);
    assert_eq!(detected.engine(), Engine::Lua);
    let error = forced.acquire(b"k", 1).await.expect_err("no module");
    assert!(
        chain(&error).contains("unknown command"),
        "{}",
        chain(&error)
    );
}

/// A server that gains the module after a limiter was built (loaded by
/// `MODULE LOAD` here; a restart with `--loadmodule` alike): a limiter
/// that detected the Lua functions decides with the module once a new
/// connection finds it, on the same state.
#[tokio::test]
async fn on_redis_a_module_loaded_later_is_found_by_the_next_connection() {
    let server = RedisServer::start_with_args(&["--enable-module-command", "yes"]);
    let url = server.url();
    let policies: Policies = "token-bucket:4/10s".parse().unwrap();
    let clock = ManualClock::new(1_000_000);
    let detected = common::builder_at(&url, policies)
        .key_prefix(common::fresh_prefix("later"))
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    assert_eq!(detected.engine(), Engine::Lua);
    assert_eq!(detected.acquire(b"k", 1).await.unwrap().remaining, 3);
    let path = limiter_test::redis_server::module_path();
    assert_eq!(
        server.command(&format!("MODULE LOAD {}", path.display())),
        "+OK"
    );
    // The connection in use was asked before the module came.
    assert_eq!(detected.engine(), Engine::Lua);
    server.command("CLIENT KILL TYPE normal");
    // The dead connection is replaced (and the call sent again on the
    // new one, which asked for the module first).
    assert_eq!(detected.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(detected.engine(), Engine::Module);
    assert_eq!(detected.acquire(b"k", 1).await.unwrap().remaining, 1);
    let stats = server.query("INFO commandstats");
    assert!(stats.contains("cmdstat_limiter.decide:calls="), "{stats}");
}

/// Concurrent decisions share calls (a hot key's batch: its keys and
/// arguments once, the number of requests after): both engines admit the
/// capacity exactly and leave the same bytes.
#[tokio::test]
async fn on_redis_a_hot_keys_batch_is_decided_alike_by_both_engines() {
    let server = RedisServer::start_with_module(&[]);
    let url = server.url();
    let mut states = Vec::new();
    for text in [
        "token-bucket:5/10s",
        "sliding-log:7/10s",
        "sliding-log:300/10s",
    ] {
        let policies: Policies = text.parse().unwrap();
        let clock = ManualClock::new(1_000_000);
        let mut each = Vec::new();
        for engine in [Engine::Lua, Engine::Module] {
            let prefix = common::fresh_prefix("hot");
            let limiter = limiter(&url, &policies, engine, &prefix, Some(&clock)).await;
            let decisions = (0..64).map(|_| limiter.acquire(b"hot", 1));
            let admitted = futures_util::future::join_all(decisions)
                .await
                .into_iter()
                .filter(|d| d.as_ref().unwrap().allowed)
                .count();
            let capacity = policies.parts()[0].max_cost().min(64);
            assert_eq!(admitted as u64, capacity, "{text} by {engine:?}");
            each.push(contents(&url, &limiter.redis_key(b"hot")).await);
        }
        assert_eq!(each[0], each[1], "{text}");
        states.push(each);
    }
    // The requests shared calls: fewer calls of each engine than requests.
    let stats = server.query("INFO commandstats");
    for command in ["fcall", "limiter.decide"] {
        let calls: u64 = stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or_else(|| panic!("no {command} in {stats}"));
        assert!(
            calls < 3 * 64,
            "{command}: {calls} calls for 3 x 64 requests"
        );
    }
}

/// Both engines' writes raise the same keyspace events (the module's are
/// those of the commands it replicates): `set` and `expire` for a write
/// that sets the TTL, `setrange` for one in place.
#[tokio::test]
async fn on_redis_both_engines_raise_the_same_keyspace_events() {
    use futures_util::StreamExt;

    let server = RedisServer::start_with_module(&["--notify-keyspace-events", "E$g"]);
    let url = server.url();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe("__keyevent@0__:*").await.unwrap();
    let policies: Policies = "token-bucket:10/1s,capacity=20".parse().unwrap();
    let mut keys = Vec::new();
    for engine in [Engine::Lua, Engine::Module] {
        let prefix = common::fresh_prefix("events");
        // Redis time: the second write is covered by the first's deadline.
        let limiter = limiter(&url, &policies, engine, &prefix, None).await;
        for _ in 0..2 {
            assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
        }
        keys.push(limiter.redis_key(b"k"));
    }
    let mut events: [Vec<String>; 2] = Default::default();
    let mut messages = pubsub.on_message();
    // Generous for a loaded machine: the events are sent as the writes run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while events.iter().map(Vec::len).sum::<usize>() < 6 {
        let message = tokio::time::timeout_at(deadline, messages.next())
            .await
            .unwrap_or_else(|_| panic!("events so far: {events:?}"))
            .unwrap();
        let key: Vec<u8> = message.get_payload().unwrap();
        let event = message
            .get_channel_name()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned();
        if let Some(i) = keys.iter().position(|k| *k == key) {
            events[i].push(event);
        }
    }
    assert_eq!(events[0], ["set", "expire", "setrange"], "by Lua");
    assert_eq!(events[1], events[0], "by the module");
}
