//! Many tasks on one limiter at once: decisions stay exact.

use std::sync::Arc;

use limiter_core::{Algorithm, Limiter, Policy, Rate};

use super::Subject;
use crate::Harness;

const TASKS: u64 = 8;
const REQUESTS_PER_TASK: u64 = 2_000;

/// Sends `requests` one-unit requests on each of `keys(task, i)` from
/// `TASKS` spawned tasks at once and returns, per task, the keys it was
/// admitted on.
pub(crate) async fn race(
    limiter: &Arc<dyn Limiter>,
    keys: fn(u64, u64) -> String,
) -> Vec<Vec<String>> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let limiter = Arc::clone(limiter);
            tokio::spawn(async move {
                let mut admitted = Vec::new();
                for i in 0..REQUESTS_PER_TASK {
                    let key = keys(task, i);
                    let decision = limiter
                        .acquire(key.as_bytes(), 1)
                        .await
                        .unwrap_or_else(|e| panic!("task {task}: acquire({key:?}) failed: {e}"));
                    if decision.allowed {
                        admitted.push(key);
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = Vec::new();
    for task in tasks {
        admitted.push(task.await.expect("task panicked"));
    }
    admitted
}

/// 8 tasks x 2,000 requests on one key, limit 1,000 per hour, time frozen:
/// exactly 1,000 are admitted, whatever the interleaving, for every algorithm.
pub async fn concurrent_acquires_on_one_key_admit_exactly_the_limit<H: Harness>(harness: &H) {
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::per_hour(1_000)).unwrap();
        let subject = Subject::new(harness, &policy).await;
        let admitted = race(&subject.limiter, |_, _| "hot".to_owned()).await;
        let total: usize = admitted.iter().map(Vec::len).sum();
        assert_eq!(
            total, 1_000,
            "{policy}: admitted on one key by {TASKS} racing tasks"
        );
        let after = subject.limiter.peek(b"hot", 1).await.unwrap();
        assert!(
            !after.allowed && after.remaining == 0,
            "{policy}: {after:?}"
        );
    }
}

/// 8 tasks race, each alternating between its own key and one shared key,
/// limit 500 per hour: each own key admits exactly 500, the shared key
/// exactly 500 in all.
pub async fn concurrent_keys_are_isolated<H: Harness>(harness: &H) {
    for algorithm in [Algorithm::SlidingLog, Algorithm::TokenBucket] {
        let policy = Policy::new(algorithm, Rate::per_hour(500)).unwrap();
        let subject = Subject::new(harness, &policy).await;
        let keys = |task: u64, i: u64| {
            if i.is_multiple_of(2) {
                format!("own:{task}")
            } else {
                "shared".to_owned()
            }
        };
        let admitted = race(&subject.limiter, keys).await;
        let mut shared = 0;
        for (task, keys) in admitted.iter().enumerate() {
            let own = keys.iter().filter(|k| k.starts_with("own:")).count();
            assert_eq!(own, 500, "{policy}: task {task}'s own key");
            shared += keys.len() - own;
        }
        assert_eq!(shared, 500, "{policy}: the shared key");
    }
}
