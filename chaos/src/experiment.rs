//! The run: the lock deployment, the fenced resource, worker processes, the seeded fault
//! injector, then the analysis.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_runtime::fence::redis::fence_key;
use lock_tests::{FaultProxy, RedisServer, Reply};

use crate::analyze::{self, Fault, FaultKind, Hit, Incarnation, Report};
use crate::deployment::{Deployment, Stop, StoreFault};
use crate::rng::Rng;
use crate::{Config, Mode, TTL, now_ns, signal};

/// Quiet time before the first fault and after the last one: every orphaned lease has run out
/// and the lock has been passed around normally again before the workers are stopped.
const WARMUP: Duration = Duration::from_millis(1500);
fn cooldown() -> Duration {
    TTL + Duration::from_millis(1500)
}
/// How long a worker may take to finish its section once told to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// What a connection fault does to a worker's proxies.
enum Connection {
    Stall(Duration),
    /// A stall of the worker's link to the resource too.
    Partition(Duration),
    Delay {
        delay: Duration,
        length: Duration,
    },
    Cut,
}

struct Worker {
    slot: usize,
    child: Child,
    record: Incarnation,
}

struct Run<'a> {
    config: &'a Config,
    dir: PathBuf,
    exe: PathBuf,
    deployment: Deployment,
    resource: RedisServer,
    /// One proxy per worker slot between it and the resource, for `partition`.
    resource_proxies: Vec<FaultProxy>,
    workers: Vec<Worker>,
    finished: Vec<Incarnation>,
    faults: Vec<Fault>,
    rng: Rng,
    /// When the run started (wall clock, ns): times in the output count from here.
    t0: u64,
}

impl Run<'_> {
    fn spawn(&mut self, slot: usize, incarnation: usize) -> Result<Worker, String> {
        let log = self.dir.join(format!("worker-{slot}-{incarnation}.log"));
        let stderr_path = self.dir.join(format!("worker-{slot}-{incarnation}.stderr"));
        let stderr = fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let seed = self.config.seed ^ ((slot as u64) << 32) ^ (incarnation as u64) << 48;
        let child = Command::new(&self.exe)
            .arg("worker")
            // In the environment, not on the command line, where `ps` would show a password.
            .env(
                crate::worker::LOCK_URL_VAR,
                self.deployment.worker_url(slot),
            )
            .args(["--resource-url", &self.resource_proxies[slot].url()])
            .args(["--tasks", &self.config.tasks.to_string()])
            .arg("--log")
            .arg(&log)
            .args(["--seed", &seed.to_string()])
            .args(["--keys", &self.config.keys.to_string()])
            .args(["--fair", if self.config.fair { "1" } else { "0" }])
            .args([
                "--lock-delay-ms",
                &self.config.lock_delay.as_millis().to_string(),
            ])
            .args(["--mode", self.config.mode.name()])
            .args(["--permits", &self.config.permits.to_string()])
            .args(["--reads", &self.config.reads_pct.to_string()])
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

    /// The slot of the worker that holds the lock now, if the lock store says. A semaphore's
    /// permits and a read-write lock's grants record no pid: there the workers' own logs say
    /// who is inside a section now, a writer before readers, and `pick` (a draw made whether
    /// it is needed or not, so the schedule does not depend on it) chooses among them.
    /// The PostgreSQL store records no pid either (its rows hold a holder id made from the
    /// owner token): there too the logs say.
    fn holder(&self, pick: u64) -> Option<usize> {
        if self.config.mode != Mode::Exclusive || self.config.topology.is_postgres() {
            let inside: Vec<(bool, usize)> = self
                .workers
                .iter()
                .flat_map(|w| {
                    open_sections(&w.record.log)
                        .into_iter()
                        .map(move |writer| (writer, w.slot))
                })
                .collect();
            let writers: Vec<usize> = inside.iter().filter(|i| i.0).map(|i| i.1).collect();
            let any: Vec<usize> = inside.iter().map(|i| i.1).collect();
            let from = if writers.is_empty() { any } else { writers };
            return (!from.is_empty()).then(|| from[pick as usize % from.len()]);
        }
        let pid = self.deployment.holder_pid()?;
        self.workers
            .iter()
            .find(|w| w.record.pid == pid)
            .map(|w| w.slot)
    }

    /// Mostly the current holder (the interesting victim), otherwise any worker.
    fn target(&mut self) -> usize {
        let random = self.rng.below(self.workers.len() as u64) as usize;
        if self.rng.below(4) < 3 {
            // Drawn only in the new modes: the exclusive mode's schedule of a seed stays.
            let pick = if self.config.mode == Mode::Exclusive && !self.config.topology.is_postgres()
            {
                0
            } else {
                self.rng.below(1 << 16)
            };
            self.holder(pick).unwrap_or(random)
        } else {
            random
        }
    }

    fn ttl_times(&mut self, lo_pct: u64, hi_pct: u64) -> Duration {
        TTL * self.rng.range(lo_pct, hi_pct) as u32 / 100
    }

    /// A fault on worker `slot` that lasted from `start` until now. The lock is free to take
    /// from its start: the worker's lease is all it can leave behind.
    fn worker_fault(
        &self,
        kind: FaultKind,
        slot: usize,
        pid: u32,
        start: u64,
        detail: String,
    ) -> Fault {
        Fault {
            kind,
            hit: Hit::Worker(slot),
            pid: Some(pid),
            start,
            end: now_ns(),
            serving: start,
            detail,
            slots: Vec::new(),
        }
    }

    fn kill(&mut self) -> Result<Fault, String> {
        let slot = self.target();
        let incarnation = self.workers[slot].record.incarnation + 1;
        let worker = &mut self.workers[slot];
        let pid = worker.record.pid;
        let start = now_ns();
        let _ = worker.child.kill();
        let status = worker.child.wait().map_err(|e| e.to_string())?;
        worker.record.killed = true;
        worker.record.ended = start;
        worker.record.exit = status.to_string();
        let fault = self.worker_fault(
            FaultKind::Kill,
            slot,
            pid,
            start,
            "SIGKILL, respawned".into(),
        );
        // Respawned at once, as a supervisor would.
        let fresh = self.spawn(slot, incarnation)?;
        let old = std::mem::replace(&mut self.workers[slot], fresh);
        self.finished.push(old.record);
        Ok(fault)
    }

    fn pause(&mut self) -> Result<Fault, String> {
        let slot = self.target();
        let pause = self.ttl_times(130, 220);
        let pid = self.workers[slot].record.pid;
        let start = now_ns();
        signal(pid, "STOP")?;
        std::thread::sleep(pause);
        signal(pid, "CONT")?;
        let detail = format!("SIGSTOP for {} ms", pause.as_millis());
        Ok(self.worker_fault(FaultKind::Pause, slot, pid, start, detail))
    }

    /// Stall, delay or cut a worker's connections: every proxy between it and the lock store at
    /// once (for Redlock, its link to each master). A partition also stalls its link to the
    /// resource: a write sent just before is delivered when the network heals, whatever the
    /// worker has learnt about its lease by then (the delayed packet of Kleppmann's article).
    fn connection(&mut self, kind: FaultKind) -> Result<Fault, String> {
        let slot = self.target();
        // Drawn before anything happens, in the order the schedule has always drawn them.
        let fault = match kind {
            FaultKind::Stall => Connection::Stall(self.ttl_times(130, 220)),
            FaultKind::Partition => Connection::Partition(self.ttl_times(130, 220)),
            FaultKind::Delay => {
                let delay = Duration::from_millis(self.rng.range(20, 100));
                let length = self.ttl_times(80, 150);
                Connection::Delay { delay, length }
            }
            _ => Connection::Cut,
        };
        let pid = self.workers[slot].record.pid;
        let proxies = self.deployment.proxies(slot);
        if proxies.is_empty() {
            return Err(format!(
                "{} needs a proxy, and the {} topology has none",
                kind.name(),
                self.config.topology.name()
            ));
        }
        let start = now_ns();
        let detail = match fault {
            Connection::Stall(length) => {
                proxies.iter().for_each(|p| p.blackhole(true));
                std::thread::sleep(length);
                proxies.iter().for_each(|p| p.blackhole(false));
                format!("connection blackholed for {} ms", length.as_millis())
            }
            Connection::Partition(length) => {
                let resource = &self.resource_proxies[slot];
                proxies.iter().for_each(|p| p.blackhole(true));
                resource.blackhole(true);
                std::thread::sleep(length);
                resource.blackhole(false);
                proxies.iter().for_each(|p| p.blackhole(false));
                format!(
                    "every connection, the resource's too, blackholed for {} ms",
                    length.as_millis()
                )
            }
            Connection::Delay { delay, length } => {
                proxies.iter().for_each(|p| p.set_delay(delay));
                std::thread::sleep(length);
                proxies.iter().for_each(|p| p.set_delay(Duration::ZERO));
                format!(
                    "{} ms each way for {} ms",
                    delay.as_millis(),
                    length.as_millis()
                )
            }
            Connection::Cut => {
                proxies.iter().for_each(FaultProxy::cut);
                "every connection closed".to_owned()
            }
        };
        Ok(self.worker_fault(kind, slot, pid, start, detail))
    }

    /// Ends backends with `pg_terminate_backend`: directly, those of the worker the fault
    /// targets (by the `application_name` in its URL), which is a fault on that worker; behind
    /// PgBouncer, where a server connection serves whichever client the pooler lends it to,
    /// every backend of the lock role, which is a fault on the store.
    fn terminate(&mut self) -> Result<Fault, String> {
        let slot = self.target();
        let pid = self.workers[slot].record.pid;
        let start = now_ns();
        let fault = self.deployment.terminate(slot)?;
        Ok(match fault.hit {
            Hit::Worker(_) => {
                self.worker_fault(FaultKind::Terminate, slot, pid, start, fault.detail)
            }
            _ => on_store(FaultKind::Terminate, fault),
        })
    }

    fn inject(&mut self, kind: FaultKind) -> Result<(), String> {
        let store = |fault| on_store(kind, fault);
        let fault = match kind {
            FaultKind::Kill => self.kill()?,
            FaultKind::Pause => self.pause()?,
            FaultKind::Stall | FaultKind::Delay | FaultKind::Cut | FaultKind::Partition => {
                self.connection(kind)?
            }
            FaultKind::RestartPersist | FaultKind::RestartNoPersist => {
                let persist = kind == FaultKind::RestartPersist;
                store(self.deployment.restart(persist, &mut self.rng)?)
            }
            FaultKind::NodePause => {
                let (lo, hi) = self.config.topology.node_pause_pct();
                let pause = self.ttl_times(lo, hi);
                store(self.deployment.pause_node(pause, &mut self.rng)?)
            }
            FaultKind::ShardStall => {
                // As long as a node-pause: under the failure detection, no failover follows.
                let (lo, hi) = self.config.topology.node_pause_pct();
                let pause = self.ttl_times(lo, hi);
                store(self.deployment.stall_shard(pause, &mut self.rng)?)
            }
            FaultKind::ServerCrash => store(self.deployment.crash_server()?),
            FaultKind::PoolerRestart => store(self.deployment.restart_pooler()?),
            FaultKind::Terminate => self.terminate()?,
            FaultKind::FailoverKill => store(self.deployment.fail_over(Stop::Kill)?),
            FaultKind::FailoverPause => store(self.deployment.fail_over(Stop::Pause)?),
            FaultKind::FailoverObserved => {
                return Err("a failover the deployment does on its own cannot be injected".into());
            }
        };
        self.record(fault)
    }

    /// Logs a fault to `faults.log` as it happens (wall-clock ns, comparable with the workers'
    /// logs) and to stdout, and keeps it for the analysis.
    fn record(&mut self, fault: Fault) -> Result<(), String> {
        let target = match fault.hit {
            Hit::Worker(slot) => format!("worker-{slot}"),
            Hit::Master(node) => format!("master-{node}"),
            Hit::Store => "store".into(),
            Hit::Shard => "shard".into(),
        };
        let line = format!(
            "{} {} {} {} {} {}\n",
            fault.start,
            fault.end,
            fault.serving,
            fault.kind.name(),
            target,
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
            fault.kind.name(),
            fault.hit.label(),
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

/// The sections a worker's log shows open now (entered, not yet left), each `true` for a
/// writer's. Only the log's tail is read: a section open now entered a moment ago, or is one of
/// the long ones (about 1.4 s), whose lines fit well within it.
fn open_sections(log: &Path) -> Vec<bool> {
    const TAIL: u64 = 64 * 1024;
    let Ok(mut file) = fs::File::open(log) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut bytes = Vec::new();
    let start = std::io::SeekFrom::Start(len.saturating_sub(TAIL));
    if std::io::Seek::seek(&mut file, start).is_err()
        || std::io::Read::read_to_end(&mut file, &mut bytes).is_err()
    {
        return Vec::new();
    }
    // The tail may begin mid-line, mid-character even: only the whole lines after it matter.
    let text = String::from_utf8_lossy(&bytes);
    let mut open: Vec<((&str, &str), bool)> = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts[..] {
            ["enter", task, n, .., role] => open.push(((task, n), role == "write")),
            ["exit", task, n, ..] => open.retain(|(section, _)| *section != (task, n)),
            _ => {}
        }
    }
    open.into_iter().map(|(_, writer)| writer).collect()
}

/// A fault on the lock store as the analysis sees it.
fn on_store(kind: FaultKind, fault: StoreFault) -> Fault {
    Fault {
        kind,
        hit: fault.hit,
        pid: None,
        start: fault.start,
        end: fault.end,
        serving: fault.serving,
        detail: fault.detail,
        slots: fault.slots,
    }
}

/// The longest a fault of this kind is expected to take, plus the quiet gap after it. A
/// failover's length is Redis's business: the run waits for the last fault to end, then for the
/// cooldown, however long it took.
fn budget(kind: FaultKind) -> Duration {
    let gap = TTL + Duration::from_millis(800);
    gap + match kind {
        FaultKind::Pause
        | FaultKind::Stall
        | FaultKind::Partition
        | FaultKind::NodePause
        | FaultKind::ShardStall => TTL * 22 / 10,
        FaultKind::Delay => TTL * 15 / 10,
        FaultKind::RestartPersist | FaultKind::RestartNoPersist => Duration::from_millis(500),
        FaultKind::Kill | FaultKind::Cut | FaultKind::Terminate => Duration::from_millis(100),
        // Crash recovery replays little WAL here; the time is the start and the first answer.
        FaultKind::ServerCrash => Duration::from_secs(2),
        FaultKind::PoolerRestart => Duration::from_secs(1),
        // Typically 2 to 3.5 s (promotion after the 1 s down-after / node timeout, then the old
        // master back as a replica).
        FaultKind::FailoverKill | FaultKind::FailoverPause => Duration::from_secs(5),
        // Never scheduled: only seen.
        FaultKind::FailoverObserved => Duration::ZERO,
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
    let mode = match config.mode {
        Mode::Exclusive => String::new(),
        Mode::ReadWrite => format!(", mode rw ({}% reads)", config.reads_pct),
        Mode::Semaphore => format!(", mode semaphore ({} permits)", config.permits),
    };
    println!(
        "chaos: seed {}, topology {}{mode}, {} workers x {} tasks, ttl {:?}{}, {} s{}",
        config.seed,
        config.topology.name(),
        config.workers,
        config.tasks,
        TTL,
        if config.lock_delay.is_zero() {
            String::new()
        } else {
            format!(", lock-delay {:?}", config.lock_delay)
        },
        config.duration.as_secs(),
        if config.quick { " (quick)" } else { "" }
    );
    println!(
        "  replay with --topology {}{} --seed {}; logs in {}",
        config.topology.name(),
        match config.mode {
            Mode::Exclusive => String::new(),
            Mode::ReadWrite => format!(" --mode rw --reads {}", config.reads_pct),
            Mode::Semaphore => format!(" --mode semaphore --permits {}", config.permits),
        },
        config.seed,
        dir.display()
    );
    let resource = RedisServer::start();
    let resource_proxies = (0..config.workers)
        .map(|_| FaultProxy::start(resource.addr()))
        .collect();
    let deployment = Deployment::start(config, &dir)?;
    println!("  lock store: {}", deployment.describe());
    let mut run = Run {
        config,
        dir: dir.clone(),
        exe,
        deployment,
        resource,
        resource_proxies,
        workers: Vec::new(),
        finished: Vec::new(),
        faults: Vec::new(),
        rng: Rng::new(config.seed),
        t0: now_ns(),
    };
    let outcome = run.drive();
    // The harness's servers keep their logs in temp dirs that go with them: keep a copy.
    if let Some(log) = run.deployment.log() {
        let _ = fs::write(dir.join("topology.log"), log);
    }
    let report = outcome?;
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

impl Run<'_> {
    /// Adds the failovers the watch saw that no injected failover explains (the deployment
    /// failed over on its own): from the analysis's point of view they are faults too.
    fn record_failovers_not_injected(&mut self, seen: Vec<StoreFault>) -> Result<(), String> {
        for change in seen {
            // The watch sees an injected failover up to a poll late, possibly after the fault
            // ended: any overlap with one means it is that one (or happened inside it).
            let injected = self.faults.iter().any(|f| {
                matches!(f.kind, FaultKind::FailoverKill | FaultKind::FailoverPause)
                    && f.start <= change.serving
                    && change.start <= f.end
            });
            if !injected {
                self.record(on_store(FaultKind::FailoverObserved, change))?;
            }
        }
        Ok(())
    }

    /// The resource's journal of every write it saw, in order.
    fn journal(&self) -> Result<Vec<analyze::Delivery>, String> {
        let reply = self
            .resource
            .try_cmd(&["LRANGE", crate::worker::RESOURCE_JOURNAL, "0", "-1"])
            .map_err(|e| format!("cannot read the resource's journal: {e}"))?;
        let Reply::Array(items) = reply else {
            return Err(format!("the resource's journal: {reply:?}"));
        };
        let entries: Vec<String> = items
            .into_iter()
            .map(|item| match item {
                Reply::Bulk(entry) => Ok(String::from_utf8_lossy(&entry).into_owned()),
                other => Err(format!("the resource's journal: {other:?}")),
            })
            .collect::<Result<_, _>>()?;
        analyze::parse_journal(&entries)
    }

    /// Workers, faults, stop, checks: everything once the servers are up.
    fn drive(&mut self) -> Result<Report, String> {
        let config = self.config;
        for slot in 0..config.workers {
            let worker = self.spawn(slot, 0)?;
            self.workers.push(worker);
        }
        let watch = self.deployment.watch_failovers();
        let started = Instant::now();
        let faults_until = started + config.duration - cooldown();
        std::thread::sleep(WARMUP);
        let mut quiet_from = Instant::now();
        // Every kind of the topology once per round, in a seeded order; near the end, the kinds
        // that no longer fit are skipped for those that do.
        let mut round: Vec<FaultKind> = Vec::new();
        loop {
            if round.is_empty() {
                round = config.fault_kinds();
                self.rng.shuffle(&mut round);
            }
            let now = Instant::now();
            let Some(next) = round
                .iter()
                .rposition(|&kind| now + budget(kind) <= faults_until)
            else {
                break;
            };
            let kind = round.remove(next);
            self.inject(kind)?;
            quiet_from = Instant::now();
            let gap = TTL + Duration::from_millis(300 + self.rng.range(0, 500));
            std::thread::sleep(gap);
        }
        // A fault that ran long still gets its cooldown.
        let end = (started + config.duration).max(quiet_from + cooldown());
        if let Some(left) = end.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let mut problems = self.stop_workers();
        let t1 = now_ns();
        if let Some(watch) = watch {
            self.record_failovers_not_injected(watch.stop()?)?;
        }
        self.faults.sort_by_key(|f| f.start);
        match self.deployment.locks_left(config.mode) {
            Ok(left) if left.is_empty() => {}
            Ok(left) => problems.push(format!(
                "lock left behind: still held on {} after every worker stopped",
                left.join(", ")
            )),
            Err(e) => problems.push(format!("cannot check for a lock left behind: {e}")),
        }
        let journal = self.journal()?;
        let final_token = match self
            .resource
            .try_cmd(&["GET", &fence_key(crate::worker::RESOURCE_JOURNAL)])
        {
            Ok(Reply::Bulk(b)) => String::from_utf8_lossy(&b).parse::<u64>().ok(),
            _ => None,
        };
        analyze::analyze(&analyze::Input {
            config,
            incarnations: &self.finished,
            faults: &self.faults,
            problems,
            t0: self.t0,
            t1,
            final_token,
            journal,
        })
    }
}

fn write(path: &str, text: &str) -> Result<(), String> {
    if let Some(parent) = Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("{path}: {e}"))
}
