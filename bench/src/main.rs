//! `lock-bench`: starts its own redis-server (or `--server PATH`) on a free port, or uses
//! `REDIS_URL`, runs every scenario for every contender, prints one table per scenario and writes
//! the same as JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lock_bench::chart::{Bars, handover_svg};
use lock_bench::report::{Document, Row};
use lock_bench::server::Target;
use lock_bench::{
    BenchError, CHILD_FLAG, HoldManyIn, Options, Plan, Scenario, contender, machine, targets,
};

const USAGE: &str = "\
usage: lock-bench [--quick] [--json PATH] [--svg PATH] [--markdown PATH] [--only SCENARIOS]
                  [--repetitions N] [--contenders NAMES] [--server PATH]

  --quick            every scenario in reduced form, under a minute (CI smoke runs)
  --json PATH        results as JSON (default target/lock-bench/results.json)
  --svg PATH         chart of handover latency (default target/lock-bench/handover.svg)
  --markdown PATH    machine, tables and targets as markdown (default: not written)
  --replot JSON      run nothing: draw the chart (--svg) from the results of an earlier run
  --only SCENARIOS   comma-separated: uncontended, parallel, contended, natural_contention,
                     read_heavy, semaphore, expiry_takeover, hold_many, redis_benchmark
  --repetitions N    repetitions of every scenario (default 5, hold_many 2; quick 1)
  --contenders NAMES comma-separated: distributed_lock, LockManager::lock, hand-rolled,
                     hand-rolled pub/sub (quote the list), rslock; read_heavy and
                     semaphore measure the library's read-write lock, lock and semaphore
                     whatever the list
  --server PATH      the server binary to start instead of redis-server from PATH, with the
                     same arguments, e.g. valkey-server (default: $LOCK_BENCH_REDIS_SERVER)

Starts redis-server (or --server) on a free loopback port, or uses the server REDIS_URL names.
The report's header names the server and its version (INFO server), binary included.
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
            "--only" => {
                let names = value()?;
                let scenarios = names
                    .split(',')
                    .map(|name| {
                        Scenario::from_name(name.trim())
                            .ok_or_else(|| format!("no scenario `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
                parsed.only = Some(scenarios);
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
                        contender::NAMES
                            .contains(&name)
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
    let options = Options {
        plan,
        scenarios: args.only.clone().unwrap_or_else(|| Scenario::ALL.to_vec()),
        hold_many_in: HoldManyIn::Child(exe),
        contenders: args
            .contenders
            .clone()
            .unwrap_or_else(|| contender::NAMES.map(str::to_owned).to_vec()),
        verbose: true,
    };

    let target = Target::from_env(args.server.as_deref())?;
    let mut server = target.probe().await?.server().await?;
    server.binary = target.binary().map(|binary| binary.display().to_string());
    let mut header = machine();
    header.push(format!(
        "server: {server} at {}:{}{}",
        target.host(),
        target.port(),
        server
            .binary
            .as_ref()
            .map_or_else(String::new, |binary| format!(", started from {binary}"))
    ));
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
    let report = lock_bench::run(&target, &options).await?;
    let elapsed = started.elapsed();

    let mut markdown = String::new();
    markdown.push_str(
        &header
            .iter()
            .map(|l| format!("- {l}\n"))
            .collect::<String>(),
    );
    markdown.push_str(&format!(
        "- finished in {:.0} s; load average at the end: {}\n\n",
        elapsed.as_secs_f64(),
        lock_bench::load_average()
    ));
    for scenario in report.results.scenarios() {
        markdown.push_str(&report.results.table(&scenario));
        markdown.push('\n');
    }
    let checks = targets::check(&report.results, targets::cpu_share_for(&server));
    if !checks.is_empty() {
        markdown.push_str("targets\n\n");
        markdown.push_str(&targets::table(&checks));
    }
    println!("{markdown}");

    let document = Document {
        server,
        header,
        rows: report.results.rows(),
    };
    let json =
        serde_json::to_string_pretty(&document).map_err(|err| BenchError::new(err.to_string()))?;
    write(&args.json, &json)?;
    println!("JSON: {}", args.json.display());

    plot(&args.svg, |contender, metric| {
        report.results.median("contended", contender, metric)
    })?;
    if let Some(path) = &args.markdown {
        write(path, &markdown)?;
        println!("markdown: {}", path.display());
    }

    if report.violations > 0 {
        eprintln!(
            "FAILED: {} exclusion violations in the contention scenarios",
            report.violations
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
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
