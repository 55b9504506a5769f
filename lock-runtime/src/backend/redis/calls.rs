//! The calls of the lock scripts, built once for every deployment: who takes the locks
//! ([`Holder`]), the call of each step for each shape, and the one gate of the lean path.

use std::time::Duration;

use redis::{FromRedisValue, RedisResult};

use super::connection::RedisSettings;
use crate::backend::{Ask, Line, Renewal};
use crate::key::Key;
use crate::protocol::scripts::{
    ACQUIRE, HANDOFF, LEAVE, PERMIT_RELEASE, RELEASE, RENEW, RW_ACQUIRE, RW_LEAVE, RW_RELEASE,
    SEMAPHORE, STEAL,
};
use crate::protocol::scripts::{Lua, invoke};
use crate::protocol::{self, Announce, Capabilities, millis};
use crate::shape::Shape;
use crate::store::{Notice, NoticeKind};

/// One script call, with the script it calls (to cache it when the server does not know it):
/// a lock's and a semaphore's steps are different scripts behind the same backend calls.
pub(super) struct Call<'a> {
    invocation: redis::ScriptInvocation<'a>,
    script: &'static Lua,
}

impl Call<'_> {
    /// Runs the call (`EVALSHA`), caching the script first if the server does not know it.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        invoke(&self.invocation, self.script, conn).await
    }
}

/// The renewal of one lease, as renew.lua takes it: a permit adds its number of permits; a
/// read share, whose member is `r:<token>`, renews through the permit branch with `r`; a write
/// hold is stored in a lock's format and renews as a lock.
pub(super) fn renew_invocation(renewal: &Renewal) -> redis::ScriptInvocation<'static> {
    let stored = &renewal.lease.stored;
    let mut invocation = RENEW.prepare_invoke();
    invocation
        .key(stored.held_at().as_ref())
        .arg(renewal.token())
        .arg(millis(renewal.ttl));
    match stored.shape {
        Shape::Semaphore { permits } => {
            invocation.arg(permits);
        }
        Shape::Read => {
            invocation.arg("r");
        }
        Shape::Lock | Shape::Write => {}
    }
    invocation
}

/// `r` or `w`, as rw_acquire.lua and rw_release.lua take the mode of a read-write lock's key.
fn rw_mode(key: &Key) -> &'static str {
    match key.shape {
        Shape::Read => "r",
        Shape::Write | Shape::Lock | Shape::Semaphore { .. } => "w",
    }
}

/// Who takes the locks, as acquire.lua records it, and how tokens are handed out: the arguments
/// of the lock scripts that are the same for every call.
pub(super) struct Holder {
    /// ` host=<h> pid=<p> app=<a>`, or empty with holder metadata off.
    metadata: String,
    /// How long a lock freed for the first fair waiter waits for it.
    fair_turn_ms: u64,
    /// See [`RedisSettings::clocked_tokens`].
    clocked_tokens: bool,
    /// The channel notices travel on (see [`protocol::notices_channel`]).
    notices: String,
}

impl Holder {
    /// `notices`: the channel the backend's hearers subscribe to, which its steals publish on.
    pub(super) fn new(settings: &RedisSettings<'_>, notices: &str) -> Self {
        let metadata = if settings.holder_metadata {
            let host = gethostname::gethostname();
            crate::protocol::holder_metadata(
                &host.to_string_lossy(),
                std::process::id(),
                settings.app_name,
            )
        } else {
            String::new()
        };
        Holder {
            metadata,
            fair_turn_ms: millis(settings.fair_turn),
            clocked_tokens: settings.clocked_tokens,
            notices: notices.to_owned(),
        }
    }

    /// The `PUBLISH` that tells `notice` to every manager subscribed to the notices channel.
    pub(super) fn announce(&self, notice: &Notice) -> redis::Cmd {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(&self.notices).arg(notice.encode());
        publish
    }

    /// The call of steal.lua that takes the plain lock `key` for `token` and `ttl` whoever
    /// holds it, and tells the holder with a notice whose text is `from`.
    pub(super) fn steal(&self, key: &Key, token: &str, ttl: Duration, from: &str) -> Call<'static> {
        // The text as a notice keeps it (cut to its longest), written by the script.
        let text = Notice::new(NoticeKind::Stolen, "", None, from).text;
        let mut invocation = STEAL.prepare_invoke();
        invocation
            .key(&key.lock)
            .key(key.counter())
            .key(key.queue())
            .arg(token)
            .arg(millis(ttl))
            .arg(self.holder(protocol::now_ms()))
            .arg(&self.notices)
            .arg(text);
        Call {
            invocation,
            script: &STEAL,
        }
    }

    /// Whether an acquire of `key` asked as `ask` takes the lean path (a transaction, no
    /// script) on a server that offers `capabilities`: a plain lock, outside the line of fair
    /// waiters, where tokens come from the slot's counter alone. A Redlock master's tokens
    /// follow its clock too ([`RedisSettings::clocked_tokens`]), which only the script
    /// computes. The one gate of every deployment (a Cluster master is never clocked, a
    /// Redlock master always is).
    pub(super) fn takes_lean(&self, capabilities: &Capabilities, key: &Key, ask: Ask) -> bool {
        capabilities.lean_acquire
            && !self.clocked_tokens
            && key.shape.takes_lean_path()
            && ask.line != Line::Fair
    }

    /// The call of acquire.lua that takes `key` for `token` and `ttl` (see [`Ask`]); a fair
    /// waiter's turn is announced as `announce` says. For a semaphore, the call of
    /// semaphore.lua that takes one of its permits.
    pub(super) fn acquire<'a>(
        &'a self,
        key: &Key,
        token: &str,
        ttl: Duration,
        ask: Ask,
        announce: Announce,
    ) -> Call<'a> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_ACQUIRE.prepare_invoke();
                invocation
                    .key(key.rw_readers())
                    .key(key.rw_writer())
                    .key(key.rw_writer_waiting())
                    .key(key.counter())
                    .key(key.sem_waiting())
                    .key(key.fence_of_0_2())
                    .arg(token)
                    .arg(rw_mode(key))
                    .arg(millis(ttl))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(self.clock_arg())
                    .arg(if ask.line == Line::No { "0" } else { "1" });
                Call {
                    invocation,
                    script: &RW_ACQUIRE,
                }
            }
            Shape::Semaphore { permits } => {
                let mut invocation = SEMAPHORE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.counter())
                    .key(key.sem_waiting())
                    .key(key.fence_of_0_2())
                    .arg(token)
                    .arg(permits)
                    .arg(millis(ttl))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(self.clock_arg());
                Call {
                    invocation,
                    script: &SEMAPHORE,
                }
            }
            Shape::Lock => {
                let mut invocation = ACQUIRE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.counter())
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .key(key.fence_before_0_2())
                    .arg(token)
                    .arg(millis(ttl))
                    .arg(self.holder(ask.since_ms))
                    .arg(if ask.waited { "1" } else { "0" })
                    .arg(crate::backend::line_arg(ask.line))
                    .arg(self.fair_turn_ms)
                    .arg(announce.as_arg())
                    .arg(self.clock_arg());
                Call {
                    invocation,
                    script: &ACQUIRE,
                }
            }
        }
    }

    /// `clock` when tokens follow the server clock too (see [`RedisSettings::clocked_tokens`]),
    /// as the acquire scripts take it.
    fn clock_arg(&self) -> &'static str {
        if self.clocked_tokens { "clock" } else { "" }
    }

    /// What a held lock's value says of its holder (see [`protocol::held_value`]): ` since=<ms>`
    /// and ` host=<h> pid=<p> app=<a>`, or nothing with holder metadata off.
    pub(super) fn holder(&self, since_ms: u64) -> String {
        crate::protocol::holder_part(since_ms, &self.metadata)
    }

    /// The value an attempt of `token` asking `ask` writes: marked as awaited if it waited.
    pub(super) fn attempt_value(&self, token: &str, ask: Ask) -> String {
        self.held_value(token, if ask.waited { '1' } else { '0' }, ask.since_ms)
    }

    /// The value an acquire of `token` begun at `since_ms` (wall clock) writes: see
    /// [`protocol::held_value`], whose holder part is [`Holder::holder`].
    pub(super) fn held_value(&self, token: &str, waiting: char, since_ms: u64) -> String {
        protocol::held_value(token, waiting, since_ms, &self.metadata)
    }

    /// The call of leave.lua: `token` leaves the line of fair waiters for `key`; for a
    /// read-write lock, the call of rw_leave.lua: a writer stops waiting.
    pub(super) fn leave(&self, key: &Key, token: &str, announce: Announce) -> Call<'static> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_LEAVE.prepare_invoke();
                invocation
                    .key(key.rw_writer_waiting())
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(announce.as_arg())
                    .arg(&key.lock);
                Call {
                    invocation,
                    script: &RW_LEAVE,
                }
            }
            Shape::Lock | Shape::Semaphore { .. } => {
                let mut invocation = LEAVE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .arg(token)
                    .arg(self.fair_turn_ms)
                    .arg(announce.as_arg());
                Call {
                    invocation,
                    script: &LEAVE,
                }
            }
        }
    }

    /// The call of handoff.lua that moves `key` from `from` to `to` for `ttl`.
    pub(super) fn hand_off(
        &self,
        key: &Key,
        from: &str,
        to: &str,
        ttl: Duration,
        announce: Announce,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = HANDOFF.prepare_invoke();
        invocation
            .key(&key.lock)
            .key(key.queue())
            .key(key.queue_expiry())
            .key(key.counter())
            .arg(from)
            .arg(to)
            .arg(millis(ttl))
            .arg(self.holder(crate::protocol::now_ms()))
            .arg(announce.as_arg())
            .arg(self.fair_turn_ms);
        invocation
    }

    /// The call of release.lua that releases `key` if `token` holds it, keeping it busy for
    /// `keep_ms` more (hold_at_least) when that is not 0; for a semaphore, the call of
    /// permit_release.lua.
    pub(super) fn release(
        &self,
        key: &Key,
        token: &str,
        keep_ms: u64,
        announce: Announce,
    ) -> Call<'static> {
        match key.shape {
            Shape::Read | Shape::Write => {
                let mut invocation = RW_RELEASE.prepare_invoke();
                invocation
                    .key(key.rw_readers())
                    .key(key.rw_writer())
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(rw_mode(key))
                    .arg(keep_ms)
                    .arg(announce.as_arg())
                    .arg(&key.lock);
                Call {
                    invocation,
                    script: &RW_RELEASE,
                }
            }
            Shape::Semaphore { permits } => {
                let mut invocation = PERMIT_RELEASE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.sem_waiting())
                    .arg(token)
                    .arg(permits)
                    .arg(keep_ms)
                    .arg(announce.as_arg());
                Call {
                    invocation,
                    script: &PERMIT_RELEASE,
                }
            }
            Shape::Lock => {
                let mut invocation = RELEASE.prepare_invoke();
                invocation
                    .key(&key.lock)
                    .key(key.queue())
                    .key(key.queue_expiry())
                    .arg(token)
                    .arg(keep_ms)
                    .arg(announce.as_arg())
                    .arg(self.fair_turn_ms);
                Call {
                    invocation,
                    script: &RELEASE,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_lock_outside_the_fair_line_with_counted_tokens_takes_the_lean_path() {
        let holder = |clocked_tokens| Holder {
            metadata: String::new(),
            fair_turn_ms: 0,
            clocked_tokens,
            notices: protocol::notices_channel("lock:", 0),
        };
        let lean = Capabilities {
            lean_acquire: true,
            native_delete: None,
            set_ifeq: false,
            resp3: true,
        };
        let scripts = Capabilities {
            lean_acquire: false,
            ..lean
        };
        let lock = Key::new("lock:", "k", Shape::Lock).expect("key");
        let permit = Key::new("lock:", "k", Shape::Semaphore { permits: 2 }).expect("key");
        let plain = Ask::default();
        let fair = Ask {
            line: Line::Fair,
            ..plain
        };
        assert!(holder(false).takes_lean(&lean, &lock, plain));
        // A Redlock master: its token follows its clock, which the script reads.
        assert!(!holder(true).takes_lean(&lean, &lock, plain));
        assert!(!holder(false).takes_lean(&scripts, &lock, plain));
        assert!(!holder(false).takes_lean(&lean, &permit, plain));
        assert!(!holder(false).takes_lean(&lean, &lock, fair));
    }
}
