//! The Tokio runtime a backend's calls run on: the caller's, or, for a
//! caller outside any Tokio context (another executor, a plain thread's
//! `block_on`), the first runtime the backend met.
//!
//! The connections, their timeouts and the call tasks are Tokio's; without
//! this a caller outside a runtime would panic ("there is no reactor
//! running") rather than be decided.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::error::BackendError;

/// The first runtime a backend was built or called on.
#[derive(Debug, Default)]
pub(crate) struct Runtime {
    first: OnceLock<Handle>,
}

impl Runtime {
    /// Remembers the caller's runtime, if it has one.
    pub(crate) fn new() -> Self {
        let runtime = Self::default();
        runtime.caller();
        runtime
    }

    /// The caller's runtime, remembered if it is the first; `None` outside
    /// any.
    #[inline]
    fn caller(&self) -> Option<Handle> {
        let here = Handle::try_current().ok()?;
        if self.first.get().is_none() {
            let _ = self.first.set(here.clone());
        }
        Some(here)
    }

    /// Whether the caller is in a runtime (remembered if it is the first).
    /// Asked for the caller's handle: a task id alone is no proof (a
    /// `LocalSet` runs tasks on any executor, without a runtime).
    #[inline]
    pub(crate) fn is_here(&self) -> bool {
        self.caller().is_some()
    }

    /// Why a call sent to the first runtime went unanswered, for a caller
    /// outside any: that runtime has shut down. The caller's to fix (call
    /// from a runtime that runs), so no failure policy answers it.
    pub(crate) fn gone() -> BackendError {
        BackendError::config(
            "the Tokio runtime this backend calls Redis on for callers outside any has shut \
             down: call it from a running Tokio runtime",
        )
    }

    /// Spawns `task` on the caller's runtime, or, outside any, on the
    /// first one; fails (dropping `task`) if the backend never met one.
    #[inline]
    pub(crate) fn spawn<F>(&self, task: F) -> Result<JoinHandle<F::Output>, BackendError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.caller().or_else(|| self.first.get().cloned()) {
            Some(runtime) => Ok(runtime.spawn(task)),
            None => Err(BackendError::config(
                "no Tokio runtime to call Redis on: build the backend on one, or call it \
                 once from one, before calling it from outside any",
            )),
        }
    }
}

/// `work` on a task of its own on the caller's runtime, waited for until
/// `deadline`: `None` past it (or if the runtime shuts down first), the
/// work going on regardless; `None` at once, `work` not started, if the
/// deadline has passed already. A command's retry runs so: its caller's
/// wait ends at the command's deadline, and the retry still ends by its
/// own timeouts, whose failure marks a hung server or node down
/// (cancelling it would leave that to the next caller, who would wait on
/// it again).
pub(crate) async fn within<T: Send + 'static>(
    deadline: Instant,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    if Instant::now() >= deadline {
        return None;
    }
    let task = tokio::spawn(work);
    match tokio::time::timeout_at(deadline.into(), task).await {
        Ok(Ok(done)) => Some(done),
        Ok(Err(failed)) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        _ => None,
    }
}
