//! Scheduled job: every instance of a service has the same cron entry, "draw the lottery at noon",
//! but the draw must happen once.
//!
//! Each instance tries the lock once (`wait = "0s"`): the one that gets it draws, the others are
//! told `LockError::Busy` and skip. `hold_at_least = "2s"` keeps the lock after a quick draw, so
//! an instance whose clock or scheduler runs a little late does not draw a second time.
//!
//! On Redis, a run started within those 2 s of the last one finds the job's lock still kept, and
//! says it waits for it; Ctrl-C (or SIGTERM) releases the locks held at that moment
//! (`LockManager::shutdown`).
//!
//! `cargo run -p lock-examples --bin scheduled_job` runs on memory; set `REDIS_URL` to use Redis.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{LockError, LockManager, distributed_lock};
use tokio::sync::Barrier;

const INSTANCES: usize = 4;
const DRAW_DATE: &str = "2025-06-01";
/// The job's lock, as `draw_lottery` renders it for [`DRAW_DATE`].
const JOB_KEY: &str = "job:lottery:2025-06-01";
/// The longest an earlier run can have left the job's lock: its `ttl`, and a margin.
const EARLIER_RUN_AT_MOST: Duration = Duration::from_secs(12);

/// Where draws are recorded: the table every instance writes to.
#[derive(Default)]
struct Draws {
    rows: Mutex<Vec<(String, u32, u64)>>,
}

/// One running copy of the service, with its own lock manager, as a separate process would have.
struct Instance {
    name: String,
    locks: LockManager,
    draws: Arc<Draws>,
}

impl Instance {
    #[distributed_lock(
        key = "job:lottery:<date>",
        ttl = "10s",
        wait = "0s",
        hold_at_least = "2s",
        manager = self.locks
    )]
    async fn draw_lottery(&self, date: &str) -> Result<u32, LockError> {
        // The fencing token orders this run among all runs of the job: a store that remembers
        // the highest token it saw can refuse a late write from an instance that lost the lock.
        let token = lock_runtime::current().map_or(0, |lock| lock.fencing_token());
        tokio::time::sleep(Duration::from_millis(200)).await; // pick the numbers
        let winner = 1 + (token % 9000) as u32;
        let mut rows = self.draws.rows.lock().expect("draws");
        rows.push((date.to_owned(), winner, token));
        println!(
            "  {}: drew ticket #{winner} (fencing token {token})",
            self.name
        );
        Ok(winner)
    }

    /// What the scheduler calls; a busy lock means another instance has the job.
    async fn on_schedule(&self) -> Result<bool, LockError> {
        match self.draw_lottery(DRAW_DATE).await {
            Ok(_) => Ok(true),
            Err(LockError::Busy { key, .. }) => {
                println!("  {}: skipped, `{key}` is busy", self.name);
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }
}

/// Fires the job on every instance at the same moment; returns how many ran it.
async fn fire(instances: &[Arc<Instance>]) -> Result<usize, LockError> {
    let start = Arc::new(Barrier::new(instances.len()));
    let runs: Vec<_> = instances
        .iter()
        .map(|instance| {
            let (instance, start) = (instance.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                instance.on_schedule().await
            })
        })
        .collect();
    let mut ran = 0;
    for run in runs {
        ran += usize::from(run.await.expect("instance task")?);
    }
    Ok(ran)
}

async fn run() -> Result<ExitCode, LockError> {
    // Each instance connects on its own, as separate processes would: to Redis, or to the
    // process-wide memory:// table, which every manager connected to it shares.
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "memory://".into());
    let draws = Arc::new(Draws::default());
    let mut instances = Vec::new();
    for n in 1..=INSTANCES {
        let locks = LockManager::connect(&url).await?;
        let (name, draws) = (format!("instance-{n}"), draws.clone());
        instances.push(Arc::new(Instance { name, locks, draws }));
    }
    println!("lottery draw on {}", instances[0].locks.backend());
    let managers: Vec<LockManager> = instances.iter().map(|i| i.locks.clone()).collect();
    lock_examples::run_until_stopped(&managers, draw(&instances, &draws)).await
}

async fn draw(instances: &[Arc<Instance>], draws: &Draws) -> Result<ExitCode, LockError> {
    // A run just before this one drew for the same date and keeps the lock for hold_at_least:
    // today's job has run. This demo starts over once that lock is gone.
    lock_examples::wait_for_earlier_run(&instances[0].locks, JOB_KEY, EARLIER_RUN_AT_MOST).await?;

    let noon = Instant::now();
    println!("noon: the job fires on {INSTANCES} instances at once");
    let first = fire(instances).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = noon.elapsed().as_millis();
    println!("noon + {late} ms: a late scheduler fires it again, within hold_at_least");
    let second = fire(instances).await?;

    let rows = draws.rows.lock().expect("draws");
    println!("draws recorded for {DRAW_DATE}: {}", rows.len());
    if first != 1 || second != 0 || rows.len() != 1 {
        eprintln!("FAILED: first firing ran {first} draws, second {second}; expected 1 and 0");
        return Ok(ExitCode::FAILURE);
    }
    println!("ok: exactly one draw");
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    lock_examples::report(run().await)
}
