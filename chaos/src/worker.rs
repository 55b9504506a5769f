//! `chaos worker ...`: one worker process. Its tasks take the lock through `#[distributed_lock]`
//! again and again and, inside, write their fencing token to the fenced resource.
//!
//! Every event is one line, written with a single `write` call as it happens, so a SIGKILL loses
//! at most the event in progress:
//!
//! ```text
//! start <ns> <pid>
//! enter <task> <n> <ns> <token> <abort|continue> [read|write|permit]
//! write <task> <n> <ns> <token> <accepted 0|1> <seq> <held 0|1>
//! read <task> <n> <ns> <token> <accepted 0|1> <seq> <held 0|1> <value seen>
//! exit <task> <n> <ns>
//! violation <task> <n> <ns>
//! error <task> <ns> <busy|lease_lost|backend|config|resource>
//! lease <key> <hash slot> <ttl ns> <start ns> <end ns> kept|lost [reason]
//! stop <ns>
//! ```
//!
//! With `--keys N` (many-keys mode, on Cluster) the worker also holds N locks of its own,
//! `chaos:shard:<pid>:<i>:<n>`, lease `i` on shard `i % 3`: each held a few
//! seconds at a time while the watchdog renews it, then released and taken again. Nobody else
//! takes them, so a lease can only be lost to a fault; `lease` records how each hold ended.
//!
//! The sections take what `--mode` says: the lock (`enter` without a role); in rw mode a read
//! share (`read`, which reads the resource) or the write hold (`write`, which writes it), as
//! `--reads` percent of the sections say; in semaphore mode a permit (`permit`, which touches
//! no resource: see chaos/README.md for why a semaphore's token fences nothing).
//!
//! Times are wall-clock nanoseconds (`SystemTime`), shared by every process on the machine.
//! The worker stops when its stdin closes: each task finishes the section it is in, then exits.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_runtime::fence::redis as fenced;
use lock_runtime::fence::{Fence, FenceError};
use lock_runtime::{LockError, LockManager, LockOptions, OnLeaseLost, distributed_lock};

use crate::rng::Rng;
use crate::{DEFAULT_PERMITS, LOCK_KEY, Mode, now_ns};

/// The fenced resource: the list `resource:journal`, behind `lock_runtime::fence::redis`
/// (its fence, the highest token that claimed it, is `fence::redis::fence_key` of it). Every
/// operation a holder makes on it is one entry, `<token> <accepted 0|1> <ns>`, and ` r` after a
/// read, `ns` the holder's clock when it sent the operation:
///
/// - a write section (`--mode exclusive`, or the write hold) claims the resource and reads its
///   last entry as it comes in (one fenced `LINDEX`), and after its pause appends its entry
///   with a fenced `RPUSH`, which claims again in the same step: refused once a newer holder
///   claimed;
/// - a read section (the read share) appends its entry with a fenced `RPUSH` after its pause
///   (its claim), and reads the value from the entries before it, which never change after.
///
/// A refused claim or write leaves the resource as it was; the holder then appends a refused
/// entry itself (`<token> 0 <ns>`), a record for the analysis, not data. The accepted entries
/// are thus in the order the resource accepted them, and a request held up in the network
/// reaches the resource whatever its sender knows by then.
pub(crate) const RESOURCE_JOURNAL: &str = "resource:journal";

/// How many journal entries a reader fetches at a time, looking back for the last write.
const LOOK_BACK: isize = 64;

/// The variable a worker reads its lock URL from when `--lock-url` is not given: the
/// experiment passes it so, since a PostgreSQL URL carries a password.
pub(crate) const LOCK_URL_VAR: &str = "CHAOS_LOCK_URL";

/// What a worker is told on its command line.
pub(crate) struct WorkerArgs {
    pub(crate) lock_url: String,
    pub(crate) resource_url: String,
    pub(crate) tasks: usize,
    pub(crate) log: String,
    pub(crate) seed: u64,
    /// Many-keys mode: this many leases of the worker's own.
    pub(crate) keys: usize,
    /// Sections wait for the lock in fair mode.
    pub(crate) fair: bool,
    /// The manager's lock-delay.
    pub(crate) lock_delay: Duration,
    /// The primitive the sections take.
    pub(crate) mode: Mode,
    /// The semaphore's permits (semaphore mode).
    pub(crate) permits: u32,
    /// The share of read sections, in percent (rw mode).
    pub(crate) reads_pct: u64,
}

impl WorkerArgs {
    pub(crate) fn parse(args: &[String]) -> Result<Self, String> {
        let mut parsed = WorkerArgs {
            lock_url: String::new(),
            resource_url: String::new(),
            tasks: 3,
            log: String::new(),
            seed: 0,
            keys: 0,
            fair: false,
            lock_delay: Duration::ZERO,
            mode: Mode::Exclusive,
            permits: DEFAULT_PERMITS,
            reads_pct: 0,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .clone();
            match flag.as_str() {
                "--lock-url" => parsed.lock_url = value,
                "--resource-url" => parsed.resource_url = value,
                "--tasks" => parsed.tasks = value.parse().map_err(|e| format!("--tasks: {e}"))?,
                "--log" => parsed.log = value,
                "--seed" => parsed.seed = value.parse().map_err(|e| format!("--seed: {e}"))?,
                "--keys" => parsed.keys = value.parse().map_err(|e| format!("--keys: {e}"))?,
                "--fair" => parsed.fair = value == "1",
                "--lock-delay-ms" => {
                    let ms = value.parse().map_err(|e| format!("--lock-delay-ms: {e}"))?;
                    parsed.lock_delay = Duration::from_millis(ms);
                }
                "--mode" => parsed.mode = Mode::parse(&value)?,
                "--permits" => {
                    parsed.permits = value.parse().map_err(|e| format!("--permits: {e}"))?;
                }
                "--reads" => {
                    parsed.reads_pct = value.parse().map_err(|e| format!("--reads: {e}"))?;
                }
                other => return Err(format!("unknown worker option {other}")),
            }
        }
        if parsed.lock_url.is_empty() {
            parsed.lock_url = std::env::var(LOCK_URL_VAR).unwrap_or_default();
        }
        if parsed.lock_url.is_empty() || parsed.resource_url.is_empty() || parsed.log.is_empty() {
            return Err(format!(
                "worker needs --lock-url (or {LOCK_URL_VAR}), --resource-url and --log"
            ));
        }
        Ok(parsed)
    }
}

#[derive(Debug)]
enum WorkerError {
    Lock(LockError),
    Resource(FenceError),
}

impl From<LockError> for WorkerError {
    fn from(err: LockError) -> Self {
        WorkerError::Lock(err)
    }
}

struct Ctx {
    log: Mutex<File>,
    resource: redis::aio::MultiplexedConnection,
}

/// How an operation on the resource went: accepted or refused, its entry's number in the
/// journal (`seq`, from 1), and for a read the last write's token before it.
struct Touched {
    accepted: bool,
    seq: u64,
    value: u64,
}

impl Ctx {
    fn log(&self, line: String) {
        let mut file = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        // One write per event: a killed worker leaves whole lines behind.
        file.write_all(format!("{line}\n").as_bytes())
            .expect("the worker log must be writable");
    }

    /// A write section's claim as it comes in, with a read of the resource (its last entry) in
    /// the same step. `Ok(false)` if refused: a newer holder has claimed it.
    async fn claim(&self, fence: &Fence) -> Result<bool, FenceError> {
        let mut conn = self.resource.clone();
        let last = redis::cmd("LINDEX").arg(RESOURCE_JOURNAL).arg(-1).clone();
        refused_as_false(fenced::command::<_, Option<String>>(&mut conn, fence, &last).await)
    }

    /// One operation on the fenced resource: a write, or a read (`read`), appended to the
    /// journal with a claim in the same step, or recorded as refused.
    async fn touch(&self, fence: &Fence, read: bool) -> Result<Touched, FenceError> {
        let mut conn = self.resource.clone();
        let token = fence.token();
        let entry = entry(token, true, read);
        let push = redis::cmd("RPUSH")
            .arg(RESOURCE_JOURNAL)
            .arg(&entry)
            .clone();
        let (accepted, seq) = match fenced::command::<_, u64>(&mut conn, fence, &push).await {
            Ok(seq) => (true, seq),
            Err(err) if err.is_refusal() => (false, self.refused(token, read).await?),
            Err(err) => return Err(err),
        };
        let value = if read {
            last_write_before(&mut conn, seq).await?
        } else {
            token
        };
        Ok(Touched {
            accepted,
            seq,
            value,
        })
    }

    /// Appends the entry of a refused operation: the journal's record, the resource untouched.
    async fn refused(&self, token: u64, read: bool) -> Result<u64, FenceError> {
        let mut conn = self.resource.clone();
        redis::cmd("RPUSH")
            .arg(RESOURCE_JOURNAL)
            .arg(entry(token, false, read))
            .query_async(&mut conn)
            .await
            .map_err(|e| FenceError::store(RESOURCE_JOURNAL, "redis: refusal record", e))
    }
}

/// A refusal as `Ok(false)`, other errors as they are.
fn refused_as_false<T>(answer: Result<T, FenceError>) -> Result<bool, FenceError> {
    match answer {
        Ok(_) => Ok(true),
        Err(err) if err.is_refusal() => Ok(false),
        Err(err) => Err(err),
    }
}

/// A journal entry: `<token> <accepted 0|1> <ns>`, ` r` after a read.
fn entry(token: u64, accepted: bool, read: bool) -> String {
    let read = if read { " r" } else { "" };
    format!("{token} {} {}{read}", u8::from(accepted), now_ns())
}

/// The token of the last accepted write before journal entry `seq`, 0 if none: the value a read
/// appended as entry `seq` saw. Entries before it never change, so they are read after it.
async fn last_write_before(
    conn: &mut redis::aio::MultiplexedConnection,
    seq: u64,
) -> Result<u64, FenceError> {
    let mut end = isize::try_from(seq).unwrap_or(isize::MAX) - 2;
    while end >= 0 {
        let start = (end - LOOK_BACK + 1).max(0);
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(RESOURCE_JOURNAL)
            .arg(start)
            .arg(end)
            .query_async(conn)
            .await
            .map_err(|e| FenceError::store(RESOURCE_JOURNAL, "redis: read's value", e))?;
        let write = entries.iter().rev().find_map(|entry| {
            match entry.split_whitespace().collect::<Vec<_>>()[..] {
                [token, "1", _] => token.parse().ok(),
                _ => None,
            }
        });
        if let Some(token) = write {
            return Ok(token);
        }
        end = start - 1;
    }
    Ok(0)
}

/// Logs the end of a section when dropped: at the end of the body, and also when the body is
/// dropped at an `.await` because its lease was lost.
struct ExitLog<'a> {
    ctx: &'a Ctx,
    task: usize,
    n: u64,
}

impl Drop for ExitLog<'_> {
    fn drop(&mut self) {
        self.ctx
            .log(format!("exit {} {} {}", self.task, self.n, now_ns()));
    }
}

/// What a section holds, and so what it does with the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The lock: writes its token.
    Exclusive,
    /// A read share of the read-write lock: reads the resource.
    Read,
    /// The write hold of the read-write lock: writes its token.
    Write,
    /// A semaphore's permit: touches no resource.
    Permit,
}

impl Role {
    /// What the `enter` line says after `abort|continue`.
    fn tag(self) -> &'static str {
        match self {
            Role::Exclusive => "",
            Role::Read => " read",
            Role::Write => " write",
            Role::Permit => " permit",
        }
    }
}

/// The section: tokens come from `current()`, the operation goes to the fenced resource.
async fn section(
    ctx: &Ctx,
    task: usize,
    n: u64,
    on_lost: &str,
    role: Role,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    let enter = now_ns();
    let Some(lock) = lock_runtime::current() else {
        ctx.log(format!("violation {task} {n} {enter}"));
        return Ok(());
    };
    let token = lock.fencing_token();
    // The resource's fence: this section's token, and its holder id (a token a store handed out
    // twice claims for one holder only).
    let Ok(fence) = Fence::current().map(|fence| fence.on(RESOURCE_JOURNAL)) else {
        ctx.log(format!("violation {task} {n} {enter}"));
        return Ok(());
    };
    ctx.log(format!(
        "enter {task} {n} {enter} {token} {on_lost}{}",
        role.tag()
    ));
    let _exit = ExitLog { ctx, task, n };
    let read = role == Role::Read;
    let op = Op {
        task,
        n,
        token,
        read,
    };
    // A write section claims the resource as it comes in, before it reads it: if a newer holder
    // has, its turn is over before it starts (its refused entry is its operation).
    let mut done = false;
    if matches!(role, Role::Exclusive | Role::Write)
        && !ctx.claim(&fence).await.map_err(WorkerError::Resource)?
    {
        let seq = ctx
            .refused(token, false)
            .await
            .map_err(WorkerError::Resource)?;
        let touched = Touched {
            accepted: false,
            seq,
            value: 0,
        };
        op.log(ctx, &touched, lock.is_held());
        done = true;
    }
    tokio::time::sleep(Duration::from_millis(pauses.0)).await;
    if role != Role::Permit && !done {
        let touched = ctx
            .touch(&fence, read)
            .await
            .map_err(WorkerError::Resource)?;
        op.log(ctx, &touched, lock.is_held());
    }
    tokio::time::sleep(Duration::from_millis(pauses.1)).await;
    Ok(())
}

/// A section's operation on the resource, for its log line.
struct Op {
    task: usize,
    n: u64,
    token: u64,
    read: bool,
}

impl Op {
    /// `write <task> <n> <ns> <token> <accepted> <seq> <held>`, or `read ... <value seen>`.
    fn log(&self, ctx: &Ctx, touched: &Touched, held: bool) {
        let Op { task, n, token, .. } = *self;
        let at = now_ns();
        let (accepted, held) = (u8::from(touched.accepted), u8::from(held));
        let seq = touched.seq;
        ctx.log(if self.read {
            let value = touched.value;
            format!("read {task} {n} {at} {token} {accepted} {seq} {held} {value}")
        } else {
            format!("write {task} {n} {at} {token} {accepted} {seq} {held}")
        });
    }
}

/// Gives up the body when the lease is lost (the default).
#[distributed_lock(key = "chaos:resource", ttl = "1s", wait = "5s")]
async fn locked_abort(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "abort", Role::Exclusive, pauses).await
}

/// Runs on after the lease is lost, as a holder that does not look would: only fencing stops
/// its late write.
#[distributed_lock(
    key = "chaos:resource",
    ttl = "1s",
    wait = "5s",
    on_lease_lost = "continue"
)]
async fn locked_continue(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "continue", Role::Exclusive, pauses).await
}

/// [`locked_abort`] in fair mode.
#[distributed_lock(key = "chaos:resource", ttl = "1s", wait = "5s", fair = true)]
async fn fair_abort(ctx: &Ctx, task: usize, n: u64, pauses: (u64, u64)) -> Result<(), WorkerError> {
    section(ctx, task, n, "abort", Role::Exclusive, pauses).await
}

/// [`locked_continue`] in fair mode.
#[distributed_lock(
    key = "chaos:resource",
    ttl = "1s",
    wait = "5s",
    fair = true,
    on_lease_lost = "continue"
)]
async fn fair_continue(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "continue", Role::Exclusive, pauses).await
}

/// A read share of the read-write lock `chaos:resource`, given up when the lease is lost.
#[distributed_lock(key = "chaos:resource", ttl = "1s", wait = "5s", mode = "read")]
async fn read_abort(ctx: &Ctx, task: usize, n: u64, pauses: (u64, u64)) -> Result<(), WorkerError> {
    section(ctx, task, n, "abort", Role::Read, pauses).await
}

/// [`read_abort`] running on after a lost lease: only the resource's check refuses its read.
#[distributed_lock(
    key = "chaos:resource",
    ttl = "1s",
    wait = "5s",
    mode = "read",
    on_lease_lost = "continue"
)]
async fn read_continue(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "continue", Role::Read, pauses).await
}

/// The write hold of the read-write lock `chaos:resource`, given up when the lease is lost.
#[distributed_lock(key = "chaos:resource", ttl = "1s", wait = "5s", mode = "write")]
async fn write_abort(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "abort", Role::Write, pauses).await
}

/// [`write_abort`] running on after a lost lease: only fencing stops its late write.
#[distributed_lock(
    key = "chaos:resource",
    ttl = "1s",
    wait = "5s",
    mode = "write",
    on_lease_lost = "continue"
)]
async fn write_continue(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "continue", Role::Write, pauses).await
}

/// A permit of the semaphore `chaos:resource` of [`DEFAULT_PERMITS`] permits, given up when the
/// lease is lost.
#[distributed_lock(key = "chaos:resource", ttl = "1s", wait = "5s", permits = DEFAULT_PERMITS)]
async fn permit_abort(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "abort", Role::Permit, pauses).await
}

/// [`permit_abort`] running on after a lost lease.
#[distributed_lock(
    key = "chaos:resource",
    ttl = "1s",
    wait = "5s",
    permits = DEFAULT_PERMITS,
    on_lease_lost = "continue"
)]
async fn permit_continue(
    ctx: &Ctx,
    task: usize,
    n: u64,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    section(ctx, task, n, "continue", Role::Permit, pauses).await
}

/// A permit of a semaphore of `permits` permits other than the attribute's
/// [`DEFAULT_PERMITS`]: the attribute takes the number at compile time, so this goes through
/// `run_locked`, what the attribute expands to.
async fn permit_of(
    locks: &LockManager,
    ctx: &Ctx,
    (task, n, continues): (usize, u64, bool),
    permits: u32,
    pauses: (u64, u64),
) -> Result<(), WorkerError> {
    let (on_lost, action) = if continues {
        ("continue", OnLeaseLost::Continue)
    } else {
        ("abort", OnLeaseLost::Abort)
    };
    let options = LockOptions::new()
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(5))
        .permits(permits)
        .on_lease_lost(action);
    let body = section(ctx, task, n, on_lost, Role::Permit, pauses);
    locks.run_locked(LOCK_KEY.to_owned(), options, body).await
}

fn error_kind(err: &WorkerError) -> &'static str {
    match err {
        WorkerError::Lock(LockError::Busy { .. }) => "busy",
        WorkerError::Lock(LockError::LeaseLost { .. }) => "lease_lost",
        WorkerError::Lock(LockError::Config(_)) => "config",
        WorkerError::Lock(LockError::Deadlock { .. }) => "deadlock",
        WorkerError::Lock(_) => "backend",
        WorkerError::Resource(_) => "resource",
    }
}

/// How the sections of a task are taken: the worker's settings every task shares.
struct Plan {
    mode: Mode,
    fair: bool,
    permits: u32,
    reads_pct: u64,
    locks: LockManager,
}

async fn task_loop(ctx: Arc<Ctx>, stop: Arc<AtomicBool>, task: usize, seed: u64, plan: Arc<Plan>) {
    let mut rng = Rng::new(seed ^ (task as u64).wrapping_mul(0x9E37_79B9));
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        // Mostly short sections; one in eight outlives the ttl, so that the watchdog renews it
        // and a fault can take its lease away while it runs.
        let pauses = if rng.below(8) == 0 {
            (rng.range(1100, 1400), rng.range(0, 10))
        } else {
            (rng.range(5, 40), rng.range(0, 10))
        };
        // Every other section runs on after a lost lease; the others abort.
        let continues = (task as u64 + n) % 2 == 1;
        let outcome = match plan.mode {
            Mode::Exclusive => match (continues, plan.fair) {
                (true, false) => locked_continue(&ctx, task, n, pauses).await,
                (false, false) => locked_abort(&ctx, task, n, pauses).await,
                (true, true) => fair_continue(&ctx, task, n, pauses).await,
                (false, true) => fair_abort(&ctx, task, n, pauses).await,
            },
            Mode::ReadWrite => match (rng.below(100) < plan.reads_pct, continues) {
                (true, true) => read_continue(&ctx, task, n, pauses).await,
                (true, false) => read_abort(&ctx, task, n, pauses).await,
                (false, true) => write_continue(&ctx, task, n, pauses).await,
                (false, false) => write_abort(&ctx, task, n, pauses).await,
            },
            Mode::Semaphore if plan.permits == DEFAULT_PERMITS => {
                if continues {
                    permit_continue(&ctx, task, n, pauses).await
                } else {
                    permit_abort(&ctx, task, n, pauses).await
                }
            }
            Mode::Semaphore => {
                let section = (task, n, continues);
                permit_of(&plan.locks, &ctx, section, plan.permits, pauses).await
            }
        };
        if let Err(err) = outcome {
            if let WorkerError::Resource(e) = &err {
                // Only a partition of this worker delays a resource write past the client's
                // timeout: otherwise this is worth a line for the person reading.
                eprintln!("task {task}: resource write failed: {e}");
            }
            if error_kind(&err) == "backend" {
                // What the store said (it names the server, never a password): the log has
                // the kind only.
                eprintln!("{} task {task}: {err:?}", now_ns());
            }
            ctx.log(format!("error {task} {} {}", now_ns(), error_kind(&err)));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A short breath between sections lets the other tasks in.
        tokio::time::sleep(Duration::from_millis(rng.range(0, 5))).await;
    }
}

/// Many-keys mode: holds lease `key` (its own lock, ttl 1 s or 2 s by parity, so that one
/// renewal batch mixes ttls) for 2 to 4 s at a time while the watchdog renews it, releases it,
/// and takes it again, logging how each hold ended.
async fn hold_key(ctx: Arc<Ctx>, locks: LockManager, stop: Arc<AtomicBool>, key: usize, seed: u64) {
    let mut rng = Rng::new(seed ^ 0x5EED ^ (key as u64).wrapping_mul(0x9E37_79B9));
    let (name, hash_slot) = name_on_shard(key);
    let ttl = if key.is_multiple_of(2) {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(2)
    };
    // Staggered, so that renewals fall due all through the cycle.
    tokio::time::sleep(Duration::from_millis(rng.range(0, 1000))).await;
    while !stop.load(Ordering::Relaxed) {
        let options = LockOptions::new().ttl(ttl).wait(Duration::from_secs(5));
        let guard = match locks.lock(name.as_str(), options).await {
            Ok(guard) => guard,
            Err(err) => {
                ctx.log(format!(
                    "error keys {} {}",
                    now_ns(),
                    error_kind(&WorkerError::Lock(err))
                ));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let start = now_ns();
        let hold = Duration::from_millis(rng.range(2000, 4000));
        let lost = tokio::select! {
            () = sleep_unless_stopped(hold, &stop) => None,
            reason = guard.lost() => Some(reason),
        };
        let end = now_ns();
        let how = match lost {
            None => "kept".to_owned(),
            Some(reason) => format!("lost {reason:?}"),
        };
        ctx.log(format!(
            "lease {key} {hash_slot} {} {start} {end} {how}",
            ttl.as_nanos()
        ));
        // A lost lease's release reports the loss: already logged.
        let _ = guard.release().await;
        tokio::time::sleep(Duration::from_millis(rng.range(0, 200))).await;
    }
}

/// The name of lease `key` and its hash slot: the first `chaos:shard:<pid>:<key>:<n>` whose slot
/// lies on shard `key % 3` of the harness's three-master cluster (`redis-cli --cluster create`
/// gives the masters slots 0-5460, 5461-10922 and 10923-16383, and failovers move a shard whole),
/// so that the leases of every worker cover every shard.
fn name_on_shard(key: usize) -> (String, u16) {
    let shard = |slot: u16| match slot {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    };
    let pid = std::process::id();
    (0..)
        .map(|n| {
            let name = format!("chaos:shard:{pid}:{key}:{n}");
            let slot = lock_tests::key_slot(format!("lock:{{{name}}}"));
            (name, slot)
        })
        .find(|&(_, slot)| shard(slot) == key % 3)
        .unwrap_or_else(|| unreachable!("some name lands on every shard"))
}

/// Sleeps for `length`, or until the worker is told to stop: a hold ends with the run.
async fn sleep_unless_stopped(length: Duration, stop: &AtomicBool) {
    let until = tokio::time::Instant::now() + length;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(Duration::from_millis(100))).await;
    }
}

async fn connect_locks(url: &str, lock_delay: Duration) -> Result<LockManager, LockError> {
    // A worker respawned while the lock server restarts keeps trying for a while.
    let mut tries = 0;
    loop {
        match LockManager::builder()
            .url(url)
            .app_name("chaos-worker")
            .lock_delay(lock_delay)
            // No mode waits for a lock while holding another: a deadlock any call gave up in
            // would be a false one, and the analysis counts it as a violation.
            .deadlock(lock_runtime::Deadlock::Fail)
            .build()
            .await
        {
            Ok(locks) => return Ok(locks),
            Err(err) if tries < 100 => {
                tries += 1;
                let _ = err;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

pub(crate) fn run(args: WorkerArgs) -> Result<(), String> {
    // The runtime's warnings (a renewal that failed and why, a lease lost) go to the worker's
    // stderr, with wall-clock times, for the person reading a run that failed.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("lock_runtime=warn"))
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async move {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&args.log)
            .map_err(|e| format!("cannot open {}: {e}", args.log))?;
        let locks = connect_locks(&args.lock_url, args.lock_delay)
            .await
            .map_err(|e| format!("lock server: {e}"))?;
        lock_runtime::set_global_default(locks.clone()).map_err(|e| e.to_string())?;
        let client = redis::Client::open(args.resource_url.as_str())
            .map_err(|e| format!("resource server: {e}"))?;
        let resource = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("resource server: {e}"))?;
        let ctx = Arc::new(Ctx {
            log: Mutex::new(log),
            resource,
        });
        ctx.log(format!("start {} {}", now_ns(), std::process::id()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            // The parent closes our stdin to stop us.
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = std::io::stdin().read_to_end(&mut sink);
                stop.store(true, Ordering::Relaxed);
            });
        }
        let plan = Arc::new(Plan {
            mode: args.mode,
            fair: args.fair,
            permits: args.permits,
            reads_pct: args.reads_pct,
            locks: locks.clone(),
        });
        let mut handles: Vec<_> = (0..args.tasks)
            .map(|task| {
                tokio::spawn(task_loop(
                    ctx.clone(),
                    stop.clone(),
                    task,
                    args.seed,
                    plan.clone(),
                ))
            })
            .collect();
        handles.extend((0..args.keys).map(|key| {
            tokio::spawn(hold_key(
                ctx.clone(),
                locks.clone(),
                stop.clone(),
                key,
                args.seed,
            ))
        }));
        for handle in handles {
            handle.await.map_err(|e| format!("task failed: {e}"))?;
        }
        ctx.log(format!("stop {}", now_ns()));
        Ok(())
    })
}
