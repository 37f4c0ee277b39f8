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

use crate::answer::own_answer::OwnAnswer;
use crate::answer::rate_headers::RateHeaders;
use crate::answer::response::Verdict;
use crate::middleware::body::RefusalBody;
use crate::middleware::pending::{Decide, Decided};
use crate::middleware::response_charge::ResponseCharge;

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
        },
        // Its headers in the charge: this state no larger than `Calling`.
        Charging {
            #[pin]
            fut: F,
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

    /// The inner service's response, `headers` to be added to it.
    #[inline]
    pub(crate) fn calling(fut: F, headers: RateHeaders) -> Self {
        if headers.is_empty() {
            return Self::passing(fut);
        }
        Self {
            state: State::Calling { fut, headers },
        }
    }

    /// The inner service's response, `headers` to be added to it, and its
    /// body metered for `charge`.
    pub(crate) fn charging(fut: F, headers: RateHeaders, mut charge: Box<ResponseCharge>) -> Self {
        charge.headers = headers;
        Self {
            state: State::Charging {
                fut,
                charge: Some(charge),
            },
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

impl<F, S, B> fmt::Debug for ResponseFuture<F, S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Passing { .. } | State::Calling { .. } | State::Charging { .. } => "calling",
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
                            let fut = inner.call(req);
                            match charge {
                                Some(mut charge) => {
                                    charge.headers = headers;
                                    State::Charging {
                                        fut,
                                        charge: Some(charge),
                                    }
                                }
                                None if headers.is_empty() => State::Passing { fut },
                                None => State::Calling { fut, headers },
                            }
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
                StateProj::Calling { fut, headers } => {
                    let mut response = ready!(fut.poll(cx))?;
                    std::mem::take(headers).replace_inner(&mut response);
                    return Poll::Ready(Ok(response));
                }
                StateProj::Charging { fut, charge } => {
                    let response = ready!(fut.poll(cx))?;
                    let charge = charge.take().expect("polled after completion");
                    return Poll::Ready(Ok(charge.meter(response)));
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
