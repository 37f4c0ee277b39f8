//! Changing a limiter's policies on a cluster (docs/spec.md section 9):
//! the policy-change vectors, whose keys spread over the primaries, on
//! both engines, on a cluster whose every node loaded the module.

use limiter_redis::Engine;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_change_vectors_replay_byte_for_byte_on_a_redis_cluster() {
    let cluster = cluster_of_its_own_for(Engine::Module).await;
    for engine in [Engine::Lua, Engine::Module] {
        let backend = backend(&cluster);
        limiter_test::cases::policy_change_vectors_replay_byte_for_byte(
            |policies, clock| {
                let backend = backend.clone();
                async move {
                    let limiter = RedisLimiter::builder(&backend, policies)
                        .key_prefix(common::fresh_prefix("vectors"))
                        .engine(engine)
                        .clock(clock)
                        .build()
                        .await
                        .unwrap();
                    assert_eq!(limiter.engine(), engine);
                    limiter
                }
            },
            |limiter, policies| limiter.set_policies(policies).unwrap(),
        )
        .await;
    }
}
