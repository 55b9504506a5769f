//! Telling the managers over a PostgreSQL store of releases and notices: by LISTEN on one
//! connection per store (every release statement does `pg_notify` in the same statement, a
//! steal and an announce theirs on the channel of notices), or, where LISTEN cannot be heard (a
//! pooler in transaction mode and no direct URL to listen on), by looking every poll interval
//! whether the locks waited for are free, only while something waits; notices are not heard
//! then.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::oneshot;

use super::sql;
use crate::store::{Changes, Notice};

/// How long connect waits to hear its own check notification before it polls instead. Only a
/// pooler the port check missed fails it, so it may be generous: a loaded server or machine
/// that answers late must not cost the manager its notices for good.
const HEAR_CHECK: Duration = Duration::from_secs(5);

/// How long the listening loop waits before it connects again after a failure.
const RECONNECT: Duration = Duration::from_millis(500);

/// The managers over one store, and the keys they wait for.
#[derive(Default)]
pub(crate) struct Told {
    changes: Mutex<Vec<Changes>>,
    /// The stored names waited for, where the store polls.
    watched: Mutex<HashSet<String>>,
}

impl Told {
    pub(crate) fn attach(&self, changes: &Changes) {
        let mut all = lock(&self.changes);
        all.retain(|changes| !changes.is_gone());
        all.push(changes.clone());
    }

    /// The lock named `name` was released: a waiter of each manager tries again.
    pub(crate) fn released(&self, name: &str) {
        for changes in lock(&self.changes).iter() {
            changes.released(name);
        }
    }

    /// `notice` was heard: each manager acts on it.
    pub(crate) fn heard(&self, notice: &Notice) {
        let all = lock(&self.changes).clone();
        for changes in all {
            changes.heard(notice);
        }
    }

    /// Releases may have gone unheard: every waiter tries again once.
    pub(crate) fn missed(&self) {
        for changes in lock(&self.changes).iter() {
            changes.missed();
        }
    }

    pub(crate) fn watch(&self, name: &str) {
        lock(&self.watched).insert(name.to_owned());
    }

    pub(crate) fn unwatch(&self, name: &str) {
        lock(&self.watched).remove(name);
    }

    fn watched(&self) -> Vec<String> {
        lock(&self.watched).iter().cloned().collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the store hears of releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hearing {
    /// LISTEN on a connection of its own.
    Listen,
    /// Looking every interval, while something waits.
    Poll(Duration),
}

/// Ends the store's feed task when dropped (with the store).
pub(crate) struct Stop(#[allow(dead_code)] oneshot::Sender<()>);

/// Starts listening for releases, and for notices on `notices`, on a connection from `listen`
/// (the store's own pool, or one to a direct URL), and checks that a notification sent through `pool` is heard on it within
/// [`HEAR_CHECK`]. `Ok(None)` if it is not heard (a pooler in transaction mode between).
pub(crate) async fn listen(
    pool: &PgPool,
    listen: &PgPool,
    told: &Arc<Told>,
    notices: &str,
) -> Result<Option<Stop>, sqlx::Error> {
    let mut listener = PgListener::connect_with(listen).await?;
    listener.ignore_pool_close_event(true);
    listener.listen_all([sql::CHANNEL, notices]).await?;
    let check = format!("check:{}", uuid::Uuid::new_v4());
    sqlx::raw_sql(&sql::notify(&check)).execute(pool).await?;
    let heard = tokio::time::timeout(HEAR_CHECK, async {
        loop {
            match listener.try_recv().await {
                Ok(Some(note)) if note.payload() == check => return true,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    if !heard {
        return Ok(None);
    }
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(follow(listener, Arc::downgrade(told), stopped));
    Ok(Some(Stop(stop)))
}

/// Tells what `listener` hears until the store is dropped.
async fn follow(mut listener: PgListener, told: Weak<Told>, mut stopped: oneshot::Receiver<()>) {
    let mut failing = false;
    loop {
        let heard = tokio::select! {
            _ = &mut stopped => return,
            heard = listener.try_recv() => heard,
        };
        let Some(told) = told.upgrade() else {
            return;
        };
        match heard {
            Ok(Some(note)) if note.channel() != sql::CHANNEL => {
                failing = false;
                // Anything else said on the channel is not a notice, and is dropped.
                match Notice::decode(note.payload()) {
                    Some(notice) => told.heard(&notice),
                    None => tracing::debug!(
                        channel = note.channel(),
                        bytes = note.payload().len(),
                        "a message on the notices channel is not a notice; dropped"
                    ),
                }
            }
            Ok(Some(note)) => {
                failing = false;
                match note.payload() {
                    "" => told.missed(),
                    name => told.released(name),
                }
            }
            // The connection was lost (and made again): releases meanwhile went unheard.
            Ok(None) => told.missed(),
            Err(err) => {
                if !failing {
                    tracing::warn!(error = %err, "lost the connection that listens for lock releases and notices; waiters wait on their leases, and notices go unheard, until it is back");
                    told.missed();
                }
                failing = true;
                drop(told);
                tokio::select! {
                    _ = &mut stopped => return,
                    () = tokio::time::sleep(RECONNECT) => {}
                }
            }
        }
    }
}

/// Starts looking every `every` whether the locks waited for are free, until the store is
/// dropped.
pub(crate) fn poll(pool: PgPool, told: &Arc<Told>, every: Duration) -> Stop {
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(look(pool, Arc::downgrade(told), every, stopped));
    Stop(stop)
}

async fn look(pool: PgPool, told: Weak<Told>, every: Duration, mut stopped: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(told) = told.upgrade() else {
            return;
        };
        let watched = told.watched();
        if watched.is_empty() {
            continue;
        }
        let Ok(rows) = sqlx::raw_sql(&sql::held(watched.iter().map(String::as_str)))
            .fetch_all(&pool)
            .await
        else {
            // Waiters wait on their leases meanwhile; the next look tries again.
            continue;
        };
        let held: HashSet<String> = rows
            .iter()
            .filter_map(|row| row.try_get::<String, _>(0).ok())
            .collect();
        for name in watched.iter().filter(|name| !held.contains(*name)) {
            told.released(name);
        }
    }
}
