#!/usr/bin/env bash
# The benchmark on several servers, one run after another, so that their tables (Redis calls and
# CPU per pair included) can be set side by side. Each report's header names its server.
#
#   bash scripts/bench-servers.sh --quick                        # redis-server, Valkey 9.0
#   bash scripts/bench-servers.sh --quick -- redis-server /path/to/valkey-server
#
# Arguments before `--` go to every lock-bench run; the binaries to start come after it. By
# default: redis-server from PATH, and Valkey 9.0 if scripts/compat.sh has cached it, as
# target/compat/valkey-9.0/bin/redis-server (LOCK_COMPAT_DIR overrides target/compat).
# `bash scripts/compat.sh valkey-9.0` fetches and caches it, then runs the compatibility suites
# on it. Each run writes target/lock-bench/<n>-<server>-<version>.{json,svg} unless --json and
# --svg say otherwise (then every run writes the same files, as with --markdown).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    args+=("$1")
    shift
done
[ $# -gt 0 ] && shift
servers=("$@")
if [ ${#servers[@]} -eq 0 ]; then
    servers=(redis-server)
    valkey=${LOCK_COMPAT_DIR:-target/compat}/valkey-9.0/bin/redis-server
    if [ -x "$valkey" ]; then
        servers+=("$valkey")
    else
        echo "bench-servers.sh: no $valkey (bash scripts/compat.sh valkey-9.0 fetches it)" >&2
    fi
fi

failed=0
n=0
for server in "${servers[@]}"; do
    n=$((n + 1))
    # "Valkey server v=9.0.0 ..." -> valkey-9.0.0
    name=$("$server" --version 2>/dev/null | awk '{ sub("v=", "", $3); print tolower($1) "-" $3 }') \
        || name=unknown
    out=target/lock-bench/$n-$name
    echo
    echo "==> run $n: $server ($name)"
    cargo run --release --quiet -p lock-bench -- --json "$out.json" --svg "$out.svg" \
        ${args[@]+"${args[@]}"} --server "$server" || failed=1
done
exit $failed
