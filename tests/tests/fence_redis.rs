//! `lock_runtime::fence::redis` on real servers: what each call accepts and refuses, that a
//! refused call writes nothing, the fence beside its data in one Cluster slot, holders racing
//! for one resource, a holder stopped past its lease refused by the resource, and the script
//! loaded again after `SCRIPT FLUSH`.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::distributed_lock;
use lock_runtime::fence::redis::{self as fenced, fence_key};
use lock_runtime::fence::{Fence, FenceError};
use lock_tests::prelude::*;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

/// A cart kept in Redis, fenced by the section's own lock: the example of docs/FENCING.md.
#[distributed_lock(key = "cart:<id>", ttl = "30s", manager = locks)]
async fn add_item(
    locks: &LockManager,
    redis: &mut MultiplexedConnection,
    id: u64,
    item: &str,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let fence = Fence::current()?; // `cart:<id>`, this section's token
    let cart: Option<String> = fenced::claim_get(redis, &fence).await?; // claim + GET
    let cart = format!("{}{item};", cart.unwrap_or_default());
    fenced::set(redis, &fence, &cart, None).await?; // claim + SET, refused once overtaken
    Ok(cart)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_section_claims_and_writes_its_cart_through_the_fence() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let mut conn = data(&server).await;
    add_item(&locks, &mut conn, 7, "tea").await.expect("first");
    let cart = add_item(&locks, &mut conn, 7, "milk")
        .await
        .expect("second");
    assert_eq!(cart, "tea;milk;");
    let stored: String = conn.get(fence_key("cart:7")).await.expect("GET");
    let (token, holder) = stored.split_once(' ').expect("a token and a holder id");
    assert!(
        token.parse::<u64>().is_ok() && holder.len() == 16,
        "{stored}"
    );
}

/// A connection of the application's to `server`: where its data lives.
async fn data(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// The fence of `resource` as the server keeps it.
async fn fence_of(conn: &mut MultiplexedConnection, resource: &str) -> Option<u64> {
    conn.get(fence_key(resource)).await.expect("GET")
}

fn assert_stale<T: std::fmt::Debug>(answer: Result<T, FenceError>, current: u64, offered: u64) {
    match answer {
        Err(FenceError::Stale {
            current: c,
            offered: o,
            ..
        }) if (c, o) == (current, offered) => {}
        other => {
            panic!("expected Stale {{ current: {current}, offered: {offered} }}, got {other:?}")
        }
    }
}

#[tokio::test]
async fn a_claim_raises_the_fence_and_a_lower_token_is_refused_as_stale() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    fenced::claim(&mut conn, &Fence::new("cart:1", 5))
        .await
        .expect("first claim");
    assert_eq!(fence_of(&mut conn, "cart:1").await, Some(5));
    fenced::claim(&mut conn, &Fence::new("cart:1", 5))
        .await
        .expect("the same token again");
    fenced::claim(&mut conn, &Fence::new("cart:1", 9))
        .await
        .expect("a newer holder");
    assert_eq!(fence_of(&mut conn, "cart:1").await, Some(9));
    assert_stale(
        fenced::claim(&mut conn, &Fence::new("cart:1", 5)).await,
        9,
        5,
    );
    assert_eq!(fence_of(&mut conn, "cart:1").await, Some(9));
}

#[tokio::test]
async fn a_check_accepts_only_the_fences_own_token() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let refused = fenced::check(&mut conn, &Fence::new("cart:2", 5)).await;
    assert!(
        matches!(
            refused,
            Err(FenceError::NotClaimed {
                current: None,
                offered: 5,
                ..
            })
        ),
        "{refused:?}"
    );
    fenced::claim(&mut conn, &Fence::new("cart:2", 5))
        .await
        .expect("claim");
    fenced::check(&mut conn, &Fence::new("cart:2", 5))
        .await
        .expect("the claimed token");
    assert_stale(
        fenced::check(&mut conn, &Fence::new("cart:2", 4)).await,
        5,
        4,
    );
    let lower = fenced::check(&mut conn, &Fence::new("cart:2", 6)).await;
    assert!(
        matches!(
            lower,
            Err(FenceError::NotClaimed {
                current: Some(5),
                offered: 6,
                ..
            })
        ),
        "{lower:?}"
    );
    // A check changes nothing.
    assert_eq!(fence_of(&mut conn, "cart:2").await, Some(5));
}

#[tokio::test]
async fn a_token_handed_out_twice_claims_for_the_first_holder_only() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let first = Fence::new("cart:10", 7).held_by("holder-a");
    let second = Fence::new("cart:10", 7).held_by("holder-b");
    fenced::claim(&mut conn, &first).await.expect("first claim");
    assert_stale(fenced::claim(&mut conn, &second).await, 7, 7);
    assert_stale(fenced::set(&mut conn, &second, "b", None).await, 7, 7);
    assert_stale(fenced::check(&mut conn, &second).await, 7, 7);
    fenced::set(&mut conn, &first, "a", None)
        .await
        .expect("the claim's own holder");
    fenced::check(&mut conn, &first)
        .await
        .expect("the claim's own holder");
    let value: String = conn.get("cart:10").await.expect("GET");
    assert_eq!(value, "a");
    // A fence without a holder id is not told apart; a newer token takes over from both.
    fenced::claim(&mut conn, &Fence::new("cart:10", 7))
        .await
        .expect("no holder id");
    fenced::claim(&mut conn, &second.clone().on("cart:10").held_by("holder-b"))
        .await
        .expect_err("still the first holder's");
    fenced::claim(&mut conn, &Fence::new("cart:10", 8).held_by("holder-b"))
        .await
        .expect("newer");
    assert_stale(fenced::claim(&mut conn, &first).await, 8, 7);
}

#[tokio::test]
async fn a_fenced_read_claims_and_reads_in_one_step_and_a_stale_one_reads_nothing() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let _: () = conn.set("cart:3", "apple").await.expect("SET");
    let read: Option<String> = fenced::claim_get(&mut conn, &Fence::new("cart:3", 3))
        .await
        .expect("claim and read");
    assert_eq!(read.as_deref(), Some("apple"));
    assert_eq!(fence_of(&mut conn, "cart:3").await, Some(3));
    let missing: Option<String> = fenced::claim_get(&mut conn, &Fence::new("cart:none", 1))
        .await
        .expect("a missing key reads as nil");
    assert_eq!(missing, None);
    fenced::claim(&mut conn, &Fence::new("cart:3", 8))
        .await
        .expect("newer");
    assert_stale(
        fenced::claim_get::<_, Option<String>>(&mut conn, &Fence::new("cart:3", 3)).await,
        8,
        3,
    );
}

#[tokio::test]
async fn a_fenced_set_writes_with_its_expiry_and_a_refused_one_writes_nothing() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let old = Fence::new("order:4", 10);
    fenced::set(&mut conn, &old, "paid", Some(Duration::from_secs(60)))
        .await
        .expect("set");
    let value: String = conn.get("order:4").await.expect("GET");
    assert_eq!(value, "paid");
    let pttl: i64 = conn.pttl("order:4").await.expect("PTTL");
    assert!((1..=60_000).contains(&pttl), "{pttl}");
    // The fence itself never expires.
    let fence_ttl: i64 = conn.pttl(fence_key("order:4")).await.expect("PTTL");
    assert_eq!(fence_ttl, -1);
    fenced::set(&mut conn, &Fence::new("order:4", 11), "shipped", None)
        .await
        .expect("newer");
    assert_stale(fenced::set(&mut conn, &old, "refunded", None).await, 11, 10);
    let value: String = conn.get("order:4").await.expect("GET");
    assert_eq!(value, "shipped");
}

#[tokio::test]
async fn a_fenced_hset_sets_fields_and_a_refused_one_sets_none() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let added = fenced::hset(
        &mut conn,
        &Fence::new("user:5", 2),
        &[("name", "ada"), ("plan", "pro")],
    )
    .await
    .expect("hset");
    assert_eq!(added, 2);
    fenced::claim(&mut conn, &Fence::new("user:5", 3))
        .await
        .expect("newer");
    assert_stale(
        fenced::hset(
            &mut conn,
            &Fence::new("user:5", 2),
            &[("plan", "free"), ("x", "y")],
        )
        .await,
        3,
        2,
    );
    let fields: Vec<(String, String)> = conn.hgetall("user:5").await.expect("HGETALL");
    let mut fields = fields;
    fields.sort();
    assert_eq!(
        fields,
        vec![("name".into(), "ada".into()), ("plan".into(), "pro".into())]
    );
}

#[tokio::test]
async fn a_fenced_del_deletes_the_data_and_keeps_the_fence() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let _: () = conn.set("session:6", "x").await.expect("SET");
    fenced::claim(&mut conn, &Fence::new("session:6", 7))
        .await
        .expect("newer");
    assert_stale(
        fenced::del(&mut conn, &Fence::new("session:6", 6)).await,
        7,
        6,
    );
    let exists: bool = conn.exists("session:6").await.expect("EXISTS");
    assert!(exists, "a refused DEL deleted the data");
    assert!(
        fenced::del(&mut conn, &Fence::new("session:6", 7))
            .await
            .expect("del")
    );
    assert!(
        !fenced::del(&mut conn, &Fence::new("session:6", 7))
            .await
            .expect("del")
    );
    assert_eq!(fence_of(&mut conn, "session:6").await, Some(7));
    assert_stale(
        fenced::claim(&mut conn, &Fence::new("session:6", 6)).await,
        7,
        6,
    );
}

#[tokio::test]
async fn a_fenced_command_runs_on_the_data_key_and_a_refused_one_does_not_run() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let fence = Fence::new("stock:7", 4);
    let left: i64 = fenced::command(
        &mut conn,
        &fence,
        redis::cmd("INCRBY").arg("stock:7").arg(5),
    )
    .await
    .expect("incrby");
    assert_eq!(left, 5);
    let pushed: u64 = fenced::command(
        &mut conn,
        &Fence::new("log:7", 1),
        redis::cmd("rpush").arg("log:7").arg("a").arg("b"),
    )
    .await
    .expect("rpush");
    assert_eq!(pushed, 2);
    fenced::claim(&mut conn, &Fence::new("stock:7", 5))
        .await
        .expect("newer");
    assert_stale(
        fenced::command::<_, i64>(
            &mut conn,
            &fence,
            redis::cmd("INCRBY").arg("stock:7").arg(5),
        )
        .await,
        5,
        4,
    );
    let stock: i64 = conn.get("stock:7").await.expect("GET");
    assert_eq!(stock, 5);
}

/// `XADD *` and `SPOP` answer what no argument fixes; the fence is raised after them, which
/// Redis 5 allows only to a script replicated as its effects.
#[tokio::test]
async fn a_command_whose_effect_its_arguments_do_not_fix_is_fenced_too() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let events = Fence::new("events:1", 3);
    let id: String = fenced::command(
        &mut conn,
        &events,
        redis::cmd("XADD")
            .arg("events:1")
            .arg("*")
            .arg("kind")
            .arg("paid"),
    )
    .await
    .expect("xadd");
    assert!(id.contains('-'), "{id}");
    let _: u64 = conn.sadd("pool:1", &["a", "b"]).await.expect("SADD");
    let taken: Option<String> = fenced::command(
        &mut conn,
        &Fence::new("pool:1", 1),
        redis::cmd("SPOP").arg("pool:1"),
    )
    .await
    .expect("spop");
    assert!(matches!(taken.as_deref(), Some("a" | "b")), "{taken:?}");
    assert_eq!(fence_of(&mut conn, "pool:1").await, Some(1));
}

#[tokio::test]
async fn a_command_on_another_key_is_not_sent() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let fence = Fence::new("stock:8", 4);
    for cmd in [
        redis::cmd("INCRBY").arg("other").arg(1).clone(),
        redis::cmd("DEL").arg("stock:8").arg("other").clone(),
        redis::cmd("RENAME").arg("stock:8").arg("other").clone(),
        redis::cmd("FLUSHALL").clone(),
    ] {
        let refused = fenced::command::<_, redis::Value>(&mut conn, &fence, &cmd).await;
        match refused {
            Err(err @ FenceError::Store { .. }) => {
                assert!(err.to_string().contains("stock:8"), "{err}")
            }
            other => panic!("expected a refusal before sending, got {other:?}"),
        }
    }
    let keys: Vec<String> = conn.keys("*").await.expect("KEYS");
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn a_command_the_server_refuses_leaves_the_fence_unraised() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    let _: () = conn.set("name:9", "text").await.expect("SET");
    fenced::claim(&mut conn, &Fence::new("name:9", 2))
        .await
        .expect("claim");
    let failed = fenced::command::<_, i64>(
        &mut conn,
        &Fence::new("name:9", 3),
        redis::cmd("HINCRBY").arg("name:9").arg("f").arg(1),
    )
    .await;
    match failed {
        Err(err @ FenceError::Store { .. }) => {
            let shown = err.to_string();
            assert!(
                shown.contains("name:9") && shown.contains("fenced HINCRBY"),
                "{shown}"
            );
            assert!(shown.contains("WRONGTYPE"), "{shown}");
        }
        other => panic!("expected the server's error, got {other:?}"),
    }
    assert_eq!(fence_of(&mut conn, "name:9").await, Some(2));
}

#[tokio::test]
async fn an_unreachable_server_is_a_store_error_naming_the_resource_and_step() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    server.kill();
    let failed = fenced::claim(&mut conn, &Fence::new("gone:1", 1)).await;
    match failed {
        Err(err @ FenceError::Store { .. }) => {
            let shown = err.to_string();
            assert!(
                shown.contains("gone:1") && shown.contains("redis: claim"),
                "{shown}"
            );
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again() {
    let server = RedisServer::start();
    let mut conn = data(&server).await;
    fenced::claim(&mut conn, &Fence::new("script:1", 1))
        .await
        .expect("claim");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("flush");
    let read: Option<String> = fenced::claim_get(&mut conn, &Fence::new("script:1", 2))
        .await
        .expect("loaded again");
    assert_eq!(read, None);
    assert_stale(
        fenced::claim(&mut conn, &Fence::new("script:1", 1)).await,
        2,
        1,
    );
}

/// Holders with tokens 1..=16 race for one resource, each claiming before its read and writing
/// after: the writes the resource accepted come in token order, the newest always gets through,
/// and every refusal names a fence above the refused token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_holders_get_through_in_token_order_only() {
    let server = RedisServer::start();
    let conn = data(&server).await;
    let tasks: Vec<_> = (1..=16u64)
        .map(|token| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let fence = Fence::new("race:log", token);
                let read = fenced::claim::<MultiplexedConnection>(&mut conn, &fence).await;
                let wrote = match read {
                    Ok(()) => {
                        tokio::task::yield_now().await;
                        fenced::command::<_, u64>(
                            &mut conn,
                            &fence,
                            redis::cmd("RPUSH").arg("race:log").arg(token),
                        )
                        .await
                        .map(|_| ())
                    }
                    Err(err) => Err(err),
                };
                (token, wrote)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    let mut conn = conn;
    let log: Vec<u64> = conn.lrange("race:log", 0, -1).await.expect("LRANGE");
    assert!(
        log.windows(2).all(|w| w[0] < w[1]),
        "accepted out of order: {log:?}"
    );
    assert_eq!(log.last(), Some(&16), "{log:?}");
    for (token, wrote) in outcomes {
        match wrote {
            Ok(()) => assert!(log.contains(&token), "{token} accepted, not in {log:?}"),
            Err(FenceError::Stale {
                current, offered, ..
            }) => {
                assert!(current > offered && offered == token && !log.contains(&token));
            }
            Err(other) => panic!("{token}: {other}"),
        }
    }
    assert_eq!(fence_of(&mut conn, "race:log").await, Some(16));
}

/// A holder whose connection to the lock's store stalls past its lease: the next holder takes
/// the lock and claims the resource, and the first one's write, made as if it still held the
/// lock, is refused by the resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_is_refused_by_the_resource() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let stalled = LockManager::connect(&proxy.url()).await.expect("connect");
    let next = connect(&server).await;
    let mut conn = data(&server).await;
    let options = LockOptions::new().ttl(ms(1000));
    let first = stalled.lock("account:1", options).await.expect("free");
    let old = Fence::of(&first).on("account:1:balance");
    let balance: Option<i64> = fenced::claim_get(&mut conn, &old).await.expect("claim");
    assert_eq!(balance, None);
    proxy.blackhole(true);
    let second = next
        .lock("account:1", options.wait(PATIENCE))
        .await
        .unwrap_or_else(|err| panic!("the lease ran out, yet: {err}\n{}", server.log()));
    let new = Fence::of(&second).on("account:1:balance");
    assert!(new.token() > old.token());
    let read: Option<i64> = fenced::claim_get(&mut conn, &new).await.expect("claim");
    assert_eq!(read, None);
    fenced::set(&mut conn, &new, 100, None)
        .await
        .expect("the holder writes");
    assert_stale(
        fenced::set(&mut conn, &old, 50, None).await,
        new.token(),
        old.token(),
    );
    let balance: i64 = conn.get("account:1:balance").await.expect("GET");
    assert_eq!(balance, 100);
    proxy.blackhole(false);
    drop(first);
    second.release().await.expect("release");
}

/// On a Cluster each fence key is in its resource's slot, so every call is one script on the
/// master of that slot, whatever the resource's braces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_fence_lives_in_its_resources_slot() {
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::start(3, 0)))
        .await
        .expect("cluster start");
    let client = redis::cluster::ClusterClient::new(cluster.seed_urls()).expect("seeds");
    let mut conn = client.get_async_connection().await.expect("connect");
    for (n, resource) in [
        "cart:1",
        "cart:2",
        "{user:3}:profile",
        "a}b",
        "x{y",
        "orders",
    ]
    .into_iter()
    .enumerate()
    {
        let token = n as u64 + 1;
        let fence = Fence::new(resource, token);
        fenced::set(&mut conn, &fence, "v", None)
            .await
            .unwrap_or_else(|err| panic!("{resource}: {err}\n{}", cluster.log()));
        let read: Option<String> = fenced::claim_get(&mut conn, &fence).await.expect("read");
        assert_eq!(read.as_deref(), Some("v"));
        let hits: i64 = fenced::command(&mut conn, &fence, redis::cmd("STRLEN").arg(resource))
            .await
            .expect("strlen");
        assert_eq!(hits, 1);
        assert_stale(
            fenced::claim(&mut conn, &Fence::new(resource, 0)).await,
            token,
            0,
        );
        let master = cluster.master_for_key(resource);
        assert_eq!(
            master.cmd(&["GET", &fence_key(resource)]),
            token.to_string(),
            "{resource}"
        );
    }
    // After SCRIPT FLUSH on every master, each call loads the script again where it runs.
    for master in cluster.masters() {
        master.cmd(&["SCRIPT", "FLUSH"]);
    }
    fenced::claim(&mut conn, &Fence::new("cart:1", 10))
        .await
        .expect("loaded again");
}
