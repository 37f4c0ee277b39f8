//! The matrix's callers: [`TASKS`] tasks deciding in a loop while a test
//! breaks the server, each call's outcome and latency kept ([`Load`]).

use super::*;

/// What one decision answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Admitted,
    Denied,
    Failed(BackendErrorKind),
}

/// One decision, timed from the start of the load.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call {
    pub(super) task: usize,
    pub(super) start: Duration,
    pub(super) end: Duration,
    pub(super) outcome: Outcome,
}

impl Call {
    pub(super) fn latency(&self) -> Duration {
        self.end - self.start
    }

    pub(super) fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }
}

/// [`TASKS`] callers deciding on one key until stopped, each recording
/// every call; counters let the test poll progress.
pub(super) struct Load {
    pub(super) base: Instant,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) progress: Arc<Progress>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<Vec<Call>>>,
}

#[derive(Default)]
pub(super) struct Progress {
    pub(super) completed: AtomicUsize,
    pub(super) admitted: AtomicU64,
    pub(super) failed: AtomicUsize,
    /// The latest start (ns from the load's base) of a call that got an
    /// answer from Redis.
    pub(super) last_answered_start_ns: AtomicU64,
}

impl Load {
    pub(super) fn start(limiter: &Arc<Guarded>) -> Self {
        let base = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let tasks = (0..TASKS)
            .map(|task| {
                let limiter = Arc::clone(limiter);
                let stop = Arc::clone(&stop);
                let progress = Arc::clone(&progress);
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let start = base.elapsed();
                        let result = limiter.acquire(b"shared", 1).await;
                        let end = base.elapsed();
                        let outcome = match &result {
                            Ok(d) if d.allowed => Outcome::Admitted,
                            Ok(_) => Outcome::Denied,
                            Err(e) => Outcome::Failed(common::backend_kind(e)),
                        };
                        match outcome {
                            Outcome::Failed(_) => {
                                progress.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            Outcome::Admitted | Outcome::Denied => {
                                if outcome == Outcome::Admitted {
                                    progress.admitted.fetch_add(1, Ordering::Relaxed);
                                }
                                progress
                                    .last_answered_start_ns
                                    .fetch_max(start.as_nanos() as u64, Ordering::Relaxed);
                            }
                        }
                        progress.completed.fetch_add(1, Ordering::Relaxed);
                        calls.push(Call {
                            task,
                            start,
                            end,
                            outcome,
                        });
                        let failed = matches!(outcome, Outcome::Failed(_));
                        tokio::time::sleep(if failed { BACK_OFF } else { PACE }).await;
                    }
                    calls
                })
            })
            .collect();
        Self {
            base,
            stop,
            progress,
            tasks,
        }
    }

    /// Time since the load started.
    pub(super) fn now(&self) -> Duration {
        self.base.elapsed()
    }

    pub(super) fn admitted(&self) -> u64 {
        self.progress.admitted.load(Ordering::Relaxed)
    }

    pub(super) fn completed(&self) -> usize {
        self.progress.completed.load(Ordering::Relaxed)
    }

    pub(super) fn failed(&self) -> usize {
        self.progress.failed.load(Ordering::Relaxed)
    }

    /// Whether a call started after `t` got an answer from Redis.
    pub(super) fn answered_since(&self, t: Duration) -> bool {
        self.progress.last_answered_start_ns.load(Ordering::Relaxed) > t.as_nanos() as u64
    }

    /// Waits until every caller has made `n` more calls (about).
    pub(super) async fn run_for_calls(&self, n: usize) {
        let target = self.completed() + n * TASKS;
        wait_until("more calls", || self.completed() >= target).await;
    }

    pub(super) async fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        for task in self.tasks {
            calls.extend(task.await.unwrap());
        }
        calls.sort_by_key(|c| c.start);
        calls
    }
}
