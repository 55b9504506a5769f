-- The schema of the version before published records (lock_runtime_records), as its connect
-- made it: the suite makes it by hand to check that connect brings it up to date.
CREATE TABLE IF NOT EXISTS lock_runtime_locks (
    name       text PRIMARY KEY,
    token      text NOT NULL,
    holder     bigint NOT NULL,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    host       text,
    pid        bigint,
    app        text,
    since      timestamptz,
    waited     boolean NOT NULL DEFAULT false
);
-- A table made by an earlier version gains the columns it lacks; the table is altered (which
-- waits for every transaction using it) only where one is missing.
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_attribute
        WHERE attrelid = 'lock_runtime_locks'::regclass AND NOT attisdropped
          AND attname IN ('host', 'pid', 'app', 'since', 'waited')) < 5 THEN
        ALTER TABLE lock_runtime_locks
            ADD COLUMN IF NOT EXISTS host text,
            ADD COLUMN IF NOT EXISTS pid bigint,
            ADD COLUMN IF NOT EXISTS app text,
            ADD COLUMN IF NOT EXISTS since timestamptz,
            ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;
    END IF;
END
$$;
CREATE SEQUENCE IF NOT EXISTS lock_runtime_fences AS bigint;
-- The acquire of the first functions, which recorded no holder.
DROP FUNCTION IF EXISTS lock_runtime_acquire(text, text, bigint, bigint, integer, integer);
CREATE OR REPLACE FUNCTION lock_runtime_acquire(
    p_name text, p_token text, p_holder bigint, p_ttl_ms bigint, p_space integer, p_key integer,
    p_host text, p_pid bigint, p_app text, p_since timestamptz, p_waits boolean,
    p_waited boolean)
RETURNS TABLE (fence bigint, holder bigint, left_ms bigint, held_fence bigint, host text,
               pid bigint, app text, since_ms bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF NOT pg_try_advisory_xact_lock(p_space, p_key) THEN
        left_ms := -1;
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO lock_runtime_locks AS l
        (name, token, holder, fence, expires_at, host, pid, app, since, waited)
    VALUES (p_name, p_token, p_holder, nextval('lock_runtime_fences'),
            clock_timestamp() + p_ttl_ms * interval '1 millisecond',
            p_host, p_pid, p_app, p_since, p_waited)
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token, holder = excluded.holder, fence = excluded.fence,
            expires_at = excluded.expires_at, host = excluded.host, pid = excluded.pid,
            app = excluded.app, since = excluded.since, waited = l.waited OR excluded.waited
        WHERE l.expires_at <= clock_timestamp() OR l.token = excluded.token
    RETURNING l.fence INTO fence;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Busy: the row is locked (ON CONFLICT locks the row it does not update) until this
    -- transaction ends, so a release waits for the mark and tells the caller that waits.
    IF p_waits THEN
        UPDATE lock_runtime_locks l SET waited = true WHERE l.name = p_name AND NOT l.waited;
    END IF;
    RETURN QUERY SELECT NULL::bigint, l.holder,
        greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint,
        l.fence, l.host, l.pid, l.app, (extract(epoch FROM l.since) * 1000)::bigint
    FROM lock_runtime_locks l WHERE l.name = p_name;
END
$$;
CREATE OR REPLACE FUNCTION lock_runtime_release(
    p_name text, p_token text, p_keep_ms bigint, p_tell_name boolean)
RETURNS TABLE (mine boolean, other boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    told boolean;
BEGIN
    IF p_keep_ms > 0 THEN
        UPDATE lock_runtime_locks l SET token = '', holder = 0, host = NULL, pid = NULL,
            app = NULL, since = NULL,
            expires_at = clock_timestamp() + p_keep_ms * interval '1 millisecond'
        WHERE l.name = p_name AND l.token = p_token AND l.expires_at > clock_timestamp()
        RETURNING true, true INTO mine, told;
    ELSE
        DELETE FROM lock_runtime_locks l WHERE l.name = p_name AND l.token = p_token
        RETURNING l.expires_at > clock_timestamp(), l.waited INTO mine, told;
    END IF;
    IF FOUND THEN
        -- Told where someone waits: a caller told it is busy marked it, or its holder waited
        -- for it (others of its process may still wait); a kept lock is always told.
        IF told THEN
            PERFORM pg_notify('lock_runtime_released',
                CASE WHEN p_tell_name THEN p_name ELSE '' END);
        END IF;
        other := false;
    ELSE
        other := EXISTS (SELECT 1 FROM lock_runtime_locks l WHERE l.name = p_name
            AND l.token <> p_token AND l.expires_at > clock_timestamp());
    END IF;
    RETURN NEXT;
END
$$;
CREATE OR REPLACE FUNCTION lock_runtime_renew(
    p_indices bigint[], p_names text[], p_tokens text[], p_ttl_ms bigint[])
RETURNS TABLE (i bigint)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN
        UPDATE lock_runtime_locks AS l
        SET expires_at = clock_timestamp() + b.ms * interval '1 millisecond'
        FROM unnest(p_indices, p_names, p_tokens, p_ttl_ms) AS b(i, name, token, ms)
        WHERE l.name = b.name AND l.token = b.token AND l.expires_at > clock_timestamp()
        RETURNING b.i
    LOOP
        RETURN NEXT;
    END LOOP;
END
$$;
CREATE OR REPLACE FUNCTION lock_runtime_steal(
    p_name text, p_token text, p_holder bigint, p_ttl_ms bigint, p_space integer, p_key integer,
    p_host text, p_pid bigint, p_app text, p_since timestamptz, p_channel text, p_from text)
RETURNS TABLE (fence bigint, victim bigint, in_transaction boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    was_holder bigint;
    was_token text;
    was_live boolean;
BEGIN
    -- A transaction's lock is its advisory lock, let go only when that transaction ends: it
    -- cannot be stolen. An acquire holds the same advisory lock for its own statement only,
    -- so a steal waits for that, a little, before it says a transaction holds the lock.
    PERFORM set_config('lock_timeout', '1000', true);
    BEGIN
        PERFORM pg_advisory_xact_lock(p_space, p_key);
    EXCEPTION WHEN lock_not_available THEN
        in_transaction := true;
        RETURN NEXT;
        RETURN;
    END;
    in_transaction := false;
    -- The victim: whoever holds a live lease (not an expired one, nor a lock kept ownerless
    -- by hold_at_least), unless it is the stealer itself.
    SELECT l.holder, l.token, l.expires_at > clock_timestamp()
    INTO was_holder, was_token, was_live
    FROM lock_runtime_locks l WHERE l.name = p_name FOR UPDATE;
    IF FOUND AND was_live AND was_token <> '' AND was_token <> p_token AND was_holder <> 0 THEN
        victim := was_holder;
    END IF;
    INSERT INTO lock_runtime_locks AS l
        (name, token, holder, fence, expires_at, host, pid, app, since)
    VALUES (p_name, p_token, p_holder, nextval('lock_runtime_fences'),
            clock_timestamp() + p_ttl_ms * interval '1 millisecond',
            p_host, p_pid, p_app, p_since)
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token, holder = excluded.holder, fence = excluded.fence,
            expires_at = excluded.expires_at, host = excluded.host, pid = excluded.pid,
            app = excluded.app, since = excluded.since
    RETURNING l.fence INTO fence;
    -- The victim is told at COMMIT, with the notice as Notice::encode writes it:
    -- `n1 stolen <holder id in hex> <key length in bytes> <key><text>`.
    IF victim IS NOT NULL THEN
        PERFORM pg_notify(p_channel, 'n1 stolen ' || to_hex(victim) || ' '
            || octet_length(p_name)::text || ' ' || p_name || p_from);
    END IF;
    RETURN NEXT;
END
$$;
