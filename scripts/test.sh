#!/usr/bin/env bash
# Runs the whole test suite. The integration tests start their own servers on free loopback
# ports: redis-server, PostgreSQL (initdb in a temp dir) and PgBouncer. So this installs
# redis-server (and redis-cli), Debian's postgresql and pgbouncer when missing; a system Redis on
# 6379, a system PostgreSQL cluster on 5432 or a system PgBouncer on 6432 is neither needed, nor
# created, nor started, nor touched. Extra arguments go to `cargo test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

sudo=""
apt_updated=""
created_policy=""

# Sets $sudo for apt-get, or fails naming the command to run by hand. $1: what is missing,
# $2: the command.
need_root() {
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "$1 is missing and installing it needs root or sudo:" >&2
        echo "  $2" >&2
        exit 1
    fi
}

# apt-get install -y "$@", after one apt-get update per run.
apt_install() {
    if [ -z "$apt_updated" ]; then
        echo "+ ${sudo:+$sudo }apt-get update"
        $sudo apt-get update
        apt_updated=1
    fi
    echo "+ ${sudo:+$sudo }apt-get install -y $*"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

# Debian's packages start their service on install (the postgresql package also creates a
# cluster `main` on 5432 first): a policy-rc.d that answers 101 ("action forbidden") makes
# invoke-rc.d and deb-systemd-invoke skip every start while this script installs. One that was
# already there (as in many container images) is kept; the one made here is removed on exit.
forbid_service_starts() {
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# scripts/test.sh: no service starts while it installs packages\nexit 101\n' \
            | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
        trap 'if [ -n "$created_policy" ]; then $sudo rm -f /usr/sbin/policy-rc.d; fi' EXIT
    fi
}

# The newest /usr/lib/postgresql/<major>/bin with initdb and postgres, or LOCK_TESTS_PG_BIN, or
# the directory of postgres on PATH: where the harness looks, in its order.
pg_bin_dir() {
    if [ -n "${LOCK_TESTS_PG_BIN:-}" ]; then
        echo "$LOCK_TESTS_PG_BIN"
        return
    fi
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
            echo "$dir"
            return
        fi
    done
    if command -v postgres >/dev/null 2>&1; then
        dirname "$(command -v postgres)"
    fi
}

pgbouncer_binary() {
    if [ -n "${LOCK_TESTS_PGBOUNCER:-}" ]; then
        echo "$LOCK_TESTS_PGBOUNCER"
    elif command -v pgbouncer >/dev/null 2>&1; then
        command -v pgbouncer
    elif [ -x /usr/sbin/pgbouncer ]; then
        echo /usr/sbin/pgbouncer
    fi
}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
    || ! command -v redis-benchmark >/dev/null 2>&1; then
    need_root redis-server "apt-get install -y redis-server redis-tools"
    echo "test.sh: redis-server, redis-cli or redis-benchmark missing; installing redis-server and redis-tools"
    forbid_service_starts
    apt_install redis-server redis-tools
    if ! command -v redis-server >/dev/null 2>&1; then
        echo "redis-server is still not on PATH after installing it" >&2
        exit 1
    fi
fi

pg_bin=$(pg_bin_dir)
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/psql" ] || [ ! -x "$pg_bin/pg_basebackup" ]; then
    need_root "PostgreSQL (initdb, postgres, psql, pg_basebackup)" "apt-get install -y postgresql"
    echo "test.sh: PostgreSQL server binaries missing; installing postgresql without a cluster"
    forbid_service_starts
    # postgresql-common owns createcluster.conf: installed first, it is told not to create the
    # cluster `main` that installing a server version would otherwise create on port 5432.
    apt_install postgresql-common
    conf=/etc/postgresql-common/createcluster.conf
    if grep -Eq '^[#[:space:]]*create_main_cluster' "$conf"; then
        $sudo sed -Ei 's/^[#[:space:]]*create_main_cluster.*/create_main_cluster = false/' "$conf"
    else
        echo "create_main_cluster = false" | $sudo tee -a "$conf" >/dev/null
    fi
    apt_install postgresql postgresql-client
    pg_bin=$(pg_bin_dir)
    if [ -z "$pg_bin" ]; then
        echo "initdb and postgres are still not found after installing postgresql" >&2
        exit 1
    fi
fi

if [ -z "$(pgbouncer_binary)" ]; then
    need_root pgbouncer "apt-get install -y pgbouncer"
    echo "test.sh: pgbouncer missing; installing it without starting its service"
    forbid_service_starts
    apt_install pgbouncer
    if [ -z "$(pgbouncer_binary)" ]; then
        echo "pgbouncer is still not found after installing it" >&2
        exit 1
    fi
fi

if [ -n "$created_policy" ]; then
    $sudo rm -f /usr/sbin/policy-rc.d
    created_policy=""
fi

echo "test.sh: using $(redis-server --version)"
echo "test.sh: using $("$pg_bin/postgres" --version) from $pg_bin"
echo "test.sh: using $("$(pgbouncer_binary)" --version | head -n 1) ($(pgbouncer_binary))"
echo "test.sh: tests start their own servers on free ports; no system Redis on 6379, PostgreSQL on 5432 or PgBouncer on 6432 is used"
echo "+ cargo test --workspace $*"
exec cargo test --workspace "$@"
