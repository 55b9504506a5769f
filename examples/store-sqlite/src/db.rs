//! The tables and the transactions over them: plain, blocking SQLite, one `BEGIN IMMEDIATE`
//! transaction per step, the lease judged by the wall clock read inside it.
//!
//! `holders` has one row per owner token holding a key (one at most for a plain lock, up to the
//! permits for a semaphore), `fences` the last fencing token handed out per key, and
//! `semaphores` the number of permits a semaphore's holders declared. A row whose `expires_ms`
//! has passed holds nothing; each acquire deletes those it finds. `releases` is the feed of
//! recent releases, numbered in commit order, that every store over the file reads (see
//! `feed`); each release deletes the entries older than a minute.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::store::{Acquire, HolderId, Key, Release, Shape};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS holders (
        name TEXT NOT NULL,
        token TEXT NOT NULL,
        fence INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (name, token)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS holders_by_expiry ON holders (expires_ms);
    CREATE TABLE IF NOT EXISTS fences (
        name TEXT PRIMARY KEY,
        last INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS semaphores (
        name TEXT PRIMARY KEY,
        permits INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS releases (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        by_store TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS releases_by_time ON releases (at_ms);
";

/// How long a release stays in `releases` for the other stores' feeds to read.
const RELEASE_KEPT_MS: i64 = 60_000;

/// Why a step failed, before the store adds the key and file to the message.
#[derive(Debug)]
pub(crate) enum Failure {
    Sqlite(rusqlite::Error),
    /// A semaphore declared with another number of permits than its holders declared.
    PermitsDiffer {
        held: i64,
        asked: u32,
    },
    /// A shape this store does not keep (the noun of it).
    Unsupported(&'static str),
}

impl From<rusqlite::Error> for Failure {
    fn from(err: rusqlite::Error) -> Self {
        Failure::Sqlite(err)
    }
}

pub(crate) type Step<T> = Result<T, Failure>;

/// Opens (creating if need be) the database at `path`, waiting up to `busy` for another
/// connection's write transaction, and makes the tables.
pub(crate) fn open(path: &Path, busy: Duration) -> Step<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(busy)?;
    // WAL: a reader never waits for a writer. FULL: a committed fencing token is on disk before
    // the answer, so no token is handed out twice even after a power loss.
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

/// The wall clock in ms since the Unix epoch: the one clock every process on this machine
/// shares. Read inside the write transaction, so that steps are judged in the order they commit.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, ms)
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn remaining(expires_ms: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(expires_ms.saturating_sub(now)).unwrap_or(0))
}

fn immediate(conn: &mut Connection) -> rusqlite::Result<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
}

/// The next fencing token of `name`: one more than the last, kept across releases, expiries and
/// restarts.
fn next_fence(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<u64> {
    let fence: i64 = tx.query_row(
        "INSERT INTO fences (name, last) VALUES (?1, 1)
         ON CONFLICT (name) DO UPDATE SET last = last + 1
         RETURNING last",
        params![name],
        |row| row.get(0),
    )?;
    Ok(u64::try_from(fence).unwrap_or(0))
}

/// One step: take `key` for `token` for `ttl`, or say who holds it and for how long.
pub(crate) fn acquire(
    conn: &mut Connection,
    key: &Key,
    token: &str,
    ttl: Duration,
) -> Step<Acquire> {
    let tx = immediate(conn)?;
    let now = now_ms();
    tx.execute("DELETE FROM holders WHERE expires_ms <= ?1", params![now])?;
    let answer = match key.shape() {
        Shape::Lock => take_lock(&tx, key.name(), token, ttl, now)?,
        Shape::Semaphore { permits } => take_permit(&tx, key.name(), permits, token, ttl, now)?,
        // Refused before it reaches the store (see `SqliteStore::supports`).
        other => return Err(Failure::Unsupported(other.noun())),
    };
    tx.commit()?;
    Ok(answer)
}

fn take_lock(
    tx: &Transaction<'_>,
    name: &str,
    token: &str,
    ttl: Duration,
    now: i64,
) -> Step<Acquire> {
    let held: Option<(String, i64, i64)> = tx
        .query_row(
            "SELECT token, fence, expires_ms FROM holders WHERE name = ?1",
            params![name],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()?;
    let expires = now.saturating_add(ms(ttl));
    match held {
        // Ours already (a retry whose answer was lost): renewed, same fencing token.
        Some((holder, fence, _)) if holder == token => {
            tx.execute(
                "UPDATE holders SET expires_ms = ?3 WHERE name = ?1 AND token = ?2",
                params![name, token, expires],
            )?;
            Ok(Acquire::Acquired {
                fence: u64::try_from(fence).unwrap_or(0),
            })
        }
        Some((holder, _, until)) => Ok(Acquire::Busy {
            remaining: Some(remaining(until, now)),
            // An empty token: kept only by `hold_at_least`, no holder any more.
            holder: (!holder.is_empty()).then(|| HolderId::of_token(&holder)),
            in_line: false,
            blocker: None,
        }),
        None => {
            let fence = next_fence(tx, name)?;
            tx.execute(
                "INSERT INTO holders (name, token, fence, expires_ms) VALUES (?1, ?2, ?3, ?4)",
                params![
                    name,
                    token,
                    i64::try_from(fence).unwrap_or(i64::MAX),
                    expires
                ],
            )?;
            Ok(Acquire::Acquired { fence })
        }
    }
}

fn take_permit(
    tx: &Transaction<'_>,
    name: &str,
    permits: u32,
    token: &str,
    ttl: Duration,
    now: i64,
) -> Step<Acquire> {
    let (holders, first_end): (i64, Option<i64>) = tx.query_row(
        "SELECT count(*), min(expires_ms) FROM holders WHERE name = ?1",
        params![name],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if holders == 0 {
        tx.execute(
            "INSERT INTO semaphores (name, permits) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET permits = excluded.permits",
            params![name, permits],
        )?;
    } else {
        let declared: Option<i64> = tx
            .query_row(
                "SELECT permits FROM semaphores WHERE name = ?1",
                params![name],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(held) = declared.filter(|&held| held != i64::from(permits)) {
            return Err(Failure::PermitsDiffer {
                held,
                asked: permits,
            });
        }
    }
    let expires = now.saturating_add(ms(ttl));
    let renewed = tx.execute(
        "UPDATE holders SET expires_ms = ?3 WHERE name = ?1 AND token = ?2",
        params![name, token, expires],
    )?;
    if renewed == 0 && holders >= i64::from(permits) {
        // One of several holders: none is named.
        let first = first_end.map(|end| remaining(end, now));
        return Ok(Acquire::busy(first, false));
    }
    let fence = next_fence(tx, name)?;
    tx.execute(
        "INSERT INTO holders (name, token, fence, expires_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name, token) DO UPDATE SET fence = excluded.fence",
        params![
            name,
            token,
            i64::try_from(fence).unwrap_or(i64::MAX),
            expires
        ],
    )?;
    Ok(Acquire::Acquired { fence })
}

/// One step for a whole batch of renewals, `(key name, owner token, ttl)`: for each, whether
/// the token still held its key (and now holds it for its ttl from now).
pub(crate) fn renew(
    conn: &mut Connection,
    batch: &[(String, String, Duration)],
) -> Step<Vec<bool>> {
    let tx = immediate(conn)?;
    let now = now_ms();
    let mut renewed = Vec::with_capacity(batch.len());
    {
        let mut update = tx.prepare_cached(
            "UPDATE holders SET expires_ms = ?3
             WHERE name = ?1 AND token = ?2 AND token <> '' AND expires_ms > ?4",
        )?;
        for (name, token, ttl) in batch {
            let expires = now.saturating_add(ms(*ttl));
            renewed.push(update.execute(params![name, token, expires, now])? == 1);
        }
    }
    tx.commit()?;
    Ok(renewed)
}

/// One step: give `token`'s hold of `key` back, or with `keep > 0` leave it held (by nobody)
/// that much longer; a release is written to the feed as the store `by`'s.
pub(crate) fn release(
    conn: &mut Connection,
    key: &Key,
    token: &str,
    keep: Duration,
    by: &str,
) -> Step<Release> {
    let tx = immediate(conn)?;
    let now = now_ms();
    let name = key.name();
    let holders: Vec<String> = {
        let mut live =
            tx.prepare_cached("SELECT token FROM holders WHERE name = ?1 AND expires_ms > ?2")?;
        let rows = live.query_map(params![name, now], |row| row.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let answer = if !holders.iter().any(|holder| holder == token) {
        match key.shape() {
            // Someone else's now, or kept by `hold_at_least` for nobody.
            Shape::Lock if !holders.is_empty() => Release::NotOwner,
            _ => Release::Gone,
        }
    } else if keep.is_zero() {
        tx.execute(
            "DELETE FROM holders WHERE name = ?1 AND token = ?2",
            params![name, token],
        )?;
        Release::Released
    } else {
        // A plain lock is kept for nobody (no owner may renew or release it again); a
        // semaphore's permit stays its holder's until it ends.
        let kept_by = if key.shape() == Shape::Lock {
            ""
        } else {
            token
        };
        tx.execute(
            "UPDATE holders SET token = ?3, expires_ms = ?4 WHERE name = ?1 AND token = ?2",
            params![name, token, kept_by, now.saturating_add(ms(keep))],
        )?;
        Release::Released
    };
    if answer == Release::Released {
        tx.execute(
            "INSERT INTO releases (name, by_store, at_ms) VALUES (?1, ?2, ?3)",
            params![name, by, now],
        )?;
        tx.execute(
            "DELETE FROM releases WHERE at_ms < ?1",
            params![now.saturating_sub(RELEASE_KEPT_MS)],
        )?;
    }
    tx.commit()?;
    Ok(answer)
}

/// A connection for reading the feed of releases, and the number of the last release in it.
pub(crate) fn open_feed(path: &Path, busy: Duration) -> Step<(Connection, i64)> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(busy)?;
    // The last number handed out, even if its entry is gone from the feed.
    let last = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'releases'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok((conn, last.unwrap_or(0)))
}

/// A number that changes whenever another connection commits to the file.
pub(crate) fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
}

/// The releases after number `seen`, in order: `(number, key name, releasing store)`.
pub(crate) fn releases_after(
    conn: &Connection,
    seen: i64,
) -> rusqlite::Result<Vec<(i64, String, String)>> {
    let mut after = conn
        .prepare_cached("SELECT seq, name, by_store FROM releases WHERE seq > ?1 ORDER BY seq")?;
    let rows = after.query_map(params![seen], |row| {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
    })?;
    rows.collect()
}

/// One live row of `holders`, as the inspection side reads it.
pub(crate) struct Held {
    /// The key name the engine gave (`Key::name`).
    pub(crate) name: String,
    /// Empty while kept only by `hold_at_least`.
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// Its lease left.
    pub(crate) left: Duration,
    /// A semaphore's declared permits.
    pub(crate) permits: Option<u32>,
}

/// Every live hold, by key name and lease end.
pub(crate) fn held(conn: &mut Connection) -> Step<Vec<Held>> {
    let now = now_ms();
    let mut live = conn.prepare_cached(
        "SELECT h.name, h.token, h.fence, h.expires_ms, s.permits
         FROM holders h LEFT JOIN semaphores s ON s.name = h.name
         WHERE h.expires_ms > ?1 ORDER BY h.name, h.expires_ms",
    )?;
    let rows = live.query_map(params![now], |row| {
        Ok(Held {
            name: row.get(0)?,
            token: row.get(1)?,
            fence: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
            left: remaining(row.get(3)?, now),
            permits: row
                .get::<_, Option<i64>>(4)?
                .and_then(|permits| u32::try_from(permits).ok()),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// What a force-release found.
pub(crate) enum Forced {
    /// The hold `holder` names was deleted (and the release written to the feed).
    Removed,
    /// Nothing holds the lock.
    Free,
    /// Another hold than `holder` names holds it: left alone.
    Other,
}

/// One step: deletes the hold of the plain lock `name` if `holder` (see
/// [`holder_name`]) names it, whatever its owner token, and writes the release to the feed as
/// the store `by`'s, so that waiters in every process try again.
pub(crate) fn force_release(
    conn: &mut Connection,
    name: &str,
    holder: &str,
    by: &str,
) -> Step<Forced> {
    let tx = immediate(conn)?;
    let now = now_ms();
    let held: Option<(String, i64)> = tx
        .query_row(
            "SELECT token, fence FROM holders WHERE name = ?1 AND expires_ms > ?2",
            params![name, now],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    let Some((token, fence)) = held else {
        return Ok(Forced::Free);
    };
    if holder_name(&token, u64::try_from(fence).unwrap_or(0)) != holder {
        return Ok(Forced::Other);
    }
    tx.execute("DELETE FROM holders WHERE name = ?1", params![name])?;
    tx.execute(
        "INSERT INTO releases (name, by_store, at_ms) VALUES (?1, ?2, ?3)",
        params![name, by, now],
    )?;
    tx.commit()?;
    Ok(Forced::Removed)
}

/// What names one hold to a force-release: an id of its owner token (never the token), or for
/// a lock kept by `hold_at_least` (no token) its fencing token.
pub(crate) fn holder_name(token: &str, fence: u64) -> String {
    if token.is_empty() {
        format!("kept:{fence}")
    } else {
        format!("{:013x}", HolderId::of_token(token).get())
    }
}
