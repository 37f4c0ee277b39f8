//! [`ResponseCharge`]: what an admitted request is charged once its
//! response is complete ([`LimiterLayer::charge_after`](crate::LimiterLayer::charge_after)),
//! and the [`Meter`] its response's body carries until then.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use http::Response;
use limiter_core::{Decision, DecisionSource, Error};

use crate::answer::rate_headers::RateHeaders;
use crate::client::key_bytes::KeyBytes;
use crate::costs::charge_after::{ActualCost, ChargeAfter, Kind};
use crate::middleware::body::{Metered, RefusalBody};
use crate::middleware::plans::Limits;
use crate::middleware::settings::Settings;

/// The charge after the response of one admitted request: on the key and
/// limiter it was decided on, above the units it reserved; with the
/// rate-limit headers its response gets first, so that the response
/// future's usual state (the headers alone) stays as small as it is for a
/// layer that charges nothing.
pub(crate) struct ResponseCharge {
    charge_after: ChargeAfter,
    settings: Arc<Settings>,
    /// The plan's limiter the request was decided by.
    limits: Arc<Limits>,
    key: KeyBytes,
    /// The units the request's cost reserved: its estimate.
    reserved: u64,
    pub(crate) headers: RateHeaders,
}

impl ResponseCharge {
    /// The charge of a request of `reserved` units under `key` that
    /// `decision` answers; `None` unless the layer charges after the
    /// response and the backend admitted the request (a request passed
    /// while the backend fails, fail-open or by a fallback's decision, is
    /// not charged: the backend it would be charged to is the one failing).
    #[inline]
    pub(crate) fn of(
        settings: &Arc<Settings>,
        limits: &Arc<Limits>,
        key: &KeyBytes,
        reserved: u64,
        decision: &Decision,
    ) -> Option<Box<Self>> {
        let charge_after = settings.charge_after?;
        if !decision.allowed || decision.source != DecisionSource::Backend {
            return None;
        }
        Some(Self::boxed(charge_after, settings, limits, key, reserved))
    }

    /// The charge, boxed: out of line, so that a layer that charges
    /// nothing only reads its setting, and the decision stays where it is.
    #[inline(never)]
    fn boxed(
        charge_after: ChargeAfter,
        settings: &Arc<Settings>,
        limits: &Arc<Limits>,
        key: &KeyBytes,
        reserved: u64,
    ) -> Box<Self> {
        Box::new(Self {
            charge_after,
            settings: Arc::clone(settings),
            limits: Arc::clone(limits),
            key: key.clone(),
            reserved,
            headers: RateHeaders::default(),
        })
    }

    /// `response` with its rate-limit headers and its body metered for
    /// this charge; unmetered when there is nothing to charge (no
    /// [`ActualCost`], or one within the estimate). Out of line, as
    /// [`boxed`](Self::boxed).
    #[inline(never)]
    pub(crate) fn meter<B: RefusalBody + http_body::Body>(
        mut self: Box<Self>,
        mut response: Response<B>,
    ) -> Response<B> {
        std::mem::take(&mut self.headers).replace_inner(&mut response);
        let count = match self.charge_after.kind() {
            Kind::ActualCost => match response.extensions().get::<ActualCost>() {
                Some(&ActualCost(units)) if units > self.reserved => Count::Units(units),
                _ => return response,
            },
            Kind::ResponseBytes(unit) => Count::Bytes {
                unit: unit.get(),
                sent: 0,
            },
        };
        let meter = Meter {
            charge: Some(self),
            count,
        };
        response.map(|body| B::metered(Metered::new(body, meter)))
    }

    /// Charges `units` on the key, at once where the limiter decides in
    /// process, else in a task of the runtime; a failure is reported,
    /// never answered (the response is out).
    fn make(self, units: u64) {
        let Self {
            settings,
            limits,
            key,
            ..
        } = self;
        let in_task = Arc::clone(&settings);
        let mut charge = Box::pin(async move {
            let result = limits.limiter.charge(&key, units).await;
            in_task.observer.charged(units, result.as_ref().err());
        });
        let mut now = Context::from_waker(Waker::noop());
        if charge.as_mut().poll(&mut now).is_ready() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(charge)),
            Err(_) => {
                let error = Error::InvalidConfig(
                    "a charge after the response is made in a Tokio runtime, and none runs here"
                        .into(),
                );
                settings.observer.charged(units, Some(&error));
            }
        }
    }
}

/// What a response's body counts toward its charge, and the charge made
/// when the body ends or is dropped: once.
pub(crate) struct Meter {
    charge: Option<Box<ResponseCharge>>,
    count: Count,
}

/// The true cost as it is known: units the handler stated, or bytes sent.
#[derive(Debug, Clone, Copy)]
enum Count {
    Units(u64),
    Bytes { unit: u64, sent: u64 },
}

impl Meter {
    /// `bytes` more of the body were sent.
    #[inline]
    pub(crate) fn sent(&mut self, bytes: usize) {
        if let Count::Bytes { sent, .. } = &mut self.count {
            *sent = sent.saturating_add(bytes as u64);
        }
    }

    /// The body is complete: charges what is owed, once.
    pub(crate) fn finish(&mut self) {
        let Some(charge) = self.charge.take() else {
            return;
        };
        let units = match self.count {
            Count::Units(units) => units,
            Count::Bytes { unit, sent } => sent.div_ceil(unit),
        };
        let owed = units.saturating_sub(charge.reserved);
        if owed > 0 {
            (*charge).make(owed);
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.finish();
    }
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("count", &self.count)
            .field("charged", &self.charge.is_none())
            .finish()
    }
}
