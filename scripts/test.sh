#!/usr/bin/env bash
# Runs the whole test suite. The integration tests start their own redis-server processes on free
# loopback ports, so this installs redis-server (and redis-cli) when missing; a system Redis on
# port 6379 is neither needed nor touched. Extra arguments go to `cargo test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
    || ! command -v redis-benchmark >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "redis-server is missing and installing it needs root or sudo:" >&2
        echo "  apt-get install -y redis-server redis-tools" >&2
        exit 1
    fi
    echo "test.sh: redis-server, redis-cli or redis-benchmark missing; installing redis-server and redis-tools"
    echo "+ ${sudo:+$sudo }apt-get update"
    $sudo apt-get update
    echo "+ ${sudo:+$sudo }apt-get install -y redis-server redis-tools"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools
    if ! command -v redis-server >/dev/null 2>&1; then
        echo "redis-server is still not on PATH after installing it" >&2
        exit 1
    fi
fi

echo "test.sh: using $(redis-server --version)"
echo "test.sh: tests start their own servers on free ports; no system Redis on 6379 is used"
echo "+ cargo test --workspace $*"
exec cargo test --workspace "$@"
