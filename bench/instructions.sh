#!/usr/bin/env bash
# Counts the user-space instructions a server spends per request on the
# pipelined respond path: the server runs under valgrind's callgrind on
# core 0, wrk drives it from core 1 (64 connections, batches of 16 GETs,
# bench/peers/wrk-pipeline.lua), the counters are zeroed after a warm-up
# and dumped after the measured run, and their total over the responses
# wrk counted is the figure. Deterministic where timings are not (the
# kernel's share is not in it): it is how a change to the per-request
# path is judged before a timed comparison.
#
# Usage: bench/instructions.sh [--seconds S] [--proxy] SERVER...
#   SERVER: gapura | gapura-protected | floor | a path to a gapura binary,
#   optionally with :protected (e.g. /tmp/gapura-old:protected)
#   --proxy: the proxy path instead (gapura builds only): every request
#   forwarded to an upstream nginx on core 1 over pooled connections
#   (peers/gapura-proxy.toml.in), wrk with 64 keep-alive connections and
#   no pipelining; the figure is per proxied response
#
# Prints one line per server: responses, instructions, instructions per
# response. Needs valgrind (callgrind_control) and wrk; builds nothing
# (target/release/gapura and target/release/floor-proxy must exist).
# Everything stays on 127.0.0.1 and each run is bounded in time.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
SECONDS_RUN=6
SERVERS=()
PROXY=
UP_PID=
while [[ $# -gt 0 ]]; do
    case $1 in
        --seconds) SECONDS_RUN=$2; shift 2 ;;
        --proxy) PROXY=1; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) SERVERS+=("$1"); shift ;;
    esac
done
[[ ${#SERVERS[@]} -gt 0 ]] || { echo "instructions.sh: name at least one server" >&2; exit 2; }
[[ $SECONDS_RUN =~ ^[1-9][0-9]*$ ]] || { echo "instructions.sh: --seconds takes a whole number" >&2; exit 2; }
for tool in valgrind callgrind_control callgrind_annotate wrk taskset; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is missing" >&2; exit 2; }
done

WORK=$(mktemp -d)
VG_PID=
cleanup() {
    [[ -n $VG_PID ]] && kill -9 "$VG_PID" 2>/dev/null || true
    [[ -n $UP_PID ]] && kill "$UP_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    for _ in $(seq 150); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.2
    done
    echo "instructions.sh: nothing listens on $1" >&2
    return 1
}

# The proxy path's upstream: nginx, one worker on core 1, keep-alive.
UP_PORT=
start_upstream() {
    command -v nginx >/dev/null || { echo "instructions.sh: nginx is missing" >&2; exit 2; }
    UP_PORT=$(free_port)
    printf '%s\n' 'worker_processes 1;' 'daemon off;' "pid $WORK/upstream.pid;" \
        "error_log $WORK/upstream-error.log;" 'events { worker_connections 4096; }' \
        'http { access_log off; keepalive_requests 1000000;' \
        "  server { listen 127.0.0.1:$UP_PORT; location / { return 200 \"hello\\n\"; } } }" \
        > "$WORK/upstream.conf"
    taskset -c 1 nginx -c "$WORK/upstream.conf" -p "$WORK" > /dev/null 2>&1 &
    UP_PID=$!
    wait_port "$UP_PORT"
}

run_one() {
    local name=$1 port admin bin profile cmd out
    port=$(free_port)
    admin=$(free_port)
    case $name in
        floor)
            cmd=("$REPO_ROOT/target/release/floor-proxy" --listen "$port" --engine monoio --respond) ;;
        *)
            bin=$REPO_ROOT/target/release/gapura
            profile=gapura-respond
            case $name in
                gapura) ;;
                gapura-protected) profile=gapura-respond-protected ;;
                *:protected) bin=${name%:protected}; profile=gapura-respond-protected ;;
                *) bin=$name ;;
            esac
            [[ -n $PROXY ]] && profile=gapura-proxy
            sed -e "s/@PORT@/$port/; s/@ADMIN_PORT@/$admin/; s/@UPSTREAM_PORT@/$UP_PORT/" \
                "$SCRIPT_DIR/peers/$profile.toml.in" > "$WORK/profile.toml"
            cmd=("$bin" run --allow-root --profile "$WORK/profile.toml") ;;
    esac
    out=$WORK/callgrind.out
    rm -f "$out"*
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out" "${cmd[@]}" \
        > "$WORK/server.log" 2>&1 &
    VG_PID=$!
    wait_port "$port"
    local url=http://127.0.0.1:$port/ lua=$SCRIPT_DIR/peers/wrk-pipeline.lua
    local shape=(-s "$lua" "$url" -- 16)
    [[ -n $PROXY ]] && shape=("$url")
    taskset -c 1 wrk -t1 -c64 -d2s "${shape[@]}" > /dev/null
    callgrind_control -z "$VG_PID" > /dev/null 2>&1
    taskset -c 1 wrk -t1 -c64 -d"${SECONDS_RUN}s" "${shape[@]}" > "$WORK/wrk.txt"
    callgrind_control -d "$VG_PID" > /dev/null 2>&1
    sleep 1
    kill -9 "$VG_PID" 2>/dev/null || true
    wait "$VG_PID" 2>/dev/null || true
    VG_PID=
    local responses dump total
    responses=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    dump=$(ls -S "$out".* | head -1)
    total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    python3 -c "import sys; n,t=int(sys.argv[2]),int(sys.argv[3]); print(f'{sys.argv[1]}: {n} responses, {t} instructions, {t/n:.0f} per response')" \
        "$name" "$responses" "$total"
}

if [[ -n $PROXY ]]; then
    for s in "${SERVERS[@]}"; do
        [[ $s == floor ]] && { echo "instructions.sh: --proxy measures gapura builds only" >&2; exit 2; }
    done
    start_upstream
fi
for s in "${SERVERS[@]}"; do
    run_one "$s"
done
