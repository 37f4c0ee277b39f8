//! [`Landing`]: what a request that claimed units of its key's lease in
//! flight awaits, the lease's answer (docs/spec.md section 8.1).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::leases::Leases;

/// Ready once the lease request in flight on `key` when the request
/// claimed its units has settled (granted, denied, failed or dropped), or
/// once the key is no longer held. Whatever the lease brought, the
/// request then decides again, from the units in hand or by the global
/// limiter: it waits once at most.
pub(crate) struct Landing<'a> {
    pub(crate) leases: &'a Leases,
    pub(crate) key: &'a [u8],
    /// The key's settle count when the request claimed its units.
    pub(crate) settles: u32,
}

impl Future for Landing<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let waiting = self.leases.with(self.key, |lease| {
            lease.in_flight_since(self.settles, cx.waker())
        });
        match waiting {
            Some(true) => Poll::Pending,
            _ => Poll::Ready(()),
        }
    }
}
