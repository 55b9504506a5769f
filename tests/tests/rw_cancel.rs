//! A writer cancelled while its request is on the wire: the request may have put its waiting
//! mark on the server, and the call, not told so yet, must still take it away.

use std::time::Duration;

use lock_runtime::inspect::read_write_keys;
use lock_tests::prelude::*;

/// The request that sets a waiting writer's mark reaches the server, and the writer is
/// cancelled before the busy answer comes back (the link is slow): the mark goes at once,
/// instead of holding every new reader up until it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_cancelled_with_its_request_on_the_wire_leaves_no_mark() {
    let server = RedisServer::start();
    let readers = connect(&server).await;
    let share = readers
        .read_lock(
            "on-the-wire",
            LockOptions::new().ttl(Duration::from_secs(30)),
        )
        .await
        .expect("free");
    let proxy = FaultProxy::start(server.addr());
    let writers = LockManager::builder()
        .url(proxy.url())
        .request_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()));
    // A round trip through the proxy takes 6 s from now on: 3 s to the server, 3 s back.
    proxy.set_delay(Duration::from_secs(3));
    let writer = tokio::spawn(async move {
        writers
            .write_lock(
                "on-the-wire",
                LockOptions::new()
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(120)),
            )
            .await
    });
    let mark = read_write_keys("lock:", "on-the-wire")
        .expect("a key")
        .writer_waiting;
    assert!(
        wait_until_async(PATIENCE, || server.cmd(&["EXISTS", &mark]) == "1").await,
        "the writer's request never reached the server\n{}",
        server.log()
    );
    // Its busy answer is still on its way back.
    writer.abort();
    assert!(writer.await.expect_err("cancelled").is_cancelled());
    let pttl: u64 = server.cmd(&["PTTL", &mark]).parse().unwrap_or(0);
    assert!(pttl > 10_000, "the mark lasts {pttl} ms\n{}", server.log());
    // The leave goes through the same slow link: 3 s, far less than the mark's own life.
    let gone = wait_until_async(Duration::from_millis(pttl / 2), || {
        server.cmd(&["EXISTS", &mark]) == "0"
    });
    assert!(
        gone.await,
        "the cancelled writer's mark is still there, holding readers up for {pttl} ms\n{}",
        server.log()
    );
    let other = connect(&server).await;
    let second = other
        .read_lock("on-the-wire", LockOptions::new())
        .await
        .unwrap_or_else(|err| panic!("a reader is let in at once: {err}\n{}", server.log()));
    second.release().await.expect("release");
    share.release().await.expect("release");
}
