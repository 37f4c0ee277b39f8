//! [`ResponseFuture`]: the future of a [`LimiterService`](crate::LimiterService)
//! call, through its states: deciding, calling the inner service, done.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use crate::body::RefusalBody;
use crate::pending::{Decide, Decided};
use crate::rate_headers::RateHeaders;
use crate::response::{OwnAnswer, Verdict};
use crate::response_charge::ResponseCharge;

pin_project! {
    /// The future of a [`LimiterService`](crate::LimiterService) call.
    pub struct ResponseFuture<F, S, B> {
        #[pin]
        state: State<F, S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, B> {
        Deciding {
            decide: Decide,
            inner: Option<S>,
            req: Option<Request<B>>,
        },
        Passing {
            #[pin]
            fut: F,
        },
        Calling {
            #[pin]
            fut: F,
            headers: RateHeaders,
            charge: Option<Box<ResponseCharge>>,
        },
        Done {
            response: Option<Response<Bytes>>,
        },
    }
}

impl<F, S, B> ResponseFuture<F, S, B> {
    /// A request whose decision is still to be made: `inner` is called
    /// with `req` once `decide` lets it through.
    pub(crate) fn deciding(decide: Decide, inner: S, req: Request<B>) -> Self {
        Self {
            state: State::Deciding {
                decide,
                inner: Some(inner),
                req: Some(req),
            },
        }
    }

    /// The layer's own answer, already decided.
    pub(crate) fn done(response: Response<Bytes>) -> Self {
        Self {
            state: State::Done {
                response: Some(response),
            },
        }
    }

    /// The inner service's response, `headers` to be added to it, its
    /// body metered for `charge`.
    #[inline]
    pub(crate) fn calling(
        fut: F,
        headers: RateHeaders,
        charge: Option<Box<ResponseCharge>>,
    ) -> Self {
        Self {
            state: State::calling(fut, headers, charge),
        }
    }

    /// The inner service's response as it is.
    #[inline]
    pub(crate) fn passing(fut: F) -> Self {
        Self {
            state: State::Passing { fut },
        }
    }
}

impl<F, S, B> State<F, S, B> {
    /// Calling the inner service: with what to do to its response, or
    /// passing it as it is when there is nothing to do.
    #[inline]
    fn calling(fut: F, headers: RateHeaders, charge: Option<Box<ResponseCharge>>) -> Self {
        if headers.is_empty() && charge.is_none() {
            return Self::Passing { fut };
        }
        Self::Calling {
            fut,
            headers,
            charge,
        }
    }
}

impl<F, S, B> fmt::Debug for ResponseFuture<F, S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Passing { .. } | State::Calling { .. } => "calling",
            State::Done { .. } => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<F, S, B, ResB, E> Future for ResponseFuture<F, S, B>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    S: Service<Request<B>, Response = Response<ResB>, Error = E, Future = F>,
    ResB: RefusalBody + http_body::Body,
{
    type Output = Result<Response<ResB>, E>;

    // Inline: out of line, the response is copied once more on its way out.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Deciding { decide, inner, req } => {
                    let Decided { verdict, charge } = ready!(decide.as_mut().poll(cx));
                    match verdict {
                        Verdict::Pass(headers) => {
                            let mut inner = inner.take().expect("polled after completion");
                            let req = req.take().expect("polled after completion");
                            State::calling(inner.call(req), headers, charge)
                        }
                        Verdict::Respond(response) => State::Done {
                            response: Some(*response),
                        },
                        Verdict::Limited(limited) => {
                            let req = req.take().expect("polled after completion");
                            State::Done {
                                response: Some(limited.respond(req)),
                            }
                        }
                    }
                }
                StateProj::Passing { fut } => return fut.poll(cx),
                StateProj::Calling {
                    fut,
                    headers,
                    charge,
                } => {
                    let mut response = ready!(fut.poll(cx))?;
                    std::mem::take(headers).replace_inner(&mut response);
                    if let Some(charge) = charge.take() {
                        response = charge.meter(response);
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Done { response } => {
                    let mut response = response
                        .take()
                        .expect("polled after completion")
                        .map(ResB::refusal);
                    response.extensions_mut().insert(OwnAnswer);
                    return Poll::Ready(Ok(response));
                }
            };
            this.state.set(next);
        }
    }
}
