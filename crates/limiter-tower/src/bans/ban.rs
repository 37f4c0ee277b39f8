//! [`BanList`]: keys refused outright until their ban ends, checked before
//! the limiter; and [`Penalty`]: the ban a key earns by being denied too
//! often.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use limiter_core::backend::{ClockSource, InlineKey, StoredKey};
use limiter_core::{Clock, Error, KeyLimitReached, Limiter};

/// The longest key a ban is kept under as it is: a longer one (a client's
/// 200 KB header, say) is kept under its digest ([`StoredKey`]: the
/// in-process stores' one form, a mark byte and its SHA-256), so a ban
/// costs a bounded size, in process and in Redis, however long the key.
const MAX_BAN_KEY_BYTES: usize = 256;

/// A banned key as the in-process list holds it: short ones inline.
type BanKey = InlineKey<22>;

/// The key `key`'s ban is kept under: `key` itself up to
/// [`MAX_BAN_KEY_BYTES`], else its digest.
fn ban_key(key: &[u8]) -> StoredKey<'_> {
    StoredKey::of(key, MAX_BAN_KEY_BYTES)
}

/// Where a [`BanList`] keeps its bans.
enum Store {
    /// In this process: a ban holds on this instance only.
    Memory(MemoryBans),
    /// A Redis key per ban, `{prefix}:{key}` (the key's text form), with
    /// the ban's TTL: every instance on that Redis sees it, and Redis ends
    /// it.
    #[cfg(feature = "redis")]
    Redis {
        backend: limiter_redis::RedisBackend,
        prefix: String,
    },
}

/// In-process bans: each key's end, in µs of `clock`, under the key's
/// bytes (an address's key is not formatted to be looked up); at most
/// `max_bans` of them, so that clients who earn bans under ever new keys
/// cannot grow the process.
struct MemoryBans {
    clock: ClockSource,
    max_bans: usize,
    bans: Mutex<Bans>,
}

#[derive(Default)]
struct Bans {
    until_us: HashMap<BanKey, u64>,
    /// Expired bans are dropped when looked up, and all at once when the
    /// map has grown to this size since the last sweep.
    sweep_at: usize,
    /// No ban held ends before this (µs): while it is ahead, a full map
    /// has nothing to sweep, and a new key is refused without a scan.
    first_end_us: u64,
}

impl Bans {
    /// Drops the bans ended by `now`.
    fn sweep(&mut self, now: u64) {
        self.until_us.retain(|_, until| *until > now);
        self.sweep_at = self.until_us.len() * 2;
        self.first_end_us = self.until_us.values().copied().min().unwrap_or(u64::MAX);
    }
}

/// The smallest map size worth a sweep.
const MIN_SWEEP: usize = 64;

impl MemoryBans {
    fn lock(&self) -> MutexGuard<'_, Bans> {
        self.bans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bans `key` until `duration` from now (a zero one lifts its ban). A
    /// new key while `max_bans` bans are held, none of them ended, is
    /// refused ([`KeyLimitReached`]); a key already banned is banned anew.
    fn ban(&self, key: &[u8], duration: Duration) -> Result<(), Error> {
        let now = self.clock.now_us();
        let mut bans = self.lock();
        if duration.is_zero() {
            bans.until_us.remove(key);
            return Ok(());
        }
        let until = now.saturating_add(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX));
        if let Some(held) = bans.until_us.get_mut(key) {
            *held = until;
            bans.first_end_us = bans.first_end_us.min(until);
            return Ok(());
        }
        if bans.until_us.len() >= self.max_bans && bans.first_end_us <= now {
            bans.sweep(now);
        }
        if bans.until_us.len() >= self.max_bans {
            return Err(Error::from(KeyLimitReached::new(self.max_bans)));
        }
        bans.until_us.insert(BanKey::new(key), until);
        bans.first_end_us = bans.first_end_us.min(until);
        if bans.until_us.len() >= bans.sweep_at.max(MIN_SWEEP) {
            bans.sweep(now);
        }
        Ok(())
    }

    fn banned_for(&self, key: &[u8]) -> Option<Duration> {
        let now = self.clock.now_us();
        let mut bans = self.lock();
        match bans.until_us.get(key) {
            Some(&until) if until > now => Some(Duration::from_micros(until - now)),
            Some(_) => {
                bans.until_us.remove(key);
                None
            }
            None => None,
        }
    }
}

/// Keys refused outright until their ban ends: checked by a
/// [`LimiterLayer`](crate::LimiterLayer) before its limiter (a banned
/// request is not counted), answered 403 (or 429, see
/// [`ban_status`](crate::LimiterLayer::ban_status)) with `Retry-After`.
///
/// A key is a byte string, the layer's whole key as its limiter is given
/// it, kind prefix included: `b"header:<api key>"`, or for an address its
/// key bytes, which [`key::bytes_from_text`](crate::key::bytes_from_text)
/// makes of its text form `ip:203.0.113.7` (see
/// [`KeyExtractor`](crate::KeyExtractor)). In process, a ban is kept
/// under those bytes, so checking a request formats nothing; in Redis,
/// under the key's text form. A key longer than 256 bytes is kept under
/// its SHA-256, so a ban costs a bounded size however long a client's
/// key. Clones share the bans: keep one to call [`ban`](Self::ban) and
/// [`unban`](Self::unban) from an admin endpoint while layers check it.
///
/// ```
/// use std::time::Duration;
/// use limiter_tower::ban::BanList;
/// use limiter_tower::key::bytes_from_text;
///
/// # async fn run() -> Result<(), limiter_core::Error> {
/// let bans = BanList::memory();
/// let address = bytes_from_text("ip:203.0.113.7");
/// bans.ban(&address, Duration::from_secs(600)).await?;
/// assert!(bans.banned_for(&address).await?.is_some());
/// bans.unban(&address).await?;
/// bans.ban(b"header:k-42", Duration::from_secs(60)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BanList {
    store: Arc<Store>,
}

impl BanList {
    /// The most bans [`memory`](Self::memory) holds: 100,000, as a
    /// [`Config`](crate::Config) policy's default `max_keys`.
    pub const DEFAULT_MAX_BANS: usize = 100_000;

    /// Bans kept in this process: they hold on this instance only, and
    /// are gone when it exits. A ban lasts its duration even if the wall
    /// clock is stepped meanwhile (NTP, a manual set): its time is the
    /// [`AnchoredClock`](limiter_core::AnchoredClock)'s, the system clock
    /// read once and advanced by the monotonic counter.
    ///
    /// At most [`DEFAULT_MAX_BANS`](Self::DEFAULT_MAX_BANS) bans are held,
    /// each under at most 256 bytes of key: a new key's ban while that
    /// many are in force is refused with [`Error::is_key_limit`], and the
    /// bans in force stay (a key denied too often is then still denied
    /// by the limiter, not banned).
    pub fn memory() -> Self {
        Self::memory_with_max_bans(Self::DEFAULT_MAX_BANS)
    }

    /// [`memory`](Self::memory) holding at most `max_bans` bans.
    pub fn memory_with_max_bans(max_bans: usize) -> Self {
        Self::memory_on(ClockSource::default(), max_bans)
    }

    /// [`memory`](Self::memory) on `clock` (a
    /// [`ManualClock`](limiter_core::ManualClock) in tests).
    pub fn memory_with_clock(clock: impl Clock + 'static) -> Self {
        Self::memory_on(ClockSource::Custom(Box::new(clock)), Self::DEFAULT_MAX_BANS)
    }

    fn memory_on(clock: ClockSource, max_bans: usize) -> Self {
        Self::of(Store::Memory(MemoryBans {
            clock,
            max_bans,
            bans: Mutex::new(Bans {
                first_end_us: u64::MAX,
                ..Bans::default()
            }),
        }))
    }

    /// Bans kept in Redis, on `backend`'s shared connections: the ban of
    /// key `k` is the Redis key `{prefix}:{k}`, `k` in its text form
    /// (`bans:ip:203.0.113.7`; `k` longer than 256 bytes as its digest,
    /// the byte 0xFF and its SHA-256), which expires when the ban
    /// ends (Redis's clock decides). Every instance on that Redis sees every
    /// ban. A failed check (Redis down) bans no one: see
    /// [`LimiterLayer::bans`](crate::LimiterLayer::bans).
    ///
    /// Available with the `redis` feature.
    #[cfg(feature = "redis")]
    pub fn redis(backend: &limiter_redis::RedisBackend, prefix: impl Into<String>) -> Self {
        Self::of(Store::Redis {
            backend: backend.clone(),
            prefix: prefix.into(),
        })
    }

    fn of(store: Store) -> Self {
        Self {
            store: Arc::new(store),
        }
    }

    /// Bans `key` (as the limiter is given it: see [`BanList`]) for
    /// `duration` (on Redis rounded up to a whole millisecond), replacing
    /// any ban it had; a zero `duration` lifts the ban.
    ///
    /// # Errors
    ///
    /// In process, a key not banned yet while the list holds its most
    /// bans, none ended ([`Error::is_key_limit`]); on Redis, the
    /// backend's failure.
    pub async fn ban(&self, key: &[u8], duration: Duration) -> Result<(), Error> {
        match &*self.store {
            Store::Memory(bans) => bans.ban(ban_key(key).as_bytes(), duration),
            #[cfg(feature = "redis")]
            Store::Redis { backend, prefix } => {
                if duration.is_zero() {
                    return self.unban(key).await;
                }
                // Redis refuses an expiry past i64 ms from now: a longer
                // ban (Duration::MAX, "for ever") is 2^62 ms, about 146
                // million years, as the memory store's saturated one.
                let millis = u64::try_from(duration.as_nanos().div_ceil(1_000_000))
                    .unwrap_or(u64::MAX)
                    .min(1 << 62);
                let mut set = redis::cmd("SET");
                set.arg(redis_key(prefix, key)).arg(1).arg("PX").arg(millis);
                backend.command::<()>(&set).await
            }
        }
    }

    /// Lifts `key`'s ban, if it has one.
    pub async fn unban(&self, key: &[u8]) -> Result<(), Error> {
        match &*self.store {
            Store::Memory(bans) => bans.ban(ban_key(key).as_bytes(), Duration::ZERO),
            #[cfg(feature = "redis")]
            Store::Redis { backend, prefix } => {
                backend
                    .command::<()>(redis::cmd("DEL").arg(redis_key(prefix, key)))
                    .await
            }
        }
    }

    /// How long `key` stays banned: `None` if it is not.
    ///
    /// A Redis key without a TTL (set by hand) is a ban until
    /// [`unban`](Self::unban)ned, reported as one day.
    pub async fn banned_for(&self, key: &[u8]) -> Result<Option<Duration>, Error> {
        match &*self.store {
            Store::Memory(bans) => Ok(bans.banned_for(ban_key(key).as_bytes())),
            #[cfg(feature = "redis")]
            Store::Redis { backend, prefix } => {
                let ttl_ms: i64 = backend
                    .command(redis::cmd("PTTL").arg(redis_key(prefix, key)))
                    .await?;
                Ok(match ttl_ms {
                    -2 => None,
                    ms if ms < 0 => Some(Duration::from_secs(24 * 60 * 60)),
                    ms => Some(Duration::from_millis(ms.unsigned_abs().max(1))),
                })
            }
        }
    }

    /// [`banned_for`](Self::banned_for), answered now if the bans are in
    /// process; `None` means ask `banned_for`.
    pub(crate) fn banned_for_now(&self, key: &[u8]) -> Option<Option<Duration>> {
        match &*self.store {
            Store::Memory(bans) => Some(bans.banned_for(ban_key(key).as_bytes())),
            #[cfg(feature = "redis")]
            Store::Redis { .. } => None,
        }
    }
}

/// The Redis key of `key`'s ban: `{prefix}:` and the ban key of its text
/// form, as an administrator writes it with `redis-cli`.
#[cfg(feature = "redis")]
fn redis_key(prefix: &str, key: &[u8]) -> Vec<u8> {
    let text = crate::client::key::text_from_bytes(key);
    let mut redis_key = Vec::with_capacity(prefix.len() + 1 + text.len());
    redis_key.extend_from_slice(prefix.as_bytes());
    redis_key.push(b':');
    redis_key.extend_from_slice(ban_key(text.as_bytes()).as_bytes());
    redis_key
}

impl fmt::Debug for BanList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.store {
            Store::Memory(bans) => f
                .debug_struct("BanList")
                .field("store", &"memory")
                .field("bans", &bans.lock().until_us.len())
                .finish(),
            #[cfg(feature = "redis")]
            Store::Redis { backend, prefix } => f
                .debug_struct("BanList")
                .field("store", &"redis")
                .field("url", &backend.url())
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// The ban a key earns by being denied too often: each denial by the
/// layer's limiter costs the key one unit of `counter` (under the key
/// `penalty:` and the key's bytes), and the denial that uses up `counter`'s limit bans the
/// key for `ban_for` in the layer's [`BanList`].
///
/// Give `counter` a sliding log (or a fixed window) of `N` per window:
/// `sliding-log:5/1m` bans a key on its fifth denial within a minute. On a
/// Redis limiter the count is shared by every instance, like the bans.
///
/// ```
/// use std::time::Duration;
/// use limiter_memory::MemoryLimiter;
/// use limiter_tower::ban::Penalty;
///
/// let five_a_minute = MemoryLimiter::new("sliding-log:5/1m".parse::<limiter_core::Policy>()?);
/// let penalty = Penalty::new(five_a_minute, Duration::from_secs(15 * 60));
/// # let _ = penalty;
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Penalty {
    counter: Arc<dyn Limiter>,
    ban_for: Duration,
}

impl Penalty {
    /// Bans a key for `ban_for` once its denials use up `counter`'s limit.
    pub fn new(counter: impl Limiter + 'static, ban_for: Duration) -> Self {
        Self::from_arc(Arc::new(counter), ban_for)
    }

    /// [`new`](Self::new) with a shared `Arc<dyn Limiter>`.
    pub fn from_arc(counter: Arc<dyn Limiter>, ban_for: Duration) -> Self {
        Self { counter, ban_for }
    }

    /// Counts a denial of `key`; bans it in `bans` if that was one too
    /// many. Answers whether it did. A degraded count (the counter's
    /// backend failing) bans no one.
    pub(crate) async fn punish(&self, bans: &BanList, key: &[u8]) -> Result<bool, Error> {
        let mut denial_key = Vec::with_capacity(8 + key.len());
        denial_key.extend_from_slice(b"penalty:");
        denial_key.extend_from_slice(key);
        let counted = match self.counter.acquire_now(&denial_key, 1) {
            Some(counted) => counted?,
            None => self.counter.acquire(&denial_key, 1).await?,
        };
        let earned = !counted.is_degraded() && (!counted.allowed || counted.remaining == 0);
        if earned {
            bans.ban(key, self.ban_for).await?;
        }
        Ok(earned)
    }

    /// How long an earned ban lasts.
    pub(crate) fn ban_for(&self) -> Duration {
        self.ban_for
    }
}

#[cfg(test)]
mod tests {
    use limiter_core::backend::{DIGEST_KEY_BYTES, DIGEST_MARK};
    use limiter_core::ManualClock;

    use super::*;

    #[test]
    fn a_long_keys_ban_is_kept_under_its_digest_and_is_its_own() {
        let clock = ManualClock::new(1_000_000);
        let bans = BanList::memory_with_clock(clock);
        let Store::Memory(memory) = &*bans.store else {
            unreachable!()
        };
        let long = [b"header:".as_slice(), &[b'k'; 1 << 20]].concat();
        let other = [long.as_slice(), b"x"].concat();
        let at_bound = [b'k'; MAX_BAN_KEY_BYTES];
        let day = Duration::from_secs(86_400);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            bans.ban(&long, day).await.unwrap();
            bans.ban(&at_bound, day).await.unwrap();
            assert_eq!(bans.banned_for(&long).await.unwrap(), Some(day));
            assert_eq!(bans.banned_for_now(&long), Some(Some(day)));
            assert_eq!(bans.banned_for(&other).await.unwrap(), None);
            let mut held: Vec<usize> = memory
                .lock()
                .until_us
                .keys()
                .map(|key| key.as_bytes().len())
                .collect();
            held.sort_unstable();
            assert_eq!(held, [DIGEST_KEY_BYTES, MAX_BAN_KEY_BYTES]);
            bans.unban(&long).await.unwrap();
            assert_eq!(bans.banned_for(&long).await.unwrap(), None);
        });
        assert_eq!(ban_key(b"ip:10.0.0.1").as_bytes(), b"ip:10.0.0.1");
        assert_eq!(ban_key(&long).as_bytes()[0], DIGEST_MARK);
    }

    #[test]
    fn memory_bans_end_and_sweep() {
        let clock = ManualClock::new(1_000_000);
        let bans = BanList::memory_with_clock(clock.clone());
        let Store::Memory(memory) = &*bans.store else {
            unreachable!()
        };
        memory.ban(b"a", Duration::from_millis(1_500)).unwrap();
        assert_eq!(
            bans.banned_for_now(b"a"),
            Some(Some(Duration::from_millis(1_500)))
        );
        clock.advance(Duration::from_millis(1_499));
        assert_eq!(
            bans.banned_for_now(b"a"),
            Some(Some(Duration::from_millis(1)))
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(bans.banned_for_now(b"a"), Some(None));
        // Many short bans never looked up again are swept by later bans.
        for i in 0..1_000 {
            memory
                .ban(format!("k{i}").as_bytes(), Duration::from_secs(1))
                .unwrap();
            clock.advance(Duration::from_millis(10));
        }
        assert!(memory.lock().until_us.len() <= 2 * 100 + MIN_SWEEP);
        memory.ban(b"k999", Duration::ZERO).unwrap();
        assert_eq!(bans.banned_for_now(b"k999"), Some(None));
    }

    #[test]
    fn a_full_memory_list_refuses_new_keys_keeps_its_bans_and_frees_ended_ones() {
        let clock = ManualClock::new(1_000_000);
        let bans = BanList::memory_on(ClockSource::Custom(Box::new(clock.clone())), 2);
        let Store::Memory(memory) = &*bans.store else {
            unreachable!()
        };
        memory.ban(b"a", Duration::from_secs(10)).unwrap();
        memory.ban(b"b", Duration::from_secs(20)).unwrap();
        let refused = memory.ban(b"c", Duration::from_secs(30)).unwrap_err();
        assert!(refused.is_key_limit(), "{refused}");
        assert_eq!(bans.banned_for_now(b"c"), Some(None));
        // The bans in force stay, and can be renewed or lifted.
        memory.ban(b"a", Duration::from_secs(15)).unwrap();
        assert_eq!(
            bans.banned_for_now(b"a"),
            Some(Some(Duration::from_secs(15)))
        );
        assert_eq!(
            bans.banned_for_now(b"b"),
            Some(Some(Duration::from_secs(20)))
        );
        memory.ban(b"b", Duration::ZERO).unwrap();
        memory.ban(b"c", Duration::from_secs(30)).unwrap();
        assert!(memory.ban(b"d", Duration::from_secs(30)).is_err());
        // An ended ban, never looked up again, makes room.
        clock.advance(Duration::from_secs(15));
        memory.ban(b"d", Duration::from_secs(30)).unwrap();
        assert_eq!(memory.lock().until_us.len(), 2);
        assert_eq!(bans.banned_for_now(b"a"), Some(None));
        assert_eq!(
            bans.banned_for_now(b"d"),
            Some(Some(Duration::from_secs(30)))
        );
    }
}
