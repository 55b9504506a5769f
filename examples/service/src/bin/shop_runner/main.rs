//! The shop runner: starts several instances of `shop_service` against one Redis and one SQLite
//! file, fires concurrent orders at all of them, optionally SIGKILLs one midway through the sale
//! or stops one for longer than its leases (a stale lock holder that wakes up), and then checks in the database that no invariant broke: orders never exceed the stock, the
//! stock never goes negative, stock + orders == the initial stock, at most one order per user,
//! and every accepted stock write carried a higher fencing token than the one before.
//!
//! ```sh
//! cargo build --release -p lock-service-examples --bins
//! target/release/shop_runner                 # its own redis-server on a free loopback port
//! target/release/shop_runner --kill-one      # one instance SIGKILLed midway
//! target/release/shop_runner --pause-one     # one instance stopped past its leases, then resumed
//! target/release/shop_runner --pause-one --on-lease-lost continue   # only the fences stop it
//! REDIS_URL=redis://127.0.0.1:7000 target/release/shop_runner
//! ```
//!
//! It prints throughput, latency percentiles, outcomes, orders, refused stale writes and what
//! each instance served, then a `summary:` line of `name=value` pairs for scripts. Exit codes:
//! 0 every invariant held, 1 an invariant broke (the database is kept for a look), 2 the run
//! could not be made (no redis-server, the service binary missing, ...).

mod instances;
mod load;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use lock_service_examples::shop::wire::Outcome;
use lock_service_examples::shop::{Audit, Database, OnLeaseLost, SKU};
use lock_tests::RedisServer;
use tokio::sync::oneshot;

use crate::instances::Instance;
use crate::load::{Plan, Results};

/// Runs the shop service on several instances under load and checks its database afterwards.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// How many instances of shop_service to start.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// How many users order.
    #[arg(long, default_value_t = 10_000)]
    users: u64,
    /// How many order requests each user sends (at once, to different instances).
    #[arg(long, default_value_t = 3)]
    requests_per_user: u64,
    /// The items on sale.
    #[arg(long, default_value_t = 3000)]
    stock: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// SIGKILL the last instance once half the stock is sold.
    #[arg(long)]
    kill_one: bool,
    /// SIGSTOP the first instance for 3 s, past its 2 s leases, once a quarter of the stock is
    /// sold, then SIGCONT it: its locks are taken over while it sleeps, and what it then tries
    /// to write must be refused.
    #[arg(long)]
    pause_one: bool,
    /// What the instances' locked sections do when their lease is lost: `continue` leaves a
    /// stale holder to the database's fences alone (see `--pause-one`).
    #[arg(long, value_enum, default_value = "abort")]
    on_lease_lost: OnLeaseLost,
    /// The SQLite file (recreated); default: a fresh one in the temp dir, removed afterwards
    /// unless an invariant broke.
    #[arg(long)]
    db: Option<PathBuf>,
    /// The shop_service binary; default: the one next to this binary.
    #[arg(long)]
    service_bin: Option<PathBuf>,
}

/// How long `--pause-one` stops an instance: longer than the service's 2 s leases.
const PAUSE: Duration = Duration::from_secs(3);

/// Why a run could not be made (exit code 2), as one message.
type Setup<T> = Result<T, String>;

/// The Redis the instances share: `REDIS_URL`, or a server of our own.
struct Redis {
    url: String,
    /// Killed on drop; `None` for `REDIS_URL`.
    _own: Option<RedisServer>,
}

impl Redis {
    fn from_env() -> Setup<Redis> {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Ok(Redis { url, _own: None });
        }
        let installed = Command::new("redis-server").arg("--version").output();
        if !installed.is_ok_and(|out| out.status.success()) {
            return Err(
                "redis-server not found: install it (apt-get install redis-server) or \
                        point REDIS_URL at a server"
                    .to_owned(),
            );
        }
        // On a free loopback port, never 6379, without persistence.
        let server = RedisServer::start();
        Ok(Redis {
            url: server.url(),
            _own: Some(server),
        })
    }
}

/// Where the database lives. A temp dir made for it is removed on drop, unless kept.
struct DbFile {
    path: PathBuf,
    /// The temp dir made for it, to remove.
    dir: Option<PathBuf>,
}

impl DbFile {
    fn choose(given: Option<PathBuf>) -> Setup<DbFile> {
        if let Some(path) = given {
            return Ok(DbFile { path, dir: None });
        }
        let dir = std::env::temp_dir().join(format!("shop-runner-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        Ok(DbFile {
            path: dir.join("shop.sqlite"),
            dir: Some(dir),
        })
    }

    /// Leaves the file in place for a look.
    fn keep(&mut self) {
        self.dir = None;
    }
}

impl Drop for DbFile {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            // Best effort: a leftover file in the temp dir harms nobody.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn service_bin(given: Option<PathBuf>) -> Setup<PathBuf> {
    let bin = match given {
        Some(bin) => bin,
        None => std::env::current_exe()
            .map_err(|err| format!("cannot find this binary's directory: {err}"))?
            .with_file_name(format!("shop_service{}", std::env::consts::EXE_SUFFIX)),
    };
    if !bin.is_file() {
        return Err(format!(
            "{} not found: build it with `cargo build -p lock-service-examples --bins` (add \
             --release as for this binary), or name it with --service-bin",
            bin.display()
        ));
    }
    Ok(bin)
}

async fn run(args: Args) -> Setup<bool> {
    if args.instances == 0 || args.users == 0 || args.requests_per_user == 0 {
        return Err("--instances, --users and --requests-per-user must be at least 1".to_owned());
    }
    if args.kill_one && args.pause_one && args.instances < 2 {
        return Err("--kill-one with --pause-one needs two instances at least".to_owned());
    }
    let bin = service_bin(args.service_bin.clone())?;
    let redis = Redis::from_env()?;
    let mut db_file = DbFile::choose(args.db.clone())?;
    let db = Database::create(&db_file.path, SKU, args.stock)
        .await
        .map_err(|err| format!("{}: {err}", db_file.path.display()))?;

    let client = load::client();
    let mut instances = start_instances(&args, &bin, &db_file.path, &redis.url, &client).await?;
    let plan = Plan {
        users: args.users,
        requests_per_user: args.requests_per_user,
        concurrency: args.concurrency,
    };
    print_setup(&args, &plan, &instances, &redis.url, &db_file.path);
    let targets = instances
        .iter()
        .map(|instance| (instance.name.clone(), instance.addr))
        .collect();
    // Each event waits for its milestone; the load ends without telling one it never reaches.
    let mut milestones = Vec::new();
    let sleeper = match instances.first() {
        Some(first) if args.pause_one => first.pid().map(|pid| (pid, first.name.clone())),
        _ => None,
    };
    let pauser = sleeper.map(|(pid, name)| {
        let (told, at_quarter) = oneshot::channel();
        milestones.push((pause_after(args.stock), told));
        async move {
            at_quarter.await.ok()?;
            Some(crate::instances::pause(pid, PAUSE).await.map(|()| name))
        }
    });
    let victim = if args.kill_one {
        instances.last_mut()
    } else {
        None
    };
    let killer = victim.map(|victim| {
        let (told, at_half) = oneshot::channel();
        milestones.push((kill_after(args.stock), told));
        async move {
            at_half.await.ok()?;
            Some(victim.kill().await.map(|()| victim.name.clone()))
        }
    });
    let (results, paused, killed) = tokio::join!(
        load::run(client, targets, plan, milestones),
        optional(pauser),
        optional(killer),
    );
    let paused = paused.transpose()?;
    let killed = killed.transpose()?;
    drop(instances); // kills the others

    let audit = db
        .audit(SKU)
        .await
        .map_err(|err| format!("{}: {err}", db_file.path.display()))?;
    let events = Events {
        paused: paused.as_deref(),
        killed: killed.as_deref(),
    };
    report(&plan, &results, &audit, &events);
    let broken = audit.broken();
    for invariant in &broken {
        eprintln!("INVARIANT BROKEN: {invariant}");
    }
    if !broken.is_empty() {
        db_file.keep();
        eprintln!("the database is kept at {}", db_file.path.display());
    }
    Ok(broken.is_empty())
}

/// Starts `args.instances` instances of `bin`, named `shop-1`, `shop-2`, ...
async fn start_instances(
    args: &Args,
    bin: &Path,
    db: &Path,
    redis_url: &str,
    client: &load::Client,
) -> Setup<Vec<Instance>> {
    let mut instances = Vec::with_capacity(args.instances);
    for i in 1..=args.instances {
        let name = format!("shop-{i}");
        let instance =
            Instance::start(bin, &name, db, redis_url, args.on_lease_lost, client).await?;
        instances.push(instance);
    }
    Ok(instances)
}

fn print_setup(args: &Args, plan: &Plan, instances: &[Instance], redis_url: &str, db: &Path) {
    let listening: Vec<String> = instances
        .iter()
        .map(|instance| format!("{} on {}", instance.name, instance.addr))
        .collect();
    println!(
        "{} instances ({}), locks on {}, database {}",
        instances.len(),
        listening.join(", "),
        lock_runtime::inspect::redact_url(redis_url),
        db.display()
    );
    println!(
        "{} x {SKU} on sale; {} users send {} orders each, {} in all, {} at a time",
        args.stock,
        plan.users,
        plan.requests_per_user,
        plan.requests(),
        plan.concurrency,
    );
    if args.pause_one {
        println!(
            "the first instance is stopped for {PAUSE:?} once {} are sold, then resumed",
            pause_after(args.stock)
        );
    }
    if args.kill_one {
        println!(
            "the last instance is SIGKILLed once {} are sold",
            kill_after(args.stock)
        );
    }
}

/// Orders placed before `--pause-one` stops an instance: a quarter of the stock.
fn pause_after(stock: u64) -> u64 {
    (stock / 4).max(1)
}

/// Orders placed before `--kill-one` kills an instance: half the stock.
fn kill_after(stock: u64) -> u64 {
    (stock / 2).max(1)
}

/// The output of `event`, or `None` when there is no such event.
async fn optional<T>(event: Option<impl Future<Output = Option<T>>>) -> Option<T> {
    match event {
        Some(event) => event.await,
        None => None,
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

/// What the runner did to the instances during the load.
struct Events<'a> {
    paused: Option<&'a str>,
    killed: Option<&'a str>,
}

fn report(plan: &Plan, results: &Results, audit: &Audit, events: &Events<'_>) {
    let answered = results.latencies.len() as u64;
    let seconds = results.elapsed.as_secs_f64();
    println!(
        "requests: {answered} answered, {} unanswered, {} attempts moved to another instance",
        results.unanswered, results.retries
    );
    println!(
        "throughput: {:.0} requests/s ({answered} in {seconds:.2} s)",
        answered as f64 / seconds.max(1e-9)
    );
    let placed = results.count(Outcome::Placed);
    println!(
        "selling: {placed} orders placed in {:.2} s ({:.0} orders/s)",
        results.selling.as_secs_f64(),
        placed as f64 / results.selling.as_secs_f64().max(1e-9)
    );
    println!(
        "latency: p50 {}, p95 {}, p99 {}, max {}",
        ms(results.percentile(0.50)),
        ms(results.percentile(0.95)),
        ms(results.percentile(0.99)),
        ms(results.percentile(1.0))
    );
    let outcomes: Vec<String> = Outcome::ALL
        .iter()
        .map(|&outcome| format!("{} {}", outcome.name(), results.count(outcome)))
        .collect();
    println!("answers: {}", outcomes.join(", "));
    for (name, served) in &results.served {
        let stored = audit
            .orders_per_instance
            .iter()
            .find(|(instance, _)| instance == name)
            .map_or(0, |&(_, orders)| orders);
        let fate = if events.killed == Some(name.as_str()) {
            " (SIGKILLed)"
        } else if events.paused == Some(name.as_str()) {
            " (stopped and resumed)"
        } else {
            ""
        };
        println!(
            "  {name}{fate}: answered {}, placed {}, orders in the database {stored}",
            served.answered, served.placed
        );
    }
    for error in &results.errors {
        println!("  e.g. {error}");
    }
    println!(
        "database: stock {} -> {} left, {} orders from {} users, {} users with more than one, \
         {} refused stale writes",
        audit.initial,
        audit.stock_left,
        audit.orders,
        audit.users_with_orders,
        audit.users_with_several,
        audit.refused_writes
    );
    let ok = audit.broken().is_empty();
    println!(
        "invariants: {}",
        if ok {
            "hold (orders <= stock, stock >= 0, stock + orders == initial, one order per user, \
             stock tokens rising)"
        } else {
            "BROKEN"
        }
    );
    let mut summary = vec![
        format!("requests={}", plan.requests()),
        format!("answered={answered}"),
        format!("unanswered={}", results.unanswered),
    ];
    summary.extend(
        Outcome::ALL
            .iter()
            .map(|&outcome| format!("{}={}", outcome.name(), results.count(outcome))),
    );
    summary.extend([
        format!("orders={}", audit.orders),
        format!("stock_left={}", audit.stock_left),
        format!("refused_writes={}", audit.refused_writes),
        format!("paused={}", events.paused.unwrap_or("none")),
        format!("killed={}", events.killed.unwrap_or("none")),
        format!("invariants={}", if ok { "ok" } else { "broken" }),
    ]);
    println!("summary: {}", summary.join(" "));
}

#[tokio::main]
async fn main() -> ExitCode {
    lock_examples::init_logging();
    let args = Args::parse();
    // Dropping the run on Ctrl-C kills the instances and our redis-server on the way out.
    let outcome = tokio::select! {
        outcome = run(args) => outcome,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("shop_runner: {err}");
            ExitCode::from(2)
        }
    }
}
