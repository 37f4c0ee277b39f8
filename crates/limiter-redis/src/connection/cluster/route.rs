//! Where a command goes: the slot of its first key, or every primary.

use redis::Cmd;

use limiter_core::backend::cluster_slot;

use crate::protocol::wire::MODULE_COMMANDS;

/// Commands whose first argument is not a key: sent to every primary (the
/// first reply is the answer), such as `FUNCTION LOAD`, which each
/// primary needs. (A command without arguments goes to every primary too.)
pub(super) const KEYLESS: [&str; 3] = ["PING", "FUNCTION", "SCRIPT"];

/// Where a command goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    Slot(u16),
    Primaries,
}

/// A command's route: `FCALL`, `EVALSHA` and `EVAL` by their first key
/// (keyless ones to every primary, like [`KEYLESS`]), limiter-redis-module's
/// commands ([`MODULE_COMMANDS`]) by their fourth argument (their first
/// key), any other command by its first argument.
pub(super) fn route(cmd: &Cmd) -> Route {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let Some(name) = args.next() else {
        return Route::Primaries;
    };
    let is = |names: &[&str]| {
        names
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    };
    if is(&KEYLESS) {
        return Route::Primaries;
    }
    let key = if is(&["FCALL", "FCALL_RO", "EVALSHA", "EVAL"]) {
        let _script = args.next();
        let keys = args
            .next()
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok());
        match keys {
            Some(1..) => args.next(),
            _ => None,
        }
    } else if is(&MODULE_COMMANDS) {
        args.nth(3)
    } else {
        args.next()
    };
    match key {
        Some(key) => Route::Slot(cluster_slot(key)),
        None => Route::Primaries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_go_to_their_first_key() {
        let mut fcall = redis::cmd("FCALL");
        fcall
            .arg("limiter_x")
            .arg(2)
            .arg("p:{u}:tb")
            .arg("p:{u}:fw")
            .arg("acquire");
        assert_eq!(route(&fcall), Route::Slot(cluster_slot(b"u")));
        assert_eq!(
            route(redis::cmd("SET").arg("ban:{k}").arg(1)),
            Route::Slot(cluster_slot(b"k"))
        );
        let mut module = redis::cmd("LIMITER.DECIDE");
        module
            .arg("token-bucket:1/1s")
            .arg(0)
            .arg("packed")
            .arg("p:{u}:tb");
        assert_eq!(route(&module), Route::Slot(cluster_slot(b"u")));
        let mut across = redis::cmd("LIMITER.DECIDE_ACROSS");
        across
            .arg("token-bucket:1/1s")
            .arg(0)
            .arg("packed")
            .arg("p:{u}:tb")
            .arg("p:{u}:record")
            .arg("p:{u}:tb")
            .arg("p:{u}:record")
            .arg("p:{v}:tb")
            .arg("p:{v}:record");
        assert_eq!(route(&across), Route::Slot(cluster_slot(b"u")));
        assert_eq!(route(redis::cmd("FCALL").arg("f").arg(0)), Route::Primaries);
        assert_eq!(route(redis::cmd("FUNCTION").arg("LOAD")), Route::Primaries);
        assert_eq!(route(&redis::cmd("PING")), Route::Primaries);
    }
}
