//! A run of `limiter bench`: the connections made, the limiter's phase
//! (and on Redis the ceiling's, alternating), the report printed, the
//! run's keys deleted.

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, Policies};
use limiter_memory::MemoryLimiter;
use limiter_redis::url::redact_url;
use limiter_redis::{RedisBackend, RedisLimiter};

use super::args::{BenchArgs, OnFailure};
use super::ceiling::{ceiling, ceiling_key, CeilingClient};
use super::lease::{bound, exact_most_in_window, leased, BenchLeased, LeaseFacts, WindowCounts};
use super::phase::{phase, Phase, Tally};
use super::report::Report;
use super::server_stats::{decision_calls, server_cpu};
use crate::backend;
use crate::cli::{BackendKind, Format};
use crate::failure::Failure;

/// How long connecting to Redis may take in all before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// On Redis, the ceiling and the limiter each run in this many slices of
/// the duration, alternating, so that a shared machine's changing load
/// weighs on both phases alike and the ratio holds from run to run.
const SLICES: u32 = 5;
/// A task yields to the runtime after this many calls: one that decides
/// without I/O (memory, or a failure policy while Redis is down) would
/// otherwise keep its thread, and the other tasks would not run.
const YIELD_EVERY: u32 = 64;

/// Runs the benchmark and prints its report to stdout.
pub(crate) async fn run(args: &BenchArgs) -> Result<(), Failure> {
    let policy = Policies::new(args.policy.iter().flat_map(|set| set.iter().cloned()))
        .map_err(|e| Failure::usage("invalid policy").with_source(e))?;
    let keys: Arc<[String]> = (0..args.keys).map(|i| format!("bench:{i}")).collect();
    // With --lease: each key's units per window of the first policy.
    let counts = args
        .lease_options()
        .map(|_| Arc::new(WindowCounts::new(keys.len(), policy[0].window_us())));
    let report = match args.backend.backend {
        BackendKind::Memory => {
            backend::memory_takes_no_redis_flags(&args.backend)?;
            let exact = wrap(
                MemoryLimiter::builder(policy.clone()).build(),
                args.on_failure,
            );
            let (limiter, lease) = lease(exact, args);
            let decisions = decide(&limiter, &keys, args, args.duration, counts.as_ref()).await?;
            Report {
                args,
                policy: policy.clone(),
                server: None,
                decisions,
                server_cpu: None,
                ceiling: None,
                cleanup: None,
                lease: lease.map(|leased| facts(&policy, &leased, counts.as_deref(), None)),
            }
        }
        BackendKind::Redis | BackendKind::RedisCluster => {
            let redis = backend::redis_backend(&args.backend)?;
            let server = redis.url().to_owned();
            let (exact, fresh) = connect_redis(args, &redis, policy.clone()).await?;
            let (limiter, lease) = lease(exact, args);
            let slice = args.duration / SLICES;
            let mut plain = match args.backend.backend {
                BackendKind::RedisCluster => None,
                _ => Some(connect_plain(&args.backend.redis_urls()[0]).await?),
            };
            let client = match &plain {
                None => CeilingClient::Cluster(redis.clone()),
                Some(conn) => CeilingClient::Server(conn.clone()),
            };
            let calls_before = match plain.as_mut() {
                Some(conn) => decision_calls(conn).await,
                None => None,
            };
            let (ceiling, decisions, server_cpu) = alternate(
                client,
                plain.clone(),
                &limiter,
                &keys,
                args,
                slice,
                counts.as_ref(),
            )
            .await?;
            let calls_after = match plain.as_mut() {
                Some(conn) => decision_calls(conn).await,
                None => None,
            };
            let redis_calls = calls_before
                .zip(calls_after)
                .map(|(before, after)| after.saturating_sub(before));
            let cleanup = if fresh {
                Some(delete_keys(&limiter, &keys, args.concurrency).await?)
            } else {
                None
            };
            Report {
                args,
                policy: policy.clone(),
                server: Some(server),
                decisions,
                server_cpu,
                ceiling: Some(ceiling),
                cleanup,
                lease: lease.map(|leased| facts(&policy, &leased, counts.as_deref(), redis_calls)),
            }
        }
    };
    let text = match args.format {
        Format::Table => report.table(),
        Format::Json => report.json(),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // A reader that went away (`| head`) wanted no more.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(Failure::runtime(format!("cannot write the report: {e}")));
        }
        _ => {}
    }
    if let Some(failed) = report.cleanup.filter(|&failed| failed > 0) {
        eprintln!(
            "warning: {failed} of {} benchmark keys could not be deleted; they expire by their TTL",
            keys.len()
        );
    }
    Ok(())
}

/// `exact` behind leases when `--lease` asks for them (and the leased
/// limiter, to read after the run), else as it is.
fn lease(
    exact: Arc<dyn Limiter>,
    args: &BenchArgs,
) -> (Arc<dyn Limiter>, Option<Arc<BenchLeased>>) {
    match args.lease_options() {
        None => (exact, None),
        Some(options) => {
            let leased = leased(exact, options);
            (Arc::clone(&leased) as Arc<dyn Limiter>, Some(leased))
        }
    }
}

/// What a leased run of `policies` through `leased` showed.
fn facts(
    policies: &Policies,
    leased: &BenchLeased,
    counts: Option<&WindowCounts>,
    redis_calls: Option<u64>,
) -> LeaseFacts {
    let first = &policies[0];
    let max_lease = leased.max_lease();
    LeaseFacts {
        lifetime: leased.lifetime(),
        max_lease,
        min_lease: leased.min_lease(),
        budget_percent: leased.over_admission_budget(),
        stats: leased.stats(),
        most_in_window: counts.map_or(0, WindowCounts::most),
        exact_most: exact_most_in_window(first),
        bound: bound(first, max_lease),
        redis_calls,
    }
}

/// `limiter` wrapped in the failure policy of `--on-failure`.
fn wrap(limiter: impl Limiter + 'static, on_failure: OnFailure) -> Arc<dyn Limiter> {
    match on_failure {
        OnFailure::Error => Arc::new(limiter),
        OnFailure::Open => Arc::new(limiter.on_failure(FailurePolicy::FailOpen)),
        OnFailure::Closed => Arc::new(limiter.on_failure(FailurePolicy::FailClosed)),
    }
}

/// The limiter on Redis (Redis `TIME`, no caller clock), and whether its
/// key prefix is a fresh one of this run's.
async fn connect_redis(
    args: &BenchArgs,
    redis: &RedisBackend,
    policy: Policies,
) -> Result<(Arc<dyn Limiter>, bool), Failure> {
    let (prefix, fresh) = match &args.backend.redis_prefix {
        Some(prefix) => (prefix.clone(), false),
        None => (backend::fresh_prefix("bench"), true),
    };
    let build = async {
        redis.connect().await?;
        RedisLimiter::builder(redis, policy)
            .key_prefix(prefix)
            .engine(args.backend.redis_engine.engine())
            .build()
            .await
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, build).await {
        Ok(Ok(limiter)) => Ok((wrap(limiter, args.on_failure), fresh)),
        Ok(Err(Error::InvalidPolicy(e))) => Err(Failure::usage(format!("invalid policy: {e}"))),
        Ok(Err(e @ Error::InvalidConfig(_))) => Err(Failure::usage(backend::reason(&e))),
        Ok(Err(e)) => Err(Failure::runtime(backend::reason(&e))),
        Err(_) => Err(Failure::runtime(format!(
            "cannot connect to Redis at {}: no answer within {}s",
            redis.url(),
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// The ceiling's connection: plain redis-rs, one multiplexed connection.
async fn connect_plain(url: &str) -> Result<redis::aio::MultiplexedConnection, Failure> {
    let failed = |e: &dyn std::fmt::Display| {
        Failure::runtime(format!(
            "cannot open the ceiling's redis-rs connection to {}: {e}",
            redact_url(url)
        ))
    };
    let client = redis::Client::open(url).map_err(|e| failed(&e))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection()).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(failed(&e)),
        Err(_) => Err(failed(&"no answer within 5s")),
    }
}

/// The limiter's phase: every task decides one unit at a time until the
/// deadline; the j-th request of task i goes to key (i + j·N) mod K, so
/// the requests of all tasks together go round-robin over the keys.
async fn decide(
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    duration: Duration,
    counts: Option<&Arc<WindowCounts>>,
) -> Result<Phase, Failure> {
    let concurrency = args.concurrency as usize;
    let counts = counts.cloned();
    phase(args.concurrency, duration, |first, deadline| {
        let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
        let counts = counts.clone();
        async move {
            let mut tally = Tally::new();
            let count = keys.len();
            let step = concurrency % count;
            let mut index = first % count;
            let mut calls = 0u32;
            loop {
                let started = Instant::now();
                if started >= deadline {
                    break;
                }
                let key_index = index;
                let key = keys[index].as_str();
                index += step;
                if index >= count {
                    index -= count;
                }
                let result = match limiter.acquire_now(key.as_bytes(), 1) {
                    Some(result) => result,
                    None => limiter.acquire(key.as_bytes(), 1).await,
                };
                tally.latency.record(started.elapsed());
                match result {
                    Ok(decision) => match decision.source {
                        DecisionSource::FailOpen => tally.fail_open += 1,
                        DecisionSource::FailClosed => tally.fail_closed += 1,
                        source if decision.allowed => {
                            tally.admitted += 1;
                            tally.leased += u64::from(source == DecisionSource::Lease);
                            if let Some(counts) = &counts {
                                counts.admitted(key_index, decision.time_us, 1);
                            }
                        }
                        _ => tally.denied += 1,
                    },
                    Err(e) => tally.error(|| backend::reason(&e)),
                }
                calls += 1;
                if calls == YIELD_EVERY {
                    calls = 0;
                    tokio::task::yield_now().await;
                }
            }
            tally
        }
    })
    .await
}

/// The ceiling (on `client`) and the limiter's phase in [`SLICES`] slices
/// of `slice` each, alternating, the ceiling first: (ceiling, decisions,
/// and the server's CPU over the limiter's slices when `server` can ask
/// one server for it).
async fn alternate(
    client: CeilingClient,
    mut server: Option<redis::aio::MultiplexedConnection>,
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    slice: Duration,
    counts: Option<&Arc<WindowCounts>>,
) -> Result<(Phase, Phase, Option<Duration>), Failure> {
    let ceiling_keys: Arc<[String]> = keys.iter().map(|k| ceiling_key(k)).collect();
    let (mut ceilings, mut decisions) = (Phase::empty(), Phase::empty());
    let mut cpu = Some(Duration::ZERO);
    for _ in 0..SLICES {
        ceilings.merge(ceiling(client.clone(), &ceiling_keys, args, slice).await?);
        let before = match server.as_mut() {
            Some(conn) => server_cpu(conn).await,
            None => None,
        };
        decisions.merge(decide(limiter, keys, args, slice, counts).await?);
        let after = match server.as_mut() {
            Some(conn) => server_cpu(conn).await,
            None => None,
        };
        cpu = cpu
            .zip(before.zip(after))
            .map(|(sum, (before, after))| sum + after.saturating_sub(before));
    }
    Ok((ceilings, decisions, cpu))
}

/// Deletes the run's keys (`reset`), `concurrency` at a time; how many
/// could not be.
async fn delete_keys(
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    concurrency: u32,
) -> Result<u64, Failure> {
    let workers = (concurrency as usize).min(keys.len());
    let tasks: Vec<_> = (0..workers)
        .map(|first| {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
            tokio::spawn(async move {
                let mut failed = 0u64;
                for key in keys.iter().skip(first).step_by(workers) {
                    if limiter.reset(key.as_bytes()).await.is_err() {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        failed += task
            .await
            .map_err(|e| Failure::runtime(format!("a cleanup task failed: {e}")))?;
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:secret@host"), "rediss://:***@host");
    }
}
