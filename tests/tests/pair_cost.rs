//! What one uncontended acquire + release costs the client, counted rather than timed: context
//! switches and CPU time per pair, thread by thread (from /proc), and commands per pair on the
//! server (`INFO commandstats`). Counts do not move with the machine's load the way the
//! benchmark's pairs per second do, so the paths can be compared on a busy machine:
//! `LockManager::lock` + `release`, `run_locked` (aborting on a lost lease, and not), and
//! `#[distributed_lock]`, on memory:// and on a redis-server, one `block_on` driving the pairs
//! as in the benchmark's `uncontended` scenario.
//!
//! A measurement, not a check: ignored by default. Run it with
//!
//! ```sh
//! cargo test --release -p lock-tests --test pair_cost -- --ignored --nocapture
//! ```
//!
//! `LOCK_PAIRS=n` runs `n` pairs per path (20,000 by default); `LOCK_PAIR_PATHS=memory:lock`
//! (a backend and a path, comma-separated: `memory`/`redis`, `lock`, `run_locked`,
//! `run_locked_continue`, `attribute`) runs only those, e.g. to count system calls under
//! `strace -f -c` at two values of `LOCK_PAIRS`.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_runtime::{OnLeaseLost, distributed_lock};
use lock_tests::prelude::*;

/// The lease: long enough that no renewal falls inside a measurement.
const LEASE: Duration = Duration::from_secs(30);

/// Pairs before counting: connections, scripts, the allocator's pools.
const WARM_UP: usize = 500;

/// A locked section as `#[distributed_lock]` writes it.
struct Attribute {
    locks: LockManager,
}

impl Attribute {
    #[distributed_lock(key = "<key>", ttl = "30s", manager = self.locks)]
    async fn pair_locked(&self, key: &str) -> Result<(), LockError> {
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum Path {
    Lock,
    RunLocked,
    RunLockedContinue,
    Attribute,
}

impl Path {
    const ALL: [Path; 4] = [
        Path::Lock,
        Path::RunLocked,
        Path::RunLockedContinue,
        Path::Attribute,
    ];

    fn id(self) -> &'static str {
        match self {
            Path::Lock => "lock",
            Path::RunLocked => "run_locked",
            Path::RunLockedContinue => "run_locked_continue",
            Path::Attribute => "attribute",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Path::Lock => "lock + release",
            Path::RunLocked => "run_locked",
            Path::RunLockedContinue => "run_locked continue",
            Path::Attribute => "distributed_lock",
        }
    }

    async fn pair(self, attribute: &Attribute, key: &str) {
        let locks = &attribute.locks;
        let options = LockOptions::new().ttl(LEASE);
        let outcome = match self {
            Path::Lock => match locks.lock(key, options).await {
                Ok(guard) => guard.release().await,
                Err(err) => Err(err),
            },
            Path::RunLocked => {
                locks
                    .run_locked(key.to_owned(), options, async { Ok::<_, LockError>(()) })
                    .await
            }
            Path::RunLockedContinue => {
                let options = options.on_lease_lost(OnLeaseLost::Continue);
                locks
                    .run_locked(key.to_owned(), options, async { Ok::<_, LockError>(()) })
                    .await
            }
            Path::Attribute => attribute.pair_locked(key).await,
        };
        outcome.expect("a free lock is taken and given back");
    }
}

/// What the kernel counts for one thread: context switches it made (waiting) and suffered
/// (preempted), and its CPU time.
#[derive(Clone, Copy, Default)]
struct ThreadCounts {
    voluntary: u64,
    involuntary: u64,
    cpu_ns: u64,
}

/// The counts of every thread of this process now, by thread id and name.
fn thread_counts() -> BTreeMap<(i32, String), ThreadCounts> {
    let mut threads = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let entry = entry.expect("a thread");
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let read =
            |file: &str| std::fs::read_to_string(entry.path().join(file)).unwrap_or_default();
        let status = read("status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        let counts = ThreadCounts {
            voluntary: field("voluntary_ctxt_switches:"),
            involuntary: field("nonvoluntary_ctxt_switches:"),
            // The first field of schedstat: time on the CPU, in ns.
            cpu_ns: read("schedstat")
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse().ok())
                .unwrap_or(0),
        };
        threads.insert((tid, read("comm").trim().to_owned()), counts);
    }
    threads
}

/// Calls per command since the last `CONFIG RESETSTAT`, as `INFO commandstats` tells them, by
/// name.
fn command_calls(server: &RedisServer) -> BTreeMap<String, u64> {
    let info = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        // The measurement's own.
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .collect()
}

fn pair_count() -> usize {
    std::env::var("LOCK_PAIRS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(20_000)
}

async fn measure(backend: &str, path: Path, pairs: usize) {
    let deployment = match backend {
        "memory" => Deployment::memory().await,
        _ => Deployment::redis().await,
    };
    let attribute = Attribute {
        locks: deployment.locks.clone(),
    };
    let key = format!("pair_cost:{backend}:{}", path.name());
    for _ in 0..WARM_UP {
        path.pair(&attribute, &key).await;
    }
    let server = deployment.data_servers().first().copied();
    if let Some(server) = server {
        server.cmd(&["CONFIG", "RESETSTAT"]);
    }
    let before = thread_counts();
    for _ in 0..pairs {
        path.pair(&attribute, &key).await;
    }
    let after = thread_counts();
    let per_pair = |count: u64| count as f64 / pairs as f64;
    let mut total = ThreadCounts::default();
    let mut lines = Vec::new();
    for (thread, now) in &after {
        let then = before.get(thread).copied().unwrap_or_default();
        let spent = ThreadCounts {
            voluntary: now.voluntary - then.voluntary,
            involuntary: now.involuntary - then.involuntary,
            cpu_ns: now.cpu_ns - then.cpu_ns,
        };
        total.voluntary += spent.voluntary;
        total.involuntary += spent.involuntary;
        total.cpu_ns += spent.cpu_ns;
        if spent.voluntary + spent.involuntary > pairs as u64 / 100 {
            lines.push(format!(
                "           {:<24} {:>5.2} voluntary, {:>5.2} involuntary switches, {:>6.2} µs CPU",
                format!("{} ({})", thread.1, thread.0),
                per_pair(spent.voluntary),
                per_pair(spent.involuntary),
                per_pair(spent.cpu_ns) / 1000.0,
            ));
        }
    }
    println!(
        "{backend:<6} {:<20} per pair: {:>5.2} voluntary, {:>5.2} involuntary switches, \
         {:>6.2} µs CPU",
        path.name(),
        per_pair(total.voluntary),
        per_pair(total.involuntary),
        per_pair(total.cpu_ns) / 1000.0,
    );
    for line in lines {
        println!("{line}");
    }
    if let Some(server) = server {
        let calls = command_calls(server);
        let shown: Vec<String> = calls
            .iter()
            .map(|(name, calls)| format!("{name} {:.2}", per_pair(*calls)))
            .collect();
        println!("           commands per pair: {}", shown.join(", "));
    }
}

/// One task drives the pairs, as in the benchmark: the runtime's `block_on`, two workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn counts_per_uncontended_pair() {
    let pairs = pair_count();
    let only = std::env::var("LOCK_PAIR_PATHS").ok();
    for backend in ["memory", "redis"] {
        for path in Path::ALL {
            let chosen = format!("{backend}:{}", path.id());
            if only
                .as_deref()
                .is_none_or(|only| only.split(',').any(|one| one == chosen))
            {
                measure(backend, path, pairs).await;
            }
        }
    }
}
