//! `lock-bench`: starts its own redis-server (or `--server PATH`) on a free port, or uses
//! `REDIS_URL`, and its own PostgreSQL, or uses `--postgres-url` / `DATABASE_URL`; runs every
//! scenario for every contender, prints one table per scenario and writes the same as JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lock_bench::chart::{Bars, handover_svg};
use lock_bench::postgres::server::PgTarget;
use lock_bench::postgres::{PgOptions, PgScenario};
use lock_bench::report::{Document, Results, Row};
use lock_bench::server::{ServerInfo, Target};
use lock_bench::{
    BenchError, CHILD_FLAG, HoldManyIn, Options, Plan, Scenario, contender, machine, targets,
};

const USAGE: &str = "\
usage: lock-bench [--quick] [--json PATH] [--svg PATH] [--markdown PATH] [--only SCENARIOS]
                  [--repetitions N] [--contenders NAMES] [--server PATH] [--store STORES]
                  [--postgres-url URL]

  --quick            every scenario in reduced form, under a minute (CI smoke runs)
  --json PATH        results as JSON (default target/lock-bench/results.json)
  --svg PATH         chart of handover latency (default target/lock-bench/handover.svg)
  --markdown PATH    machine, tables and targets as markdown (default: not written)
  --replot JSON      run nothing: draw the chart (--svg) from the results of an earlier run
  --only SCENARIOS   comma-separated: uncontended, parallel, contended, natural_contention,
                     read_heavy, semaphore, expiry_takeover, hold_many, redis_benchmark;
                     on PostgreSQL: postgres_uncontended, postgres_parallel,
                     postgres_handover, postgres_expiry_takeover
  --repetitions N    repetitions of every scenario (default 5, hold_many 2; quick 1)
  --contenders NAMES comma-separated: distributed_lock, LockManager::lock, hand-rolled,
                     hand-rolled pub/sub (quote the list), rslock; read_heavy and
                     semaphore measure the library's read-write lock, lock and semaphore
                     whatever the list; on PostgreSQL: distributed_lock, LockManager::lock,
                     lease floor, lease floor + NOTIFY, pg_try_advisory_lock,
                     sqlx PgAdvisoryLock
  --server PATH      the server binary to start instead of redis-server from PATH, with the
                     same arguments, e.g. valkey-server (default: $LOCK_BENCH_REDIS_SERVER)
  --store STORES     comma-separated: redis, postgres (default: both, Redis first)
  --postgres-url URL the PostgreSQL to use (default: $DATABASE_URL, else one of our own)

Starts redis-server (or --server) on a free loopback port, or uses the server REDIS_URL names;
starts PostgreSQL (initdb in a temp dir, a free loopback port, as the test suite does), or uses
the one --postgres-url or DATABASE_URL names. The report's header names each server and its
version, binary included.
Build with --release: cargo run --release -p lock-bench -- --quick";

struct Args {
    quick: bool,
    json: PathBuf,
    svg: PathBuf,
    markdown: Option<PathBuf>,
    only: Option<Vec<Scenario>>,
    repetitions: Option<usize>,
    contenders: Option<Vec<String>>,
    replot: Option<PathBuf>,
    server: Option<PathBuf>,
    redis: bool,
    postgres: bool,
    postgres_url: Option<String>,
    pg_only: Option<Vec<PgScenario>>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        quick: false,
        json: PathBuf::from("target/lock-bench/results.json"),
        svg: PathBuf::from("target/lock-bench/handover.svg"),
        markdown: None,
        only: None,
        repetitions: None,
        contenders: None,
        replot: None,
        server: None,
        redis: true,
        postgres: true,
        postgres_url: None,
        pg_only: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--json" => parsed.json = value()?.into(),
            "--svg" => parsed.svg = value()?.into(),
            "--markdown" => parsed.markdown = Some(value()?.into()),
            "--replot" => parsed.replot = Some(value()?.into()),
            "--server" => parsed.server = Some(value()?.into()),
            "--postgres-url" => parsed.postgres_url = Some(value()?),
            "--store" => {
                let names = value()?;
                (parsed.redis, parsed.postgres) = (false, false);
                for name in names.split(',') {
                    match name.trim() {
                        "redis" => parsed.redis = true,
                        "postgres" => parsed.postgres = true,
                        other => return Err(format!("no store `{other}` (redis, postgres)")),
                    }
                }
            }
            "--only" => {
                let (mut scenarios, mut pg_scenarios) = (Vec::new(), Vec::new());
                for name in value()?.split(',').map(str::trim) {
                    if let Some(scenario) = Scenario::from_name(name) {
                        scenarios.push(scenario);
                    } else if let Some(scenario) = PgScenario::from_name(name) {
                        pg_scenarios.push(scenario);
                    } else {
                        return Err(format!("no scenario `{name}`"));
                    }
                }
                parsed.only = Some(scenarios);
                parsed.pg_only = Some(pg_scenarios);
            }
            "--repetitions" => {
                let n = value()?;
                parsed.repetitions = Some(
                    n.parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("--repetitions `{n}`: not a positive number"))?,
                );
            }
            "--contenders" => {
                let names = value()?;
                let names = names
                    .split(',')
                    .map(|name| {
                        let name = name.trim();
                        (contender::NAMES.contains(&name)
                            || contender::POSTGRES_NAMES.contains(&name))
                        .then(|| name.to_owned())
                        .ok_or_else(|| format!("no contender `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
                parsed.contenders = Some(names);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(CHILD_FLAG) {
        return match lock_bench::hold_many_child(&args[1..]).await {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("{err}");
                ExitCode::FAILURE
            }
        };
    }
    if args.iter().any(|arg| arg == "--help" || arg == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(&args) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("{err}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("FAILED: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode, BenchError> {
    if let Some(json) = &args.replot {
        let text = std::fs::read_to_string(json)
            .map_err(|err| BenchError::new(format!("cannot read {}: {err}", json.display())))?;
        let rows: Vec<Row> = Document::rows_of(&text)
            .map_err(|err| BenchError::new(format!("{}: {err}", json.display())))?;
        let median = |contender: &str, metric: &str| {
            rows.iter()
                .find(|r| {
                    r.scenario == "contended" && r.contender == contender && r.metric == metric
                })
                .map(|r| r.median)
        };
        plot(&args.svg, median)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(repetitions) = args.repetitions {
        plan.repetitions = repetitions;
        plan.hold_repetitions = repetitions;
    }
    let exe = std::env::current_exe()
        .map_err(|err| BenchError::new(format!("cannot find this program's path: {err}")))?;
    let pick = |names: &[&str]| -> Vec<String> {
        match &args.contenders {
            Some(chosen) => chosen
                .iter()
                .filter(|name| names.contains(&name.as_str()))
                .cloned()
                .collect(),
            None => names.iter().map(|&name| name.to_owned()).collect(),
        }
    };
    let options = Options {
        plan: plan.clone(),
        scenarios: args.only.clone().unwrap_or_else(|| Scenario::ALL.to_vec()),
        hold_many_in: HoldManyIn::Child(exe),
        contenders: pick(&contender::NAMES),
        verbose: true,
    };
    let pg_options = PgOptions {
        plan,
        scenarios: args
            .pg_only
            .clone()
            .unwrap_or_else(|| PgScenario::ALL.to_vec()),
        contenders: pick(&contender::POSTGRES_NAMES),
        verbose: true,
    };
    // A store runs when it has scenarios to run, and contenders unless none were asked for.
    let chosen = |contenders: &[String]| args.contenders.is_none() || !contenders.is_empty();
    let run_redis = args.redis && !options.scenarios.is_empty() && chosen(&options.contenders);
    let run_postgres =
        args.postgres && !pg_options.scenarios.is_empty() && chosen(&pg_options.contenders);

    let mut header = machine();
    let redis = match run_redis {
        true => Some(start_redis(&args, &mut header).await?),
        false => None,
    };
    let postgres = match run_postgres {
        true => Some(start_postgres(&args, &mut header).await?),
        false => None,
    };
    header.push(format!(
        "command: lock-bench {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    ));
    header.push(format!("plan: {:?}", options.plan));
    for line in &header {
        println!("{line}");
    }
    if cfg!(debug_assertions) {
        println!("WARNING: a debug build; figures are only meaningful with --release");
    }
    println!();

    let started = std::time::Instant::now();
    let mut results = Results::default();
    let mut violations = 0;
    if let Some((target, _)) = &redis {
        let report = lock_bench::run(target, &options).await?;
        results.append(report.results);
        violations += report.violations;
    }
    if let Some(target) = &postgres {
        let report = lock_bench::postgres::run(target, &pg_options).await?;
        results.append(report.results);
        violations += report.violations;
    }
    let elapsed = started.elapsed();
    let server = redis.map(|(_, server)| server);
    let markdown = markdown(&header, elapsed, &results, server.as_ref());
    println!("{markdown}");

    let document = Document {
        server,
        header,
        rows: results.rows(),
    };
    let json =
        serde_json::to_string_pretty(&document).map_err(|err| BenchError::new(err.to_string()))?;
    write(&args.json, &json)?;
    println!("JSON: {}", args.json.display());

    plot(&args.svg, |contender, metric| {
        results.median("contended", contender, metric)
    })?;
    if let Some(path) = &args.markdown {
        write(path, &markdown)?;
        println!("markdown: {}", path.display());
    }

    if violations > 0 {
        eprintln!("FAILED: {violations} exclusion violations in the contention scenarios");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts (or finds) the Redis under test and adds its line to `header`.
async fn start_redis(
    args: &Args,
    header: &mut Vec<String>,
) -> Result<(Target, ServerInfo), BenchError> {
    let target = Target::from_env(args.server.as_deref())?;
    let mut server = target.probe().await?.server().await?;
    server.binary = target.binary().map(|binary| binary.display().to_string());
    header.push(format!(
        "server: {server} at {}:{}{}",
        target.host(),
        target.port(),
        server
            .binary
            .as_ref()
            .map_or_else(String::new, |binary| format!(", started from {binary}"))
    ));
    Ok((target, server))
}

/// Starts (or finds) the PostgreSQL under test and adds its line to `header`.
async fn start_postgres(args: &Args, header: &mut Vec<String>) -> Result<PgTarget, BenchError> {
    let target = PgTarget::from_env(args.postgres_url.as_deref()).await?;
    let version = target.probe().await?.version().await?;
    header.push(format!(
        "postgres: PostgreSQL {version} at {}{}",
        target.shown(),
        target.binaries().map_or_else(String::new, |dir| format!(
            ", started from {}",
            dir.display()
        ))
    ));
    Ok(target)
}

/// The report: header, one table per scenario, the targets.
fn markdown(
    header: &[String],
    elapsed: std::time::Duration,
    results: &Results,
    server: Option<&ServerInfo>,
) -> String {
    let mut markdown: String = header.iter().map(|l| format!("- {l}\n")).collect();
    markdown.push_str(&format!(
        "- finished in {:.0} s; load average at the end: {}\n\n",
        elapsed.as_secs_f64(),
        lock_bench::load_average()
    ));
    for scenario in results.scenarios() {
        markdown.push_str(&results.table(&scenario));
        markdown.push('\n');
    }
    let mut checks = match server {
        Some(server) => targets::check(results, targets::cpu_share_for(server)),
        None => Vec::new(),
    };
    checks.extend(targets::check_postgres(results));
    if !checks.is_empty() {
        markdown.push_str("targets\n\n");
        markdown.push_str(&targets::table(&checks));
    }
    markdown
}

/// The handover chart from the medians of the contended scenario, if it was measured.
fn plot(svg: &Path, median: impl Fn(&str, &str) -> Option<f64>) -> Result<(), BenchError> {
    let bars: Vec<Bars> = contender::NAMES
        .iter()
        .filter_map(|&name| {
            Some(Bars {
                contender: name.to_owned(),
                p50: median(name, "handover_p50")?,
                p99: median(name, "handover_p99")?,
            })
        })
        .collect();
    if bars.is_empty() {
        return Ok(());
    }
    let title = "Contended handover: release to the next holder's entry (median of repetitions)";
    write(svg, &handover_svg(title, &bars))?;
    println!("chart: {}", svg.display());
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
        .map_err(|err| BenchError::new(format!("cannot write {}: {err}", path.display())))
}
