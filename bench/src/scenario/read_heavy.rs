//! Eight tasks share one key under a read-heavy load: each operation is a read with probability
//! 0.9 and a write otherwise, and holds its section for [`HOLD`]. The same load runs twice, once
//! through the read-write lock (`LockManager::read_lock` for reads, `write_lock` for writes) and
//! once through the exclusive lock (`LockManager::lock` for both), so the figures say what
//! letting readers in together is worth, and what it costs in Redis calls.
//!
//! Every task has a `LockManager` of its own, as separate processes would: nothing is shared in
//! the client, so every handover between tasks goes through the server. Each task draws its
//! reads and writes from a generator seeded with its index, the same for both locks, so both
//! run the same sequence of operations.
//!
//! Reported: operations per second (those entered before the deadline), the acquire latency
//! (from asking to holding) of reads and of writes apart, p50/p99, over every operation, the
//! drain's included; the share of reads actually drawn; the time inside a section; the most
//! sections seen inside at once (above 1 only if readers shared the lock); and the Redis calls
//! and server CPU per operation. Exclusion is checked inside every section: a writer that finds
//! anyone inside, a reader that finds a writer inside, or under the exclusive lock anyone that
//! finds anyone inside, is a violation.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_runtime::{LockManager, LockOptions};
use tokio::time::Instant;

use super::Metric;
use super::contended::Outcome;
use crate::BenchError;
use crate::contender::LEASE;
use crate::server::{Per, Probe};
use crate::stats::{percentile, sorted_micros};

/// The probability that an operation is a read.
pub const READ_SHARE: f64 = 0.9;

/// How long every section, read or write, holds the lock: a sleep, so the time is the timer's
/// (tokio's resolution is 1 ms: a section lasts 1 to 2 ms).
pub const HOLD: Duration = Duration::from_millis(1);

/// How long after the end of the run the tasks still waiting may take to get through.
const DRAIN: Duration = Duration::from_secs(30);

/// The two ways of taking the key that the scenario compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// `read_lock` for reads, `write_lock` for writes.
    ReadWrite,
    /// `lock` for both.
    Exclusive,
}

impl Locking {
    pub const ALL: [Locking; 2] = [Locking::ReadWrite, Locking::Exclusive];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Locking::ReadWrite => RWLOCK,
            Locking::Exclusive => EXCLUSIVE,
        }
    }
}

/// The read-write lock's name in tables and JSON.
pub const RWLOCK: &str = "LockManager::read_lock/write_lock";
/// The exclusive lock's name in tables and JSON.
pub const EXCLUSIVE: &str = "LockManager::lock";

/// Who is inside the section now, and the most seen at once.
#[derive(Default)]
struct Occupancy {
    readers: u32,
    writers: u32,
    most: u32,
    violations: u64,
}

/// One task's figures.
#[derive(Default)]
struct Tally {
    reads: Vec<Duration>,
    writes: Vec<Duration>,
    /// Operations entered before the deadline, and the reads among them.
    counted: u64,
    counted_reads: u64,
    /// Every operation, the drain's included.
    operations: u64,
    /// Time inside the section, over the counted operations.
    section_time: Duration,
}

/// SplitMix64: a tiny seeded generator, so that both locks see the same operations.
struct Draw(u64);

impl Draw {
    fn new(task: usize) -> Draw {
        Draw(0x5EED_0000_0000_0000 ^ task as u64)
    }

    /// Uniform in [0, 1).
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub async fn measure(
    locking: Locking,
    url: &str,
    mut probe: Probe,
    key: &str,
    tasks: usize,
    duration: Duration,
) -> Result<Outcome, BenchError> {
    let managers = super::managers(url, tasks).await?;
    let occupancy = Arc::new(Mutex::new(Occupancy::default()));
    let before = probe.reading().await?;
    let deadline = Instant::now() + duration;
    let handles: Vec<_> = managers
        .into_iter()
        .enumerate()
        .map(|(task, locks)| {
            let occupancy = occupancy.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                run_task(locking, &locks, &key, task, deadline, &occupancy).await
            })
        })
        .collect();
    let mut tally = Tally::default();
    for handle in handles {
        let one = tokio::time::timeout_at(deadline + DRAIN, handle)
            .await
            .map_err(|_| BenchError::new("read_heavy: tasks still waiting 30 s after the run"))?
            .map_err(|err| BenchError::new(format!("read_heavy task: {err}")))??;
        tally.reads.extend(one.reads);
        tally.writes.extend(one.writes);
        tally.counted += one.counted;
        tally.counted_reads += one.counted_reads;
        tally.operations += one.operations;
        tally.section_time += one.section_time;
    }
    let usage = probe.reading().await?.since(&before);
    let occupancy = occupancy.lock().unwrap_or_else(PoisonError::into_inner);
    let (reads, writes) = (sorted_micros(&tally.reads), sorted_micros(&tally.writes));
    let counted = tally.counted.max(1) as f64;
    let mut metrics = vec![
        Metric::new(
            "ops_per_s",
            "ops/s",
            tally.counted as f64 / duration.as_secs_f64(),
        ),
        Metric::new("reads", "%", 100.0 * tally.counted_reads as f64 / counted),
        Metric::new(
            "read_acquire_p50",
            "µs",
            percentile(&reads, 0.50).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "read_acquire_p99",
            "µs",
            percentile(&reads, 0.99).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "write_acquire_p50",
            "µs",
            percentile(&writes, 0.50).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "write_acquire_p99",
            "µs",
            percentile(&writes, 0.99).unwrap_or(f64::NAN),
        ),
        Metric::new(
            "mean_section",
            "µs",
            tally.section_time.as_secs_f64() * 1e6 / counted,
        ),
        Metric::new("most_inside", "sections", f64::from(occupancy.most)),
    ];
    // Over every operation of the run, the drain included, as the counters are.
    metrics.extend(usage.metrics(Per::Operation, tally.operations));
    metrics.push(Metric::new(
        "violations",
        "count",
        occupancy.violations as f64,
    ));
    Ok(Outcome {
        metrics,
        violations: occupancy.violations,
    })
}

async fn run_task(
    locking: Locking,
    locks: &LockManager,
    key: &str,
    task: usize,
    deadline: Instant,
    occupancy: &Mutex<Occupancy>,
) -> Result<Tally, BenchError> {
    let occupancy = || occupancy.lock().unwrap_or_else(PoisonError::into_inner);
    let mut draw = Draw::new(task);
    let mut tally = Tally::default();
    // Waiting as long as it takes, woken by the release notification.
    let options = || LockOptions::new().ttl(LEASE).wait(Duration::MAX);
    while Instant::now() < deadline {
        let write = draw.next() >= READ_SHARE;
        let asked = Instant::now();
        let guard = match (locking, write) {
            (Locking::Exclusive, _) => locks.lock(key, options()).await,
            (Locking::ReadWrite, false) => locks.read_lock(key, options()).await,
            (Locking::ReadWrite, true) => locks.write_lock(key, options()).await,
        }
        .map_err(|err| {
            let what = if write { "write" } else { "read" };
            BenchError::new(format!("{}: {what} of `{key}`: {err}", locking.name()))
        })?;
        let entered = Instant::now();
        // Under the exclusive lock a read must be alone too.
        let alone = write || locking == Locking::Exclusive;
        {
            let mut now = occupancy();
            if now.writers > 0 || (alone && now.readers > 0) {
                now.violations += 1;
            }
            if alone {
                now.writers += 1;
            } else {
                now.readers += 1;
            }
            now.most = now.most.max(now.readers + now.writers);
        }
        tokio::time::sleep(HOLD).await;
        {
            let mut now = occupancy();
            if alone {
                now.writers -= 1;
            } else {
                now.readers -= 1;
            }
        }
        let left = Instant::now();
        guard.release().await?;
        if write {
            tally.writes.push(entered - asked);
        } else {
            tally.reads.push(entered - asked);
        }
        tally.operations += 1;
        if entered < deadline {
            tally.counted += 1;
            tally.counted_reads += u64::from(!write);
            tally.section_time += left - entered;
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_is_the_same_for_a_task_and_about_nine_reads_in_ten() {
        let sequence = |task| {
            let mut draw = Draw::new(task);
            (0..10_000)
                .map(|_| draw.next() < READ_SHARE)
                .collect::<Vec<_>>()
        };
        assert_eq!(sequence(3), sequence(3));
        assert_ne!(sequence(3), sequence(4));
        let reads = sequence(0).iter().filter(|&&read| read).count();
        assert!((8_800..=9_200).contains(&reads), "{reads} reads");
    }
}
