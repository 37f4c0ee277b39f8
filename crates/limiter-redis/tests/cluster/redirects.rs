//! The cluster's redirects and "not now"s in orders a real cluster gives
//! only by chance: `MOVED`, `ASK` and `TRYAGAIN` scripted on fake nodes
//! (`limiter_test::fake_cluster`) in front of the binary's real
//! `redis-server`, which makes every decision. Each test counts what the
//! nodes saw and the decisions against the policy.

use limiter_core::FailureReach;
use limiter_test::fake_cluster::{slot_of, Answer, FakeCluster, FakeNode, Seen};

use super::*;

/// What every test here decides under: five a key, none refilled within
/// a test (one token every twelve minutes).
const LIMIT: u64 = 5;

/// The backends' probe interval, which also spaces the slot map's reads:
/// long enough that no test reads the map again after the first read, so
/// the map changes only as the redirects change it.
const NO_MAP_READ: Duration = Duration::from_secs(3600);

/// The command timeout of the tests that run out of it: short enough for
/// many retries to be counted quickly, long enough for a loaded machine to
/// make a few.
const SHORT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a call that runs out of [`SHORT_TIMEOUT`] may take before the
/// test calls it hung: thirty times the timeout, for a loaded machine.
const HUNG: Duration = Duration::from_secs(60);

/// Two fake nodes (slots 0–8191 on node 0, the rest on node 1) in front of
/// the binary's `redis-server`.
async fn fake_cluster() -> FakeCluster {
    fake_cluster_of(2).await
}

/// `nodes` fake nodes, the slots split evenly over them in order, in front
/// of the binary's `redis-server`.
async fn fake_cluster_of(nodes: usize) -> FakeCluster {
    let port = tokio::task::block_in_place(|| common::server().port());
    FakeCluster::start(port, nodes).await
}

/// A limiter of [`LIMIT`] per hour (token bucket) on `cluster`, on a
/// backend with `timeout` for connecting and for commands, the map read
/// once ([`NO_MAP_READ`]).
async fn fake_limiter(cluster: &FakeCluster, timeout: Duration, name: &str) -> RedisLimiter {
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .connection_timeout(timeout)
        .command_timeout(timeout)
        .probe_interval(NO_MAP_READ)
        .build()
        .await
        .unwrap_or_else(|e| panic!("a backend on the fake nodes: {}", chain(&e)));
    RedisLimiter::builder(
        &backend,
        Policy::token_bucket(Rate::per_hour(LIMIT)).unwrap(),
    )
    .key_prefix(common::fresh_prefix(name))
    .build()
    .await
    .unwrap_or_else(|e| panic!("a limiter on the fake nodes: {}", chain(&e)))
}

/// `count` user keys named `{name}:{n}` whose states lie in distinct slots
/// of node `node`, each with its slot.
fn keys_of_node(
    cluster: &FakeCluster,
    limiter: &RedisLimiter,
    name: &str,
    node: usize,
    count: usize,
) -> Vec<(String, u16)> {
    let mut keys: Vec<(String, u16)> = Vec::new();
    for n in 0.. {
        if keys.len() == count {
            break;
        }
        let key = format!("{name}:{n}");
        let slot = slot_of(limiter.redis_key(key.as_bytes()));
        if cluster.owner(slot) == node && keys.iter().all(|(_, s)| *s != slot) {
            keys.push((key, slot));
        }
    }
    keys
}

/// `acquires` acquires of `key`, one after the other: how many were
/// admitted.
async fn admitted(limiter: &RedisLimiter, key: &str, acquires: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..acquires {
        let decision = limiter
            .acquire(key.as_bytes(), 1)
            .await
            .unwrap_or_else(|e| panic!("acquire({key}): {}", chain(&e)));
        assert!(!decision.is_degraded(), "{decision:?}");
        admitted += u64::from(decision.allowed);
    }
    admitted
}

/// Whether the server holds `key`'s state: whether a decision on it
/// reached the server.
async fn stored(limiter: &RedisLimiter, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(limiter.redis_key(key.as_bytes()))
        .query_async::<bool>(&mut common::connection_at(&common::server().url()).await)
        .await
        .unwrap()
}

/// The decisions (`FCALL`s) `node` saw for `slot`, in order.
fn decisions_for(node: &FakeNode, slot: u16) -> Vec<Seen> {
    node.keyed()
        .into_iter()
        .filter(|seen| seen.slot == Some(slot))
        .collect()
}

/// How many of `seen` got `answer`.
fn answered(seen: &[Seen], answer: impl Fn(&Answer) -> bool) -> usize {
    seen.iter().filter(|s| answer(&s.answer)).count()
}

fn is_served(answer: &Answer) -> bool {
    *answer == Answer::Served
}

/// Whether `answer` is an error starting with `code` (e.g. `MOVED`).
fn refused_with(code: &'static str) -> impl Fn(&Answer) -> bool {
    move |answer| matches!(answer, Answer::Refused(error) if error.starts_with(code))
}

/// The most attempts a command can make on nodes that refuse it for now
/// within `timeout`, `first_unwaited` of them without a wait before: a
/// later attempt follows a wait of the documented backoff (10 ms, doubling
/// up to 160 ms; docs/backends.md, "Redirects and routing"), and none
/// starts once the waits add up to the timeout.
fn most_attempts(timeout: Duration, first_unwaited: usize) -> usize {
    let (mut waited, mut wait) = (Duration::ZERO, Duration::from_millis(10));
    let mut attempts = first_unwaited;
    loop {
        waited += wait;
        if waited >= timeout {
            return attempts;
        }
        attempts += 1;
        wait = (wait * 2).min(Duration::from_millis(160));
    }
}

/// A `MOVED` sends the command to the node it names, and moves the slot in
/// the client's map: the slot's later decisions go to that node at once,
/// never to the old one again, and count on from where the old node left
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_is_decided_on_its_new_node_from_then_on() {
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, TIMEOUT, "moved").await;
    let (key, slot) = keys_of_node(&cluster, &limiter, "moved", 0, 1).remove(0);
    assert_eq!(admitted(&limiter, &key, 1).await, 1);

    cluster.assign(slot, 1);
    assert_eq!(admitted(&limiter, &key, LIMIT + 1).await, LIMIT - 1);

    let old = decisions_for(cluster.node(0), slot);
    assert_eq!(old.len(), 2, "{old:#?}");
    assert_eq!(old[0].answer, Answer::Served);
    assert_eq!(
        old[1].answer,
        Answer::Refused(format!("MOVED {slot} {}", cluster.node(1).address()))
    );
    let new = decisions_for(cluster.node(1), slot);
    assert_eq!(new.len(), (LIMIT + 1) as usize, "{new:#?}");
    assert_eq!(answered(&new, is_served), new.len(), "{new:#?}");
    assert!(new.iter().all(|s| !s.after_asking), "{new:#?}");
    assert!(stored(&limiter, &key).await, "{key}");
}

/// An `ASK` sends `ASKING` and the command to the node it names, on one
/// connection, once: the slot stays in the client's map where it was, so
/// the slot's next decisions go to the old node, and the asked node's
/// decision counts with theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_followed_once_after_asking_and_leaves_the_slot_map() {
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, TIMEOUT, "ask").await;
    let (key, slot) = keys_of_node(&cluster, &limiter, "ask", 0, 1).remove(0);
    let (source, target) = (cluster.node(0), cluster.node(1));
    source.refuse(1, format!("ASK {slot} {}", target.address()));

    assert_eq!(admitted(&limiter, &key, LIMIT + 2).await, LIMIT);

    let asked = target.seen();
    let askings: Vec<usize> = (0..asked.len())
        .filter(|&i| asked[i].is("ASKING"))
        .collect();
    assert_eq!(askings.len(), 1, "one ASKING: {asked:#?}");
    let after = asked[askings[0] + 1..]
        .iter()
        .find(|s| s.connection == asked[askings[0]].connection)
        .expect("a command after ASKING on its connection");
    assert!(
        after.is("FCALL") && after.slot == Some(slot) && after.after_asking,
        "{after:#?}"
    );
    assert_eq!(after.answer, Answer::Served);
    let on_target = decisions_for(target, slot);
    assert_eq!(on_target.len(), 1, "{on_target:#?}");

    let on_source = decisions_for(source, slot);
    assert_eq!(on_source.len(), (LIMIT + 2) as usize, "{on_source:#?}");
    assert_eq!(answered(&on_source, refused_with("ASK ")), 1);
    assert!(refused_with("ASK ")(&on_source[0].answer), "{on_source:#?}");
    assert_eq!(answered(&on_source, is_served), (LIMIT + 1) as usize);
}

/// An `ASK` to a node the slot map does not name (a new primary, importing
/// its first slot): the client connects to it and loads the limiter's
/// library there before its first decision, which follows `ASKING`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_to_a_node_first_met_loads_the_library_there_first() {
    let cluster = fake_cluster_of(3).await;
    // Node 2 serves no slot: the client connects to it only when asked.
    for slot in 0..limiter_test::redis_cluster::SLOTS {
        if cluster.owner(slot) == 2 {
            cluster.assign(slot, 0);
        }
    }
    let limiter = fake_limiter(&cluster, TIMEOUT, "ask-new-node").await;
    let (key, slot) = keys_of_node(&cluster, &limiter, "ask-new-node", 0, 1).remove(0);
    let new = cluster.node(2);
    assert!(new.seen().is_empty(), "{:#?}", new.seen());
    cluster
        .node(0)
        .refuse(1, format!("ASK {slot} {}", new.address()));

    assert_eq!(admitted(&limiter, &key, LIMIT + 1).await, LIMIT);

    let seen = new.seen();
    let decision = seen
        .iter()
        .position(|s| s.is("FCALL"))
        .expect("a decision on the new node");
    assert!(seen[decision].after_asking, "{seen:#?}");
    assert_eq!(seen[decision].answer, Answer::Served);
    let loaded_before = seen[..decision].iter().any(|s| {
        s.connection == seen[decision].connection
            && s.is("FUNCTION")
            && s.args
                .get(1)
                .is_some_and(|sub| sub.eq_ignore_ascii_case("LOAD"))
            && s.answer == Answer::Served
    });
    assert!(
        loaded_before,
        "no FUNCTION LOAD before the decision: {seen:#?}"
    );
    assert_eq!(new.keyed().len(), 1, "{seen:#?}");
}

/// A node that does not know its peers' host names (Redis's
/// `cluster-preferred-endpoint-type unknown-endpoint`) redirects to an
/// empty host, `:PORT`: the host the client reached that node on, with the
/// port named. A `MOVED` and an `ASK` so are followed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_an_empty_host_goes_to_the_host_of_the_node_that_sent_it() {
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, TIMEOUT, "empty-host").await;
    let keys = keys_of_node(&cluster, &limiter, "empty-host", 0, 2);
    let (source, target) = (cluster.node(0), cluster.node(1));
    let ((asked, asked_slot), (moved, moved_slot)) = (&keys[0], &keys[1]);
    source.refuse(1, format!("ASK {asked_slot} :{}", target.port()));
    assert_eq!(admitted(&limiter, asked, LIMIT + 1).await, LIMIT);
    cluster.assign(*moved_slot, 1);
    source.refuse(1, format!("MOVED {moved_slot} :{}", target.port()));
    assert_eq!(admitted(&limiter, moved, LIMIT + 1).await, LIMIT);

    let on_target = |slot: u16| answered(&decisions_for(target, slot), is_served);
    assert_eq!(on_target(*asked_slot), 1);
    assert_eq!(on_target(*moved_slot), (LIMIT + 1) as usize);
    assert_eq!(answered(&decisions_for(source, *moved_slot), is_served), 0);
}

/// `TRYAGAIN` is waited out and the command sent again to the same node,
/// as often as the node answers it, and then decided once: the retries
/// count nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tryagain_is_retried_on_the_node_until_it_clears() {
    const REFUSALS: usize = 4;
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, TIMEOUT, "tryagain").await;
    let (key, slot) = keys_of_node(&cluster, &limiter, "tryagain", 0, 1).remove(0);
    let node = cluster.node(0);
    node.refuse(
        REFUSALS,
        "TRYAGAIN Multiple keys request during rehashing of slot",
    );

    assert_eq!(admitted(&limiter, &key, LIMIT + 2).await, LIMIT);

    let seen = decisions_for(node, slot);
    assert_eq!(seen.len(), REFUSALS + (LIMIT + 2) as usize, "{seen:#?}");
    assert!(
        seen[..REFUSALS]
            .iter()
            .all(|s| refused_with("TRYAGAIN")(&s.answer)),
        "{seen:#?}"
    );
    assert_eq!(answered(&seen[REFUSALS..], is_served), (LIMIT + 2) as usize);
    assert!(cluster.node(1).keyed().is_empty());
}

/// `TRYAGAIN` on one node and `CLUSTERDOWN` on the other, without end:
/// each command is retried with the documented backoff until its command
/// timeout, then fails as a timeout naming the cluster's last answer,
/// having made no more attempts than the backoff allows. A `TRYAGAIN`
/// reaches its node's keys, a `CLUSTERDOWN` every key. Nothing reached
/// the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_tryagain_and_clusterdown_fail_as_timeouts_after_bounded_retries() {
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, SHORT_TIMEOUT, "endless").await;
    let refusals = [
        (
            "TRYAGAIN Multiple keys request during rehashing of slot",
            FailureReach::Node,
        ),
        ("CLUSTERDOWN The cluster is down", FailureReach::Backend),
    ];
    for (node, (refusal, _)) in refusals.iter().enumerate() {
        cluster.node(node).refuse_always(*refusal);
    }
    for (node, (refusal, reach)) in refusals.into_iter().enumerate() {
        let (key, slot) = keys_of_node(&cluster, &limiter, "endless", node, 1).remove(0);
        let error = tokio::time::timeout(HUNG, limiter.acquire(key.as_bytes(), 1))
            .await
            .expect("the command timeout ends the retries")
            .expect_err("no node decides");
        assert_eq!(common::backend_kind(&error), BackendErrorKind::Timeout);
        assert_eq!(error.reach(), Some(reach), "{refusal}");
        let told = chain(&error);
        let code = refusal.split(' ').next().unwrap().to_lowercase();
        assert!(
            told.contains("retries included") && told.to_lowercase().contains(&code),
            "{told}"
        );
        let attempts = decisions_for(cluster.node(node), slot);
        let most = most_attempts(SHORT_TIMEOUT, 1);
        eprintln!(
            "{code}: {} attempts within {SHORT_TIMEOUT:?}, at most {most}",
            attempts.len()
        );
        assert!(
            (2..=most).contains(&attempts.len()),
            "{code}: {} attempts, at most {most}",
            attempts.len()
        );
        assert_eq!(answered(&attempts, is_served), 0);
        assert!(!stored(&limiter, &key).await, "{key}");
    }
}

/// Two nodes that send a command to each other without end (`MOVED`
/// back and forth): after the first bounce every attempt waits as for
/// `TRYAGAIN`, and the command fails as a timeout once its command
/// timeout has passed, having gone back and forth no more often than the
/// backoff allows. Nothing reached the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_loop_fails_as_a_timeout_after_bounded_retries() {
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, SHORT_TIMEOUT, "redirect-loop").await;
    let (key, slot) = keys_of_node(&cluster, &limiter, "redirect-loop", 0, 1).remove(0);
    let (a, b) = (cluster.node(0), cluster.node(1));
    a.refuse_always(format!("MOVED {slot} {}", b.address()));
    b.refuse_always(format!("MOVED {slot} {}", a.address()));

    let error = tokio::time::timeout(HUNG, limiter.acquire(key.as_bytes(), 1))
        .await
        .expect("the command timeout ends the redirects")
        .expect_err("no node decides");
    assert_eq!(common::backend_kind(&error), BackendErrorKind::Timeout);
    assert_eq!(error.reach(), Some(FailureReach::Node));
    let told = chain(&error);
    assert!(
        told.contains("retries included") && told.to_lowercase().contains("moved"),
        "{told}"
    );
    let (on_a, on_b) = (decisions_for(a, slot).len(), decisions_for(b, slot).len());
    // One attempt on each node, then one after each wait, alternating.
    let most = most_attempts(SHORT_TIMEOUT, 2);
    eprintln!("{on_a} + {on_b} attempts within {SHORT_TIMEOUT:?}, at most {most}");
    assert!(
        on_a >= 2 && on_b >= 1 && on_a + on_b <= most && on_a.abs_diff(on_b) <= 1,
        "{on_a} attempts on the first node, {on_b} on the second, at most {most}"
    );
    assert!(!stored(&limiter, &key).await, "{key}");
}

/// Decisions on keys of several slots of one node share calls (a batch
/// across slots, `batch.rs`), and every slot moves to the other node before
/// they are sent. The requests go round the keys, so a batch starts with a
/// key whose slot the client has not seen move yet: it meets the `MOVED`
/// itself, and follows it to the new node, which decides every request.
/// Each key admits exactly its limit, and the old node decides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_across_slots_follows_a_moved_to_the_new_node() {
    const KEYS: usize = 8;
    let cluster = fake_cluster().await;
    let limiter = fake_limiter(&cluster, TIMEOUT, "batch-moved").await;
    let keys = keys_of_node(&cluster, &limiter, "batch-moved", 0, KEYS);
    for (_, slot) in &keys {
        cluster.assign(*slot, 1);
    }

    let limiter = &limiter;
    let acquires = (0..LIMIT + 2).flat_map(|_| {
        keys.iter()
            .map(|(key, _)| async move { (key, limiter.acquire(key.as_bytes(), 1).await) })
    });
    let mut admitted: BTreeMap<&String, u64> = BTreeMap::new();
    for (key, decision) in futures_util::future::join_all(acquires).await {
        let decision = decision.unwrap_or_else(|e| panic!("acquire({key}): {}", chain(&e)));
        *admitted.entry(key).or_default() += u64::from(decision.allowed);
    }
    let requests = KEYS * (LIMIT + 2) as usize;
    assert_eq!(admitted.len(), KEYS);
    assert!(admitted.values().all(|&n| n == LIMIT), "{admitted:?}");

    // A call across slots names the keys of several users.
    let across = |seen: &&Seen| {
        let users = keys.iter().filter(|(key, _)| {
            let tag = format!("{{{key}}}");
            seen.args.iter().any(|arg| arg.contains(&tag))
        });
        users.count() > 1
    };
    let (old, new) = (cluster.node(0).keyed(), cluster.node(1).keyed());
    assert_eq!(answered(&old, is_served), 0, "{old:#?}");
    assert!(
        old.iter()
            .filter(across)
            .any(|s| refused_with("MOVED")(&s.answer)),
        "no call across slots met the MOVED: {old:#?}"
    );
    assert_eq!(answered(&new, is_served), new.len(), "{new:#?}");
    assert!(new.iter().any(|s| across(&s)), "{new:#?}");
    assert!(
        new.len() < requests,
        "{} calls for {requests} requests",
        new.len()
    );
}
