//! Notices: a word for a lock's holder, or for whoever follows a lock, that a store carries from
//! the process that says it to every manager over the store, in every process.
//!
//! Three things travel this way: a request that the holder let go
//! ([`LockManager::request_release`](crate::LockManager::request_release)), the news that a
//! lock was stolen from its holder ([`Store::steal`](super::Store::steal)), and an election's
//! leader announcing itself. A store that [`announces`](super::Store::announces) carries each
//! as one line of text ([`Notice::encode`]), on whatever its servers offer (a Redis channel,
//! PostgreSQL's `NOTIFY`, a function call in memory), and hands what it hears to
//! [`Changes::heard`](super::Changes::heard). It never reads one: the words are the engine's.

use super::HolderId;

/// What a [`Notice`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoticeKind {
    /// Someone asks the holder to let go: its guard's `release_requested()` resolves, and the
    /// holder decides.
    ReleaseRequested,
    /// The lock was stolen from the holder: its lease is lost at once.
    Stolen,
    /// A leader of the election named by the key announces its term; the text is the
    /// election's record of it.
    Leader,
}

impl NoticeKind {
    /// Its one-word name, as encoded.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::ReleaseRequested => "release",
            NoticeKind::Stolen => "stolen",
            NoticeKind::Leader => "leader",
        }
    }

    fn parse(word: &str) -> Option<NoticeKind> {
        Some(match word {
            "release" => NoticeKind::ReleaseRequested,
            "stolen" => NoticeKind::Stolen,
            "leader" => NoticeKind::Leader,
            _ => return None,
        })
    }
}

/// One notice: what it says, of which key, for which holder, and who says it.
///
/// ```
/// use lock_runtime::store::{HolderId, Key, Notice, NoticeKind, Shape};
///
/// let key = Key::new("lock:", "order:42", Shape::Lock).unwrap();
/// let holder = HolderId::of_token("the holder's owner token");
/// let notice = Notice::new(NoticeKind::Stolen, key.name(), Some(holder), "ops-1 pid 7: stuck");
/// let line = notice.encode();
/// assert_eq!(Notice::decode(&line), Some(notice));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Notice {
    /// What it says.
    pub kind: NoticeKind,
    /// The name of the key it concerns ([`Key::name`](super::Key::name)).
    pub key: String,
    /// The holder it is for: only a lease whose owner token has this id acts on it. `None`:
    /// whoever holds the key.
    pub holder: Option<HolderId>,
    /// Who says it and why (a host, a pid, an application, a reason), for audit lines; for a
    /// [`NoticeKind::Leader`], the election's record of the term. Never an owner token.
    pub text: String,
}

/// What hears the notices a store tells a manager ([`Changes::heard`](super::Changes::heard)):
/// the manager's receiver of notices, named here so that the store's side need not know it.
pub(crate) trait Hears: Send + Sync {
    /// Acts on `notice` if it concerns one of the manager's leases or elections.
    fn heard(&self, notice: &Notice);
}

/// The tag every encoded notice begins with, and its version.
const TAG: &str = "n1";

/// The longest [`Notice::text`] kept: longer text is cut (at a character boundary), so a
/// notice stays one short message.
pub const MAX_TEXT: usize = 512;

impl Notice {
    /// A notice; `text` is cut to [`MAX_TEXT`] bytes.
    pub fn new(
        kind: NoticeKind,
        key: impl Into<String>,
        holder: Option<HolderId>,
        text: impl Into<String>,
    ) -> Notice {
        let mut text = text.into();
        if text.len() > MAX_TEXT {
            let mut end = MAX_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        Notice {
            kind,
            key: key.into(),
            holder,
            text,
        }
    }

    /// The notice as one line of text for a store to carry:
    /// `n1 <kind> <holder id in hex, or -> <key length> <key><text>`.
    pub fn encode(&self) -> String {
        let holder = self
            .holder
            .map_or_else(|| "-".to_owned(), |id| format!("{:x}", id.get()));
        format!(
            "{TAG} {} {holder} {} {}{}",
            self.kind.as_str(),
            self.key.len(),
            self.key,
            self.text
        )
    }

    /// A notice as [`encode`](Notice::encode) wrote it; `None` for anything else (a store
    /// that hears other traffic on its channel drops it).
    pub fn decode(line: &str) -> Option<Notice> {
        let mut words = line.splitn(5, ' ');
        if words.next()? != TAG {
            return None;
        }
        let kind = NoticeKind::parse(words.next()?)?;
        let holder = match words.next()? {
            "-" => None,
            hex => Some(HolderId::from_raw(u64::from_str_radix(hex, 16).ok()?)?),
        };
        let length: usize = words.next()?.parse().ok()?;
        let rest = words.next()?;
        if !rest.is_char_boundary(length.min(rest.len())) || rest.len() < length {
            return None;
        }
        let (key, text) = rest.split_at(length);
        Some(Notice {
            kind,
            key: key.to_owned(),
            holder,
            text: text.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_reads_back_as_written_whatever_its_key_and_text_hold() {
        for (key, text) in [
            ("lock:{order 42}", "ops pid 7: a reason with spaces"),
            ("", ""),
            ("lock:{ключ}", "n1 release - 3 abc"),
        ] {
            for holder in [None, HolderId::from_raw(0xabc)] {
                for kind in [
                    NoticeKind::ReleaseRequested,
                    NoticeKind::Stolen,
                    NoticeKind::Leader,
                ] {
                    let notice = Notice::new(kind, key, holder, text);
                    assert_eq!(Notice::decode(&notice.encode()), Some(notice));
                }
            }
        }
    }

    #[test]
    fn other_traffic_is_not_a_notice() {
        for line in [
            "",
            "n1",
            "n2 release - 1 kx",
            "n1 shout - 1 kx",
            "n1 release zz 1 kx",
            "n1 release 0 1 kx",
            "n1 release - 9 kx",
            "n1 release - x kx",
        ] {
            assert_eq!(Notice::decode(line), None, "{line:?}");
        }
        // A length that ends inside a character.
        assert_eq!(Notice::decode("n1 release - 1 \u{e9}x"), None);
    }

    #[test]
    fn a_long_text_is_cut_at_a_character() {
        let notice = Notice::new(NoticeKind::ReleaseRequested, "k", None, "é".repeat(400));
        assert!(notice.text.len() <= MAX_TEXT);
        assert!(notice.text.chars().all(|c| c == 'é'));
    }
}
