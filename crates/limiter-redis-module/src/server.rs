//! The [`Store`] of a running Redis: its keys and clock through
//! `RedisModule_Call`. Writes are replicated as the commands they are
//! (`SET … PX`, `SETRANGE`, `ZADD`, `PEXPIRE`…, in one `MULTI` per
//! call), never the command that decided: a replica or an AOF replay
//! holds the state the primary wrote, and decides nothing again.

use redis_module::{CallOptions, CallOptionsBuilder, CallReply, CallResult, Context};

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
        let reply = self
            .call("MGET", &self.read, keys)
            .map_err(|e| e.to_string())?;
        let CallReply::Array(values) = reply else {
            return Err("ERR limiter: MGET answered no array".to_owned());
        };
        Ok(values
            .iter()
            .map(|value| value.ok().as_ref().and_then(bytes))
            .collect())
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
        let reply = self
            .call("TIME", &self.read, &[])
            .map_err(|e| e.to_string())?;
        let CallReply::Array(time) = reply else {
            return Err("ERR limiter: TIME answered no array".to_owned());
        };
        match (number(time.get(0)), number(time.get(1))) {
            (Some(seconds), Some(micros)) => Ok(seconds * 1_000_000 + micros),
            _ => Err("ERR limiter: TIME answered no time".to_owned()),
        }
    }

    fn write_string(&mut self, key: &[u8], value: &[u8], expiry: Expiry) -> Result<(), String> {
        match expiry {
            Expiry::Px(ms) => self.write("SET", &[key, value, b"PX", ms.to_string().as_bytes()]),
            Expiry::InPlace => self.write("SETRANGE", &[key, b"0", value]),
            Expiry::Kept => self.write("SET", &[key, value, b"KEEPTTL"]),
        }
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
}
