//! How a command is reported when its deadline passes, and how a failure
//! says the whole cluster is down.

use std::time::Duration;

use redis::{ErrorKind, RedisError, RetryMethod};

/// How a failure says the cluster as a whole refuses commands (a shard lost
/// under `cluster-require-full-coverage yes`): the failure reaches every
/// key, not one node's.
const CLUSTER_DOWN: &str = "CLUSTERDOWN";

/// Whether `error` says the whole cluster is down ([`CLUSTER_DOWN`]): the
/// server's refusal, or a command that ran out of time on it.
pub(crate) fn is_cluster_down(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
    ) || (error.is_timeout() && error.to_string().contains(CLUSTER_DOWN))
}

/// A command's deadline passed: a timeout, its retries included.
pub(super) fn past_deadline(timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within the command timeout ({timeout:?}), retries included"),
    ))
}

/// A command's deadline passed while the cluster redirected it or refused
/// it for now (`last`, a redirect or a "not now"): a timeout, as for a node
/// that does not answer, since no node decided it in time. Any other error
/// is told as it is.
pub(super) fn out_of_time(timeout: Duration, last: RedisError) -> RedisError {
    if is_cluster_down(&last) {
        return RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer within the command timeout ({timeout:?}), retries included; \
                 {CLUSTER_DOWN}: the cluster refuses every key ({last})"
            ),
        ));
    }
    match last.retry_method() {
        RetryMethod::MovedRedirect
        | RetryMethod::AskRedirect
        | RetryMethod::WaitAndRetry
        | RetryMethod::RefreshSlotsAndRetry => RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer within the command timeout ({timeout:?}), retries included; the \
                 cluster's last: {last}"
            ),
        )),
        _ => last,
    }
}

#[cfg(test)]
mod tests {
    use redis::ServerErrorKind;

    use super::*;

    #[test]
    fn a_command_out_of_time_while_redirected_or_refused_for_now_is_a_timeout() {
        let timeout = Duration::from_millis(300);
        for kind in [ServerErrorKind::ClusterDown, ServerErrorKind::Moved] {
            let last = RedisError::from((ErrorKind::Server(kind), "the cluster's answer"));
            assert!(!last.is_timeout());
            let told = out_of_time(timeout, last);
            assert!(told.is_timeout(), "{told}");
            assert!(told.to_string().contains("the cluster's answer"), "{told}");
            assert_eq!(
                is_cluster_down(&told),
                kind == ServerErrorKind::ClusterDown,
                "{told}"
            );
        }
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let told = out_of_time(timeout, refused);
        assert!(told.is_connection_refusal() && !told.is_timeout(), "{told}");
    }
}
