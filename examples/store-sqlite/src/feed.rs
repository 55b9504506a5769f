//! Telling the managers over a store of releases: those made through the store at once, those
//! of other stores over the file (other processes) from the file's feed of releases, which a
//! thread of the store reads every [`POLL`].

use std::sync::{Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::store::Changes;
use rusqlite::Connection;

use crate::db;

/// How often the feed is looked at: a release in another process wakes a waiter here within
/// about this long. Looking costs one `PRAGMA data_version` while nothing was committed.
pub const POLL: Duration = Duration::from_millis(20);

/// The managers over one store, and the name the store writes its releases under.
pub(crate) struct Told {
    /// Unique among the stores open on this machine: the process id, a count within the
    /// process, and the time it was opened.
    me: String,
    changes: Mutex<Vec<Changes>>,
}

impl Told {
    pub(crate) fn new() -> Told {
        static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let count = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Told {
            me: format!("{}:{count}:{nanos}", std::process::id()),
            changes: Mutex::default(),
        }
    }

    /// The name this store's releases are written under.
    pub(crate) fn me(&self) -> &str {
        &self.me
    }

    /// A manager built over the store hears of releases from now on.
    pub(crate) fn attach(&self, changes: &Changes) {
        self.changes().push(changes.clone());
    }

    /// The lock named `name` was released: a waiter of each manager tries again.
    pub(crate) fn released(&self, name: &str) {
        for manager in self.changes().iter() {
            manager.released(name);
        }
    }

    /// Releases may have gone unread: every waiter tries again once.
    fn missed(&self) {
        for manager in self.changes().iter() {
            manager.missed();
        }
    }

    fn changes(&self) -> std::sync::MutexGuard<'_, Vec<Changes>> {
        self.changes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts the thread that reads the feed on `conn` after release number `seen`, for as long as
/// the store of `told` lives.
pub(crate) fn start(conn: Connection, seen: i64, told: Weak<Told>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("sqlite-lock-feed".into())
        .spawn(move || follow(&conn, seen, &told))
        .map(drop)
}

fn follow(conn: &Connection, mut seen: i64, told: &Weak<Told>) {
    let mut version = None;
    let mut failing = false;
    loop {
        std::thread::sleep(POLL);
        let Some(told) = told.upgrade() else {
            return;
        };
        match read(conn, &mut version, &mut seen, told.me()) {
            Ok((names, gap)) => {
                failing = false;
                if gap {
                    told.missed();
                }
                for name in names {
                    told.released(&name);
                }
            }
            // Once per spell of failures: waiters look again, then wait on their leases.
            Err(_) if !failing => {
                failing = true;
                told.missed();
            }
            Err(_) => {}
        }
    }
}

/// The names released by other stores since `seen`, if anything was committed since
/// `version`; and whether releases were dropped from the feed before they were read.
fn read(
    conn: &Connection,
    version: &mut Option<i64>,
    seen: &mut i64,
    me: &str,
) -> rusqlite::Result<(Vec<String>, bool)> {
    let now = db::data_version(conn)?;
    if *version == Some(now) {
        return Ok((Vec::new(), false));
    }
    let releases = db::releases_after(conn, *seen)?;
    *version = Some(now);
    // Numbers are never reused, and follow each other: a gap is releases that were dropped
    // from the feed (a minute old) before this store read them.
    let gap = releases.first().is_some_and(|(seq, _, _)| *seq > *seen + 1);
    if let Some((last, _, _)) = releases.last() {
        *seen = *last;
    }
    let names = releases
        .into_iter()
        .filter(|(_, _, by)| by != me)
        .map(|(_, name, _)| name)
        .collect();
    Ok((names, gap))
}
