//! A string key held open for reading and writing through Redis's module
//! key API for a whole call: read once, then written in place, its expiry
//! read and set, with no second lookup of its name and no
//! `RedisModule_Call` (each costs the server about as much as a decision;
//! docs/benchmarks.md, "The Redis module beside the Lua functions and
//! redis-cell").
//!
//! The one file of the crate with `unsafe`: redis-module's safe key type
//! reads no expiry, so the key API is called here directly. Every call
//! passes the key this value opened and holds until it is dropped.
#![allow(unsafe_code)]

use std::os::raw::c_longlong;

use redis_module::raw::{self, KeyMode, RedisModuleKey, Status};
use redis_module::{Context, KeyType, RedisString};

/// A key opened for reading and writing, closed when dropped.
pub(crate) struct OpenKey {
    key: *mut RedisModuleKey,
}

impl std::fmt::Debug for OpenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenKey")
    }
}

impl OpenKey {
    /// Opens `name` for reading and writing (an empty key included: it is
    /// created by the first write).
    pub(crate) fn open(ctx: &Context, name: &RedisString) -> Self {
        Self {
            key: raw::open_key(ctx.ctx, name.inner, KeyMode::READ | KeyMode::WRITE),
        }
    }

    /// The type of the value the key holds.
    pub(crate) fn key_type(&self) -> KeyType {
        // SAFETY: `self.key` is an open key until `self` is dropped.
        let key_type = unsafe { raw::RedisModule_KeyType.expect("RedisModule_KeyType")(self.key) };
        KeyType::from(key_type)
    }

    /// `read` of the string the key holds (`None` when it holds none),
    /// lent for the call: the bytes are Redis's own, valid until the key
    /// is written.
    pub(crate) fn with_string<R>(&self, read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        if self.key_type() != KeyType::String {
            return read(None);
        }
        let mut len = 0;
        let bytes = raw::string_dma(self.key, &mut len, KeyMode::READ);
        if bytes.is_null() {
            return read(None);
        }
        // SAFETY: Redis gives `len` readable bytes at `bytes`, valid while
        // the key is open and not written; `&self` is borrowed while they
        // are lent, and nothing here writes the key.
        read(Some(unsafe {
            std::slice::from_raw_parts(bytes.cast::<u8>(), len)
        }))
    }

    /// Writes `value` as the key's string, in place when it holds one of
    /// the same length; a value of another type is deleted first.
    pub(crate) fn write(&self, value: &[u8]) -> Result<(), String> {
        let key_type = self.key_type();
        if !matches!(key_type, KeyType::String | KeyType::Empty) {
            // SAFETY: as above.
            let status =
                unsafe { raw::RedisModule_DeleteKey.expect("RedisModule_DeleteKey")(self.key) };
            if Status::from(status) != Status::Ok {
                return Err("ERR limiter: a key of another type could not be deleted".to_owned());
            }
        }
        let mut len = 0;
        let mut bytes = raw::string_dma(self.key, &mut len, KeyMode::WRITE);
        if bytes.is_null() || len != value.len() {
            if raw::string_truncate(self.key, value.len()) != Status::Ok {
                return Err("ERR limiter: a string could not be written".to_owned());
            }
            bytes = raw::string_dma(self.key, &mut len, KeyMode::WRITE);
        }
        if bytes.is_null() || len != value.len() {
            return Err("ERR limiter: a string could not be written".to_owned());
        }
        // SAFETY: Redis gives `len` writable bytes at `bytes`, which is
        // `value.len()`; the two do not overlap (`value` is ours).
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), bytes.cast::<u8>(), len) };
        Ok(())
    }

    /// The key's time to live in ms: `None` when it has none (or no value).
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        // SAFETY: as above.
        let ms = unsafe { raw::RedisModule_GetExpire.expect("RedisModule_GetExpire")(self.key) };
        u64::try_from(ms).ok()
    }

    /// Sets the key's time to live to `ms`.
    pub(crate) fn set_ttl_ms(&self, ms: u64) -> Result<(), String> {
        let ms = c_longlong::try_from(ms).map_err(|_| "ERR limiter: a TTL out of range")?;
        if raw::set_expire(self.key, ms) == Status::Ok {
            Ok(())
        } else {
            Err("ERR limiter: a key's TTL could not be set".to_owned())
        }
    }
}

impl Drop for OpenKey {
    fn drop(&mut self) {
        raw::close_key(self.key);
    }
}
