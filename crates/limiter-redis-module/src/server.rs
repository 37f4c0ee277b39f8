//! The [`Store`] of a running Redis. The string states are read and
//! written through the module key API (a key opened, its bytes read or
//! written in place): a `RedisModule_Call` of `MGET` or `SET` costs the
//! server more than the decision. A call that writes opens each string key
//! once ([`OpenKey`]) and keeps it open to its end; a call of peeks opens
//! keys read-only, as a replica serves them. The sorted sets of large
//! sliding logs go through `RedisModule_Call`, as the Lua function's
//! commands.
//!
//! Writes are replicated as the commands they amount to (`SET … PXAT`,
//! `SETRANGE`, `SET … KEEPTTL`, `ZADD`, `PEXPIRE`…, in one `MULTI` per
//! call), never the command that decided: a replica or an AOF replay holds
//! the state the primary wrote, and decides nothing again.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use limiter_core::backend::whole_double;
use redis_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, ContextFlags, KeyType,
    NotifyEvent, RedisString,
};

use crate::decide::{LogWrite, Store};
use crate::open_key::OpenKey;
use crate::string_state::Expiry;

/// A running Redis, as one command sees it.
pub(crate) struct Server<'c> {
    ctx: &'c Context,
    /// Reads: errors as replies, nothing replicated. Built on first use:
    /// only a sorted set's commands need it.
    read: OnceCell<CallOptions>,
    /// Writes: errors as replies, replicated. Built on first use.
    write: OnceCell<CallOptions>,
    /// Whether the call writes: its string keys are opened for writing.
    writes: bool,
    /// The command's key arguments by the address of their bytes, lowest
    /// first: a key the call names is opened, replicated and notified as
    /// its own argument, with no new string made for it.
    args: Vec<(usize, &'c RedisString)>,
    /// The string keys opened for writing, by name: where in [`keys`]
    /// (Self::keys) each is.
    open: HashMap<Cow<'c, [u8]>, usize, ahash::RandomState>,
    /// The keys opened for writing, with the name as Redis takes it (for
    /// keyspace events), until the call ends (`None` once closed early).
    keys: Vec<Option<(Name<'c>, OpenKey)>>,
    /// `0` as Redis takes it (`SETRANGE`'s offset), made once a call.
    zero: OnceCell<RedisString>,
}

/// A key's name as Redis takes it: one of the command's arguments, or
/// made for a key the call computed (a part another set keeps).
enum Name<'c> {
    Argument(&'c RedisString),
    Made(RedisString),
}

impl Name<'_> {
    fn string(&self) -> &RedisString {
        match self {
            Name::Argument(name) => name,
            Name::Made(name) => name,
        }
    }
}

impl std::fmt::Debug for Server<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Server")
    }
}

impl<'c> Server<'c> {
    /// The server as a call sees it that `writes` (or only peeks), whose
    /// keys are the command's arguments `keys`.
    pub(crate) fn new(ctx: &'c Context, writes: bool, keys: &'c [RedisString]) -> Self {
        let mut args: Vec<(usize, &RedisString)> = keys
            .iter()
            .map(|key| (key.as_slice().as_ptr() as usize, key))
            .collect();
        args.sort_unstable_by_key(|&(address, _)| address);
        Self {
            ctx,
            read: OnceCell::new(),
            write: OnceCell::new(),
            writes,
            open: HashMap::with_capacity_and_hasher(args.len(), Default::default()),
            keys: Vec::with_capacity(args.len()),
            args,
            zero: OnceCell::new(),
        }
    }

    /// The command's argument whose bytes `name` is (`call::Call`'s keys
    /// are), if it is one.
    fn argument(&self, name: &[u8]) -> Option<&'c RedisString> {
        let address = name.as_ptr() as usize;
        let at = self
            .args
            .binary_search_by_key(&address, |&(address, _)| address)
            .ok()?;
        let argument = self.args[at].1;
        (argument.as_slice().len() == name.len()).then_some(argument)
    }

    /// The key `name` opened for writing, opened now if it is not yet,
    /// and its name as Redis takes it.
    fn opened(&mut self, name: &[u8]) -> &(Name<'c>, OpenKey) {
        let at = self.open_at(name);
        self.key_at(at)
    }

    /// Where in [`keys`](Self::keys) the key `name` opened for writing
    /// is, opened now if it is not yet.
    fn open_at(&mut self, name: &[u8]) -> usize {
        if let Some(&at) = self.open.get(name) {
            return at;
        }
        let (bytes, redis_name) = match self.argument(name) {
            Some(argument) => (Cow::Borrowed(argument.as_slice()), Name::Argument(argument)),
            None => (Cow::Owned(name.to_vec()), Name::Made(self.name(name))),
        };
        let key = OpenKey::open(self.ctx, redis_name.string());
        self.keys.push(Some((redis_name, key)));
        self.open.insert(bytes, self.keys.len() - 1);
        self.keys.len() - 1
    }

    /// The key opened at `at` ([`open_at`](Self::open_at)).
    fn key_at(&self, at: usize) -> &(Name<'c>, OpenKey) {
        self.keys[at]
            .as_ref()
            .expect("a key closed early is no longer in the map of open keys")
    }

    /// Closes `name` if it is open: a command run on it through
    /// `RedisModule_Call` may change or delete its value.
    fn close(&mut self, name: &[u8]) {
        if let Some(at) = self.open.remove(name) {
            self.keys[at] = None;
        }
    }

    fn read_options(&self) -> &CallOptions {
        self.read
            .get_or_init(|| CallOptionsBuilder::new().errors_as_replies().build())
    }

    fn write_options(&self) -> &CallOptions {
        self.write.get_or_init(|| {
            CallOptionsBuilder::new()
                .errors_as_replies()
                .replicate()
                .build()
        })
    }

    fn call(&self, command: &str, options: &CallOptions, args: &[&[u8]]) -> CallResult<'static> {
        self.ctx
            .call_ext::<_, CallResult<'static>>(command, options, args)
    }

    /// A key's name as Redis takes it: any bytes, a 0 byte included.
    fn name(&self, key: &[u8]) -> RedisString {
        RedisString::create_from_slice(self.ctx.get_raw(), key)
    }

    /// Whether this node serves `keys` (of one slot) now, as a script's
    /// own key check tells: `RedisModule_Call` refuses a command on keys of
    /// a slot another node serves, or importing, or migrating with some of
    /// them gone. A server that is no cluster's serves every key.
    pub(crate) fn serves<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> bool {
        if !self.ctx.get_flags().contains(ContextFlags::CLUSTER) {
            return true;
        }
        let keys: Vec<&[u8]> = keys.collect();
        matches!(
            self.call("EXISTS", self.read_options(), &keys),
            Ok(CallReply::I64(_))
        )
    }

    fn write(&self, command: &str, args: &[&[u8]]) -> Result<(), String> {
        self.call(command, self.write_options(), args)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// The bytes of a string reply.
fn bytes(reply: &CallReply<'_>) -> Option<Vec<u8>> {
    match reply {
        CallReply::String(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

/// A whole number in a reply's text.
fn number(reply: Option<CallResult<'_>>) -> Option<u64> {
    let reply = reply?.ok()?;
    let text = String::from_utf8(bytes(&reply)?).ok()?;
    text.parse::<u64>()
        .ok()
        .or_else(|| text.parse::<f64>().ok().and_then(whole_double))
}

impl Store for Server<'_> {
    fn read_strings(
        &mut self,
        keys: &[&[u8]],
        read: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<(), String> {
        for (at, &name) in keys.iter().enumerate() {
            if self.writes {
                // As MGET: a key of another type holds no string.
                self.opened(name).1.with_string(|value| read(at, value));
                continue;
            }
            let made;
            let redis_name = match self.argument(name) {
                Some(argument) => argument,
                None => {
                    made = self.name(name);
                    &made
                }
            };
            let key = self.ctx.open_key(redis_name);
            if key.key_type() != KeyType::String {
                read(at, None);
                continue;
            }
            read(at, key.read().map_err(|e| format!("ERR limiter: {e}"))?);
        }
        Ok(())
    }

    fn sorted_log(&mut self, key: &[u8]) -> Result<Option<Vec<(u64, u64)>>, String> {
        self.close(key);
        let reply = match self.call(
            "ZRANGE",
            self.read_options(),
            &[key, b"0", b"-1", b"WITHSCORES"],
        ) {
            Ok(reply) => reply,
            Err(e) if e.as_bytes().starts_with(b"WRONGTYPE") => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let CallReply::Array(flat) = reply else {
            return Err("ERR limiter: ZRANGE answered no array".to_owned());
        };
        (0..flat.len() / 2)
            .map(|i| {
                let total = number(flat.get(2 * i));
                let ts = number(flat.get(2 * i + 1));
                ts.zip(total)
                    .ok_or_else(|| "ERR limiter: a sorted set holds no sliding log".to_owned())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn time_us(&mut self) -> Result<u64, String> {
        now_us()
    }

    fn write_string(&mut self, name: &[u8], value: &[u8], expiry: Expiry) -> Result<(), String> {
        // As SET: a key of another type is written over.
        let ctx = self.ctx;
        let at = self.open_at(name);
        let zero = self.zero.get_or_init(|| self.name(b"0"));
        let (redis_name, key) = self.key_at(at);
        let notified = redis_name.string();
        key.write(value)?;
        let notify = |class, event| ctx.notify_keyspace_event(class, event, notified);
        let value = RedisString::create_from_slice(ctx.get_raw(), value);
        // The commands' own keyspace events (SET … PX: set, then expire).
        match expiry {
            Expiry::Px(ms) => {
                key.set_ttl_ms(ms)?;
                let at = ctx.create_string((now_us()? / 1000 + ms).to_string());
                let pxat = ctx.create_string("PXAT");
                ctx.replicate("SET", &[notified, &value, &pxat, &at][..]);
                notify(NotifyEvent::STRING, "set");
                notify(NotifyEvent::GENERIC, "expire");
            }
            Expiry::InPlace => {
                ctx.replicate("SETRANGE", &[notified, zero, &value][..]);
                notify(NotifyEvent::STRING, "setrange");
            }
            Expiry::Kept => {
                let keepttl = ctx.create_string("KEEPTTL");
                ctx.replicate("SET", &[notified, &value, &keepttl][..]);
                notify(NotifyEvent::STRING, "set");
            }
        }
        Ok(())
    }

    fn write_sorted_log(&mut self, key: &[u8], write: &LogWrite) -> Result<(), String> {
        self.close(key);
        if let Some(ts) = write.drop_below {
            self.write(
                "ZREMRANGEBYSCORE",
                &[key, b"-inf", format!("({ts}").as_bytes()],
            )?;
        }
        if let Some(total) = write.replace {
            self.write("ZREM", &[key, total.to_string().as_bytes()])?;
        }
        if let Some(entries) = &write.rebased {
            self.write("DEL", &[key])?;
            for (ts, total) in entries {
                self.write(
                    "ZADD",
                    &[key, ts.to_string().as_bytes(), total.to_string().as_bytes()],
                )?;
            }
        }
        let (ts, total) = write.add;
        self.write(
            "ZADD",
            &[key, ts.to_string().as_bytes(), total.to_string().as_bytes()],
        )?;
        self.write("PEXPIRE", &[key, write.ttl_ms.to_string().as_bytes()])
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), String> {
        self.close(key);
        self.write("DEL", &[key])
    }

    /// As `PEXPIRE key ms GT`: a key with no TTL (or none) is left as it
    /// is, and so is one that lives longer already.
    fn extend(&mut self, name: &[u8], ms: u64) -> Result<(), String> {
        let ctx = self.ctx;
        let (redis_name, key) = self.opened(name);
        let notified = redis_name.string();
        if key.key_type() == KeyType::Empty || key.ttl_ms().is_none_or(|ttl| ttl >= ms) {
            return Ok(());
        }
        key.set_ttl_ms(ms)?;
        let at = (now_us()? / 1000 + ms).to_string();
        ctx.replicate("PEXPIREAT", &[name, at.as_bytes()]);
        ctx.notify_keyspace_event(NotifyEvent::GENERIC, "expire", notified);
        Ok(())
    }
}

/// The server's clock in µs: the clock Redis `TIME` reads (the system's
/// real-time clock, in this very process).
fn now_us() -> Result<u64, String> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| u64::try_from(since.as_micros()).ok())
        .ok_or_else(|| "ERR limiter: the server's clock is before 1970".to_owned())
}
