//! An outage: the circuit opened, every caller answered at once, and the
//! background probe that ends it.

use std::sync::{Arc, Weak};

use super::open::CREDENTIALS_FIX;
use super::{cause, Shared};
use crate::connection::circuit::ProbeTurn;
use crate::error::{BackendError, BackendErrorKind};

impl Shared {
    /// The answer every call gets at once, with no round trip, while the
    /// backend refuses to serve (a configuration error) or the circuit is
    /// open (then with its probe made sure of); `None` otherwise.
    #[inline]
    pub(super) fn answer_at_once(self: &Arc<Self>) -> Option<BackendError> {
        if let Some(refusal) = self.refusal.get() {
            return Some(refusal.clone());
        }
        if self.circuit.is_open() {
            self.ensure_probe();
            return Some(self.unavailable());
        }
        None
    }

    /// The answer while the circuit is open: at once, no round trip. While
    /// the server refuses the credentials, a configuration error.
    pub(super) fn unavailable(&self) -> BackendError {
        let (ago, cause, misconfigured) = self
            .circuit
            .outage()
            .map(|o| (o.since.elapsed(), o.cause, o.misconfigured))
            .unwrap_or_default();
        if misconfigured {
            return BackendError::config(format!(
                "Redis at {} refuses the backend's credentials ({cause}): {CREDENTIALS_FIX} \
                 (checked again every {:?})",
                self.url, self.probe_interval
            ));
        }
        BackendError::new(
            BackendErrorKind::Unavailable,
            format!(
                "Redis at {} unavailable for {}ms ({cause}); probing every {:?}",
                self.url,
                ago.as_millis(),
                self.probe_interval
            ),
        )
    }

    /// Opens the circuit and retires every connection, and makes sure a
    /// probe runs. The circuit opens first: a caller that finds its
    /// connection retired, and so does not trip it again, answers its own
    /// failure with the circuit already open, and the calls after it are
    /// answered at once.
    pub(super) fn trip(self: &Arc<Self>, cause: &str) {
        let opened = self.circuit.trip(cause);
        for connection_slot in self.connection_slots.iter() {
            connection_slot.clear();
        }
        if opened {
            tracing::warn!(
                url = %self.url,
                cause,
                "Redis unavailable: decisions fail at once until a probe succeeds"
            );
        }
        self.ensure_probe();
    }

    /// Opens the circuit because the server refused the credentials
    /// (`error`): every call is then told so at once, as a configuration
    /// error, and the probe connects every probe interval until the server
    /// takes them (a password set back, or rotated on both sides). Logged
    /// at `error`, with the fix, when it starts.
    pub(super) fn trip_misconfigured(self: &Arc<Self>, error: &BackendError) {
        let opened = self.circuit.trip_misconfigured(cause(error));
        for connection_slot in self.connection_slots.iter() {
            connection_slot.clear();
        }
        if opened {
            tracing::error!(
                url = %self.url,
                error = %limiter_core::ErrorChain(error),
                "Redis refuses the rate limiter's credentials: every decision fails with a \
                 configuration error (no failure policy answers it) until the server takes them"
            );
        }
        self.ensure_probe();
    }

    /// Starts the probe unless one runs: at a trip, and whenever a caller
    /// finds the circuit open, so that a probe lost with its runtime (shut
    /// down while Redis was down) is replaced by the next caller's.
    #[inline]
    pub(super) fn ensure_probe(self: &Arc<Self>) {
        if let Some(turn) = self.circuit.probe_turn() {
            // Without a runtime the probe (and its turn) is dropped: the
            // next caller on one starts it.
            let _ = self.runtime.spawn(probe(Arc::downgrade(self), turn));
        }
    }
}

/// The background probe of an outage: one attempt per interval, each
/// bounded by the timeouts; on success the connection serves connection
/// slot 0 and the circuit closes. Ends with the outage or with the backend.
async fn probe(shared: Weak<Shared>, _turn: ProbeTurn) {
    loop {
        let Some(interval) = shared.upgrade().map(|s| s.probe_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match shared.open_connection().await {
            Ok(conn) => {
                shared.connection_slots[0].install(&shared, conn);
                let lasted = shared.circuit.close().unwrap_or_default();
                tracing::info!(
                    url = %shared.url,
                    outage_ms = lasted.as_millis() as u64,
                    "Redis available again"
                );
                return;
            }
            Err(e) if e.is_refused_credentials() => {
                shared.trip_misconfigured(&e);
                tracing::debug!(url = %shared.url, error = %limiter_core::ErrorChain(&e), "Redis probe refused");
            }
            Err(e) if e.kind() == BackendErrorKind::Config => {
                // Back as a Redis Cluster node: every call is refused, at once.
                shared.refuse(e);
                shared.circuit.close();
                return;
            }
            Err(e) => {
                shared.circuit.trip(cause(&e));
                tracing::debug!(url = %shared.url, error = %limiter_core::ErrorChain(&e), "Redis probe failed");
            }
        }
    }
}
