//! Decisions from many tasks over a set of targets while a test changes or
//! breaks the cluster, and what they saw: [`Load`], its [`Report`].

use super::*;

/// Load spread over every primary: a sliding log of 10,000 an hour on
/// `backend`, `per_primary` keys of each primary, whether each key is the
/// first primary's (the one a test then takes down), and each key with
/// the limiter, for [`Load::start`].
#[allow(clippy::type_complexity)] // the three views a fault test reads
pub(super) async fn spread_over_primaries(
    cluster: &RedisCluster,
    backend: &RedisBackend,
    name: &str,
    per_primary: usize,
) -> (Vec<String>, Vec<bool>, Vec<(Arc<RedisLimiter>, String)>) {
    let limiter = limiter(
        backend,
        Policy::sliding_log(Rate::per_hour(10_000)).unwrap(),
        name,
    )
    .await;
    let primaries = cluster.primaries();
    let keys = keys_on(cluster, &limiter, name, &primaries, per_primary);
    let on_first: Vec<bool> = keys
        .iter()
        .map(|k| cluster.node_for_key(limiter.redis_key(k.as_bytes())) == primaries[0])
        .collect();
    let targets = keys
        .iter()
        .map(|k| (Arc::clone(&limiter), k.clone()))
        .collect();
    (keys, on_first, targets)
}
/// Decisions from many tasks over a set of (limiter, key) targets until
/// stopped, with each target's figures as they happen.
pub(super) struct Load {
    pub(super) stats: Arc<Vec<Stats>>,
    pub(super) decisions: Arc<AtomicU64>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) started: Instant,
    pub(super) tasks: Vec<tokio::task::JoinHandle<Errors>>,
}

/// One target's figures: admissions, errors (and when, in µs since the
/// load started), and its slowest decision (µs).
pub(super) struct Stats {
    pub(super) admitted: AtomicU64,
    pub(super) errors: AtomicU64,
    /// Errors of kind [`Timeout`](BackendErrorKind::Timeout): decisions
    /// that waited out a command timeout (the others failed at once).
    pub(super) timeouts: AtomicU64,
    pub(super) first_error_us: AtomicU64,
    pub(super) last_error_us: AtomicU64,
    pub(super) slowest_us: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            admitted: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error_us: AtomicU64::new(u64::MAX),
            last_error_us: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
        }
    }
}

/// The errors the tasks saw: how many, when (since the load started), and
/// a few distinct messages (with their causes).
#[derive(Debug, Default)]
pub(super) struct Errors {
    pub(super) count: u64,
    pub(super) first: Option<Duration>,
    pub(super) last: Option<Duration>,
    pub(super) samples: Vec<String>,
}

impl Errors {
    pub(super) fn merge(&mut self, other: Self) {
        self.count += other.count;
        self.first = self.first.into_iter().chain(other.first).min();
        self.last = self.last.into_iter().chain(other.last).max();
        for sample in other.samples {
            if self.samples.len() < 8 && !self.samples.contains(&sample) {
                self.samples.push(sample);
            }
        }
    }
}
/// What a load did, per target and in all.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) admitted: Vec<u64>,
    pub(super) errors_per_target: Vec<u64>,
    /// Per target: its first and last error, since the load started.
    pub(super) error_span: Vec<Option<(Duration, Duration)>>,
    pub(super) slowest: Vec<Duration>,
    /// Per target: errors that waited out a command timeout
    /// ([`Stats::timeouts`]).
    pub(super) timeouts: Vec<u64>,
    pub(super) decisions: u64,
    pub(super) errors: Errors,
}

impl Load {
    /// Starts `tasks` tasks, task `t`'s `n`th decision on target
    /// `(t + n) % targets`. A task that gets an error waits a millisecond
    /// before its next decision (a failing backend answers at once).
    pub(super) fn start(targets: Vec<(Arc<RedisLimiter>, String)>, tasks: usize) -> Self {
        let targets = Arc::new(targets);
        let stats: Arc<Vec<Stats>> = Arc::new(targets.iter().map(|_| Stats::default()).collect());
        let decisions = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let tasks = (0..tasks)
            .map(|task| {
                let (targets, stats, decisions, stop) = (
                    Arc::clone(&targets),
                    Arc::clone(&stats),
                    Arc::clone(&decisions),
                    Arc::clone(&stop),
                );
                tokio::spawn(async move {
                    let mut errors = Errors::default();
                    let mut n = task;
                    while !stop.load(Ordering::Relaxed) {
                        let i = n % targets.len();
                        n += 1;
                        let (limiter, key) = &targets[i];
                        let sent = Instant::now();
                        let result = limiter.acquire(key.as_bytes(), 1).await;
                        let took = sent.elapsed().as_micros() as u64;
                        stats[i].slowest_us.fetch_max(took, Ordering::Relaxed);
                        match result {
                            Ok(decision) => {
                                decisions.fetch_add(1, Ordering::Relaxed);
                                if decision.allowed {
                                    stats[i].admitted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                let at = started.elapsed();
                                let at_us = at.as_micros() as u64;
                                stats[i].errors.fetch_add(1, Ordering::Relaxed);
                                if common::backend_kind(&e) == BackendErrorKind::Timeout {
                                    stats[i].timeouts.fetch_add(1, Ordering::Relaxed);
                                }
                                stats[i].first_error_us.fetch_min(at_us, Ordering::Relaxed);
                                stats[i].last_error_us.fetch_max(at_us, Ordering::Relaxed);
                                errors.count += 1;
                                errors.first.get_or_insert(at);
                                errors.last = Some(at);
                                let message = chain(&e);
                                if errors.samples.len() < 3 && !errors.samples.contains(&message) {
                                    errors.samples.push(message);
                                }
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                    }
                    errors
                })
            })
            .collect();
        Self {
            stats,
            decisions,
            stop,
            started,
            tasks,
        }
    }

    /// Each target's admissions so far.
    pub(super) fn admitted(&self) -> Vec<u64> {
        self.stats
            .iter()
            .map(|s| s.admitted.load(Ordering::Relaxed))
            .collect()
    }

    /// Stops every task and reports.
    pub(super) async fn stop(mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut errors = Errors::default();
        for task in std::mem::take(&mut self.tasks) {
            errors.merge(task.await.expect("a load task panicked"));
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Report {
            admitted: self.admitted(),
            errors_per_target: self.stats.iter().map(|s| load(&s.errors)).collect(),
            error_span: self
                .stats
                .iter()
                .map(|s| {
                    (load(&s.errors) > 0).then(|| {
                        (
                            Duration::from_micros(load(&s.first_error_us)),
                            Duration::from_micros(load(&s.last_error_us)),
                        )
                    })
                })
                .collect(),
            slowest: self
                .stats
                .iter()
                .map(|s| Duration::from_micros(load(&s.slowest_us)))
                .collect(),
            timeouts: self.stats.iter().map(|s| load(&s.timeouts)).collect(),
            decisions: load(&self.decisions),
            errors,
        }
    }
}
