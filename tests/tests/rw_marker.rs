//! A read-write lock's release reaches every reader that waits for it, whatever the reader's own
//! lease: the mark that makes releases announce themselves lasts as long as the wait of whoever
//! was told the lock is busy, not just one lease of theirs. (A reader with a lease shorter than
//! the writer's remaining hold used to sleep until that hold would have ended.)

use std::time::Duration;

use lock_tests::prelude::*;
use tokio::time::Instant;

/// The writer's lease: what a reader that missed the release would wait for.
const WRITER_TTL: Duration = Duration::from_secs(20);
/// The readers' lease, far shorter than the writer's.
const READER_TTL: Duration = Duration::from_millis(300);

/// A reader with a short lease waits for a writer with a long one, and is let in when the writer
/// releases, after the reader's own lease would have ended had it been granted when told busy.
/// `told_busy` resolves once the reader has been told the lock is busy.
async fn readers_hear_of_the_release(
    writers: &LockManager,
    readers: &LockManager,
    told_busy: impl std::future::Future<Output = ()>,
) -> Duration {
    let writer = writers
        .write_lock("doc", LockOptions::new().ttl(WRITER_TTL))
        .await
        .expect("free");
    let reader = tokio::spawn({
        let readers = readers.clone();
        async move {
            let options = LockOptions::new()
                .ttl(READER_TTL)
                .wait(Duration::from_secs(60));
            let share = readers.read_lock("doc", options).await?;
            let entered = Instant::now();
            share.release().await?;
            Ok::<_, LockError>(entered)
        }
    });
    told_busy.await;
    // Not to order events: the condition of the case is that the reader's own lease would have
    // ended by the time the writer releases, as with a 30 s reader behind a 2 min writer.
    tokio::time::sleep(READER_TTL * 3).await;
    let released = Instant::now();
    writer.release().await.expect("release");
    let entered = reader.await.expect("reader task").expect("the read share");
    entered.duration_since(released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_with_a_shorter_lease_hears_of_the_writers_release_on_redis() {
    let server = RedisServer::start();
    let (writers, readers) = (connect(&server).await, connect(&server).await);
    let marker = "lock:{doc}:rw:waiting";
    let told_busy = async {
        let marked = eventually(|| async { server.cmd(&["EXISTS", marker]) == "1" }).await;
        assert!(marked, "the reader was never told busy\n{}", server.log());
    };
    let waited = readers_hear_of_the_release(&writers, &readers, told_busy).await;
    println!("redis: the reader entered {waited:?} after the writer's release");
    assert!(
        waited < Duration::from_secs(5),
        "the reader entered {waited:?} after the release: it slept towards the end of the \
         writer's {WRITER_TTL:?} lease"
    );
}

/// memory:// wakes waiters without a mark; on tokio's paused clock the reader is let in at the
/// very instant of the release.
#[tokio::test(start_paused = true)]
async fn a_reader_with_a_shorter_lease_hears_of_the_writers_release_in_memory() {
    let url = format!("memory://rw-marker-{}", std::process::id());
    let writers = LockManager::connect(&url).await.expect("memory");
    let readers = LockManager::connect(&url).await.expect("memory");
    // On the paused clock, time only moves once every task waits: the reader asked by then.
    let told_busy = tokio::time::sleep(ms(1));
    let waited = readers_hear_of_the_release(&writers, &readers, told_busy).await;
    println!("memory: the reader entered {waited:?} after the writer's release");
    assert!(waited < READER_TTL, "{waited:?}");
}
