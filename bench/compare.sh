#!/usr/bin/env bash
# Side-by-side comparison of Gapura, nginx and HAProxy (DESIGN §11).
#
# Every server gives the same answer (200, text/plain, "hello, world\n"), runs
# with one worker pinned to one core, and is loaded by `wrk -t1` pinned to
# another core. Per run the script records wrk's requests/s, p50/p99 latency
# and errors, and the server's CPU time (user + system over its whole process
# tree, from /proc) across the measured window, so servers are ranked by CPU
# per request measured in the same run. See bench/README.md.
#
# Usage: bench/compare.sh [--servers LIST] [--scenarios LIST] [--duration S]
#                         [--warmup S] [--quick] [--no-build] [--help]
set -euo pipefail

PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PEERS=$SCRIPT_DIR/peers
COMMAND_LINE=
for arg in "$0" "$@"; do # shell-quoted only where the word needs it
    [[ $arg =~ ^[A-Za-z0-9_./,=:@%+-]+$ ]] || arg=$(printf '%q' "$arg")
    COMMAND_LINE+="${COMMAND_LINE:+ }$arg"
done

# ---------------------------------------------------------------- scenarios --
# name -> "kind connections pipeline-depth". kind `respond`: the server under
# test answers itself; kind `proxy`: it forwards to an upstream nginx that
# answers. Adding a scenario is one line here (and one in SCENARIO_ORDER).
declare -A SCENARIO_SPEC=(
    [respond-c64]="respond 64 1"
    [respond-c256]="respond 256 1"
    [pipelined16]="respond 64 16"
    [proxy-c64]="proxy 64 1"
    [proxy-c256]="proxy 256 1"
)
declare -A SCENARIO_TEXT=(
    [respond-c64]="fixed 200 answered by the server itself, 64 keep-alive connections, one request in flight per connection"
    [respond-c256]="fixed 200 answered by the server itself, 256 keep-alive connections, one request in flight per connection"
    [pipelined16]="fixed 200 answered by the server itself, 64 keep-alive connections, 16 pipelined requests per write; latency is per batch (from writing the 16 requests to reading the 16th response)"
    [proxy-c64]="the server forwards to an upstream nginx (on the load core) that answers the fixed 200, 64 keep-alive connections"
    [proxy-c256]="the server forwards to an upstream nginx (on the load core) that answers the fixed 200, 256 keep-alive connections"
)
SCENARIO_ORDER=(respond-c64 respond-c256 pipelined16 proxy-c64 proxy-c256)
KNOWN_SERVERS=(gapura nginx haproxy)

# ----------------------------------------------------------------- defaults --
SERVERS=gapura,nginx,haproxy
SCENARIOS=respond-c64,respond-c256,pipelined16
DURATION=10
WARMUP=2
BUILD=1
SERVER_CORE=0
LOAD_CORE=1
PORT_BASE=18080
PORT_LAST=18999
RESULTS_DIR=$SCRIPT_DIR/results

usage() {
    cat <<EOF
Usage: bench/compare.sh [options]

Compares Gapura, nginx and HAProxy on the same answer, each with one worker
pinned to core $SERVER_CORE, loaded by wrk -t1 pinned to core $LOAD_CORE.

Options:
  --servers LIST     comma-separated subset of: ${KNOWN_SERVERS[*]} (default: $SERVERS)
  --scenarios LIST   comma-separated subset of: ${SCENARIO_ORDER[*]}, or "all"
                     (default: $SCENARIOS; the proxy scenarios are opt-in)
  --duration S       measured seconds per run (default: $DURATION)
  --warmup S         warm-up seconds per run before measuring (default: $WARMUP; 0 skips)
  --quick            smoke check: --duration 3 --warmup 1
  --no-build         do not run cargo; use \$GAPURA_BIN or target/release/gapura
  --server-core N    core the server under test is pinned to (default: $SERVER_CORE)
  --load-core N      core wrk (and the proxy upstream) is pinned to (default: $LOAD_CORE)
  --port-base N      first loopback port to try (default: $PORT_BASE; up to $PORT_LAST)
  --results-dir DIR  where the report goes (default: bench/results)
  -h, --help         this text

Environment:
  GAPURA_BIN         Gapura binary to use; set, it also skips the build

The report (markdown) goes to stdout and to DIR/compare-YYYYmmdd-HHMMSS.md, with
wrk's raw output and server logs in the .log file beside it.
EOF
}

die() {
    echo "compare.sh: $*" >&2
    exit 1
}
say() { echo "compare.sh: $*" >&2; }

need_value() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }

while [[ $# -gt 0 ]]; do
    case $1 in
    --servers) need_value "$@"; SERVERS=$2; shift 2 ;;
    --servers=*) SERVERS=${1#*=}; shift ;;
    --scenarios) need_value "$@"; SCENARIOS=$2; shift 2 ;;
    --scenarios=*) SCENARIOS=${1#*=}; shift ;;
    --duration) need_value "$@"; DURATION=$2; shift 2 ;;
    --duration=*) DURATION=${1#*=}; shift ;;
    --warmup) need_value "$@"; WARMUP=$2; shift 2 ;;
    --warmup=*) WARMUP=${1#*=}; shift ;;
    --quick) DURATION=3; WARMUP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --server-core) need_value "$@"; SERVER_CORE=$2; shift 2 ;;
    --server-core=*) SERVER_CORE=${1#*=}; shift ;;
    --load-core) need_value "$@"; LOAD_CORE=$2; shift 2 ;;
    --load-core=*) LOAD_CORE=${1#*=}; shift ;;
    --port-base) need_value "$@"; PORT_BASE=$2; shift 2 ;;
    --port-base=*) PORT_BASE=${1#*=}; shift ;;
    --results-dir) need_value "$@"; RESULTS_DIR=$2; shift 2 ;;
    --results-dir=*) RESULTS_DIR=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_uint "$DURATION" || die "--duration must be a whole number of seconds"
((DURATION > 0)) || die "--duration must be at least 1 s"
is_uint "$WARMUP" || die "--warmup must be a whole number of seconds"
is_uint "$SERVER_CORE" || die "--server-core must be a core number"
is_uint "$LOAD_CORE" || die "--load-core must be a core number"
((SERVER_CORE != LOAD_CORE)) || die "--server-core and --load-core must differ"
is_uint "$PORT_BASE" || die "--port-base must be a port number"
((PORT_BASE >= 1024 && PORT_BASE <= PORT_LAST)) || die "--port-base must be in 1024..$PORT_LAST"

SEL_SERVERS=()
IFS=, read -r -a requested <<<"$SERVERS"
for s in "${requested[@]}"; do
    [[ -n $s ]] || continue
    [[ " ${KNOWN_SERVERS[*]} " == *" $s "* ]] || die "unknown server '$s' (known: ${KNOWN_SERVERS[*]})"
    [[ " ${SEL_SERVERS[*]-} " == *" $s "* ]] || SEL_SERVERS+=("$s")
done
((${#SEL_SERVERS[@]})) || die "--servers selects nothing"

SEL_SCENARIOS=()
[[ $SCENARIOS == all ]] && SCENARIOS=$(IFS=,; echo "${SCENARIO_ORDER[*]}")
IFS=, read -r -a requested <<<"$SCENARIOS"
for s in "${requested[@]}"; do
    [[ -n $s ]] || continue
    [[ -n ${SCENARIO_SPEC[$s]+x} ]] || die "unknown scenario '$s' (known: ${SCENARIO_ORDER[*]})"
    [[ " ${SEL_SCENARIOS[*]-} " == *" $s "* ]] || SEL_SCENARIOS+=("$s")
done
((${#SEL_SCENARIOS[@]})) || die "--scenarios selects nothing"

selected_server() { [[ " ${SEL_SERVERS[*]} " == *" $1 "* ]]; }
any_proxy_scenario() {
    local s
    for s in "${SEL_SCENARIOS[@]}"; do
        [[ ${SCENARIO_SPEC[$s]%% *} == proxy ]] && return 0
    done
    return 1
}

cores=$(nproc)
((SERVER_CORE < cores && LOAD_CORE < cores)) || die "this machine has $cores cores; pick --server-core/--load-core below that"

# -------------------------------------------------------------------- tools --
# Debian package for each command the script runs.
declare -A PACKAGE_OF=([nginx]=nginx [haproxy]=haproxy [wrk]=wrk [curl]=curl
    [taskset]=util-linux [pgrep]=procps [ss]=iproute2)

ensure_tools() {
    local missing=() t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || missing+=("${PACKAGE_OF[$t]}")
    done
    ((${#missing[@]})) || return 0
    [[ $(id -u) -eq 0 ]] || die "missing packages: ${missing[*]} (run as root, or: apt-get install -y ${missing[*]})"
    say "installing from Debian's packages: ${missing[*]}"
    apt-get update && apt-get install -y "${missing[@]}"
}

tools=(wrk curl taskset pgrep)
selected_server nginx || any_proxy_scenario && tools+=(nginx)
selected_server haproxy && tools+=(haproxy)
ensure_tools "${tools[@]}"

# ------------------------------------------------------------------- gapura --
GAPURA_BIN=${GAPURA_BIN:-}
if selected_server gapura; then
    if [[ -z $GAPURA_BIN ]]; then
        target_dir=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
        if ((BUILD)); then
            say "building: cargo build --release -p gapura"
            (cd "$REPO_ROOT" && cargo build --release -p gapura)
        fi
        GAPURA_BIN=$target_dir/release/gapura
    fi
    [[ -x $GAPURA_BIN ]] || die "no Gapura binary at $GAPURA_BIN (build it, set GAPURA_BIN, or leave gapura out of --servers)"
fi

# ----------------------------------------------------- processes and cleanup --
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gapura-compare.XXXXXX")
TRACKED=() # pids of every background process this script started and has not stopped

is_running() { # is_running PID: alive and not a zombie
    local line
    line=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    line=${line##*) }
    [[ ${line:0:1} != Z ]]
}

descendants() { # prints every descendant pid of $1, depth first
    local child
    for child in $(pgrep -P "$1" 2>/dev/null || true); do
        echo "$child"
        descendants "$child"
    done
}

untrack() {
    local keep=() p
    for p in "${TRACKED[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    TRACKED=("${keep[@]}")
}

stop_tree() { # stop_tree PID: TERM the process, wait up to 10 s, KILL what is left of its tree
    local pid=$1 tree=() p i alive
    # Only ever signal a process this script started and still tracks.
    [[ -n $pid && " ${TRACKED[*]-} " == *" $pid "* ]] || return 0
    if is_running "$pid"; then
        mapfile -t tree < <(descendants "$pid")
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            alive=0
            for p in "$pid" "${tree[@]}"; do is_running "$p" && alive=1; done
            ((alive)) || break
            sleep 0.1
        done
        for p in "$pid" "${tree[@]}"; do
            if is_running "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
        done
    fi
    wait "$pid" 2>/dev/null || true
    untrack "$pid"
}

cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    for ((i = ${#TRACKED[@]} - 1; i >= 0; i--)); do stop_tree "${TRACKED[i]}"; done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Allow enough descriptors for 256 client connections plus upstream ones.
ulimit -n 20000 2>/dev/null || {
    hard=$(ulimit -Hn)
    [[ $hard == unlimited ]] || ulimit -n "$hard" 2>/dev/null || true
}
NOFILE=$(ulimit -n)

# -------------------------------------------------------------------- ports --
PORT_CURSOR=$PORT_BASE

port_in_use() {
    if command -v ss >/dev/null 2>&1 && [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; then
        return 0
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

next_port() { # sets REPLY to a loopback port nobody listens on; never hands out one twice
    while ((PORT_CURSOR <= PORT_LAST)); do
        REPLY=$PORT_CURSOR
        PORT_CURSOR=$((PORT_CURSOR + 1))
        port_in_use "$REPLY" || return 0
    done
    die "no free port left in $PORT_BASE..$PORT_LAST"
}

wait_port() { # wait_port PORT PID: up to 10 s for PORT to accept while PID lives
    local i
    for ((i = 0; i < 200; i++)); do
        is_running "$2" || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# ------------------------------------------------------------------ servers --
render() { # render TEMPLATE OUT KEY=VALUE...: replaces every @KEY@
    local tpl=$1 out=$2 kv args=()
    shift 2
    for kv in "$@"; do args+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
    sed "${args[@]}" "$tpl" >"$out"
    ! grep -q '@[A-Z_]*@' "$out" || die "placeholder left unrendered in $out"
}

gapura_check() { # gapura_check PROFILE: 0 when `gapura check` accepts it
    "$GAPURA_BIN" check "$1" >"$1.check" 2>&1
}

FAIL_REASON=
SERVER_PID=

# start_server NAME KIND DIR CORE PORT ADMIN_PORT UPSTREAM_PORT
# Starts NAME (gapura|nginx|haproxy) in its KIND (respond|proxy) configuration,
# pinned to CORE, and waits until PORT accepts. Sets SERVER_PID, or
# FAIL_REASON and returns 1.
start_server() {
    local name=$1 kind=$2 dir=$3 core=$4 port=$5 admin=$6 upstream=$7 conf pid
    local vars=(PREFIX="$dir" PORT="$port" ADMIN_PORT="$admin" UPSTREAM_PORT="$upstream")
    mkdir -p "$dir"
    case $name in
    nginx)
        conf=$dir/nginx.conf
        render "$PEERS/nginx-$kind.conf.in" "$conf" "${vars[@]}"
        taskset -c "$core" nginx -p "$dir/" -c "$conf" -e "$dir/error.log" >"$dir/server.log" 2>&1 &
        pid=$!
        ;;
    haproxy)
        conf=$dir/haproxy.cfg
        render "$PEERS/haproxy-$kind.cfg.in" "$conf" "${vars[@]}"
        taskset -c "$core" haproxy -db -f "$conf" >"$dir/server.log" 2>&1 &
        pid=$!
        ;;
    gapura)
        conf=$dir/gapura.toml
        render "$PEERS/gapura-$kind.toml.in" "$conf" "${vars[@]}"
        if ! gapura_check "$conf"; then
            FAIL_REASON="skipped: \`gapura check\` rejects the $kind profile"
            sed 's/^/    /' "$conf.check" >&2
            return 1
        fi
        taskset -c "$core" "$GAPURA_BIN" run --profile "$conf" >"$dir/server.log" 2>&1 &
        pid=$!
        ;;
    esac
    TRACKED+=("$pid")
    SERVER_PID=$pid
    if ! wait_port "$port" "$pid"; then
        FAIL_REASON="failed: $name did not accept connections on port $port"
        tail -n 20 "$dir/server.log" "$dir/error.log" 2>/dev/null | sed 's/^/    /' >&2 || true
        return 1
    fi
}

# check_answer PORT: one request; the answer must be 200, text/plain, "hello, world\n".
ANSWER_BYTES=
check_answer() {
    local hdr=$WORK/answer.hdr body=$WORK/answer.body code
    rm -f "$hdr" "$body"
    if ! code=$(curl -sS --max-time 5 -o "$body" -D "$hdr" -w '%{http_code}' "http://127.0.0.1:$1/" 2>"$WORK/answer.err"); then
        FAIL_REASON="failed: request to the server failed ($(head -c 200 "$WORK/answer.err"))"
        return 1
    fi
    if [[ $code != 200 ]]; then
        FAIL_REASON="failed: answered status $code instead of 200"
        return 1
    fi
    if ! tr -d '\r' <"$hdr" | grep -qi '^content-type: text/plain'; then
        FAIL_REASON="failed: answered without Content-Type text/plain"
        return 1
    fi
    if ! cmp -s "$body" "$WORK/expected.body"; then
        FAIL_REASON="failed: body differs from \"hello, world\\n\""
        return 1
    fi
    ANSWER_BYTES=$(($(wc -c <"$hdr") + $(wc -c <"$body")))
}

# ------------------------------------------------------------- measurement --
CLK_TCK=$(getconf CLK_TCK)

# tree_cpu PID: "USER SYS" clock ticks used so far by PID (all its threads, and
# children it has reaped) and every live descendant (nginx's worker).
tree_cpu() {
    local p line f user=0 sys=0
    for p in "$1" $(descendants "$1"); do
        line=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        line=${line##*) }
        read -r -a f <<<"$line"
        # f[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17.
        user=$((user + f[11] + f[13]))
        sys=$((sys + f[12] + f[14]))
    done
    echo "$user $sys"
}

printf 'hello, world\n' >"$WORK/expected.body"
cp "$PEERS/wrk-report.lua" "$WORK/wrk-respond.lua"
cat "$PEERS/wrk-pipeline.lua" "$PEERS/wrk-report.lua" >"$WORK/wrk-pipeline.lua"

wrk_args() { # wrk_args CONNS DEPTH SECONDS PORT: sets WRK_ARGS
    local script=$WORK/wrk-respond.lua
    (($2 > 1)) && script=$WORK/wrk-pipeline.lua
    WRK_ARGS=(taskset -c "$LOAD_CORE" wrk -t1 -c"$1" -d"$3s" --latency -s "$script" "http://127.0.0.1:$4/")
    (($2 > 1)) && WRK_ARGS+=(-- "$2")
    return 0
}

run_wrk() { # run_wrk OUTFILE ARGS...: runs wrk in the background so cleanup can stop it
    local out=$1 pid rc=0
    shift
    "$@" >"$out" 2>&1 &
    pid=$!
    TRACKED+=("$pid")
    wait "$pid" || rc=$?
    untrack "$pid"
    return "$rc"
}

declare -A RES # "scenario|server|field" -> value
LOG_FILE= # raw log beside the report

log_section() { # log_section TITLE FILE...
    local title=$1 f
    shift
    {
        echo "===== $title"
        for f in "$@"; do
            [[ -s $f ]] || continue
            echo "--- $(basename "$f")"
            cat "$f"
        done
    } >>"$LOG_FILE"
}

# run_one SCENARIO SERVER: start, check, warm up, measure, stop; fills RES.
run_one() {
    local sc=$1 srv=$2 kind conns depth dir port admin=0 upstream=0 spid="" upid=""
    local key="$sc|$srv" c0u c0s c1u c1s t0 t1 stat line wrc=0
    local -A W=()
    read -r kind conns depth <<<"${SCENARIO_SPEC[$sc]}"
    dir=$WORK/$sc/$srv
    mkdir -p "$dir"
    RES[$key|status]=ok
    next_port
    port=$REPLY
    if [[ $srv == gapura ]]; then
        next_port
        admin=$REPLY
    fi

    if [[ $kind == proxy ]]; then
        next_port
        upstream=$REPLY
        SERVER_PID=
        if ! start_server nginx respond "$dir/upstream" "$LOAD_CORE" "$upstream" 0 0; then
            RES[$key|status]="failed: upstream nginx did not start"
            stop_tree "$SERVER_PID"
            return 0
        fi
        upid=$SERVER_PID
    fi

    SERVER_PID=
    if ! start_server "$srv" "$kind" "$dir/server" "$SERVER_CORE" "$port" "$admin" "$upstream"; then
        RES[$key|status]=$FAIL_REASON
        stop_tree "$SERVER_PID"
        stop_tree "$upid"
        log_section "$sc $srv (did not start)" "$dir"/server/*.log "$dir"/server/*.check
        return 0
    fi
    spid=$SERVER_PID

    if ! check_answer "$port"; then
        RES[$key|status]=$FAIL_REASON
        stop_tree "$spid"
        stop_tree "$upid"
        log_section "$sc $srv (wrong answer)" "$WORK/answer.hdr" "$dir"/server/*.log
        return 0
    fi
    RES[$key|answer_bytes]=$ANSWER_BYTES

    if ((WARMUP > 0)); then
        wrk_args "$conns" "$depth" "$WARMUP" "$port"
        run_wrk "$dir/warmup.out" "${WRK_ARGS[@]}" || true
    fi

    wrk_args "$conns" "$depth" "$DURATION" "$port"
    read -r c0u c0s <<<"$(tree_cpu "$spid")"
    t0=$(date +%s%N)
    run_wrk "$dir/wrk.out" "${WRK_ARGS[@]}" || wrc=$?
    t1=$(date +%s%N)
    read -r c1u c1s <<<"$(tree_cpu "$spid")"

    if ! is_running "$spid"; then
        RES[$key|status]="failed: $srv exited during the run"
    fi
    stop_tree "$spid"
    stop_tree "$upid"
    log_section "$sc $srv: ${WRK_ARGS[*]}" "$dir/wrk.out" "$dir"/server/*.log "$dir"/server/error.log

    line=$(grep '^WRKSTAT ' "$dir/wrk.out" | tail -n 1 || true)
    if [[ -z $line ]]; then
        RES[$key|status]="failed: wrk gave no summary (exit $wrc)"
        return 0
    fi
    for stat in ${line#WRKSTAT }; do W[${stat%%=*}]=${stat#*=}; done
    if [[ ${W[requests]:-0} == 0 ]]; then
        RES[$key|status]="failed: no responses"
        return 0
    fi
    RES[$key|requests]=${W[requests]}
    RES[$key|p50_us]=${W[p50_us]}
    RES[$key|p99_us]=${W[p99_us]}
    RES[$key|non2xx]=${W[status]}
    RES[$key|socket_errors]=$((W[connect] + W[read] + W[write] + W[timeout]))
    RES[$key|errors]=$((W[connect] + W[read] + W[write] + W[timeout] + W[status]))
    local rps cpu_us user_us sys_us busy_pct
    read -r rps cpu_us user_us sys_us busy_pct < <(
        awk -v n="${W[requests]}" -v d="${W[duration_us]}" \
            -v du=$((c1u - c0u)) -v ds=$((c1s - c0s)) -v tck="$CLK_TCK" \
            -v wall=$((t1 - t0)) 'BEGIN {
                printf "%.1f %.3f %.3f %.3f %.1f\n",
                    n / (d / 1e6), (du + ds) / tck * 1e6 / n, du / tck * 1e6 / n,
                    ds / tck * 1e6 / n, (du + ds) / tck / (wall / 1e9) * 100
            }')
    RES[$key|rps]=$rps
    RES[$key|cpu_us]=$cpu_us
    RES[$key|user_us]=$user_us
    RES[$key|sys_us]=$sys_us
    RES[$key|busy_pct]=$busy_pct
}

# ------------------------------------------------------------------ report --
# 0 is wrk's answer when its histogram walk finds no value (see NA_NOTE).
fmt_us() { awk -v u="$1" 'BEGIN { if (u == 0) printf "n/a"; else if (u < 1000) printf "%d µs", u; else printf "%.2f ms", u / 1000 }'; }
NA_NOTE="n/a: wrk 4.1 found no value at that percentile. Its coordinated-omission correction adds samples spaced by the mean per-connection request interval, which pipelining makes 16 times too short; samples added below the recorded minimum are counted but never reached, so high percentiles come back as 0. Rank pipelined runs by req/s and CPU per request."
fmt_rps() { awk -v r="$1" 'BEGIN { printf "%.0f", r }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else printf "—" }'; }

scenario_table() { # prints the markdown section of one scenario
    local sc=$1 srv key base kind conns depth
    read -r kind conns depth <<<"${SCENARIO_SPEC[$sc]}"
    wrk_args "$conns" "$depth" "$DURATION" PORT
    local shown=${WRK_ARGS[*]}
    shown=${shown//$WORK\//}
    echo
    echo "## $sc"
    echo
    echo "${SCENARIO_TEXT[$sc]}."
    echo "Load: \`$shown\`"
    [[ $kind == proxy ]] && echo "Upstream: nginx \`return 200\`, one worker, pinned to core $LOAD_CORE beside wrk."
    echo
    echo "| server | req/s | p50 | p99 | CPU µs/req | user / sys µs/req | CPU/req vs nginx | req/s vs nginx | core $SERVER_CORE busy | errors |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    base="$sc|nginx"
    [[ ${RES[$base|status]-} == ok ]] || base=
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        if [[ ${RES[$key|status]} != ok ]]; then
            echo "| $srv | ${RES[$key|status]} | | | | | | | | |"
            continue
        fi
        local cpu_ratio="—" rps_ratio="—" errs=${RES[$key|errors]}
        if [[ -n $base ]]; then
            cpu_ratio=$(ratio "${RES[$key|cpu_us]}" "${RES[$base|cpu_us]}")
            rps_ratio=$(ratio "${RES[$key|rps]}" "${RES[$base|rps]}")
        fi
        ((errs == 0)) || errs="$errs (non-2xx ${RES[$key|non2xx]}, socket ${RES[$key|socket_errors]})"
        printf '| %s | %s | %s | %s | %.2f | %.2f / %.2f | %s | %s | %.0f %% | %s |\n' \
            "$srv" "$(fmt_rps "${RES[$key|rps]}")" "$(fmt_us "${RES[$key|p50_us]}")" \
            "$(fmt_us "${RES[$key|p99_us]}")" "${RES[$key|cpu_us]}" "${RES[$key|user_us]}" \
            "${RES[$key|sys_us]}" "$cpu_ratio" "$rps_ratio" "${RES[$key|busy_pct]}" "$errs"
    done
    echo
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        if [[ ${RES[$key|status]} == ok && (${RES[$key|p50_us]} == 0 || ${RES[$key|p99_us]} == 0) ]]; then
            echo "$NA_NOTE"
            echo
            break
        fi
    done
    local notes=()
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        [[ ${RES[$key|status]} == ok ]] || continue
        notes+=("$srv ${RES[$key|requests]} requests, answer ${RES[$key|answer_bytes]} bytes")
    done
    if ((${#notes[@]})); then
        local IFS=';'
        echo "Measured: ${notes[*]}." | sed 's/;/; /g'
    fi
}

tool_version() {
    local out
    case $1 in
    # Capture first: `wrk -v` exits 1, and a pipe into head could fail under pipefail.
    nginx) out=$(nginx -v 2>&1 || true); sed -n '1s/^nginx version: nginx\//nginx /p' <<<"$out" ;;
    haproxy) out=$(haproxy -v 2>&1 || true); sed -n '1s/ - https.*//; 1s/ version / /p' <<<"$out" ;;
    wrk) out=$(wrk -v 2>&1 || true); sed -n '1s/ Copyright.*//p' <<<"$out" ;;
    gapura)
        local v rev
        v=$(timeout 5 "$GAPURA_BIN" --version 2>/dev/null) || v=
        v=${v%%$'\n'*}
        rev=$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null) || rev=unknown
        git -C "$REPO_ROOT" diff --quiet HEAD 2>/dev/null || rev="$rev+dirty tree"
        echo "${v:-Gapura} (commit $rev, \`$GAPURA_BIN\`)"
        ;;
    esac
}

cpu_model() {
    local m
    m=$(lscpu 2>/dev/null) || m=
    m=$(sed -n 's/^Model name: *//p' <<<"$m")
    [[ -n $m ]] || m=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo)
    m=${m%%$'\n'*}
    echo "${m:-unknown}"
}

report_header() {
    local builds versions=() s
    builds=$(pgrep -c -x 'cargo|rustc' 2>/dev/null || true)
    versions+=("$(tool_version wrk)")
    selected_server nginx || any_proxy_scenario && versions+=("$(tool_version nginx)")
    selected_server haproxy && versions+=("$(tool_version haproxy)")
    selected_server gapura && versions+=("$(tool_version gapura)")
    echo "# Gapura, nginx and HAProxy side by side"
    echo
    echo "- Command: \`$COMMAND_LINE\`"
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- Kernel: $(uname -srm)"
    echo "- CPU: $(cpu_model), $cores cores online"
    for s in "${versions[@]}"; do echo "- $s"; done
    echo "- Layout: server under test pinned to core $SERVER_CORE with one worker (nginx \`worker_processes 1\`, HAProxy \`nbthread 1\`, Gapura \`shards = 1\`); \`wrk -t1\` pinned to core $LOAD_CORE; ${WARMUP} s warm-up, then ${DURATION} s measured per run; \`ulimit -n\` $NOFILE"
    echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ ${builds:-0} -gt 0 ]]; then
        echo "- **Warning:** $builds cargo/rustc processes were running at start; these figures are noise."
    fi
    echo
    echo "CPU µs/req is the server's user + system CPU time (whole process tree) over the measured window divided by the responses wrk counted; lower is better. Ratios are against nginx in this same run. \"core $SERVER_CORE busy\" is that CPU time over the window's wall time: below ~100 % the server was waiting on the load generator, so its req/s says more about wrk than about the server."
}

# --------------------------------------------------------------------- main --
mkdir -p "$RESULTS_DIR"
STAMP=$(date '+%Y%m%d-%H%M%S')
REPORT=$RESULTS_DIR/compare-$STAMP.md
LOG_FILE=$RESULTS_DIR/compare-$STAMP.log
: >"$LOG_FILE"

report_header | tee "$REPORT"
for sc in "${SEL_SCENARIOS[@]}"; do
    for srv in "${SEL_SERVERS[@]}"; do
        say "$sc: $srv"
        run_one "$sc" "$srv"
        [[ ${RES[$sc|$srv|status]} == ok ]] || say "$sc: $srv: ${RES[$sc|$srv|status]}"
    done
    scenario_table "$sc" | tee -a "$REPORT"
done
say "report: $REPORT (raw wrk output and server logs: $LOG_FILE)"

# Exit non-zero when a run failed (a server that is skipped on purpose is not a failure).
for key in "${!RES[@]}"; do
    [[ $key != *"|status" || ${RES[$key]} != failed:* ]] || exit 1
done
