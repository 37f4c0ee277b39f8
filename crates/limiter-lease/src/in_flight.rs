//! [`InFlight`]: a key's lease request while it is in flight, and what
//! settles it.

use std::task::Waker;

use limiter_core::Clock;

use crate::key_lease::KeyLease;
use crate::leases::Leases;

/// A key's lease request in flight: settles it when answered, and when
/// dropped unanswered (the caller's future dropped, or an error), so the
/// key can fetch again.
pub(crate) struct InFlight<'a> {
    leases: &'a Leases,
    key: &'a [u8],
    /// The time of the settle: a key it leaves idle makes room from then.
    clock: &'a dyn Clock,
    settled: bool,
}

impl<'a> InFlight<'a> {
    pub(crate) fn new(leases: &'a Leases, key: &'a [u8], clock: &'a dyn Clock) -> Self {
        Self {
            leases,
            key,
            clock,
            settled: false,
        }
    }

    /// Runs `f` on the key's leases before the request is sent again,
    /// smaller; then wakes the requests that waited for it.
    pub(crate) fn retry(&self, f: impl FnOnce(&mut KeyLease)) {
        let waiting = self.leases.with(self.key, |lease| {
            f(lease);
            lease.unclaimed()
        });
        waiting.into_iter().flatten().for_each(Waker::wake);
    }

    /// Runs `f` on the key's leases and settles the request, under one
    /// lock; then wakes the requests that waited for it. Answers `f`'s
    /// answer, if the key is held.
    pub(crate) fn finish<R>(&mut self, f: impl FnOnce(&mut KeyLease) -> R) -> Option<R> {
        self.settled = true;
        self.settle(|lease, _| (f(lease), lease.settled()))
    }

    /// [`finish`](Self::finish), then runs `next` on the key's leases,
    /// under the same lock: with no lease in flight any more, `next` may
    /// ask the next one. Both run at the time read under the lock.
    /// Answers both answers, if the key is held.
    pub(crate) fn finish_then<R, S>(
        &mut self,
        f: impl FnOnce(&mut KeyLease, u64) -> R,
        next: impl FnOnce(&mut KeyLease, u64) -> S,
    ) -> Option<(R, S)> {
        self.settled = true;
        self.settle(|lease, now_us| {
            let answer = f(lease, now_us);
            let waiting = lease.settled();
            ((answer, next(lease, now_us)), waiting)
        })
    }

    /// Runs `settle` on the key's leases at the time read under the key's
    /// lock, which settles the request and answers the requests that
    /// waited for it; then wakes them. Answers the rest of `settle`'s
    /// answer, if the key is held.
    fn settle<R>(&self, settle: impl FnOnce(&mut KeyLease, u64) -> (R, Vec<Waker>)) -> Option<R> {
        let (answer, waiting) = self.leases.with_at(self.key, self.clock, settle)?;
        waiting.into_iter().for_each(Waker::wake);
        Some(answer)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(|lease, _| ((), lease.settled()));
        }
    }
}
