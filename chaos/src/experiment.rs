//! The run: servers, proxies, worker processes, the seeded fault injector, then the analysis.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_tests::{FaultProxy, RedisServer, Reply};

use crate::analyze::{self, Fault, FaultKind, Incarnation};
use crate::lockserver::LockServer;
use crate::rng::Rng;
use crate::{Config, LOCK_KEY, TTL, now_ns};

/// Quiet time before the first fault and after the last one: every orphaned lease has run out
/// and the lock has been passed around normally again before the workers are stopped.
const WARMUP: Duration = Duration::from_millis(1500);
fn cooldown() -> Duration {
    TTL + Duration::from_millis(1500)
}
/// How long a worker may take to finish its section once told to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

struct Worker {
    slot: usize,
    child: Child,
    record: Incarnation,
}

struct Run<'a> {
    config: &'a Config,
    dir: PathBuf,
    exe: PathBuf,
    lock: LockServer,
    resource: RedisServer,
    proxies: Vec<FaultProxy>,
    workers: Vec<Worker>,
    finished: Vec<Incarnation>,
    faults: Vec<Fault>,
    rng: Rng,
    /// When the run started (wall clock, ns): times in the output count from here.
    t0: u64,
}

fn signal(pid: u32, name: &str) -> Result<(), String> {
    // `unsafe` is forbidden in the workspace, so no kill(2): the shell's builtin sends it.
    let status = Command::new("sh")
        .args(["-c", r#"kill -s "$0" "$1""#, name, &pid.to_string()])
        .status()
        .map_err(|e| format!("kill -{name} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{name} {pid}: {status}"))
    }
}

impl Run<'_> {
    fn spawn(&mut self, slot: usize, incarnation: usize) -> Result<Worker, String> {
        let log = self.dir.join(format!("worker-{slot}-{incarnation}.log"));
        let stderr_path = self.dir.join(format!("worker-{slot}-{incarnation}.stderr"));
        let stderr = fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let seed = self.config.seed ^ ((slot as u64) << 32) ^ (incarnation as u64) << 48;
        let child = Command::new(&self.exe)
            .arg("worker")
            .args(["--lock-url", &self.proxies[slot].url()])
            .args(["--resource-url", &self.resource.url()])
            .args(["--tasks", &self.config.tasks.to_string()])
            .arg("--log")
            .arg(&log)
            .args(["--seed", &seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot spawn a worker: {e}"))?;
        let record = Incarnation {
            slot,
            incarnation,
            pid: child.id(),
            log,
            stderr: stderr_path,
            started: now_ns(),
            ended: 0,
            killed: false,
            exit: String::new(),
            clean_exit: false,
        };
        Ok(Worker {
            slot,
            child,
            record,
        })
    }

    /// The slot of the worker that holds the lock now, if the lock server says.
    fn holder(&self) -> Option<usize> {
        let stored = format!("lock:{{{LOCK_KEY}}}");
        let Ok(Reply::Bulk(pid)) = self.lock.cmd(&["HGET", &stored, "pid"]) else {
            return None;
        };
        let pid: u32 = String::from_utf8_lossy(&pid).trim().parse().ok()?;
        self.workers
            .iter()
            .find(|w| w.record.pid == pid)
            .map(|w| w.slot)
    }

    /// Mostly the current holder (the interesting victim), otherwise any worker.
    fn target(&mut self) -> usize {
        let random = self.rng.below(self.workers.len() as u64) as usize;
        if self.rng.below(4) < 3 {
            self.holder().unwrap_or(random)
        } else {
            random
        }
    }

    fn ttl_times(&mut self, lo_pct: u64, hi_pct: u64) -> Duration {
        TTL * self.rng.range(lo_pct, hi_pct) as u32 / 100
    }

    fn inject(&mut self, kind: FaultKind) -> Result<(), String> {
        let mut fault = Fault {
            kind,
            slot: None,
            pid: None,
            start: 0,
            end: 0,
            detail: String::new(),
        };
        match kind {
            FaultKind::Kill => {
                let slot = self.target();
                let incarnation = self.workers[slot].record.incarnation + 1;
                let worker = &mut self.workers[slot];
                fault.slot = Some(slot);
                fault.pid = Some(worker.record.pid);
                fault.start = now_ns();
                let _ = worker.child.kill();
                let status = worker.child.wait().map_err(|e| e.to_string())?;
                fault.end = now_ns();
                worker.record.killed = true;
                worker.record.ended = fault.start;
                worker.record.exit = status.to_string();
                // Respawned at once, as a supervisor would.
                let fresh = self.spawn(slot, incarnation)?;
                let old = std::mem::replace(&mut self.workers[slot], fresh);
                self.finished.push(old.record);
                fault.detail = "SIGKILL, respawned".into();
            }
            FaultKind::Pause => {
                let slot = self.target();
                let pause = self.ttl_times(130, 220);
                let pid = self.workers[slot].record.pid;
                fault.slot = Some(slot);
                fault.pid = Some(pid);
                fault.start = now_ns();
                signal(pid, "STOP")?;
                std::thread::sleep(pause);
                signal(pid, "CONT")?;
                fault.end = now_ns();
                fault.detail = format!("SIGSTOP for {} ms", pause.as_millis());
            }
            FaultKind::RestartPersist | FaultKind::RestartNoPersist => {
                let persist = kind == FaultKind::RestartPersist;
                fault.start = now_ns();
                self.lock.restart(persist)?;
                fault.end = now_ns();
                fault.detail = if persist {
                    "SIGKILL, restarted with appendonly yes (appendfsync always)".into()
                } else {
                    "SIGKILL, data wiped, restarted with appendonly no".into()
                };
            }
            FaultKind::Stall => {
                let slot = self.target();
                let stall = self.ttl_times(130, 220);
                fault.slot = Some(slot);
                fault.pid = Some(self.workers[slot].record.pid);
                fault.start = now_ns();
                self.proxies[slot].blackhole(true);
                std::thread::sleep(stall);
                self.proxies[slot].blackhole(false);
                fault.end = now_ns();
                fault.detail = format!("connection blackholed for {} ms", stall.as_millis());
            }
            FaultKind::Delay => {
                let slot = self.target();
                let delay = Duration::from_millis(self.rng.range(20, 100));
                let length = self.ttl_times(80, 150);
                fault.slot = Some(slot);
                fault.pid = Some(self.workers[slot].record.pid);
                fault.start = now_ns();
                self.proxies[slot].set_delay(delay);
                std::thread::sleep(length);
                self.proxies[slot].set_delay(Duration::ZERO);
                fault.end = now_ns();
                fault.detail = format!(
                    "{} ms each way for {} ms",
                    delay.as_millis(),
                    length.as_millis()
                );
            }
            FaultKind::Cut => {
                let slot = self.target();
                fault.slot = Some(slot);
                fault.pid = Some(self.workers[slot].record.pid);
                fault.start = now_ns();
                self.proxies[slot].cut();
                fault.end = now_ns();
                fault.detail = "every connection closed".into();
            }
        }
        // The fault log, as it happens: wall-clock ns, comparable with the workers' logs.
        let line = format!(
            "{} {} {} {} {}\n",
            fault.start,
            fault.end,
            kind.name(),
            fault.slot.map_or("-".into(), |s| s.to_string()),
            fault.detail
        );
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("faults.log"))
            .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()))
            .map_err(|e| format!("fault log: {e}"))?;
        println!(
            "  {:>7.2}s {:<18} {}{}",
            (fault.start.saturating_sub(self.t0)) as f64 / 1e9,
            kind.name(),
            fault
                .slot
                .map_or(String::new(), |s| format!("worker {s}: ")),
            fault.detail
        );
        self.faults.push(fault);
        Ok(())
    }

    /// Closes every worker's stdin and waits for them to finish their sections and exit.
    fn stop_workers(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for worker in &mut self.workers {
            drop(worker.child.stdin.take());
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for mut worker in std::mem::take(&mut self.workers) {
            loop {
                match worker.child.try_wait() {
                    Ok(Some(status)) => {
                        worker.record.exit = status.to_string();
                        worker.record.clean_exit = status.success();
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        problems.push(format!(
                            "worker {} (pid {}) did not stop within {STOP_TIMEOUT:?}",
                            worker.slot, worker.record.pid
                        ));
                        let _ = worker.child.kill();
                        let _ = worker.child.wait();
                        worker.record.exit = "hung, killed".into();
                        break;
                    }
                }
            }
            worker.record.ended = now_ns();
            self.finished.push(worker.record);
        }
        problems
    }
}

impl Drop for Run<'_> {
    /// On an early return (a setup step failed) no worker is left behind, stopped or running.
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.kill();
            let _ = worker.child.wait();
        }
    }
}

fn all_kinds() -> Vec<FaultKind> {
    vec![
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::RestartPersist,
        FaultKind::RestartNoPersist,
        FaultKind::Stall,
        FaultKind::Delay,
        FaultKind::Cut,
    ]
}

/// The longest a fault of this kind can take, plus the quiet gap after it.
fn budget(kind: FaultKind) -> Duration {
    let gap = TTL + Duration::from_millis(800);
    gap + match kind {
        FaultKind::Pause | FaultKind::Stall => TTL * 22 / 10,
        FaultKind::Delay => TTL * 15 / 10,
        FaultKind::RestartPersist | FaultKind::RestartNoPersist => Duration::from_millis(500),
        FaultKind::Kill | FaultKind::Cut => Duration::from_millis(100),
    }
}

fn work_dir(config: &Config) -> Result<(PathBuf, bool), String> {
    if let Some(dir) = &config.dir {
        let dir = PathBuf::from(dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // The logs are appended to: an earlier run's would be read back as this one's.
        let used = fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .next()
            .is_some();
        if used {
            return Err(format!(
                "--dir {} is not empty: give each run a directory of its own",
                dir.display()
            ));
        }
        return Ok((dir, true));
    }
    let dir = std::env::temp_dir().join(format!("lock-chaos-{}-{}", std::process::id(), now_ns()));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((dir, false))
}

/// Runs the experiment; `Ok(true)` when every invariant held.
pub(crate) fn run(config: &Config) -> Result<bool, String> {
    let (dir, keep) = work_dir(config)?;
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    println!(
        "chaos: seed {}, {} workers x {} tasks, ttl {:?}, {} s{}, single Redis topology",
        config.seed,
        config.workers,
        config.tasks,
        TTL,
        config.duration.as_secs(),
        if config.quick { " (quick)" } else { "" }
    );
    println!(
        "  replay with --seed {}; logs in {}",
        config.seed,
        dir.display()
    );
    let resource = RedisServer::start();
    let lock = LockServer::start(&dir.join("lock-redis"))?;
    let proxies = (0..config.workers)
        .map(|_| FaultProxy::start(lock.addr()))
        .collect();
    let mut run = Run {
        config,
        dir: dir.clone(),
        exe,
        lock,
        resource,
        proxies,
        workers: Vec::new(),
        finished: Vec::new(),
        faults: Vec::new(),
        rng: Rng::new(config.seed),
        t0: now_ns(),
    };
    for slot in 0..config.workers {
        let worker = run.spawn(slot, 0)?;
        run.workers.push(worker);
    }
    let t0 = run.t0;
    let started = Instant::now();
    let faults_until = started + config.duration - cooldown();
    std::thread::sleep(WARMUP);
    // Every kind once per round, in a seeded order.
    let mut round: Vec<FaultKind> = Vec::new();
    loop {
        if round.is_empty() {
            round = all_kinds();
            run.rng.shuffle(&mut round);
        }
        let kind = round[round.len() - 1];
        if Instant::now() + budget(kind) > faults_until {
            break;
        }
        round.pop();
        run.inject(kind)?;
        let gap = TTL + Duration::from_millis(300 + run.rng.range(0, 500));
        std::thread::sleep(gap);
    }
    let end = started + config.duration;
    if let Some(left) = end.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
    let mut problems = run.stop_workers();
    let t1 = now_ns();
    let stored = format!("lock:{{{LOCK_KEY}}}");
    match run.lock.cmd(&["EXISTS", &stored]) {
        Ok(Reply::Integer(0)) => {}
        Ok(Reply::Integer(_)) => problems.push(format!(
            "lock left behind: {stored} still exists after every worker stopped"
        )),
        other => problems.push(format!("cannot check for a lock left behind: {other:?}")),
    }
    let final_token = match run.resource.try_cmd(&["GET", crate::worker::RESOURCE_KEY]) {
        Ok(Reply::Bulk(b)) => String::from_utf8_lossy(&b).parse::<u64>().ok(),
        _ => None,
    };
    let report = analyze::analyze(&analyze::Input {
        config,
        incarnations: &run.finished,
        faults: &run.faults,
        problems,
        t0,
        t1,
        final_token,
    })?;
    report.print();
    if let Some(path) = &config.json {
        write(path, &report.json().to_string())?;
    }
    if let Some(path) = &config.svg {
        write(path, &crate::svg::render(&report))?;
    }
    let ok = report.ok();
    drop(run);
    if ok && !keep {
        let _ = fs::remove_dir_all(&dir);
    }
    Ok(ok)
}

fn write(path: &str, text: &str) -> Result<(), String> {
    if let Some(parent) = Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("{path}: {e}"))
}
