//! The statements of the PostgreSQL store, as text. Each step is one statement, sent with the
//! simple query protocol (one `Query` message, one round trip), so that a pooler in
//! transaction mode can carry it: no named or unnamed prepared statement outlives the message,
//! no session state is set. Values go into the text as literals that no value can break out
//! of: text as its UTF-8 bytes in hex, numbers formatted by Rust.

use std::time::Duration;

use super::holder::Holder;
use crate::blocker::SINCE_BOUND_MS;
use crate::store::Ask;

/// The table of held locks.
pub(crate) const TABLE: &str = "lock_runtime_locks";

/// The table of published records ([`Store::waits`](crate::store::Store::waits)): what each
/// waiting call waits for and holds, an election's candidates.
pub(crate) const RECORDS: &str = "lock_runtime_records";

/// The first key of the advisory locks that make the writers of one name of [`RECORDS`] take
/// turns: `recs` in ASCII.
pub(crate) const RECORDS_SPACE: i32 = 0x7265_6373;

/// The sequence fencing tokens come from.
pub(crate) const SEQUENCE: &str = "lock_runtime_fences";

/// The channel releases are told on; the payload is the lock's stored name.
pub(crate) const CHANNEL: &str = "lock_runtime_released";

/// What the channel of [`Notice`](crate::store::Notice)s is called: this, then the schema of the
/// store's table (see [`notice_channel`]).
pub(crate) const NOTICES: &str = "lock_runtime_notices.";

/// The longest payload `pg_notify` takes: less than 8000 bytes.
pub(crate) const NOTIFY_LIMIT: usize = 7999;

/// The advisory lock (`pg_advisory_xact_lock`) that makes two processes creating the tables at
/// once take turns: `lock_rt` in ASCII.
pub(crate) const SCHEMA_LOCK: i64 = 0x006c_6f63_6b5f_7274;

/// The longest notification payload PostgreSQL takes is 8000 bytes; a longer name is told as
/// an empty payload (every waiter of the manager tries again).
const MAX_PAYLOAD: usize = 7900;

/// The tables, and the functions the acquire, the renewal and the release call, created or
/// brought up to date; what `create_tables(false)` leaves to the user's migrations, and safe to
/// run again. A step is one short call of a function, whose statements PL/pgSQL plans once per
/// server connection, rather than a long statement parsed and planned again each time; the
/// functions find the table through the caller's `search_path`, as the other statements do.
/// Running it over an earlier version's objects adds the holder columns to the table (only
/// where one is missing), adds what a later version added (the steal's function, the table of
/// published records and its function), drops the acquire function of the earlier signature
/// and replaces the others, in the one transaction [`create_schema`] runs it in.
pub(crate) const SCHEMA: &str = include_str!("schema.sql");

/// The signatures of the functions of [`SCHEMA`], as `to_regprocedure` takes them. A function
/// whose result or behaviour changes gets a new signature here (and the old one dropped in
/// [`SCHEMA`]), so that the probe of a database made by an earlier version finds it missing
/// and connect brings the schema up to date.
pub(crate) const FUNCTIONS: [&str; 5] = [
    "lock_runtime_acquire(text,text,bigint,bigint,integer,integer,text,bigint,text,timestamptz,\
     boolean,boolean)",
    "lock_runtime_release(text,text,bigint,boolean)",
    "lock_runtime_renew(bigint[],text[],text[],bigint[])",
    "lock_runtime_steal(text,text,bigint,bigint,integer,integer,text,bigint,text,timestamptz,\
     text,text)",
    "lock_runtime_records_update(text,integer,integer,text[],text[],text[],bigint,boolean)",
];

/// The tables and functions created in one transaction (one message: an implicit transaction,
/// rolled back whole on an error) that takes the advisory lock first, so that processes starting at once
/// take turns.
pub(crate) fn create_schema() -> String {
    format!("SELECT pg_advisory_xact_lock({SCHEMA_LOCK});\n{SCHEMA}")
}

/// Whether the connection is to a standby (`t`), the port the server answers on (NULL over a
/// unix socket), whether the table of locks and its sequence exist (`tables`) and whether the
/// functions of [`SCHEMA`] exist with their current signatures, and the table of [`RECORDS`]
/// (`functions`: what a later version added).
pub(crate) fn probe() -> String {
    format!(
        "SELECT pg_is_in_recovery() AS standby, inet_server_port() AS port, \
         to_regclass('{TABLE}') IS NOT NULL AND to_regclass('{SEQUENCE}') IS NOT NULL AS tables, \
         to_regclass('{RECORDS}') IS NOT NULL AND {} AS functions",
        FUNCTIONS
            .map(|function| format!("to_regprocedure('{function}') IS NOT NULL"))
            .join(" AND ")
    )
}

/// `text` as a literal that reads back as exactly `text`, whatever it holds (the fences on
/// PostgreSQL write theirs the same way).
pub(crate) use crate::fence::postgres::text;

/// `duration` in whole milliseconds, at least 1.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// `since` of a row in milliseconds since the Unix epoch (NULL where not recorded).
const SINCE_MS: &str = "(extract(epoch FROM l.since) * 1000)::bigint";

/// What a row records of its holder (`host, pid, app, since`, in that order): `holder`'s, with
/// `since_ms` (milliseconds since the Unix epoch) when it began its attempt; NULL each without
/// one (holder metadata off), and `since` NULL where `since_ms` is no time (year 10000 on).
fn holder_values(holder: Option<&Holder>, since_ms: u64) -> String {
    let Some(holder) = holder else {
        return "NULL::text, NULL::bigint, NULL::text, NULL::timestamptz".to_owned();
    };
    let app = holder
        .app
        .as_deref()
        .map_or_else(|| "NULL::text".to_owned(), text);
    let since = if since_ms < SINCE_BOUND_MS {
        format!("timestamptz 'epoch' + {since_ms} * interval '1 millisecond'")
    } else {
        "NULL::timestamptz".to_owned()
    };
    format!(
        "{}, {}::bigint, {app}, {since}",
        text(&holder.host),
        holder.pid
    )
}

/// The milliseconds left of `expires_at`, rounded up, from the database's clock.
const LEFT_MS: &str =
    "greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint";

/// The payload a release of `name` is told with.
pub(crate) fn payload(name: &str) -> String {
    if name.len() > MAX_PAYLOAD {
        text("")
    } else {
        text(name)
    }
}

/// The first key of the advisory locks that transaction-bound locks hold
/// (`pg_advisory_xact_lock(int4, int4)`, whose keys do not meet those of the one-`bigint` form):
/// `lock` in ASCII.
pub(crate) const ADVISORY_SPACE: i32 = 0x6c6f_636b;

/// The second key of the advisory lock of `name`: the first 32 bits of its SHA-1 digest.
pub(crate) fn advisory_key(name: &str) -> i32 {
    let digest = sha1_smol::Sha1::from(name).digest().bytes();
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// Takes `name` for `token` (whose holder id is `holder`) for `ttl` by the database's clock: a
/// free or expired lock, or one `token` holds already, unless a transaction holds it (its
/// advisory lock, tried for the step's own transaction). The row records `recorded` (see
/// [`holder_values`]) as of `ask.since_ms`, and is marked `waited` where `ask.waited` (its
/// release is then told); a busy row is marked where `ask.waits` (the caller waits to be told
/// of its release). Rows (`fence, holder, left_ms, held_fence, host, pid, app, since_ms`):
/// `fence` alone when taken; the row there when not: its `holder`, `left_ms`, its fencing token
/// as `held_fence` and what it recorded of its holder; `left_ms` -1 alone when a transaction
/// holds it.
pub(crate) fn acquire(
    name: &str,
    token: &str,
    holder: i64,
    ttl: Duration,
    recorded: Option<&Holder>,
    ask: Ask,
) -> String {
    format!(
        "SELECT * FROM lock_runtime_acquire({}, {}, {holder}, {}, {ADVISORY_SPACE}, {}, {}, {}, {})",
        text(name),
        text(token),
        millis(ttl),
        advisory_key(name),
        holder_values(recorded, ask.since_ms),
        ask.waits,
        ask.waited
    )
}

/// The transaction-local setting in which [`lock_in_transaction`]'s first statement leaves
/// whether it took the advisory lock, for its second.
const TAKEN: &str = "lock_runtime.xact_lock_taken";

/// A transaction-bound lock of `name` in the caller's transaction, as one message of two
/// statements (one round trip), with `claim` (an `INSERT` of the fence claimed, from `drawn`'s
/// `fence`) in the second if given.
///
/// The first statement reads the isolation and tries the advisory lock (held until the
/// transaction ends if taken), and records whether it took it. The second, whose snapshot is
/// taken after the first ended and so sees every lease committed before the advisory lock was
/// taken, goes on only if it was, at READ COMMITTED: whether a lease of the table holds `name`
/// (`left_ms`), and if not a fencing token from the sequence (`fence`), the release told at the
/// transaction's end (a notification is delivered at COMMIT, dropped by ROLLBACK), and the
/// claim (`claimed`: the resource's fence after it, `claimed_by` its holder), the claim's holder
/// id being the transaction's id (`holder`). Rows: `isolation, ok`, then
/// `left_ms, fence, holder, told, claimed, claimed_by`.
pub(crate) fn lock_in_transaction(name: &str, claim: Option<&str>) -> String {
    let advisory = advisory_key(name);
    let (told, name) = (payload(name), text(name));
    let (claim, claimed) = match claim {
        Some(claim) => (
            format!(", claimed AS (\n    {claim}\n)"),
            "(SELECT fence FROM claimed LIMIT 1) AS claimed,
       (SELECT holder FROM claimed LIMIT 1) AS claimed_by",
        ),
        None => (
            String::new(),
            "NULL::bigint AS claimed, NULL::text AS claimed_by",
        ),
    };
    format!(
        "SELECT current_setting('transaction_isolation') AS isolation,
       set_config('{TAKEN}', pg_try_advisory_xact_lock({ADVISORY_SPACE}, {advisory})::text, true)::boolean AS ok;
WITH mine AS (
    SELECT current_setting('{TAKEN}', true) = 'true'
       AND current_setting('transaction_isolation') = 'read committed' AS ok
), held AS (
    SELECT {LEFT_MS} AS left_ms FROM {TABLE} l, mine
    WHERE mine.ok AND l.name = {name} AND l.expires_at > clock_timestamp()
), drawn AS (
    SELECT nextval('{SEQUENCE}') AS fence, 'xact:' || txid_current()::text AS holder FROM mine
    WHERE mine.ok AND NOT EXISTS (SELECT 1 FROM held)
), told AS (
    SELECT pg_notify('{CHANNEL}', {told}) FROM drawn
){claim}
SELECT (SELECT left_ms FROM held LIMIT 1) AS left_ms,
       (SELECT fence FROM drawn) AS fence,
       (SELECT holder FROM drawn) AS holder,
       (SELECT count(*) FROM told) AS told,
       {claimed}"
    )
}

/// Renews the leases `(index, name, token, ttl)` whose token still holds a live lease, each
/// for its ttl from now by the database's clock, keeping what the row records of its holder.
/// Rows: the index of each lease renewed.
pub(crate) fn renew<'a>(
    leases: impl Iterator<Item = (usize, &'a str, &'a str, Duration)>,
) -> String {
    let (mut indices, mut names, mut tokens, mut ttls) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (index, name, token, ttl) in leases {
        indices.push(index.to_string());
        names.push(text(name));
        tokens.push(text(token));
        ttls.push(millis(ttl).to_string());
    }
    format!(
        "SELECT * FROM lock_runtime_renew(ARRAY[{}]::bigint[], ARRAY[{}]::text[], \
         ARRAY[{}]::text[], ARRAY[{}]::bigint[])",
        indices.join(", "),
        names.join(", "),
        tokens.join(", "),
        ttls.join(", ")
    )
}

/// Releases `name` if `token` holds it: deletes the row, or with `keep` leaves it ownerless
/// (no holder recorded) until then; tells the release on [`CHANNEL`] in the same statement (delivered at commit).
/// One row: `mine` (true: released; false: ours but its lease had ended; NULL: not ours) and
/// `other` (another holder's live lease is there).
pub(crate) fn release(name: &str, token: &str, keep: Duration) -> String {
    let keep = if keep.is_zero() { 0 } else { millis(keep) };
    format!(
        "SELECT * FROM lock_runtime_release({}, {}, {keep}, {})",
        text(name),
        text(token),
        name.len() <= MAX_PAYLOAD
    )
}

/// Which of `names` are held now (a live lease), by the database's clock. Rows: `name`.
pub(crate) fn held<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let listed: Vec<String> = names.map(text).collect();
    format!(
        "SELECT l.name FROM {TABLE} l WHERE l.expires_at > clock_timestamp() AND l.name IN ({})",
        listed.join(", ")
    )
}

/// Every live lease whose name starts with `prefix`, for inspection. Rows: `name`, `holder`,
/// `fence`, `left_ms`, `kept` (released with `hold_at_least`, ownerless until it expires),
/// and what the holder recorded: `host`, `pid`, `app`, `since_ms`, and `age_ms` since then by
/// the database's clock.
pub(crate) fn live(prefix: &str) -> String {
    format!(
        "SELECT l.name, l.holder, l.fence, {LEFT_MS} AS left_ms, l.token = '' AS kept,
       l.host, l.pid, l.app, {SINCE_MS} AS since_ms,
       CASE WHEN l.since IS NOT NULL THEN
           greatest(0, floor(extract(epoch FROM clock_timestamp() - l.since) * 1000))::bigint
       END AS age_ms
FROM {TABLE} l
WHERE l.expires_at > clock_timestamp() AND left(l.name, {}) = {}
ORDER BY l.name",
        prefix.chars().count(),
        text(prefix)
    )
}

/// Deletes the lease of `name` whose fencing token is `fence` (whoever holds it) and tells the
/// release. Rows: `removed` (the lease was there and live), `other` (another lease is there).
pub(crate) fn force_release(name: &str, fence: i64) -> String {
    let (told, name) = (payload(name), text(name));
    format!(
        "WITH gone AS (
    DELETE FROM {TABLE} l WHERE l.name = {name} AND l.fence = {fence}
    RETURNING l.expires_at > clock_timestamp() AS live
), told AS (
    SELECT pg_notify('{CHANNEL}', {told}) FROM gone
)
SELECT COALESCE((SELECT live FROM gone LIMIT 1), false) AS removed,
       (SELECT count(*) FROM told) AS told,
       EXISTS (SELECT 1 FROM {TABLE} l WHERE l.name = {name} AND l.fence <> {fence}
               AND l.expires_at > clock_timestamp()) AS other"
    )
}

/// The channel the managers over the store's table tell each other [`Notice`]s on (one row:
/// `channel`): [`NOTICES`] and the name of the table's schema (its SHA-256 in hex where the
/// name would make the channel longer than the 63 bytes of an identifier), so that the
/// managers of two sets of tables in one database, in two schemas, hear only their own.
///
/// [`Notice`]: crate::store::Notice
pub(crate) fn notice_channel() -> String {
    format!(
        "SELECT '{NOTICES}' || CASE WHEN octet_length(n.nspname) <= {} THEN n.nspname
       ELSE encode(sha256(convert_to(n.nspname, 'UTF8')), 'hex') END AS channel
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('{TABLE}')",
        63 - NOTICES.len()
    )
}

/// Tells `payload` on `channel`: one notification, delivered at the statement's commit.
pub(crate) fn notify_on(channel: &str, payload: &str) -> String {
    format!("SELECT pg_notify({}, {})", text(channel), text(payload))
}

/// Takes `name` for `token` (whose holder id is `holder`) for `ttl` whoever holds it, unless a
/// transaction holds it, recording `recorded` as of `since_ms` (see [`holder_values`]), with a
/// new fencing token; tells a live holder other than `token` on `channel` that it was stolen,
/// `from` being the notice's text. One row: `fence` and the `victim`'s holder id (NULL for
/// none), or `in_transaction` true alone.
#[allow(clippy::too_many_arguments)]
pub(crate) fn steal(
    name: &str,
    token: &str,
    holder: i64,
    ttl: Duration,
    recorded: Option<&Holder>,
    since_ms: u64,
    channel: &str,
    from: &str,
) -> String {
    format!(
        "SELECT * FROM lock_runtime_steal({}, {}, {holder}, {}, {ADVISORY_SPACE}, {}, {}, {}, {})",
        text(name),
        text(token),
        millis(ttl),
        advisory_key(name),
        holder_values(recorded, since_ms),
        text(channel),
        text(from)
    )
}

/// One step on the published records under `name` (see
/// [`Store::waits`](crate::store::Store::waits)): writes `set` (the last of two of one id
/// wins), then removes `remove`, and with `read` answers every record kept. Rows: `id`,
/// `record`, in id order (none without `read`).
pub(crate) fn records_update(
    name: &str,
    set: &[(String, String)],
    remove: &[String],
    keep: Duration,
    read: bool,
) -> String {
    let array = |values: &mut dyn Iterator<Item = &str>| {
        let listed: Vec<String> = values.map(text).collect();
        format!("ARRAY[{}]::text[]", listed.join(", "))
    };
    format!(
        "SELECT id, record FROM lock_runtime_records_update({}, {RECORDS_SPACE}, {}, {}, {}, {}, \
         {}, {read})",
        text(name),
        advisory_key(name),
        array(&mut set.iter().map(|(id, _)| id.as_str())),
        array(&mut set.iter().map(|(_, record)| record.as_str())),
        array(&mut remove.iter().map(String::as_str)),
        millis(keep),
    )
}

/// Tells `payload` on [`CHANNEL`]: the listening connection's check that it hears.
pub(crate) fn notify(payload: &str) -> String {
    format!("SELECT pg_notify('{CHANNEL}', {})", text(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_literal_is_hex_whatever_it_holds() {
        let shown = text("a'); DROP TABLE x; --\\ é");
        assert!(!shown.contains("DROP"), "{shown}");
        assert!(
            shown
                .trim_start_matches("convert_from(decode('")
                .trim_end_matches("', 'hex'), 'UTF8')")
                .chars()
                .all(|c| c.is_ascii_hexdigit()),
            "{shown}"
        );
        assert_eq!(text(""), "convert_from(decode('', 'hex'), 'UTF8')");
    }

    #[test]
    fn a_name_too_long_to_tell_is_told_empty() {
        assert_eq!(payload(&"x".repeat(MAX_PAYLOAD + 1)), text(""));
        assert_eq!(payload("lock:{a}"), text("lock:{a}"));
    }

    #[test]
    fn a_holder_is_recorded_only_with_metadata_and_a_since_that_is_a_time() {
        assert_eq!(
            holder_values(None, 5),
            "NULL::text, NULL::bigint, NULL::text, NULL::timestamptz"
        );
        let holder = Holder {
            host: "web-1".into(),
            pid: 42,
            app: None,
        };
        assert_eq!(
            holder_values(Some(&holder), 1500),
            format!(
                "{}, 42::bigint, NULL::text, timestamptz 'epoch' + 1500 * interval '1 millisecond'",
                text("web-1")
            )
        );
        let named = Holder {
            app: Some("orders".into()),
            ..holder
        };
        let values = holder_values(Some(&named), u64::MAX);
        assert!(values.contains(&text("orders")), "{values}");
        assert!(values.ends_with("NULL::timestamptz"), "{values}");
    }

    #[test]
    fn the_schema_names_what_the_store_uses() {
        for name in [TABLE, SEQUENCE, CHANNEL, RECORDS]
            .iter()
            .chain(FUNCTIONS.iter())
        {
            let bare = name.split('(').next().unwrap_or(name);
            assert!(SCHEMA.contains(bare), "{name}");
        }
    }

    #[test]
    fn the_documented_schema_is_the_one_connect_runs() {
        let page = include_str!("../../../../docs/POSTGRES.md");
        assert!(page.contains(&format!("```sql\n{SCHEMA}```")));
    }

    #[test]
    fn a_records_step_sends_its_values_as_literals_and_empty_lists_typed() {
        let set = vec![("01".to_owned(), "waits=a'b".to_owned())];
        let step = records_update(
            "lock:waits:{waits}",
            &set,
            &[],
            Duration::from_secs(5),
            true,
        );
        assert!(!step.contains("a'b"), "{step}");
        assert!(step.contains(&text("waits=a'b")), "{step}");
        assert!(step.contains("ARRAY[]::text[], 5000, true)"), "{step}");
        let read = records_update("n", &[], &[], Duration::ZERO, true);
        assert!(
            read.contains("ARRAY[]::text[], ARRAY[]::text[], ARRAY[]::text[], 1, true)"),
            "{read}"
        );
    }

    #[test]
    fn durations_are_whole_milliseconds_at_least_one() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
