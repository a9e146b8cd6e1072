#!/usr/bin/env bash
# Builds a profile-guided Gapura binary (PGO): an instrumented build serves
# the bench workloads for a few seconds each, and the compiler lays out the
# final build with the profile it recorded (hot paths together, branches
# ordered by how they went). Same code, same tests; only the layout differs.
#
# Usage: bench/pgo.sh [--seconds S]
#
# Output: target/pgo/release/gapura. Compare it like any build, e.g.
#   GAPURA_BIN=target/pgo/release/gapura bench/compare.py --no-build ...
#   bench/overhead.py --a-bin target/release/gapura --b-bin target/pgo/release/gapura ...
#
# Needs: cargo; llvm-profdata matching rustc's LLVM (rustup's llvm-tools
# component, installed here when missing, or $LLVM_PROFDATA); taskset. The
# training traffic stays on 127.0.0.1: one Gapura answering as the upstream
# (the plain release build), the instrumented one in front of it, and
# gapura-loadtest, each run bounded in time.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PEERS=$SCRIPT_DIR/peers
SECONDS_PER_RUN=3

while [[ $# -gt 0 ]]; do
    case $1 in
        --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "pgo.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $SECONDS_PER_RUN =~ ^[1-9][0-9]*$ ]] || { echo "pgo.sh: --seconds takes a whole number of seconds" >&2; exit 2; }

cd "$REPO_ROOT"
GEN_DIR=$REPO_ROOT/target/pgo-gen
USE_DIR=$REPO_ROOT/target/pgo
DATA=$REPO_ROOT/target/pgo-data
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

profdata() {
    if [[ -n ${LLVM_PROFDATA:-} ]]; then
        echo "$LLVM_PROFDATA"
        return
    fi
    local sysroot host tool
    sysroot=$(rustc --print sysroot)
    host=$(rustc -vV | sed -n 's/^host: //p')
    tool=$sysroot/lib/rustlib/$host/bin/llvm-profdata
    if [[ ! -x $tool ]]; then
        rustup component add llvm-tools >&2 || true
    fi
    [[ -x $tool ]] || { echo "pgo.sh: no llvm-profdata at $tool (install rustup's llvm-tools or set LLVM_PROFDATA)" >&2; exit 1; }
    echo "$tool"
}
PROFDATA=$(profdata)

free_port() {
    python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# Cores: the server under training on one, the rest on another when there is one.
if [[ $(nproc) -ge 2 ]]; then SERVER_CORE=0; LOAD_CORE=1; else SERVER_CORE=0; LOAD_CORE=0; fi

echo "== plain build (upstream and load generator)"
cargo build --release -p gapura -p gapura-loadtest
PLAIN=$REPO_ROOT/target/release/gapura
LOADTEST=$REPO_ROOT/target/release/gapura-loadtest

echo "== instrumented build"
rm -rf "$DATA"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$DATA" \
    cargo build --release -p gapura --target-dir "$GEN_DIR"

render() { # template port admin upstream -> file
    sed -e "s/@PORT@/$2/" -e "s/@ADMIN_PORT@/$3/" -e "s/@UPSTREAM_PORT@/$4/" "$PEERS/$1.toml.in" >"$WORK/$1.toml"
    echo "$WORK/$1.toml"
}

start() { # core binary profile log -> pid in $STARTED
    taskset -c "$1" "$2" run --profile "$3" >"$4" 2>&1 &
    STARTED=$!
    PIDS+=("$STARTED")
}

wait_port() {
    for _ in $(seq 100); do
        if python3 -c "import socket,sys;socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "pgo.sh: nothing listens on 127.0.0.1:$1 (see $WORK)" >&2
    exit 1
}

stop() { # pid: a graceful stop, so the instrumented process writes its profile
    local pid=$1 p
    kill -TERM "$pid" 2>/dev/null || true
    # Drained within seconds; one that is not is killed (its profile is lost).
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    # Reaped: never signalled again, its number may be reused.
    local rest=()
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || rest+=("$p"); done
    PIDS=("${rest[@]+"${rest[@]}"}")
}

CHROME="Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
BOT="Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)"
# Paths that pass, one the rule set refuses, robots.txt: rotated per request.
PATHS=(/products/item-42?x=1 / /static/js/app.3f2a9c.js /api/v1/users/42/orders?page=2 /wp-login.php /robots.txt)

load() { # seconds port connections user-agent paths...
    local seconds=$1 port=$2 conns=$3 ua=$4
    shift 4
    local first=$1
    shift
    taskset -c "$LOAD_CORE" "$LOADTEST" -t1 -c"$conns" -d"${seconds}s" --no-progress -q \
        -H "Host: app.test" -H "User-Agent: $ua" -H "X-Forwarded-For: 203.0.113.7" \
        --json "$WORK/load.json" "http://127.0.0.1:$port$first" "$@"
    python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
print("     %d requests, statuses %s" % (r["summary"]["requests"], r.get("status_counts", {})))' "$WORK/load.json"
}

UP_PORT=$(free_port)
up_conf=$(render gapura-respond "$UP_PORT" "$(free_port)" 1)
start "$LOAD_CORE" "$PLAIN" "$up_conf" "$WORK/upstream.log"
UP_PID=$STARTED
wait_port "$UP_PORT"

echo "== training: ${SECONDS_PER_RUN} s per run"
for template in gapura-respond gapura-respond-gate gapura-proxy gapura-proxy-gate; do
    for conns in 64 256; do
        port=$(free_port)
        conf=$(render "$template" "$port" "$(free_port)" "$UP_PORT")
        start "$SERVER_CORE" "$GEN_DIR/release/gapura" "$conf" "$WORK/$template.log"
        pid=$STARTED
        wait_port "$port"
        echo "   $template, $conns connections"
        load "$SECONDS_PER_RUN" "$port" "$conns" "$CHROME" "${PATHS[@]}"
        if [[ $template == *-gate && $conns == 64 ]]; then
            # One second: a refusal is cheap, so a run as long as the others
            # would outweigh them in the profile.
            echo "   $template, a refused user agent"
            load 1 "$port" "$conns" "$BOT" /
        fi
        stop "$pid"
    done
done
stop "$UP_PID"

shopt -s nullglob
raw=("$DATA"/*.profraw)
[[ ${#raw[@]} -gt 0 ]] || { echo "pgo.sh: the instrumented runs wrote no profile" >&2; exit 1; }
"$PROFDATA" merge -o "$DATA/merged.profdata" "${raw[@]}"

echo "== optimized build"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$DATA/merged.profdata" \
    cargo build --release -p gapura --target-dir "$USE_DIR"
echo "profile-guided binary: $USE_DIR/release/gapura"
