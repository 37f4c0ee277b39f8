//! [`Metered`]: a response body that counts what it sends toward its
//! request's charge after the response, and has the charge made when it
//! ends or is dropped.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::middleware::response_charge::Meter;

pin_project! {
    /// The body of an admitted response under
    /// [`LimiterLayer::charge_after`](crate::LimiterLayer::charge_after):
    /// the inner service's body, its data counted as the server takes it,
    /// and the request's charge made once, when the body ends (its last
    /// frame, or an error) or is dropped (the client gone mid-body: what
    /// was sent until then is charged).
    ///
    /// A [`RefusalBody`](crate::middleware::body::RefusalBody) holds it as its own
    /// type (axum's `Body::new`, a `BoxBody`); one that cannot hold
    /// another body takes [`into_inner`](Self::into_inner).
    #[derive(Debug)]
    pub struct Metered<B> {
        #[pin]
        body: B,
        meter: Option<Meter>,
    }
}

impl<B> Metered<B> {
    pub(crate) fn new(body: B, meter: Meter) -> Self {
        Self {
            body,
            meter: Some(meter),
        }
    }
}

impl<B: Body> Metered<B> {
    /// The inner body, charged at once: with the bytes its size hint
    /// states it holds exactly (a `Full` body), else with its least.
    pub fn into_inner(mut self) -> B {
        if let Some(mut meter) = self.meter.take() {
            let hint = self.body.size_hint();
            let bytes = hint.exact().unwrap_or(hint.lower());
            meter.sent(usize::try_from(bytes).unwrap_or(usize::MAX));
            meter.finish();
        }
        self.body
    }
}

impl<B: Body> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let (Some(data), Some(meter)) = (frame.data_ref(), this.meter.as_mut()) {
                    meter.sent(data.remaining());
                }
            }
            // The body ended or failed: charged now, not when the server
            // gets to drop it.
            None | Some(Err(_)) => drop(this.meter.take()),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
