//! The scenarios. Each measures one contender once (one repetition) and returns its metrics;
//! [`crate::run`] repeats them and rotates the contenders' order between repetitions.

pub mod ceiling;
pub mod contended;
pub mod expiry;
pub mod hold_many;
pub mod natural;
pub mod parallel;
pub mod read_heavy;
pub mod semaphore;
pub mod uncontended;

/// One measured value of one repetition.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    pub value: f64,
}

impl Metric {
    pub fn new(name: &'static str, unit: &'static str, value: f64) -> Self {
        Metric { name, unit, value }
    }
}

/// A key no other run, scenario, contender or repetition uses.
pub fn key(run: &str, scenario: &str, contender: &str, rep: usize, index: usize) -> String {
    let contender: String = contender
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("bench:{run}:{scenario}:{contender}:{rep}:{index}")
}

/// One `LockManager` per task, as separate processes would have: nothing shared in the client,
/// so every handover between tasks goes through the server.
pub async fn managers(
    url: &str,
    tasks: usize,
) -> Result<Vec<lock_runtime::LockManager>, crate::BenchError> {
    let mut managers = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        managers.push(lock_runtime::LockManager::connect(url).await?);
    }
    Ok(managers)
}
