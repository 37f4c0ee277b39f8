//! [`RefusalBody`]: a response body the layer can answer its own refusals
//! in (and meter, for a charge after the response); [`ResponseBody`], one
//! for any inner body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use pin_project_lite::pin_project;

pub use crate::middleware::metered_body::Metered;

/// A response body the layer can write its own answers in (a 429, 503, 401
/// or 500, in one chunk), so that the inner service's responses pass
/// through with their body untouched: no wrapper, no allocation. The
/// layer needs it of the inner service's body type.
///
/// Implemented for axum's `Body` (feature `axum`), tonic's `Body` (feature
/// `tonic`), [`http_body_util::Full<Bytes>`](http_body_util::Full), its
/// `BoxBody<Bytes, E>` and `UnsyncBoxBody<Bytes, E>`, and [`ResponseBody`]. Any other inner body (hyper's `Incoming`, a body of
/// your own) is wrapped in a [`ResponseBody`] under the layer:
///
/// ```
/// use http_body_util::Empty;
/// use bytes::Bytes;
/// use limiter_tower::body::ResponseBody;
/// use limiter_tower::LimiterLayer;
/// use tower::ServiceBuilder;
/// # use limiter_memory::MemoryLimiter;
/// # let limiter = MemoryLimiter::new("fixed-window:10/1s".parse::<limiter_core::Policy>()?);
/// # let inner = tower::service_fn(|_req: http::Request<()>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(Empty::<Bytes>::new()))
/// # });
///
/// let service = ServiceBuilder::new()
///     .layer(LimiterLayer::new(limiter))
///     .map_response(|response: http::Response<Empty<Bytes>>| {
///         response.map(ResponseBody::inner)
///     })
///     .service(inner);
/// # let _ = service;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "the layer cannot write its refusals in a `{Self}` response body",
    label = "not a body the rate-limit layer can answer in",
    note = "axum's `Body` needs limiter-tower's `axum` feature and tonic's its `tonic` feature: \
            `limiter-tower = {{ ..., features = [\"axum\"] }}`",
    note = "any other body: map the inner responses with `ResponseBody::inner` under the layer \
            (see `RefusalBody`)"
)]
pub trait RefusalBody: Sized {
    /// A body of `data`, the layer's own answer.
    fn refusal(data: Bytes) -> Self;

    /// `body` as this body type, for a layer that
    /// [charges after the response](crate::LimiterLayer::charge_after):
    /// the [`Metered`] body counts what the server takes and has the
    /// charge made when it ends or is dropped. Every body type here holds
    /// it but `Full`, whose length is known ahead; the default, for a type
    /// that cannot hold another body, is [`Metered::into_inner`]: charged
    /// at once, with the length its size hint states.
    fn metered(body: Metered<Self>) -> Self
    where
        Self: Body,
    {
        body.into_inner()
    }
}

impl<B> RefusalBody for ResponseBody<B> {
    fn refusal(data: Bytes) -> Self {
        Self::full(data)
    }

    fn metered(body: Metered<Self>) -> Self {
        Self {
            kind: Kind::Metered {
                body: Box::pin(body),
            },
        }
    }
}

impl RefusalBody for http_body_util::Full<Bytes> {
    fn refusal(data: Bytes) -> Self {
        Self::new(data)
    }
}

/// hyper services often answer a boxed body, of any error type.
impl<E: 'static> RefusalBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn refusal(data: Bytes) -> Self {
        Self::new(http_body_util::Full::new(data).map_err(|never| match never {}))
    }

    fn metered(body: Metered<Self>) -> Self {
        Self::new(body)
    }
}

impl<E: 'static> RefusalBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn refusal(data: Bytes) -> Self {
        Self::new(http_body_util::Full::new(data).map_err(|never| match never {}))
    }

    fn metered(body: Metered<Self>) -> Self {
        Self::new(body)
    }
}

/// axum's body. Available with the `axum` feature.
#[cfg(feature = "axum")]
impl RefusalBody for axum::body::Body {
    fn refusal(data: Bytes) -> Self {
        Self::from(data)
    }

    fn metered(body: Metered<Self>) -> Self {
        Self::new(body)
    }
}

/// tonic's body. Available with the `tonic` feature.
#[cfg(feature = "tonic")]
impl RefusalBody for tonic::body::Body {
    fn refusal(data: Bytes) -> Self {
        Self::new(http_body_util::Full::new(data))
    }

    fn metered(body: Metered<Self>) -> Self {
        Self::new(body)
    }
}

pin_project! {
    /// A response body for any inner body (see [`RefusalBody`]): the
    /// inner service's body when the request was admitted, or the layer's
    /// own (a 429, 503, 401 or 500 answer) in one chunk.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
        // Boxed: it holds a body of this type.
        Metered { body: Pin<Box<Metered<ResponseBody<B>>>> },
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A body of `data`, the layer's own.
    pub fn full(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Full { data },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|data| Ok(Frame::data(data)))),
            KindProj::Metered { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
            Kind::Metered { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
            Kind::Metered { body } => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
    use http_body_util::Full;

    use super::*;

    /// What a body type's refusal holds, read whole.
    async fn text<B: RefusalBody + Body<Data = Bytes>>() -> Bytes
    where
        B::Error: std::fmt::Debug,
    {
        B::refusal(Bytes::from_static(b"no"))
            .collect()
            .await
            .unwrap()
            .to_bytes()
    }

    #[tokio::test]
    async fn every_refusal_body_holds_the_layers_answer() {
        assert_eq!(text::<Full<Bytes>>().await, "no");
        assert_eq!(text::<BoxBody<Bytes, std::io::Error>>().await, "no");
        assert_eq!(text::<UnsyncBoxBody<Bytes, std::io::Error>>().await, "no");
        assert_eq!(text::<ResponseBody<Full<Bytes>>>().await, "no");
        #[cfg(feature = "axum")]
        assert_eq!(text::<axum::body::Body>().await, "no");
        #[cfg(feature = "tonic")]
        assert_eq!(text::<tonic::body::Body>().await, "no");
    }
}
