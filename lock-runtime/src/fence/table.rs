//! What the SQL fences share: the fence table's name, checked so that it can go into a
//! statement's text, and how a claim's or a check's answer becomes a refusal.

use super::{Fence, FenceError};
use crate::error::LockError;

/// The default fence table.
pub(crate) const DEFAULT_TABLE: &str = "lock_fences";

/// The default fence table's SQL, on PostgreSQL and SQLite alike.
pub(crate) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS lock_fences (
    resource TEXT PRIMARY KEY,
    fence    BIGINT NOT NULL,
    holder   TEXT
)";

/// What a claim sets the `holder` column to, in an `ON CONFLICT DO UPDATE` whose existing row
/// is `row` (`f.` on PostgreSQL, empty on SQLite): the claimant's, where its token is above the
/// fence or the fence's claim had no holder; the holder that claimed otherwise.
pub(crate) fn holder_update(row: &str) -> String {
    format!(
        "CASE WHEN excluded.fence > {row}fence OR (excluded.fence = {row}fence AND {row}holder IS NULL) \
         THEN excluded.holder ELSE {row}holder END"
    )
}

/// The longest identifier PostgreSQL keeps whole (`NAMEDATALEN - 1`); SQLite takes it too.
const MAX_IDENTIFIER: usize = 63;

/// A fence table's name, as given (`lock_fences`, `billing.lock_fences`) and as quoted for a
/// statement (`"billing"."lock_fences"`). Only plain identifiers are taken (lowercase ASCII
/// letters, digits, `_`, not starting with a digit), so the quoted form means exactly the table
/// a migration creates with the name unquoted, and nothing in it can end the identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TableName {
    given: String,
    quoted: String,
}

impl TableName {
    /// The default table, [`DEFAULT_TABLE`].
    pub(crate) fn default_table() -> TableName {
        TableName {
            given: DEFAULT_TABLE.to_owned(),
            quoted: format!("\"{DEFAULT_TABLE}\""),
        }
    }

    /// `name` checked: one identifier, or with `qualified` also `schema.table`; a
    /// [`LockError::Config`] naming what is wrong otherwise.
    pub(crate) fn parse(name: &str, qualified: bool) -> Result<TableName, LockError> {
        let parts: Vec<&str> = name.split('.').collect();
        let shape_ok = match parts.len() {
            1 => true,
            2 => qualified,
            _ => false,
        };
        if !shape_ok || !parts.iter().all(|part| is_identifier(part)) {
            let form = if qualified {
                "`table` or `schema.table`"
            } else {
                "`table`"
            };
            return Err(LockError::Config(format!(
                "fence table name {name:?} is refused: give {form}, each part lowercase ASCII \
                 letters, digits and `_`, not starting with a digit, at most {MAX_IDENTIFIER} \
                 characters (nothing that would need quoting, so nothing can reach the SQL)"
            )));
        }
        let quoted: Vec<String> = parts.iter().map(|part| format!("\"{part}\"")).collect();
        Ok(TableName {
            given: name.to_owned(),
            quoted: quoted.join("."),
        })
    }

    /// The name as given.
    pub(crate) fn given(&self) -> &str {
        &self.given
    }

    /// The name quoted, for a statement.
    pub(crate) fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The table's `CREATE TABLE IF NOT EXISTS`, for a migration: the default table's
    /// (`SCHEMA`) with this name, quoted (the same table as unquoted, as the name is lowercase).
    pub(crate) fn schema(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    resource TEXT PRIMARY KEY,\n    fence    BIGINT NOT NULL,\n    holder   TEXT\n)",
            self.quoted
        )
    }
}

fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    first_ok
        && part.len() <= MAX_IDENTIFIER
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether the claim at the fence's own token recorded as `theirs` is this fence's: it is
/// unless both have a holder id and the ids differ (the token was handed out twice).
fn same_holder(fence: &Fence, theirs: Option<&str>) -> bool {
    match (fence.holder(), theirs) {
        (Some(mine), Some(theirs)) => mine == theirs,
        _ => true,
    }
}

/// What a claim answers once the resource's fence is `current`, claimed by `holder` (after
/// the claim raised it to the token if it was lower): the claim holds if the fence is the
/// token and the claim there is this holder's.
pub(crate) fn claimed(fence: &Fence, current: i64, holder: Option<&str>) -> Result<(), FenceError> {
    let current = u64::try_from(current).unwrap_or(0);
    if current > fence.token() || !same_holder(fence, holder) {
        return Err(FenceError::Stale {
            resource: fence.resource().to_owned(),
            current,
            offered: fence.token(),
        });
    }
    Ok(())
}

/// What a check answers when the resource's fence is `current` (`None`: no row), claimed by
/// `holder`: it holds only if the fence is the token, claimed by this holder.
pub(crate) fn checked(
    fence: &Fence,
    current: Option<i64>,
    holder: Option<&str>,
) -> Result<(), FenceError> {
    let current = current.map(|value| u64::try_from(value).unwrap_or(0));
    match current {
        Some(current) if current == fence.token() && same_holder(fence, holder) => Ok(()),
        Some(current) if current >= fence.token() => Err(FenceError::Stale {
            resource: fence.resource().to_owned(),
            current,
            offered: fence.token(),
        }),
        current => Err(FenceError::NotClaimed {
            resource: fence.resource().to_owned(),
            current,
            offered: fence.token(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_taken_and_quoted() {
        let name = TableName::parse("lock_fences_2", false).expect("plain");
        assert_eq!(name.quoted(), "\"lock_fences_2\"");
        let name = TableName::parse("billing.fences", true).expect("qualified");
        assert_eq!(name.quoted(), "\"billing\".\"fences\"");
        assert_eq!(name.given(), "billing.fences");
        assert_eq!(
            TableName::default_table(),
            TableName::parse(DEFAULT_TABLE, false).expect("valid")
        );
    }

    #[test]
    fn anything_that_could_reach_the_sql_is_refused() {
        for bad in [
            "",
            "fences; DROP TABLE users",
            "fences\"",
            "Fences",
            "1fences",
            "a.b.c",
            ".fences",
            "fences.",
            "fen ces",
            "fences--",
            "fencés",
            &"f".repeat(64),
        ] {
            let err = TableName::parse(bad, true).expect_err(bad);
            assert!(matches!(err, LockError::Config(_)), "{bad}: {err}");
        }
        let err = TableName::parse("billing.fences", false).expect_err("unqualified only");
        assert!(err.to_string().contains("`table`"), "{err}");
    }

    #[test]
    fn a_claim_holds_unless_the_fence_is_higher_or_anothers_at_the_same_token() {
        let fence = Fence::new("r", 5);
        assert!(claimed(&fence, 5, None).is_ok());
        assert!(
            claimed(&fence, 5, Some("b")).is_ok(),
            "no holder id: anyone's"
        );
        let higher = claimed(&fence, 6, None);
        assert!(
            matches!(
                higher,
                Err(FenceError::Stale {
                    current: 6,
                    offered: 5,
                    ..
                })
            ),
            "{higher:?}"
        );
        let mine = fence.held_by("a");
        assert!(claimed(&mine, 5, Some("a")).is_ok());
        assert!(claimed(&mine, 5, None).is_ok());
        let twice = claimed(&mine, 5, Some("b"));
        assert!(
            matches!(
                twice,
                Err(FenceError::Stale {
                    current: 5,
                    offered: 5,
                    ..
                })
            ),
            "{twice:?}"
        );
    }

    #[test]
    fn a_check_holds_only_at_the_token_and_its_holder() {
        let fence = Fence::new("r", 5).held_by("a");
        assert!(checked(&fence, Some(5), Some("a")).is_ok());
        let twice = checked(&fence, Some(5), Some("b"));
        assert!(
            matches!(
                twice,
                Err(FenceError::Stale {
                    current: 5,
                    offered: 5,
                    ..
                })
            ),
            "{twice:?}"
        );
        let higher = checked(&fence, Some(9), Some("a"));
        assert!(
            matches!(higher, Err(FenceError::Stale { current: 9, .. })),
            "{higher:?}"
        );
        let lower = checked(&fence, Some(4), None);
        assert!(
            matches!(
                lower,
                Err(FenceError::NotClaimed {
                    current: Some(4),
                    ..
                })
            ),
            "{lower:?}"
        );
        let never = checked(&fence, None, None);
        assert!(
            matches!(never, Err(FenceError::NotClaimed { current: None, .. })),
            "{never:?}"
        );
    }
}
