//! The users' guide's code (docs/*.md): every Rust block there that is not a whole example
//! program is an excerpt of this file, which compiles it and runs it on `memory://`
//! (`docs_code.rs` checks that each block is still here, line for line).

use std::time::Duration;

use lock_runtime::{
    Deadlock, ElectionOptions, LeaderInfo, LockError, LockManager, LockOptions, Term,
    distributed_lock,
};
use tokio::signal::unix::{SignalKind, signal};

type AnyError = Box<dyn std::error::Error + Send + Sync>;

// ---- docs/MIGRATING.md

/// Every example of the migration page assumes a default manager set once at start-up.
async fn set_up(url: &str) -> Result<LockManager, AnyError> {
    let locks = lock_runtime::LockManager::connect(url).await?; // e.g. redis://127.0.0.1:6379
    lock_runtime::set_global_default(locks.clone())?;
    Ok(locks)
}

#[distributed_lock(key = "pay:<order_id>", ttl = "30s", wait = "5s")]
async fn pay(order_id: &str) -> Result<(), LockError> {
    // ...
    Ok(())
}

#[distributed_lock(
    key = "noon-report",
    ttl = "30s",
    max_hold = "10m",
    hold_at_least = "1m"
)]
async fn noon_report() -> Result<(), LockError> {
    // ...
    Ok(())
}

/// Spring Integration's `obtain` + `tryLock`, then the same with `run_locked`.
async fn spring_registry(locks: &LockManager, id: u64) -> Result<(), AnyError> {
    let guard = locks
        .lock(
            format!("order:{id}"),
            LockOptions::new().wait(Duration::from_secs(5)),
        )
        .await?;
    // ...
    guard.release().await?;

    locks
        .run_locked(
            format!("order:{id}"),
            LockOptions::new().wait(Duration::from_secs(5)),
            async {
                // ...
                Ok::<_, LockError>(())
            },
        )
        .await?;
    Ok(())
}

/// Redisson's `tryLock(wait, lease, unit)`.
async fn redisson(locks: &LockManager) -> Result<u64, AnyError> {
    let options = LockOptions::new()
        .wait(Duration::from_secs(5))
        .ttl(Duration::from_secs(30));
    let guard = locks.lock("order:42", options).await?;
    let token = guard.fencing_token(); // give it to the storage you write to
    // ...
    guard.release().await?;
    Ok(token)
}

/// rslock's `acquire`: wait until it is free.
async fn rslock(url: &str) -> Result<(), AnyError> {
    let locks = lock_runtime::LockManager::connect(url).await?; // e.g. redis://127.0.0.1:6379
    let guard = locks
        .lock(
            "order:42",
            LockOptions::new()
                .ttl(Duration::from_secs(30))
                .wait(Duration::MAX),
        )
        .await?;
    // ...
    guard.release().await?;
    Ok(())
}

// ---- docs/PRIMITIVES.md

async fn semaphore(locks: &LockManager) -> Result<(), AnyError> {
    let permit = locks
        .semaphore(
            "exports",
            3,
            LockOptions::new().wait(Duration::from_secs(5)),
        )
        .await?;
    assert_eq!(permit.permits(), Some(3)); // a LockGuard: fencing_token(), lost(), scope()
    permit.release().await?; // or drop it
    Ok(())
}

/// At most 3 exports per tenant at once, across every process.
#[distributed_lock(key = "export:<tenant>", permits = 3, wait = "5s")]
async fn export(tenant: u64) -> Result<u64, LockError> {
    Ok(lock_runtime::current().map_or(0, |permit| permit.fencing_token()))
}

async fn read_write_lock(locks: &LockManager) -> Result<(), AnyError> {
    let wait = LockOptions::new().wait(Duration::from_secs(5));
    let reading = locks.read_lock("catalog", wait).await?; // with any number of readers
    reading.release().await?;
    let writing = locks.write_lock("catalog", wait).await?; // alone
    writing.release().await?;
    Ok(())
}

#[distributed_lock(key = "doc:<id>", mode = "read", wait = "5s")] // or mode = "write"
async fn render(id: u64) -> Result<String, LockError> {
    Ok(format!("<h1>document {id}</h1>"))
}

async fn several_keys(locks: &LockManager) -> Result<(), AnyError> {
    let options = LockOptions::new().wait(Duration::from_secs(5));
    let both = locks.lock_all(["account:7", "account:3"], options).await?;
    let token = both.fencing_token("account:7"); // one token per key; both.lost() names the key lost
    both.release().await?; // all of them, concurrently; errors per key
    assert!(token.is_some());
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "5s")]
async fn transfer(from: u64, to: u64, amount: u64) -> Result<usize, LockError> {
    let held = lock_runtime::current_all(); // both locks, in the order they were taken
    tracing::info!(from, to, amount, "moved");
    Ok(held.len())
}

/// Leads until `run_jobs` is done, then steps down.
async fn leader(locks: &LockManager) -> Result<(), AnyError> {
    let leadership = locks.elect(
        "scheduler",
        ElectionOptions::new().ttl(Duration::from_secs(10)),
    )?;
    loop {
        let token = leadership.elected().await?; // this process leads; this term's token
        tokio::select! {
            reason = leadership.deposed() => tracing::warn!(%reason, "term ended"),
            () = run_jobs(token) => break, // write with `token`
        }
    }
    leadership.step_down().await?; // dropping it or locks.shutdown() steps down too
    Ok(())
}

async fn run_jobs(token: u64) {
    assert!(token > 0);
}

// ---- docs/ELECTION.md

/// Campaigns with a priority (resuming a saved term if given one), reads who leads and who
/// campaigns, and resigns; the term it led, as saved text.
async fn steered_election(
    locks: &LockManager,
    saved: Option<String>,
) -> Result<(u64, String), AnyError> {
    let options = ElectionOptions::new()
        .ttl(Duration::from_secs(10))
        .priority(5) // preferred when the leadership changes hands
        .grace(Duration::from_secs(2)); // how long a candidate gives way at most
    let leadership = match saved {
        Some(text) => locks.resume_election(&Term::from_secret_text(&text)?, options)?,
        None => locks.elect("scheduler", options)?,
    };
    let token = leadership.elected().await?;
    let text = leadership.current_term().expect("leading").to_secret_text(); // a secret
    println!("{:?}", leadership.leader().await?); // holder, host, pid, app, token, since
    println!("{:?}", leadership.candidates().await?); // who else campaigns, by priority
    leadership.resign().await?; // let another lead; keep campaigning
    Ok((token, text))
}

/// Logs every change of leader of `scheduler` until none came for `patience`.
async fn watch_leaders(locks: &LockManager, patience: Duration) -> Result<usize, AnyError> {
    let mut seen = 0;
    let mut watch = locks.observe("scheduler").await?;
    while let Ok(changed) = tokio::time::timeout(patience, watch.changed()).await {
        let leader: Option<LeaderInfo> = changed; // a new leader, or nobody
        match leader {
            Some(leader) => {
                tracing::info!(holder = %leader.holder_id, token = ?leader.fencing_token, "new leader")
            }
            None => tracing::warn!("nobody leads"),
        }
        seen += 1;
    }
    Ok(seen)
}

/// Saves the term of a leader, which then "restarts" (its handle forgotten: its lock stays),
/// and resumes it.
async fn resume_after_restart(
    locks: &LockManager,
    path: &std::path::Path,
) -> Result<(u64, u64), AnyError> {
    let options = ElectionOptions::new().ttl(Duration::from_secs(10));
    let leadership = locks.elect("compactor", options)?;
    let first = leadership.elected().await?;
    // While leading: save the term (again at each new term).
    let text = leadership.current_term().expect("leading").to_secret_text();
    std::fs::write(path, &text)?; // readable by this service's user only
    std::mem::forget(leadership);

    // After the restart:
    let term = Term::from_secret_text(&std::fs::read_to_string(path)?)?;
    let leadership = locks.resume_election(&term, options)?;
    let token = leadership.elected().await?; // at once, == term.fencing_token(), if it had not ended
    leadership.step_down().await?;
    Ok((first, token))
}

#[distributed_lock(key = "account:<to>", wait = "10s", deadlock = "fail")]
async fn credit(to: u64, amount: u64) -> Result<(), LockError> {
    tracing::info!(to, amount, "credited");
    Ok(())
}

async fn deadlock(locks: &LockManager) -> Result<(), AnyError> {
    let options = LockOptions::new()
        .wait(Duration::from_secs(10))
        .deadlock(Deadlock::Fail);
    match locks.lock("account:3", options).await {
        Ok(guard) => guard.release().await?,
        Err(LockError::Deadlock { cycle, .. }) => {
            tracing::warn!(%cycle, "gave up"); // let go of what you hold, retry later
        }
        Err(other) => return Err(other.into()),
    }
    Ok(())
}

async fn deadlock_default(url: &str) -> Result<(), AnyError> {
    let locks = LockManager::builder()
        .url(url)
        .deadlock(Deadlock::Fail) // for calls that set none; the default is Deadlock::Wait
        .build()
        .await?;
    locks.shutdown().await?;
    Ok(())
}

// ---- docs/API.md

async fn shutdown_on_sigterm(url: &str) -> Result<(), AnyError> {
    let locks = LockManager::connect(url).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        result = serve(locks.clone()) => result?, // `serve`: your service
        _ = terminate.recv() => {}
    }
    locks.shutdown().await?; // releases every held lock; later acquires fail with ShutDown
    Ok(())
}

async fn serve(locks: LockManager) -> Result<(), AnyError> {
    let guard = locks.lock("order:42", LockOptions::new()).await?;
    drop(guard); // released in the background
    Ok(())
}

async fn builder(url: &str) -> Result<(), AnyError> {
    let locks = LockManager::builder()
        .url(url) // or .cluster([..]), .sentinel([..], "mymaster"), .redlock([..])
        .key_prefix("lock:") // the default
        .app_name("orders") // recorded in each lock, shown by lockctl
        .request_timeout(Duration::from_secs(3)) // the default
        .build()
        .await?;
    locks.shutdown().await?;
    Ok(())
}

// ---- docs/LOCKCTL.md

/// A tool of one's own lists locks as lockctl does, whatever the store.
async fn list_orders(url: &str) -> Result<(), AnyError> {
    let locks = LockManager::connect(url).await?;
    let inspect = locks.inspect().ok_or("this store cannot be inspected")?;
    for lock in inspect.list("lock:", "order:*").await? {
        println!("{} {} {:?}", lock.key, lock.state.as_str(), lock.lease_ms);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_guide_s_code_runs_on_memory() -> Result<(), AnyError> {
    let locks = set_up("memory://guide").await?;
    pay("o-1").await?;
    noon_report().await?;
    spring_registry(&locks, 42).await?;
    assert!(redisson(&locks).await? > 0);
    rslock("memory://guide").await?;

    semaphore(&locks).await?;
    assert!(export(7).await? > 0);
    assert_eq!(render(7).await?, "<h1>document 7</h1>");
    read_write_lock(&locks).await?;
    several_keys(&locks).await?;
    assert_eq!(transfer(7, 3, 100).await?, 2);
    leader(&locks).await?;
    let watching = tokio::spawn({
        let locks = locks.clone();
        async move { watch_leaders(&locks, Duration::from_millis(500)).await }
    });
    let (token, saved) = steered_election(&locks, None).await?;
    let (again, _) = steered_election(&locks, Some(saved)).await?;
    assert!(again > token, "the resigned term had ended: a new one");
    watching.await??;
    let path = std::env::temp_dir().join(format!("guide-term-{}", std::process::id()));
    let (first, resumed) = resume_after_restart(&locks, &path).await?;
    let _ = std::fs::remove_file(&path);
    assert_eq!(first, resumed);
    credit(3, 100).await?;
    deadlock(&locks).await?;
    deadlock_default("memory://guide").await?;

    builder("memory://guide").await?;
    shutdown_on_sigterm("memory://guide").await?;
    list_orders("memory://guide").await?;
    locks.shutdown().await?;
    Ok(())
}
