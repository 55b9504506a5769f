-- The schema of the store's first PL/pgSQL functions, before rows recorded their holder: its
-- acquire took no holder and answered no held fence, and the table had no host, pid, app or
-- since. The suite makes it by hand to check that connect brings it up to date.
CREATE TABLE IF NOT EXISTS lock_runtime_locks (
    name       text PRIMARY KEY,
    token      text NOT NULL,
    holder     bigint NOT NULL,
    fence      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS lock_runtime_fences AS bigint;
CREATE OR REPLACE FUNCTION lock_runtime_acquire(
    p_name text, p_token text, p_holder bigint, p_ttl_ms bigint, p_space integer, p_key integer)
RETURNS TABLE (fence bigint, holder bigint, left_ms bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF NOT pg_try_advisory_xact_lock(p_space, p_key) THEN
        left_ms := -1;
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO lock_runtime_locks AS l (name, token, holder, fence, expires_at)
    VALUES (p_name, p_token, p_holder, nextval('lock_runtime_fences'),
            clock_timestamp() + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE
        SET token = excluded.token, holder = excluded.holder, fence = excluded.fence,
            expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp() OR l.token = excluded.token
    RETURNING l.fence INTO fence;
    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT NULL::bigint, l.holder,
        greatest(0, ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000))::bigint
    FROM lock_runtime_locks l WHERE l.name = p_name;
END
$$;
CREATE OR REPLACE FUNCTION lock_runtime_release(
    p_name text, p_token text, p_keep_ms bigint, p_tell_name boolean)
RETURNS TABLE (mine boolean, other boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF p_keep_ms > 0 THEN
        UPDATE lock_runtime_locks l SET token = '', holder = 0,
            expires_at = clock_timestamp() + p_keep_ms * interval '1 millisecond'
        WHERE l.name = p_name AND l.token = p_token AND l.expires_at > clock_timestamp()
        RETURNING true INTO mine;
    ELSE
        DELETE FROM lock_runtime_locks l WHERE l.name = p_name AND l.token = p_token
        RETURNING l.expires_at > clock_timestamp() INTO mine;
    END IF;
    IF FOUND THEN
        PERFORM pg_notify('lock_runtime_released', CASE WHEN p_tell_name THEN p_name ELSE '' END);
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
