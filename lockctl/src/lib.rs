//! `lockctl`: the operator's command line for the locks of `lock-runtime`.
//!
//! ```text
//! lockctl --url redis://127.0.0.1:6379 list 'order:*'
//! lockctl show order:42 --json
//! lockctl unlock order:42 --yes
//! lockctl revoke order:42 --reason "deploy at 14:00"
//! lockctl steal order:42 --reason "import stuck for an hour" --hold 30s
//! lockctl watch
//! lockctl deadlocks --json
//! lockctl elections
//! lockctl election scheduler --json
//! ```
//!
//! Exit codes: 0 done, 1 an error (which key, which server), 2 a usage error, 3 `deadlocks`
//! found a deadlock (0 when it found none). Errors go to stderr; no password and no owner
//! token is ever printed.
//!
//! The command line is also a library, [`main`], for a binary of your own that reaches a store
//! of your own: register its URL scheme ([`lock_runtime::store::register_scheme`]), then run
//! lockctl, which lists, shows and force-releases its locks through its inspection side
//! ([`lock_runtime::store::Inspect`]).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use lock_runtime::store::{Store, StoreError};
//! # /// Opens the store the URL names (here: none, as a placeholder for your store's own).
//! # async fn open(url: String) -> Result<Arc<dyn Store>, StoreError> {
//! #     Err(StoreError::permanent(format!("no store behind {}", url.len())))
//! # }
//! fn main() -> std::process::ExitCode {
//!     lock_runtime::store::register_scheme("mystore", open).expect("a scheme of its own");
//!     lockctl::main()
//! }
//! ```

mod control;
mod deployment;
mod elections;
mod failure;
mod read;
mod render;
mod unlock;
mod waits;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use deployment::Deployment;
use failure::Failure;

/// The exit code of `deadlocks` when it found a deadlock: not an error (1), nor a usage error
/// (2), and not "none" (0), so that a script or a probe can tell them apart.
const DEADLOCK_FOUND: u8 = 3;

/// Lists, shows, watches, revokes, steals and force-releases the distributed locks of
/// lock-runtime.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, about)]
struct Cli {
    /// The lock deployment, as the library takes it: redis://, rediss://, redis+unix://,
    /// redis+cluster://h1:p1,h2:p2, redis+sentinel://s1,s2/master, redlock://h1,h2,h3, or the
    /// URL of a store whose scheme the library was given.
    #[arg(long, env = "REDIS_URL", global = true, hide_env_values = true)]
    url: Option<String>,

    /// The key prefix the locks were taken with.
    #[arg(long, default_value = "lock:", global = true)]
    prefix: String,

    /// How long to wait for a server to connect or answer.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, global = true)]
    timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists held locks, semaphores and read-write locks (and kept locks, and those freed for a
    /// fair waiter).
    List(ListArgs),
    /// Shows everything about one lock, the semaphore and read-write lock of its name, and the
    /// calls waiting for it.
    Show(ShowArgs),
    /// Force-releases a lock whatever its holder, and wakes its waiters.
    Unlock(UnlockArgs),
    /// Asks the holder of a lock to let go (it decides), naming who asked and why.
    Revoke(RevokeArgs),
    /// Takes a lock from its holder with a new, greater fencing token, holds it for --hold
    /// (by default not at all: a fenced unlock) and releases it.
    Steal(StealArgs),
    /// A live view of the locks, refreshed until Ctrl-C.
    Watch(WatchArgs),
    /// Deadlocks among waiting calls, from the waits they publish: who waits for which lock
    /// while holding which, and who gives up.
    Deadlocks(DeadlocksArgs),
    /// Lists the elections that have a candidate now: the leader (holder, host, pid, app, the
    /// term's fencing token, for how long) and the number of candidates.
    Elections(ElectionsArgs),
    /// Shows one election: its leader, and its candidates with their priorities.
    Election(ElectionArgs),
}

#[derive(Debug, Args)]
struct ElectionsArgs {
    /// JSON on stdout, for scripts: an array of elections.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ElectionArgs {
    /// The election's name, as the application campaigns for it (`scheduler`).
    name: String,
    /// JSON on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DeadlocksArgs {
    /// JSON on stdout, for scripts: an array of cycles (`[]` when there is none).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// A glob on lock names (`*`, `order:*`, `job-?`), matched inside the prefix's braces.
    #[arg(default_value = "*")]
    pattern: String,
    /// Also list free markers, which only version 0.2 left: the last fencing token of a
    /// semaphore or read-write lock, and released locks (a lock, semaphore or read-write lock
    /// released now leaves no key).
    #[arg(long)]
    all: bool,
    /// JSON on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ShowArgs {
    /// The lock's name, as the application renders it (`order:42`).
    key: String,
    /// JSON on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct UnlockArgs {
    /// The lock's name, as the application renders it (`order:42`).
    key: String,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Deprecated and ignored: a released lock leaves no key now (its fencing tokens come from
    /// a counter that never expires). Still accepted so that existing scripts keep working.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    fence_retention: Option<Duration>,
}

#[derive(Debug, Args)]
struct RevokeArgs {
    /// The lock's name, as the application renders it (`order:42`).
    key: String,
    /// Why, for the holder's log and the audit line.
    #[arg(long, default_value = "")]
    reason: String,
    /// JSON on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct StealArgs {
    /// The lock's name, as the application renders it (`order:42`).
    key: String,
    /// Why, for the holder's log and the audit line (required).
    #[arg(long)]
    reason: String,
    /// The lease of the stolen lock, renewed while it is held (default: the library's).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// How long to hold the stolen lock before releasing it (Ctrl-C releases it sooner);
    /// default: release at once, which makes the steal a fenced unlock.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    hold: Option<Duration>,
    /// JSON on stdout, for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct WatchArgs {
    /// A glob on lock names, as for `list`.
    #[arg(default_value = "*")]
    pattern: String,
    /// Also show free markers.
    #[arg(long)]
    all: bool,
    /// How often to refresh.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// One JSON document per refresh, one per line.
    #[arg(long)]
    json: bool,
}

/// The whole command line: parses the process's arguments, runs the command on a runtime of
/// its own, and gives the exit code (errors are said on stderr).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report(&Failure::failed(format!("cannot start a runtime: {err}"))),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(failure) => report(&failure),
    }
}

fn report(failure: &Failure) -> ExitCode {
    eprintln!("lockctl: {failure}");
    ExitCode::from(failure.exit_code())
}

async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let Some(url) = cli.url.as_deref() else {
        return Err(Failure::usage(
            "no deployment given: pass --url redis://host:port or set REDIS_URL",
        ));
    };
    let nodes = Deployment::connect(url, &cli.prefix, cli.timeout).await?;
    let prefix = cli.prefix.as_str();
    let done = match cli.command {
        Command::List(args) => {
            let locks = read::list(&nodes, prefix, &args.pattern, args.all).await?;
            render::print_list(&nodes, &locks, args.json)
        }
        Command::Show(args) => {
            let locks = read::show(&nodes, prefix, &args.key).await?;
            let waiters = read::waiters(&nodes, prefix, &args.key).await?;
            render::print_show(&nodes, &args.key, &locks, waiters.as_deref(), args.json)
        }
        Command::Unlock(args) => {
            if args.fence_retention.is_some() {
                eprintln!(
                    "lockctl: --fence-retention is deprecated and ignored: a released lock \
                     leaves no key"
                );
            }
            unlock::unlock(&nodes, prefix, &args.key, args.yes).await
        }
        Command::Revoke(args) => {
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            let asked = control::Asked {
                prefix,
                key: &args.key,
                reason: &args.reason,
                json: args.json,
                out: &mut out,
                err: &mut err,
            };
            control::revoke(&nodes, asked).await
        }
        Command::Steal(args) => {
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            let asked = control::Asked {
                prefix,
                key: &args.key,
                reason: &args.reason,
                json: args.json,
                out: &mut out,
                err: &mut err,
            };
            let how = control::StealHow {
                ttl: args.ttl,
                hold: args.hold,
            };
            control::steal(&nodes, asked, how).await
        }
        Command::Watch(args) => watch(&nodes, prefix, &args).await,
        Command::Deadlocks(args) => {
            let records = waits::standing(&nodes, prefix).await?;
            let cycles = waits::deadlocks(prefix, &records);
            render::print_deadlocks(&cycles, args.json)?;
            if !cycles.is_empty() {
                return Ok(ExitCode::from(DEADLOCK_FOUND));
            }
            Ok(())
        }
        Command::Elections(args) => {
            let listed = elections::list(&nodes).await?;
            elections::print_list(&listed, args.json)
        }
        Command::Election(args) => {
            let (leader, candidates) = elections::show(&nodes, &args.name).await?;
            elections::print_show(
                &args.name,
                leader.as_ref(),
                candidates.as_deref(),
                args.json,
            )
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}

async fn watch(nodes: &Deployment, prefix: &str, args: &WatchArgs) -> Result<(), Failure> {
    if args.interval.is_zero() {
        return Err(Failure::usage("--interval must be longer than zero"));
    }
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = ticks.tick() => {}
        }
        let locks = read::list(nodes, prefix, &args.pattern, args.all).await?;
        if args.json {
            render::print_list(nodes, &locks, true)?;
        } else {
            // Clear the screen and go home, as watch(1) does.
            print!("\x1b[2J\x1b[H");
            println!(
                "{} every {}: {} (Ctrl-C to stop)",
                nodes.shown(),
                humantime::format_duration(args.interval),
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            );
            render::print_list(nodes, &locks, false)?;
        }
    }
}
