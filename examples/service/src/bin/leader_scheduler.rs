//! Leader scheduler: every instance of a service runs the same scheduler, and its job must run on
//! one of them at a time. They elect a leader (`LockManager::elect`); only the leader runs the
//! job, and each run carries the fencing token of the leader's term, so a store that keeps the
//! highest token it saw refuses a late write from a leader that lost its term.
//!
//! `cargo run -p lock-service-examples --bin leader_scheduler` runs the failover demo: three
//! scheduler processes on one Redis, the leader SIGKILLed mid-term, then the next one stepping
//! down. `... -- run` runs one scheduler; see `--help`.

use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_runtime::{ElectionOptions, LockError};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

const HELP: &str = "\
leader_scheduler: one job, run by the leader of several scheduler processes

USAGE:
    leader_scheduler [--demo] [--ttl MS] [--slack MS]
                                     three schedulers on one Redis; the leader is SIGKILLed,
                                     then the next steps down; checks the hand-overs: the
                                     failover within the lease (--ttl, default 2000) and --slack
                                     (default 700) for starting and scheduling, the step-down's
                                     hand-over within less than a lease
    leader_scheduler run [--every MS] [--ttl MS] [--quit-on-eof]
                                     one scheduler: runs the job every MS (default 250) while it
                                     leads, with a lease of --ttl (default 2000); stops on Ctrl-C
                                     or SIGTERM (and on end of stdin with --quit-on-eof),
                                     stepping down
    leader_scheduler --help, leader_scheduler run --help
                                     this text

Redis: REDIS_URL if set (redis://, redis+sentinel://, redis+cluster://, redlock://). Unset,
`run` uses the in-process memory backend (one process alone, always leader), and the demo starts
a redis-server of its own on a free loopback port: the demo needs processes that share a server,
which memory cannot be.

Each run prints `run pid=<pid> token=<fencing token> n=<run> at=<unix ms>`.";

/// The leadership all schedulers campaign for.
const NAME: &str = "scheduler:nightly-report";

#[derive(Debug, Clone, Copy)]
struct Settings {
    every: Duration,
    ttl: Duration,
    quit_on_eof: bool,
}

/// The value of the option `name`, the next argument, in milliseconds.
fn millis<'a>(args: &mut impl Iterator<Item = &'a String>, name: &str) -> Result<Duration, String> {
    let value = args.next().ok_or(format!("{name} needs a value in ms"))?;
    value
        .parse()
        .map(Duration::from_millis)
        .map_err(|_| format!("{name} {value:?} is not a number of ms"))
}

fn parse_run(args: &[String]) -> Result<Settings, String> {
    let mut settings = Settings {
        every: Duration::from_millis(250),
        ttl: Duration::from_millis(2000),
        quit_on_eof: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--every" => settings.every = millis(&mut args, "--every")?,
            "--ttl" => settings.ttl = millis(&mut args, "--ttl")?,
            "--quit-on-eof" => settings.quit_on_eof = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if settings.every.is_zero() {
        return Err("--every must be above 0".into());
    }
    Ok(settings)
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}

/// Resolves when the scheduler should stop: Ctrl-C, SIGTERM, or the end of stdin with
/// `--quit-on-eof`.
async fn stop_requested(mut stop: lock_examples::StopSignal, quit_on_eof: bool) {
    let eof = async {
        if !quit_on_eof {
            return std::future::pending().await;
        }
        let mut stdin = tokio::io::stdin();
        let mut buffer = [0u8; 64];
        while matches!(stdin.read(&mut buffer).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = stop.recv() => {}
        () = eof => {}
    }
}

/// One scheduler process: campaigns, runs the job every `every` while it leads, and steps down
/// when told to stop.
async fn run(settings: Settings) -> Result<ExitCode, LockError> {
    let stop = lock_examples::StopSignal::install()
        .map_err(|err| LockError::Config(format!("cannot listen for Ctrl-C: {err}")))?;
    let locks = lock_examples::locks_from_env().await?;
    let pid = std::process::id();
    let options = ElectionOptions::new().ttl(settings.ttl).label("scheduler");
    let leadership = locks.elect(NAME, options)?;
    println!("campaigning pid={pid} on {}", locks.backend());
    let schedule = async {
        loop {
            let token = leadership.elected().await?;
            println!("elected pid={pid} token={token} term={}", leadership.term());
            let mut ticks = tokio::time::interval(settings.every);
            let mut runs = 0u64;
            let jobs = async {
                loop {
                    ticks.tick().await;
                    // The job writes with its term's token; a store would refuse older ones.
                    if leadership.fencing_token() != Some(token) {
                        return;
                    }
                    runs += 1;
                    println!("run pid={pid} token={token} n={runs} at={}", unix_ms());
                }
            };
            tokio::select! {
                reason = leadership.deposed() => println!("deposed pid={pid} token={token}: {reason}"),
                () = jobs => {}
            }
        }
    };
    let outcome: Result<(), LockError> = tokio::select! {
        outcome = schedule => outcome,
        () = stop_requested(stop, settings.quit_on_eof) => Ok(()),
    };
    let leading = leadership.fencing_token();
    leadership.step_down().await?;
    if let Some(token) = leading {
        println!("stepped down pid={pid} token={token}");
    }
    locks.shutdown().await?;
    outcome?;
    Ok(ExitCode::SUCCESS)
}

/// One line a scheduler printed, with the moment the demo read it.
struct Line {
    child: usize,
    text: String,
    read: Instant,
}

/// A job run as its line says.
#[derive(Debug, Clone, Copy)]
struct Run {
    child: usize,
    token: u64,
    at: u128,
}

fn parse_run_line(line: &Line) -> Option<Run> {
    let rest = line.text.strip_prefix("run ")?;
    let field = |name: &str| {
        rest.split(' ')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
    };
    Some(Run {
        child: line.child,
        token: field("token")?.parse().ok()?,
        at: field("at")?.parse().ok()?,
    })
}

struct Scheduler {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// The demo: three schedulers, a SIGKILLed leader, a leader that steps down.
/// The demo's lease, and how much longer than it a failover may take (starting and scheduling
/// the processes): `--ttl` and `--slack`.
#[derive(Debug, Clone, Copy)]
struct DemoSettings {
    ttl: Duration,
    slack: Duration,
}

fn parse_demo(args: &[String]) -> Result<DemoSettings, String> {
    let mut settings = DemoSettings {
        ttl: Duration::from_millis(2000),
        slack: Duration::from_millis(700),
    };
    let mut args = args.iter().filter(|arg| *arg != "--demo");
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ttl" => settings.ttl = millis(&mut args, "--ttl")?,
            "--slack" => settings.slack = millis(&mut args, "--slack")?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(settings)
}

async fn demo(demo: DemoSettings) -> Result<ExitCode, String> {
    let own;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) if url.starts_with("memory") => {
            return Err(format!(
                "the demo runs three processes, and {url} is a table inside one: set REDIS_URL \
                 to a Redis, or leave it unset to start one"
            ));
        }
        Ok(url) => url,
        Err(_) => {
            let installed = std::process::Command::new("redis-server")
                .arg("--version")
                .output();
            if !installed.is_ok_and(|out| out.status.success()) {
                return Err(
                    "the demo needs Redis: install redis-server (apt-get install \
                            redis-server) or set REDIS_URL"
                        .into(),
                );
            }
            own = lock_tests::RedisServer::start();
            println!(
                "started redis-server on {} (loopback, free port)",
                own.addr()
            );
            own.url()
        }
    };
    let settings = Settings {
        every: Duration::from_millis(200),
        ttl: demo.ttl,
        quit_on_eof: true,
    };
    // How long to wait for a line that must come: the test's patience, not a figure.
    let patience = Duration::from_secs(20);
    let exe = std::env::current_exe().map_err(|err| format!("own executable: {err}"))?;
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    let mut schedulers = Vec::new();
    let started = Instant::now();
    for index in 0..3 {
        let mut child = Command::new(&exe)
            .args(["run", "--quit-on-eof"])
            .args(["--every", &settings.every.as_millis().to_string()])
            .args(["--ttl", &settings.ttl.as_millis().to_string()])
            .env("REDIS_URL", &url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("start scheduler {index}: {err}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stdin = child.stdin.take();
        let tx = lines_tx.clone();
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            while let Ok(Some(text)) = stdout.next_line().await {
                let read = Instant::now();
                if tx
                    .send(Line {
                        child: index,
                        text,
                        read,
                    })
                    .is_err()
                {
                    return;
                }
            }
        });
        schedulers.push(Scheduler { child, stdin });
    }
    drop(lines_tx);
    let mut runs: Vec<Run> = Vec::new();
    // Reads lines until `until` accepts one, at most `within`; every line is shown.
    let mut next =
        async |within: Duration, until: &dyn Fn(&Line) -> bool| -> Result<Line, String> {
            let deadline = tokio::time::Instant::now() + within;
            loop {
                let line = tokio::time::timeout_at(deadline, lines.recv())
                    .await
                    .map_err(|_| format!("nothing expected happened within {within:?}"))?
                    .ok_or("every scheduler exited")?;
                println!(
                    "{:>6} ms  [scheduler {}] {}",
                    line.read.duration_since(started).as_millis(),
                    line.child,
                    line.text
                );
                if let Some(run) = parse_run_line(&line) {
                    runs.push(run);
                }
                if until(&line) {
                    return Ok(line);
                }
            }
        };
    let is_run_by = |child: usize, count: u64| {
        move |line: &Line| {
            line.child == child
                && line.text.starts_with("run ")
                && line.text.contains(&format!(" n={count} "))
        }
    };

    // 1. Someone leads and runs the job.
    let first = next(patience, &|line| line.text.starts_with("run ")).await?;
    let leader = first.child;
    next(patience, &is_run_by(leader, 4)).await?;

    // 2. The leader is SIGKILLed mid-term: nobody releases its lock, the next one leads once
    //    its lease runs out.
    let victim = &mut schedulers[leader];
    let pid = victim.child.id().unwrap_or(0);
    victim
        .child
        .start_kill()
        .map_err(|err| format!("SIGKILL: {err}"))?;
    let killed = Instant::now();
    println!(
        "{:>6} ms  SIGKILL scheduler {leader} (pid {pid}), the leader",
        killed.duration_since(started).as_millis()
    );
    let took_over = next(demo.ttl + demo.slack + patience, &|line| {
        line.child != leader && line.text.starts_with("run ")
    })
    .await?;
    let failover = took_over.read.duration_since(killed);
    let second = took_over.child;
    next(patience, &is_run_by(second, 4)).await?;

    // 3. The new leader steps down (end of its stdin, as a SIGTERM handler would): released,
    //    so the last one leads at once.
    schedulers[second].stdin = None;
    let stepped = Instant::now();
    println!(
        "{:>6} ms  scheduler {second} told to step down",
        stepped.duration_since(started).as_millis()
    );
    let third = next(demo.ttl + patience, &|line| {
        line.child != leader && line.child != second && line.text.starts_with("run ")
    })
    .await?;
    let handover = third.read.duration_since(stepped);
    next(patience, &is_run_by(third.child, 3)).await?;
    for scheduler in &mut schedulers {
        scheduler.stdin = None;
    }
    while next(Duration::from_secs(5), &|_| false).await.is_ok() {}
    for scheduler in &mut schedulers {
        let _ = scheduler.child.wait().await;
    }

    println!();
    println!(
        "failover after SIGKILL: {failover:?} (lease {:?})",
        settings.ttl
    );
    println!("hand-over after stepping down: {handover:?}");
    let problems = check(&runs, failover, handover, demo);
    if problems.is_empty() {
        let terms: std::collections::BTreeSet<u64> = runs.iter().map(|run| run.token).collect();
        println!(
            "ok: {} runs in {} terms, one scheduler per fencing token, tokens rising with time, \
             no two terms overlapping",
            runs.len(),
            terms.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    for problem in problems {
        eprintln!("FAILED: {problem}");
    }
    Ok(ExitCode::FAILURE)
}

/// What went wrong with the runs and the hand-over times, if anything.
fn check(runs: &[Run], failover: Duration, handover: Duration, demo: DemoSettings) -> Vec<String> {
    let ttl = demo.ttl;
    let mut problems = Vec::new();
    let mut owners = std::collections::BTreeMap::new();
    for run in runs {
        let owner = *owners.entry(run.token).or_insert(run.child);
        if owner != run.child {
            problems.push(format!(
                "token {} used by schedulers {owner} and {}",
                run.token, run.child
            ));
        }
    }
    let mut by_time = runs.to_vec();
    by_time.sort_by_key(|run| (run.at, run.token));
    for pair in by_time.windows(2) {
        if pair[1].token < pair[0].token {
            problems.push(format!(
                "terms overlap: token {} ran at {} after token {} at {}",
                pair[1].token, pair[1].at, pair[0].token, pair[0].at
            ));
        }
    }
    // The lease, the job's period and a margin for starting and scheduling.
    if failover > ttl + demo.slack {
        problems.push(format!(
            "failover took {failover:?}, more than the lease {ttl:?} and {:?} for scheduling",
            demo.slack
        ));
    }
    if handover >= ttl {
        problems.push(format!(
            "hand-over after stepping down took {handover:?}: as long as a lease, not a release"
        ));
    }
    problems
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-h" | "--help") => {
            println!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("run") if args[1..].iter().any(|arg| arg == "-h" || arg == "--help") => {
            println!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("run") => match parse_run(&args[1..]) {
            Ok(settings) => lock_examples::report(run(settings).await),
            Err(problem) => {
                eprintln!("{problem}\n\n{HELP}");
                ExitCode::from(2)
            }
        },
        None | Some("--demo" | "--ttl" | "--slack") => {
            let settings = match parse_demo(&args) {
                Ok(settings) => settings,
                Err(problem) => {
                    eprintln!("{problem}\n\n{HELP}");
                    return ExitCode::from(2);
                }
            };
            let Ok(mut stop) = lock_examples::StopSignal::install() else {
                eprintln!("FAILED: cannot listen for Ctrl-C");
                return ExitCode::FAILURE;
            };
            tokio::select! {
                outcome = demo(settings) => outcome.unwrap_or_else(|problem| {
                    eprintln!("FAILED: {problem}");
                    ExitCode::FAILURE
                }),
                // Ends the schedulers and the demo's own redis-server with it.
                () = stop.recv() => {
                    println!("interrupted: stopping the schedulers");
                    ExitCode::from(lock_examples::INTERRUPTED)
                }
            }
        }
        Some(other) => {
            eprintln!("unknown argument {other:?}\n\n{HELP}");
            ExitCode::from(2)
        }
    }
}
