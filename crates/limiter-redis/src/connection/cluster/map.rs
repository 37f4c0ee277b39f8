//! The connection's slot map: which primary serves a slot, read from a seed
//! at first, then again from the nodes, at most once per refresh interval.

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use redis::aio::ConnectionLike as _;
use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::node::Waiter;
use super::Inner;
use crate::connection::slot_map::{Address, SlotMap};

impl Inner {
    pub(super) fn owner(&self, slot: u16) -> RedisResult<Address> {
        self.read_map().owner(slot).cloned().ok_or_else(|| {
            RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "no primary serves the slot",
                format!("slot {slot}"),
            ))
        })
    }

    /// Reads the slot map again unless it was read within the refresh
    /// interval (or another caller is reading it: this one then waits for
    /// that read), bounded by the command timeout.
    pub(super) async fn refresh(self: &Arc<Self>) {
        let mut last = self.last_refresh.lock().await;
        if last.is_some_and(|at| at.elapsed() < self.client.refresh_interval) {
            return;
        }
        let read = tokio::time::timeout(self.client.command_timeout, self.read_slot_map()).await;
        if let Ok(Some(map)) = read {
            *self.write_map() = map;
            tracing::debug!("Redis Cluster slot map read again");
        }
        *last = Some(Instant::now());
    }

    /// [`refresh`](Self::refresh) on a task of its own, unless one is
    /// already reading the map: no caller waits for it.
    pub(super) fn refresh_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.last_refresh.try_lock().is_err() {
            return;
        }
        let inner = Arc::clone(self);
        drop(runtime.spawn(async move { inner.refresh().await }));
    }

    /// The slot map from the first node that gives it: the known primaries
    /// first, then the seeds.
    async fn read_slot_map(self: &Arc<Self>) -> Option<SlotMap> {
        let mut candidates = self.read_map().primaries.clone();
        candidates.extend(self.client.seed_addresses());
        // A node known to be down would hold the read up (a hung one for
        // the timeouts): asked last.
        candidates.sort_by_key(|n| self.node(n).circuit.is_open());
        for node in candidates {
            let Ok((id, mut conn)) = self.numbered_connection(&node, Waiter::Connector).await
            else {
                continue;
            };
            let reply = conn
                .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
                .await
                .and_then(Value::extract_error);
            match reply {
                Ok(reply) => {
                    if let Some(map) = SlotMap::parse(&reply, &node) {
                        return Some(map);
                    }
                }
                // A hung node is marked down as a command's timeout marks
                // it: this read may be the only call that met it.
                Err(e) => self.failed_on(&node, &self.node(&node), id, &e),
            }
        }
        None
    }

    pub(super) fn read_map(&self) -> std::sync::RwLockReadGuard<'_, SlotMap> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write_map(&self) -> std::sync::RwLockWriteGuard<'_, SlotMap> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }
}
