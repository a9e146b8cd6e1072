#!/usr/bin/env bash
# Compares gapura-loadtest with wrk as load generators, in one run, on the
# layout of DESIGN §3/§11: nginx (one worker, `return 200`) pinned to core 0,
# each generator pinned to core 1 in turn. Generators are ranked by their own
# CPU time (user + system, from getrusage of the child) per request that the
# server counted (nginx stub_status), and by requests per second.
#
# Usage: loadtest/bench/compare-wrk.sh            (10 s per run)
#        DURATION=5s CONNS=64 DEPTH=16 loadtest/bench/compare-wrk.sh
# Needs: nginx, wrk, python3, taskset (apt-get install -y nginx wrk).
set -euo pipefail

DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
DEPTH=${DEPTH:-16}
PORT=${PORT:-18090}
SERVER_CORE=${SERVER_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/target/release/gapura-loadtest}

for tool in nginx wrk python3 taskset; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y nginx wrk)" >&2; exit 2; }
done
if [ ! -x "$BIN" ]; then
    (cd "$ROOT" && cargo build --release -p gapura-loadtest)
fi

WORK=$(mktemp -d)
NGINX_PID=
cleanup() {
    if [ -n "$NGINX_PID" ]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

mask=$(printf '%x' $((1 << SERVER_CORE)))
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(bin(0x$mask)[2:])");
daemon off;
master_process on;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 8192; }
http {
    access_log off;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$PORT reuseport;
        location = /status { stub_status; }
        location / { return 200 "ok\n"; }
    }
}
CONF
cat > "$WORK/pipeline.lua" <<'LUA'
init = function(args)
    local depth = tonumber(args[1]) or 1
    local r = {}
    for i = 1, depth do r[i] = wrk.format() end
    req = table.concat(r)
end
request = function() return req end
LUA

nginx -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 50); do
    curl_ok=$(python3 - "$PORT" <<'PY' 2>/dev/null || true
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2)
print("up")
PY
)
    [ "$curl_ok" = up ] && break
    sleep 0.1
done

# Runs one generator pinned to LOAD_CORE; prints: label req/s cpu_us_per_req server_requests
measure() {
    local label=$1; shift
    python3 - "$PORT" "$LOAD_CORE" "$label" "$@" <<'PY'
import resource, socket, subprocess, sys, time

port, core, label, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]

def served():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    lines = data.decode().split("\r\n\r\n", 1)[1].splitlines()
    return int(lines[2].split()[2])

before = served() + 1
t0 = time.monotonic()
out = subprocess.run(["taskset", "-c", core] + cmd, capture_output=True, text=True)
wall = time.monotonic() - t0
after = served()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ru.ru_utime + ru.ru_stime
n = after - before
print(f"{label:<34} {n / wall:>12.0f} {cpu * 1e6 / max(n, 1):>10.2f} {n:>12} {cpu:>8.2f}")
if out.returncode != 0:
    print(out.stdout, out.stderr, file=sys.stderr)
PY
}

printf '%-34s %12s %10s %12s %8s\n' generator "req/s" "cpu_us/req" "served" "cpu_s"
measure "gapura-loadtest -t1 -c$CONNS" "$BIN" -t1 -c"$CONNS" -d"$DURATION" -q --no-progress "http://127.0.0.1:$PORT/"
measure "wrk -t1 -c$CONNS" wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PORT/"
measure "gapura-loadtest --pipeline $DEPTH" "$BIN" -t1 -c"$CONNS" -d"$DURATION" --pipeline "$DEPTH" -q --no-progress "http://127.0.0.1:$PORT/"
measure "wrk pipeline.lua $DEPTH" wrk -t1 -c"$CONNS" -d"$DURATION" -s "$WORK/pipeline.lua" "http://127.0.0.1:$PORT/" -- "$DEPTH"
