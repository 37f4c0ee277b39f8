//! The circuit: once Redis is known to be down, every caller is answered at
//! once (through the limiter's failure policy; or, when the server refuses
//! the backend's credentials, with that configuration error), while one
//! background probe at a time checks the server.
//!
//! Without it, each caller would wait out its own connection or command
//! timeout during an outage: a refused port costs little, but a hung server
//! would cost every caller the full timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether Redis is known to be down, since when and why.
#[derive(Debug, Default)]
pub(crate) struct Circuit {
    /// Read on every decision: one relaxed load while healthy.
    open: AtomicBool,
    outage: Mutex<Option<Outage>>,
    /// Whether a probe task is running, so that there is one at a time.
    probing: Arc<AtomicBool>,
}

/// The one probe's turn: held by the probe task, given back when the task
/// ends or is dropped (its runtime shut down), so that a later caller that
/// finds the circuit open starts another rather than none ever closing it.
#[derive(Debug)]
pub(crate) struct ProbeTurn(Arc<AtomicBool>);

impl Drop for ProbeTurn {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An outage in progress.
#[derive(Debug, Clone)]
pub(crate) struct Outage {
    /// When the circuit opened.
    pub(crate) since: Instant,
    /// The failure that opened it, or the last probe's.
    pub(crate) cause: String,
    /// Whether that failure is the server refusing the backend's
    /// credentials: a configuration error, which callers are told as one
    /// (no failure policy answers it) until a probe is let in.
    pub(crate) misconfigured: bool,
}

impl Circuit {
    /// Whether callers are answered at once, without a round trip.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Opens the circuit because of `cause`, a failure of the server.
    /// Returns whether this call opened it; a circuit already open only
    /// records the newer cause.
    pub(crate) fn trip(&self, cause: impl Into<String>) -> bool {
        self.open(cause.into(), false)
    }

    /// Opens the circuit because the server refuses the backend's
    /// credentials (`cause`). Returns whether this call opened it or
    /// turned an outage into this refusal; a refusal already recorded only
    /// records the newer cause.
    pub(crate) fn trip_misconfigured(&self, cause: impl Into<String>) -> bool {
        self.open(cause.into(), true)
    }

    fn open(&self, cause: String, misconfigured: bool) -> bool {
        let mut outage = self.lock();
        match outage.as_mut() {
            Some(outage) => {
                let news = misconfigured && !outage.misconfigured;
                outage.cause = cause;
                outage.misconfigured = misconfigured;
                news
            }
            None => {
                *outage = Some(Outage {
                    since: Instant::now(),
                    cause,
                    misconfigured,
                });
                self.open.store(true, Ordering::Release);
                true
            }
        }
    }

    /// Closes the circuit: Redis answered a probe. Returns how long the
    /// outage lasted, if there was one.
    pub(crate) fn close(&self) -> Option<Duration> {
        let mut outage = self.lock();
        self.open.store(false, Ordering::Release);
        outage.take().map(|o| o.since.elapsed())
    }

    /// The probe's turn, if the circuit is open and no probe holds it.
    #[inline]
    pub(crate) fn probe_turn(&self) -> Option<ProbeTurn> {
        if !self.is_open() || self.probing.load(Ordering::Acquire) {
            return None;
        }
        (!self.probing.swap(true, Ordering::AcqRel)).then(|| ProbeTurn(Arc::clone(&self.probing)))
    }

    /// The outage in progress, if any.
    pub(crate) fn outage(&self) -> Option<Outage> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.outage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_trip_opens_and_close_reports_the_outage() {
        let circuit = Circuit::default();
        assert!(!circuit.is_open());
        assert!(circuit.close().is_none());
        assert!(circuit.probe_turn().is_none(), "closed: nothing to probe");
        assert!(circuit.trip("refused"));
        assert!(circuit.is_open());
        assert!(!circuit.trip("still refused"));
        assert_eq!(circuit.outage().unwrap().cause, "still refused");
        assert!(circuit.close().is_some());
        assert!(!circuit.is_open());
        assert!(circuit.outage().is_none());
    }

    #[test]
    fn a_refusal_of_the_credentials_is_told_apart_from_an_outage() {
        let circuit = Circuit::default();
        assert!(circuit.trip_misconfigured("WRONGPASS"));
        assert!(circuit.outage().unwrap().misconfigured);
        assert!(!circuit.trip_misconfigured("WRONGPASS again"));
        assert!(!circuit.trip("refused"), "open already");
        assert!(!circuit.outage().unwrap().misconfigured, "now an outage");
        assert!(circuit.trip_misconfigured("WRONGPASS"), "a refusal again");
        assert!(circuit.outage().unwrap().misconfigured);
    }

    #[test]
    fn one_probe_at_a_time_and_a_dropped_one_gives_its_turn_back() {
        let circuit = Circuit::default();
        circuit.trip("refused");
        let turn = circuit.probe_turn().expect("the first caller probes");
        assert!(circuit.probe_turn().is_none(), "one probe at a time");
        drop(turn); // its runtime shut down
        assert!(
            circuit.probe_turn().is_some(),
            "a later caller probes again"
        );
    }
}
