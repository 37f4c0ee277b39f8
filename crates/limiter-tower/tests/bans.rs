//! Bans over HTTP, kept in memory and in a real `redis-server` (one test
//! body for both): a ban refuses before the limiter counts, with 403 (or
//! 429) and `Retry-After`, until it is lifted or ends; a ban in Redis holds
//! on every instance; and a key denied too often earns one. In memory a
//! ban's time runs on a manual clock, moved by the test; in Redis on the
//! server's, so what is left of a Redis ban is checked within a margin
//! for the time a loaded host takes between two steps.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use limiter_core::{Limiter, ManualClock};
use limiter_tower::ban::{BanList, Penalty};
use limiter_tower::key::bytes_from_text;
use limiter_tower::LimiterLayer;
use support::{
    client, fresh_prefix, get, get_with, limiter, redis_backend, redis_server, serve, Backend,
    Reply,
};

/// A request time far from the epoch, in µs.
const T0: u64 = 1_700_000_000_000_000;

/// The key of 127.0.0.1, where every request of these tests comes from.
fn me() -> Vec<u8> {
    bytes_from_text("ip:127.0.0.1")
}

/// Seconds a loaded host may take between banning and reading what is
/// left of a Redis ban; steps take milliseconds.
const SLACK_S: u64 = 30;

/// An empty ban list on `backend`: in memory on `clock`, in Redis under
/// `prefix`.
fn ban_list(backend: Backend, prefix: &str, clock: &ManualClock) -> BanList {
    match backend {
        Backend::Memory => BanList::memory_with_clock(clock.clone()),
        Backend::Redis => BanList::redis(&redis_backend(&redis_server().url()), prefix),
    }
}

/// Whether `seconds` left (rounded up) fit a ban of `ban_s` seconds
/// read at once: exactly in memory, whose clock has not moved; within
/// [`SLACK_S`] in Redis.
fn left_of(backend: Backend, ban_s: u64, seconds: u64) -> bool {
    match backend {
        Backend::Memory => seconds == ban_s,
        Backend::Redis => (ban_s.saturating_sub(SLACK_S).max(1)..=ban_s).contains(&seconds),
    }
}

/// `duration` in whole seconds, rounded up, as `Retry-After` gives it.
fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// Lets `duration` pass for a ban on `backend`: the manual clock moves
/// for memory, the test sleeps for Redis.
async fn pass(backend: Backend, clock: &ManualClock, duration: Duration) {
    match backend {
        Backend::Memory => clock.advance(duration),
        Backend::Redis => tokio::time::sleep(duration).await,
    }
}

/// A layer of 100 per 10 s on memory that checks `bans`.
async fn layer_with(bans: &BanList) -> LimiterLayer {
    let clock = ManualClock::new(T0);
    LimiterLayer::from_arc(limiter(Backend::Memory, "sliding-log:100/10s", &clock).await)
        .bans(bans.clone())
}

async fn a_ban_refuses_uncounted_until_lifted(backend: Backend) {
    let clock = ManualClock::new(T0);
    let bans = ban_list(backend, &fresh_prefix("ban"), &clock);
    let addr = serve(layer_with(&bans).await).await;
    let client = client();
    assert_eq!(get(&client, addr).await.number("x-ratelimit-remaining"), 99);

    bans.ban(&me(), Duration::from_secs(90)).await.unwrap();
    let left = bans.banned_for(&me()).await.unwrap().unwrap();
    assert!(
        left_of(backend, 90, ceil_secs(left)),
        "{backend:?} {left:?}"
    );
    let json = [("accept", "application/json")];
    for _ in 0..3 {
        let refused = get_with(&client, addr, &json).await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{backend:?} {refused:?}"
        );
        let retry_after = refused.number("retry-after");
        assert!(left_of(backend, 90, retry_after), "{backend:?} {refused:?}");
        assert!(refused
            .body
            .starts_with(r#"{"error":"banned","retry_after_ms":"#));
        assert_eq!(refused.header("x-ratelimit-remaining"), None);
    }
    let text = get(&client, addr).await;
    let retry_after = text.number("retry-after");
    assert!(left_of(backend, 90, retry_after), "{backend:?} {text:?}");
    assert_eq!(
        text.body,
        format!("Forbidden: banned; retry after {retry_after} s\n")
    );

    bans.unban(&me()).await.unwrap();
    assert_eq!(bans.banned_for(&me()).await.unwrap(), None);
    let back = get(&client, addr).await;
    assert_eq!(back.status, StatusCode::OK);
    // The refused requests were not counted.
    assert_eq!(back.number("x-ratelimit-remaining"), 98);
}

async fn a_ban_ends_by_itself(backend: Backend) {
    let clock = ManualClock::new(T0);
    let bans = ban_list(backend, &fresh_prefix("ban"), &clock);
    let addr = serve(layer_with(&bans).await).await;
    let client = client();
    // Long enough in Redis for the request to come before it ends on a
    // loaded host: milliseconds after the ban.
    let ban = Duration::from_millis(4_800);
    bans.ban(&me(), ban).await.unwrap();
    let refused = get(&client, addr).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // 4.8 s, less the time taken since (none in memory), rounded up.
    assert!(
        left_of(backend, 5, refused.number("retry-after")),
        "{backend:?} {refused:?}"
    );
    pass(backend, &clock, ban + Duration::from_millis(100)).await;
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    assert_eq!(bans.banned_for(&me()).await.unwrap(), None);
}

#[tokio::test]
async fn a_ban_in_memory_refuses_uncounted_until_lifted() {
    a_ban_refuses_uncounted_until_lifted(Backend::Memory).await;
}

#[tokio::test]
async fn a_ban_in_redis_refuses_uncounted_until_lifted() {
    a_ban_refuses_uncounted_until_lifted(Backend::Redis).await;
}

/// A ban of a 1 MB key (kept under its digest) is that key's alone.
async fn a_long_keys_ban_is_its_own(backend: Backend) {
    let clock = ManualClock::new(T0);
    let bans = ban_list(backend, &fresh_prefix("long"), &clock);
    let long = [b"header:".as_slice(), &[b'k'; 1 << 20]].concat();
    let (other, short) = ([long.as_slice(), b"x"].concat(), b"header:k");
    bans.ban(&long, Duration::from_secs(60)).await.unwrap();
    let left = bans.banned_for(&long).await.unwrap().unwrap();
    assert!(
        left_of(backend, 60, ceil_secs(left)),
        "{backend:?} {left:?}"
    );
    assert_eq!(bans.banned_for(&other).await.unwrap(), None, "{backend:?}");
    assert_eq!(bans.banned_for(short).await.unwrap(), None, "{backend:?}");
    bans.unban(&long).await.unwrap();
    assert_eq!(bans.banned_for(&long).await.unwrap(), None, "{backend:?}");
}

#[tokio::test]
async fn a_long_keys_ban_in_memory_is_its_own() {
    a_long_keys_ban_is_its_own(Backend::Memory).await;
}

#[tokio::test]
async fn a_long_keys_ban_in_redis_is_its_own() {
    a_long_keys_ban_is_its_own(Backend::Redis).await;
}

/// A ban given an address's key bytes is named in Redis by the key's
/// text form, as an administrator reads and writes it with `redis-cli`.
#[tokio::test]
async fn a_ban_in_redis_is_named_by_its_keys_text_form() {
    let prefix = fresh_prefix("named");
    let backend = redis_backend(&redis_server().url());
    let bans = BanList::redis(&backend, prefix.as_str());
    let by_hand = format!("{prefix}:ip:127.0.0.1");
    let ttl_ms = || async {
        backend
            .command::<i64>(redis::cmd("PTTL").arg(&by_hand))
            .await
            .unwrap()
    };
    bans.ban(&me(), Duration::from_secs(60)).await.unwrap();
    assert!((1..=60_000).contains(&ttl_ms().await), "{by_hand}");
    backend
        .command::<()>(redis::cmd("DEL").arg(&by_hand))
        .await
        .unwrap();
    assert_eq!(bans.banned_for(&me()).await.unwrap(), None);
    // Set by hand, without a TTL: a ban until deleted, read as one day.
    backend
        .command::<()>(redis::cmd("SET").arg(&by_hand).arg(1))
        .await
        .unwrap();
    assert_eq!(
        bans.banned_for(&me()).await.unwrap(),
        Some(Duration::from_secs(86_400))
    );
    bans.unban(&me()).await.unwrap();
    assert_eq!(ttl_ms().await, -2);
}

/// A ban of 100,000 days: `Retry-After` says 2^31 - 1 seconds, the most
/// RFC 9111 lets a recipient read, never more.
#[tokio::test]
async fn a_ban_longer_than_two_to_the_thirty_one_seconds_says_two_to_the_thirty_one_less_one() {
    let bans = BanList::memory();
    let addr = serve(layer_with(&bans).await).await;
    bans.ban(&me(), Duration::from_secs(100_000 * 86_400))
        .await
        .unwrap();
    let refused = get(&client(), addr).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.number("retry-after"), 2_147_483_647);
    assert_eq!(
        refused.body,
        "Forbidden: banned; retry after 2147483647 s\n"
    );
}

#[tokio::test]
async fn a_ban_in_memory_ends_by_itself() {
    a_ban_ends_by_itself(Backend::Memory).await;
}

#[tokio::test]
async fn a_ban_in_redis_ends_by_itself() {
    a_ban_ends_by_itself(Backend::Redis).await;
}

/// A ban "for ever" (`Duration::MAX`) holds, on either store: Redis
/// refuses an expiry that far, so it is capped, not an error.
async fn a_ban_for_ever_holds(backend: Backend) {
    let bans = ban_list(backend, &fresh_prefix("for-ever"), &ManualClock::new(T0));
    bans.ban(&me(), Duration::MAX).await.unwrap();
    let left = bans.banned_for(&me()).await.unwrap().expect("banned");
    assert!(left > Duration::from_secs(1 << 40), "{backend:?}: {left:?}");
}

#[tokio::test]
async fn a_ban_for_ever_in_memory_holds() {
    a_ban_for_ever_holds(Backend::Memory).await;
}

#[tokio::test]
async fn a_ban_for_ever_in_redis_holds() {
    a_ban_for_ever_holds(Backend::Redis).await;
}

#[tokio::test]
async fn a_ban_can_answer_429() {
    // The ban's time stands still: its 100 ms are all left when read.
    let bans = BanList::memory_with_clock(ManualClock::new(T0));
    let addr = serve(
        layer_with(&bans)
            .await
            .ban_status(StatusCode::TOO_MANY_REQUESTS),
    )
    .await;
    bans.ban(&me(), Duration::from_millis(100)).await.unwrap();
    let refused = get(&client(), addr).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // Never 0 while banned.
    assert_eq!(refused.number("retry-after"), 1);
    assert_eq!(refused.body, "Too Many Requests: banned; retry after 1 s\n");
}

#[tokio::test]
async fn a_ban_in_redis_holds_on_every_instance() {
    let prefix = fresh_prefix("shared-ban");
    // Two instances: each its own backend, ban list and server.
    let clock = ManualClock::new(T0);
    let (one, two) = (
        ban_list(Backend::Redis, &prefix, &clock),
        ban_list(Backend::Redis, &prefix, &clock),
    );
    let first = serve(layer_with(&one).await).await;
    let second = serve(layer_with(&two).await).await;
    let client = client();
    one.ban(&me(), Duration::from_secs(60)).await.unwrap();
    for addr in [first, second] {
        assert_eq!(get(&client, addr).await.status, StatusCode::FORBIDDEN);
    }
    // Lifted on the second, lifted on the first.
    two.unban(&me()).await.unwrap();
    assert_eq!(get(&client, first).await.status, StatusCode::OK);
    // And an expiry seen by both: long enough for the request to come
    // before it on a loaded host, milliseconds after the ban.
    let ban = Duration::from_secs(5);
    two.ban(&me(), ban).await.unwrap();
    assert_eq!(get(&client, first).await.status, StatusCode::FORBIDDEN);
    tokio::time::sleep(ban + Duration::from_millis(100)).await;
    for addr in [first, second] {
        assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    }
}

/// One request a minute per key (on memory), and a ban of 10 minutes in
/// `bans` for the third denial within a minute counted by `denials`.
async fn penalized(bans: BanList, denials: Arc<dyn Limiter>, clock: &ManualClock) -> LimiterLayer {
    LimiterLayer::from_arc(limiter(Backend::Memory, "fixed-window:1/1m", clock).await)
        .bans(bans)
        .penalty(Penalty::from_arc(denials, Duration::from_secs(600)))
}

/// Five requests from 127.0.0.1 to a [`penalized`] layer on `bans` that
/// bans the third denial within a minute: the answers, and their statuses.
async fn five_penalized_requests(bans: BanList) -> (Vec<Reply>, Vec<u16>) {
    let clock = ManualClock::new(T0);
    let denials = limiter(Backend::Memory, "sliding-log:3/1m", &clock).await;
    let addr = serve(penalized(bans, denials, &clock).await).await;
    let client = client();
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(get(&client, addr).await);
    }
    let statuses = answers
        .iter()
        .map(|answer| answer.status.as_u16())
        .collect();
    (answers, statuses)
}

#[tokio::test]
async fn a_key_denied_three_times_in_a_minute_is_banned() {
    // The ban's clock does not move: its 600 s are all left.
    let bans = BanList::memory_with_clock(ManualClock::new(T0));
    let (answers, statuses) = five_penalized_requests(bans.clone()).await;
    // Admitted, denied twice, then the third denial earns the ban and is
    // answered as banned (with the ban's Retry-After, not the limiter's
    // minute), as is every request after it.
    assert_eq!(statuses, [200, 429, 429, 403, 403]);
    assert!(answers[2].number("retry-after") <= 60);
    assert_eq!(answers[3].number("retry-after"), 600);
    assert_eq!(
        bans.banned_for(&me()).await.unwrap(),
        Some(Duration::from_secs(600))
    );
}

#[tokio::test]
async fn a_key_denied_too_often_while_the_ban_list_is_full_is_still_denied() {
    let bans = BanList::memory_with_max_bans(1);
    bans.ban(&bytes_from_text("ip:192.0.2.1"), Duration::from_secs(3_600))
        .await
        .unwrap();
    let (answers, statuses) = five_penalized_requests(bans.clone()).await;
    // The third denial earns a ban the full list cannot hold: the key is
    // denied by the limiter alone, and the ban in force stays.
    assert_eq!(statuses, [200, 429, 429, 429, 429]);
    assert!(answers[4].number("retry-after") <= 60, "{:?}", answers[4]);
    assert_eq!(bans.banned_for(&me()).await.unwrap(), None);
    assert!(bans
        .banned_for(&bytes_from_text("ip:192.0.2.1"))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_penalty_in_redis_counts_the_denials_of_every_instance() {
    let clock = ManualClock::new(T0);
    let prefix = fresh_prefix("penalty");
    // The denial counter's keys must be shared too: one limiter for both.
    let denials = limiter(Backend::Redis, "sliding-log:3/1m", &clock).await;
    let instance = || {
        penalized(
            ban_list(Backend::Redis, &prefix, &clock),
            Arc::clone(&denials),
            &clock,
        )
    };
    let first = serve(instance().await).await;
    let second = serve(instance().await).await;
    let client = client();
    // Each instance admits one and denies the next; the third denial, on
    // the first instance, bans the key on both (and is answered as banned).
    let mut statuses = Vec::new();
    for addr in [first, first, second, second, first, second] {
        statuses.push(get(&client, addr).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 429, 200, 429, 403, 403]);
    assert_eq!(get(&client, first).await.status, StatusCode::FORBIDDEN);
}
