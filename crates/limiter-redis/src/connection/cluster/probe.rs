//! A node known to be down: marked so, its commands answered at once, and
//! the background probe that finds it back.

use std::sync::{Arc, PoisonError};

use redis::aio::ConnectionLike as _;
use redis::{ErrorKind, RedisError, Value};

use super::node::Node;
use super::Inner;
use crate::connection::circuit::ProbeTurn;
use crate::connection::slot_map::Address;

impl Inner {
    /// The error of a command to `node` while it is known to be down (or
    /// to refuse the credentials: then that refusal, a configuration
    /// error), with its probe made sure of.
    pub(super) fn down(self: &Arc<Self>, node: &Address, state: &Node) -> RedisError {
        self.ensure_probe(node, state);
        let (ago, cause, misconfigured) = state
            .circuit
            .outage()
            .map(|o| (o.since.elapsed(), o.cause, o.misconfigured))
            .unwrap_or_default();
        if misconfigured {
            return RedisError::from((
                ErrorKind::AuthenticationFailed,
                "Redis Cluster node refuses the credentials",
                format!(
                    "{}:{} ({cause}); checked again every {:?}",
                    node.host, node.port, self.client.refresh_interval
                ),
            ));
        }
        RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "Redis Cluster node {}:{} down for {}ms ({cause}); probing every {:?}",
                node.host,
                node.port,
                ago.as_millis(),
                self.client.refresh_interval
            ),
        ))
    }

    /// Marks `node` down because of `cause`, and starts its probe unless
    /// it was down already.
    pub(super) fn mark_down(self: &Arc<Self>, node: &Address, state: &Node, cause: &RedisError) {
        if state.circuit.trip(cause.to_string()) {
            tracing::warn!(
                cause = %cause,
                node = %format!("{}:{}", node.host, node.port),
                "Redis Cluster node unavailable: its commands fail at once until a probe succeeds"
            );
        }
        self.ensure_probe(node, state);
    }

    /// Marks `node` as refusing the credentials (`cause`): its commands
    /// fail at once with that configuration error, logged at `error` when
    /// it starts, until its probe is let in.
    pub(super) fn mark_misconfigured(
        self: &Arc<Self>,
        node: &Address,
        state: &Node,
        cause: &RedisError,
    ) {
        if state.circuit.trip_misconfigured(cause.to_string()) {
            tracing::error!(
                cause = %cause,
                node = %format!("{}:{}", node.host, node.port),
                "Redis Cluster node refuses the rate limiter's credentials: its keys' decisions \
                 fail with a configuration error (no failure policy answers it) until it takes \
                 them; set the user and password the cluster expects"
            );
        }
        self.ensure_probe(node, state);
    }

    /// Starts `node`'s probe unless one runs: at a trip, and whenever a
    /// command finds the node down, so that a probe lost with its runtime
    /// is replaced.
    fn ensure_probe(self: &Arc<Self>, node: &Address, state: &Node) {
        if let Some(turn) = state.circuit.probe_turn() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(probe(Arc::downgrade(self), node.clone(), turn))),
                // No runtime to probe on: the next command tries the node.
                Err(_) => drop(state.circuit.close()),
            }
        }
    }
}

/// The background probe of a node that is down: one `PING` per refresh
/// interval, each bounded by the timeouts (a hung node costs the probe one
/// command timeout, never a caller). Ends when the node answers, when the
/// slot map no longer names it (it was failed over and is gone), or with
/// the connection.
async fn probe(inner: std::sync::Weak<Inner>, node: Address, _turn: ProbeTurn) {
    loop {
        let Some(interval) = inner.upgrade().map(|i| i.client.refresh_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let state = inner.node(&node);
        let answered = match inner.connection(&node).await {
            Ok(mut conn) => conn
                .req_packed_command(&redis::cmd("PING"))
                .await
                .and_then(Value::extract_error)
                .is_ok(),
            Err(_) => false,
        };
        if answered {
            let lasted = state.circuit.close().unwrap_or_default();
            tracing::info!(
                node = %format!("{}:{}", node.host, node.port),
                outage_ms = lasted.as_millis() as u64,
                "Redis Cluster node available again"
            );
            return;
        }
        inner.forget(&node);
        if !inner.read_map().primaries.contains(&node) {
            inner
                .nodes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&node);
            return;
        }
    }
}
