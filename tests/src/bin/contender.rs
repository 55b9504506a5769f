//! A child process for the cross-process tests.
//!
//! `contender exclusion <url> <key> <tasks> <iterations> <out>`: `tasks` tasks each take the lock
//! `iterations` times and write one line per critical section to `out`:
//! `<enter ns> <exit ns> <fencing token>` (wall clock, shared by all processes on the machine).
//!
//! `contender hold <url> <key> <ttl ms>`: takes the lock, prints `held <token>` and sleeps until
//! killed.
//!
//! `contender permit <url> <key> <permits> <ttl ms>`: takes a permit of the semaphore `key`,
//! prints `held <token>` and sleeps until killed.
//!
//! `contender read <url> <key> <ttl ms>`: takes a read share of the read-write lock `key`,
//! prints `held <token>` and sleeps until killed.
//!
//! `contender deadlock <url> <first> <second> <fail|wait>`: takes the lock `first`, prints
//! `held`, and once a line comes on stdin waits up to 30 s for the lock `second` (with
//! `Deadlock::Fail` or `Deadlock::Wait`) while holding the first; prints `acquired <ms>`,
//! `deadlock <ms>` or `busy <ms>` (how long it waited), releases both and exits.
//!
//! `contender lead <url> <name> <ttl ms>`: campaigns for the leadership `name`, prints
//! `leader <token>` once elected and sleeps until killed.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{Deadlock, ElectionOptions, LockError, LockManager, LockOptions};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

fn arg(args: &[String], i: usize) -> &str {
    args.get(i)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("missing argument {i}: {args:?}"))
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let args: Vec<String> = std::env::args().collect();
    let locks = LockManager::connect(arg(&args, 2)).await?;
    let key = arg(&args, 3).to_owned();
    match arg(&args, 1) {
        "exclusion" => {
            let tasks: usize = arg(&args, 4).parse().expect("task count");
            let iterations: usize = arg(&args, 5).parse().expect("iteration count");
            let out = arg(&args, 6).to_owned();
            let options = LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(60));
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let locks = locks.clone();
                let key = key.clone();
                handles.push(tokio::spawn(async move {
                    let mut lines = Vec::new();
                    for _ in 0..iterations {
                        let line = locks
                            .run_locked(key.clone(), options, async {
                                let enter = now_ns();
                                let token = lock_runtime::current()
                                    .expect("inside a locked section")
                                    .fencing_token();
                                tokio::task::yield_now().await;
                                Ok::<_, LockError>(format!("{enter} {} {token}", now_ns()))
                            })
                            .await?;
                        lines.push(line);
                    }
                    Ok::<_, LockError>(lines)
                }));
            }
            let mut file = std::fs::File::create(&out).expect("create output file");
            for handle in handles {
                for line in handle.await.expect("task finished")? {
                    writeln!(file, "{line}").expect("write output");
                }
            }
        }
        "hold" => {
            let ttl: u64 = arg(&args, 4).parse().expect("ttl in ms");
            let guard = locks
                .lock(key, LockOptions::new().ttl(Duration::from_millis(ttl)))
                .await?;
            println!("held {}", guard.fencing_token());
            std::io::stdout().flush().expect("flush stdout");
            std::future::pending::<()>().await;
        }
        "permit" => {
            let permits: u32 = arg(&args, 4).parse().expect("permits");
            let ttl: u64 = arg(&args, 5).parse().expect("ttl in ms");
            let options = LockOptions::new().ttl(Duration::from_millis(ttl));
            let guard = locks.semaphore(key, permits, options).await?;
            println!("held {}", guard.fencing_token());
            std::io::stdout().flush().expect("flush stdout");
            std::future::pending::<()>().await;
        }
        "read" => {
            let ttl: u64 = arg(&args, 4).parse().expect("ttl in ms");
            let options = LockOptions::new().ttl(Duration::from_millis(ttl));
            let guard = locks.read_lock(key, options).await?;
            println!("held {}", guard.fencing_token());
            std::io::stdout().flush().expect("flush stdout");
            std::future::pending::<()>().await;
        }
        "deadlock" => {
            let second = arg(&args, 4).to_owned();
            let on_deadlock = match arg(&args, 5) {
                "fail" => Deadlock::Fail,
                _ => Deadlock::Wait,
            };
            let options = LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(30))
                .deadlock(on_deadlock);
            let first = locks.lock(key, options).await?;
            println!("held");
            std::io::stdout().flush().expect("flush stdout");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("read stdin");
            let began = std::time::Instant::now();
            let outcome = match locks.lock(second, options).await {
                Ok(guard) => {
                    let ms = began.elapsed().as_millis();
                    guard.release().await?;
                    format!("acquired {ms}")
                }
                Err(LockError::Deadlock { .. }) => {
                    format!("deadlock {}", began.elapsed().as_millis())
                }
                Err(LockError::Busy { .. }) => format!("busy {}", began.elapsed().as_millis()),
                Err(err) => return Err(err),
            };
            first.release().await?;
            println!("{outcome}");
            std::io::stdout().flush().expect("flush stdout");
        }
        "lead" => {
            let ttl: u64 = arg(&args, 4).parse().expect("ttl in ms");
            let leadership =
                locks.elect(key, ElectionOptions::new().ttl(Duration::from_millis(ttl)))?;
            println!("leader {}", leadership.elected().await?);
            std::io::stdout().flush().expect("flush stdout");
            std::future::pending::<()>().await;
        }
        other => panic!("unknown mode {other}"),
    }
    Ok(())
}
