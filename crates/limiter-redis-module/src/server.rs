//! The [`Store`] of a running Redis. The string states are read and
//! written through the module key API (a key opened, its bytes read or
//! written in place): a `RedisModule_Call` of `MGET` or `SET` costs the
//! server more than the decision. The sorted sets of large sliding logs go
//! through `RedisModule_Call`, as the Lua function's commands.
//!
//! Writes are replicated as the commands they amount to (`SET … PXAT`,
//! `SETRANGE`, `SET … KEEPTTL`, `ZADD`, `PEXPIRE`…, in one `MULTI` per
//! call), never the command that decided: a replica or an AOF replay holds
//! the state the primary wrote, and decides nothing again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, KeyType, NotifyEvent,
    RedisString,
};

use crate::decide::{LogWrite, Store};
use crate::string_state::Expiry;

/// A running Redis, as one command sees it.
pub(crate) struct Server<'c> {
    ctx: &'c Context,
    /// Reads: errors as replies, nothing replicated.
    read: CallOptions,
    /// Writes: errors as replies, replicated.
    write: CallOptions,
}

impl std::fmt::Debug for Server<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Server")
    }
}

impl<'c> Server<'c> {
    pub(crate) fn new(ctx: &'c Context) -> Self {
        Self {
            ctx,
            read: CallOptionsBuilder::new().errors_as_replies().build(),
            write: CallOptionsBuilder::new()
                .errors_as_replies()
                .replicate()
                .build(),
        }
    }

    fn call(&self, command: &str, options: &CallOptions, args: &[&[u8]]) -> CallResult<'static> {
        self.ctx
            .call_ext::<_, CallResult<'static>>(command, options, args)
    }

    /// A key's name as Redis takes it: any bytes, a 0 byte included.
    fn name(&self, key: &[u8]) -> RedisString {
        RedisString::create_from_slice(self.ctx.get_raw(), key)
    }

    fn write(&self, command: &str, args: &[&[u8]]) -> Result<(), String> {
        self.call(command, &self.write, args)
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
        .or_else(|| text.parse::<f64>().ok().and_then(crate::call::whole))
}

impl Store for Server<'_> {
    fn strings(&mut self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, String> {
        keys.iter()
            .map(|&name| {
                let key = self.ctx.open_key(&self.name(name));
                // As MGET: a key of another type holds no string.
                if key.key_type() != KeyType::String {
                    return Ok(None);
                }
                key.read()
                    .map(|bytes| bytes.map(<[u8]>::to_vec))
                    .map_err(|e| format!("ERR limiter: {e}"))
            })
            .collect()
    }

    fn sorted_log(&mut self, key: &[u8]) -> Result<Option<Vec<(u64, u64)>>, String> {
        let reply = match self.call("ZRANGE", &self.read, &[key, b"0", b"-1", b"WITHSCORES"]) {
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
        let failed = |e: redis_module::RedisError| format!("ERR limiter: {e}");
        let key = self.ctx.open_key_writable(&self.name(name));
        // As SET: a key of another type is written over.
        if !matches!(key.key_type(), KeyType::String | KeyType::Empty) {
            key.delete().map_err(failed)?;
        }
        key.as_string_dma()
            .map_err(failed)?
            .write(value)
            .map_err(failed)?;
        let notified = self.name(name);
        let notify = |class, event| self.ctx.notify_keyspace_event(class, event, &notified);
        // The commands' own keyspace events (SET … PX: set, then expire).
        match expiry {
            Expiry::Px(ms) => {
                key.set_expire(Duration::from_millis(ms)).map_err(failed)?;
                let at = (now_us()? / 1000 + ms).to_string();
                self.ctx
                    .replicate("SET", &[name, value, b"PXAT", at.as_bytes()]);
                notify(NotifyEvent::STRING, "set");
                notify(NotifyEvent::GENERIC, "expire");
            }
            Expiry::InPlace => {
                self.ctx.replicate("SETRANGE", &[name, b"0", value]);
                notify(NotifyEvent::STRING, "setrange");
            }
            Expiry::Kept => {
                self.ctx.replicate("SET", &[name, value, b"KEEPTTL"]);
                notify(NotifyEvent::STRING, "set");
            }
        }
        Ok(())
    }

    fn write_sorted_log(&mut self, key: &[u8], write: &LogWrite) -> Result<(), String> {
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
        self.write("DEL", &[key])
    }

    fn extend(&mut self, key: &[u8], ms: u64) -> Result<(), String> {
        self.write("PEXPIRE", &[key, ms.to_string().as_bytes(), b"GT"])
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
