//! Decisions sharing calls: many keys per primary, a hot key, and calls
//! that meet a slot moving between primaries.

use super::*;

/// What a test of a slot migration starts from: a cluster of its own
/// ([`own_cluster_on`]), a limiter on it, and `keys` all on the first
/// primary (`source`), whose slots the test moves to the second
/// (`target`).
struct Migration {
    cluster: Arc<RedisCluster>,
    limiter: Arc<RedisLimiter>,
    source: ClusterNode,
    target: ClusterNode,
    keys: Vec<String>,
}

/// A [`Migration`] of `count` keys named after `name`, under `policy`, on
/// `engine`.
async fn migration(engine: Engine, policy: Policy, name: &str, count: usize) -> Migration {
    let (cluster, limiter) = own_cluster_on(engine, policy, name).await;
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0].clone(), primaries[1].clone());
    let keys = keys_on(
        &cluster,
        &limiter,
        name,
        std::slice::from_ref(&source),
        count,
    );
    Migration {
        cluster,
        limiter,
        source,
        target,
        keys,
    }
}

impl Migration {
    /// Leaves `key`'s slot half-way through a migration from `source` to
    /// `target` (`IMPORTING` on the target, `MIGRATING` on the source),
    /// none of its keys moved.
    fn start(&self, key: &str) {
        let slot = self
            .cluster
            .slot_of(self.limiter.redis_key(key.as_bytes()))
            .to_string();
        let (from, to) = (&self.source, &self.target);
        let importing = ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from.id];
        let migrating = ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to.id];
        assert_eq!(self.cluster.command(to, &importing).text(), "OK");
        assert_eq!(self.cluster.command(from, &migrating).text(), "OK");
    }

    /// Moves `key`'s state and record (made by an acquire) to `target`
    /// (`MIGRATE`), its slot half-way through ([`start`](Self::start)): a
    /// call on it is then `ASK`ed there. (A new key of two Redis keys in
    /// such a slot is made by neither node: the importing node answers
    /// `TRYAGAIN` to a call on several keys it lacks, until the slot
    /// moves.)
    fn move_keys(&self, key: &str) {
        let state = String::from_utf8(self.limiter.redis_key(key.as_bytes())).unwrap();
        let record = String::from_utf8(self.limiter.redis_record_key(key.as_bytes())).unwrap();
        let port = self.target.port.to_string();
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            &state,
            &record,
        ];
        assert_eq!(self.cluster.command(&self.source, &migrate).text(), "OK");
    }
}

/// 64 tasks acquiring over `keys` (each task 24 of them in turn, so each
/// key gets 16 acquires); each key's admissions.
async fn acquire_over(limiter: &Arc<RedisLimiter>, keys: &[String]) -> BTreeMap<String, u64> {
    const TASKS: usize = 64;
    const EACH: usize = 24;
    let keys = Arc::new(keys.to_vec());
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(&keys));
            tokio::spawn(async move {
                let mut admitted = Vec::new();
                for j in 0..EACH {
                    let key = &keys[(task * EACH + j) % keys.len()];
                    let decision = limiter
                        .acquire(key.as_bytes(), 1)
                        .await
                        .unwrap_or_else(|e| panic!("acquire({key}): {}", chain(&e)));
                    if decision.allowed {
                        admitted.push(key.clone());
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted: BTreeMap<String, u64> = keys.iter().map(|k| (k.clone(), 0)).collect();
    for task in tasks {
        for key in task.await.unwrap() {
            *admitted.get_mut(&key).unwrap() += 1;
        }
    }
    admitted
}
/// Decisions spread over many keys share calls on each primary (its lane,
/// see `batch.rs`: one call decides keys of several slots), exactly, on
/// each engine: 64 tasks over 96 keys (32 per primary, 16 acquires each,
/// limit 10) admit 10 on every key, every primary runs fewer calls than it
/// got decisions, and the module's calls across slots are among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_many_keys_share_calls_on_each_primary_and_stay_exact() {
    const LIMIT: u64 = 10;
    for engine in ENGINES {
        let policy = Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap();
        let (cluster, limiter) = own_cluster_on(engine, policy, "spread").await;
        let primaries = cluster.primaries();
        let keys = keys_on(&cluster, &limiter, "spread", &primaries, 32);
        let before: Vec<u64> = primaries
            .iter()
            .map(|p| decide_calls(&cluster, p, engine))
            .collect();
        let admitted = acquire_over(&limiter, &keys).await;
        for (primary, before) in primaries.iter().zip(before) {
            let calls = decide_calls(&cluster, primary, engine) - before;
            let decisions = 32 * 16;
            eprintln!(
                "{engine:?}, primary {}: {decisions} decisions in {calls} calls",
                primary.port
            );
            assert!(
                calls < decisions,
                "{engine:?}, primary {}: {decisions} concurrent decisions took {calls} calls: \
                 none shared",
                primary.port
            );
            if engine == Engine::Module {
                assert!(
                    command_calls(&cluster, primary, "limiter.decide_across") > 0,
                    "primary {}: no call of the module across slots",
                    primary.port
                );
            }
        }
        let wrong: Vec<_> = admitted.iter().filter(|(_, &n)| n != LIMIT).collect();
        assert!(
            wrong.is_empty(),
            "{engine:?}: keys admitting other than {LIMIT}: {wrong:?}"
        );
    }
}
/// A call across slots that meets a key its node does not serve now (a
/// slot half-way through a migration, the key's state and record moved:
/// `ASK`) writes nothing, and each of its requests is decided alone,
/// following the redirect: no error, every key of the primary (the moving
/// slot's among them) admits exactly its limit (the moving one's less the
/// unit admitted before it moved), and the moving slot's key is decided on
/// the importing node (`ASKING` there). On each engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_meeting_a_moving_slot_is_decided_request_by_request() {
    for engine in ENGINES {
        a_batch_meeting_a_moving_slot_on(engine).await;
    }
}

async fn a_batch_meeting_a_moving_slot_on(engine: Engine) {
    const LIMIT: u64 = 10;
    let policy = Policy::token_bucket(Rate::per_hour(LIMIT)).unwrap();
    let m = migration(engine, policy, "moving", 48).await;
    let moving = &m.keys[0];
    assert!(
        m.limiter
            .acquire(moving.as_bytes(), 1)
            .await
            .unwrap()
            .allowed
    );
    m.start(moving);
    m.move_keys(moving);
    let asking = command_calls(&m.cluster, &m.target, "asking");
    let mut admitted = acquire_over(&m.limiter, &m.keys).await;
    *admitted.get_mut(moving).unwrap() += 1;
    let wrong: Vec<_> = admitted.iter().filter(|(_, &n)| n != LIMIT).collect();
    assert!(
        wrong.is_empty(),
        "{engine:?}: keys admitting other than {LIMIT}: {wrong:?}"
    );
    assert!(
        command_calls(&m.cluster, &m.target, "asking") > asking,
        "{engine:?}: the moving slot's key was never sent to the importing node"
    );
    assert_eq!(
        m.cluster
            .keys_matching(&m.target, m.limiter.redis_key(moving.as_bytes()))
            .len(),
        1,
        "the moving slot's new key lives on the importing node"
    );
}
/// A batch across slots never follows an `ASK`: after `ASKING`, the node
/// a slot migrates to would serve a missing key of any slot it imports,
/// while that key still lives on the old node. Two slots of one primary
/// migrate to another: one key moved (one unit admitted; its requests are
/// `ASK`ed to the new node), one already at its limit and still on the old
/// node. Under 64 tasks alternating the two, the full key admits nothing
/// more, the moved one exactly the rest of its limit. On each engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_never_follows_an_ask_into_another_importing_slot() {
    for engine in ENGINES {
        a_batch_never_follows_an_ask_on(engine).await;
    }
}

async fn a_batch_never_follows_an_ask_on(engine: Engine) {
    const LIMIT: u64 = 10;
    let policy = Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap();
    let m = migration(engine, policy, "asking", 2).await;
    let (moved, full) = (&m.keys[0], &m.keys[1]);
    for _ in 0..LIMIT {
        assert!(m.limiter.acquire(full.as_bytes(), 1).await.unwrap().allowed);
    }
    assert!(
        m.limiter
            .acquire(moved.as_bytes(), 1)
            .await
            .unwrap()
            .allowed
    );
    for key in [moved, full] {
        m.start(key);
    }
    m.move_keys(moved);
    let admitted = acquire_over(&m.limiter, &m.keys).await;
    assert_eq!(
        admitted[full], 0,
        "{engine:?}: the key at its limit admitted more"
    );
    assert_eq!(admitted[moved], LIMIT - 1, "{engine:?}: the moved key");
}

/// A call `ASK`ed to the node a slot migrates to, which lost its library
/// (`FUNCTION FLUSH` there) while the limiter's connection to it stayed:
/// the library is loaded on that node, not on the slot's owner, and the
/// call decides there. With the Lua functions (the module's command has
/// no library to lose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asked_to_a_node_that_lost_its_library_loads_it_there() {
    const LIMIT: u64 = 10;
    let policy = Policy::token_bucket(Rate::per_hour(LIMIT)).unwrap();
    let m = migration(Engine::Lua, policy, "flushed", 1).await;
    let moving = &m.keys[0];
    // A connection to the target, its library loaded, then lost there.
    let on_target = keys_on(
        &m.cluster,
        &m.limiter,
        "flushed-target",
        std::slice::from_ref(&m.target),
        1,
    );
    for key in [&on_target[0], moving] {
        let decision = m.limiter.acquire(key.as_bytes(), 1).await.unwrap();
        assert!(decision.allowed, "{key}: {decision:?}");
    }
    let flushed = m.cluster.command(&m.target, &["FUNCTION", "FLUSH"]);
    assert_eq!(flushed, Reply::Status("OK".into()));
    m.start(moving);
    m.move_keys(moving);
    let decision = m
        .limiter
        .acquire(moving.as_bytes(), 1)
        .await
        .unwrap_or_else(|e| panic!("the call asked to the flushed node failed: {e:#}"));
    assert!(
        decision.allowed && decision.remaining == LIMIT - 2,
        "{decision:?}"
    );
}

/// Decisions on one hot key of a cluster share calls (its slot's lane, see
/// `batch.rs`), exactly: 64 tasks of 20 acquires each on one key with a
/// limit of 500 admit 500, in fewer `FCALL`s on its primary than
/// decisions; keys spread over the primaries are decided too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_on_a_hot_key_share_calls_and_stay_exact() {
    const TASKS: usize = 64;
    const EACH: usize = 20;
    const LIMIT: u64 = 500;
    let policy = Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap();
    let (cluster, limiter) = own_cluster(policy, "hot").await;
    let owner = cluster.node_for_key(limiter.redis_key(b"global"));
    let fcalls = |node: &ClusterNode| command_calls(&cluster, node, "fcall");
    let before = fcalls(&owner);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..EACH {
                    admitted += u64::from(limiter.acquire(b"global", 1).await.unwrap().allowed);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let calls = fcalls(&owner) - before;
    let decisions = (TASKS * EACH) as u64;
    eprintln!("hot key: {decisions} decisions in {calls} calls, {admitted} admitted");
    assert_eq!(admitted, LIMIT);
    assert!(
        calls < decisions,
        "{decisions} concurrent decisions took {calls} calls: none shared"
    );
}
