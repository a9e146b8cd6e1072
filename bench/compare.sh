#!/usr/bin/env bash
# Side-by-side comparison of Gapura, nginx and HAProxy (DESIGN §11).
#
# Every server gives the same answer (200, text/plain, "hello, world\n"), runs
# with one worker pinned to one core, and is loaded by one load-generator
# thread pinned to another core: gapura-loadtest (the default, cheaper per
# request) or wrk. Per run the script records the generator's requests/s,
# p50/p99 latency, errors and its own CPU per request, and the server's CPU
# time (user + system over its whole process tree, from /proc) across the
# measured window, so servers are ranked by CPU per request measured in the
# same run. See bench/README.md.
#
# Usage: bench/compare.sh [--servers LIST] [--scenarios LIST] [--duration S]
#                         [--warmup S] [--quick] [--generator G] [--no-build]
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
    [pipelined16]="fixed 200 answered by the server itself, 64 keep-alive connections, 16 pipelined requests per write; latency counts from the batch's write (gapura-loadtest: a sample per response; wrk: one per batch, at its 16th response)"
    [proxy-c64]="the server forwards to an upstream nginx (on the load core) that answers the fixed 200, 64 keep-alive connections"
    [proxy-c256]="the server forwards to an upstream nginx (on the load core) that answers the fixed 200, 256 keep-alive connections"
)
SCENARIO_ORDER=(respond-c64 respond-c256 pipelined16 proxy-c64 proxy-c256)
KNOWN_SERVERS=(gapura nginx haproxy)
KNOWN_GENERATORS=(gapura-loadtest wrk)

# ----------------------------------------------------------------- defaults --
SERVERS=gapura,nginx,haproxy
SCENARIOS=respond-c64,respond-c256,pipelined16
DURATION=10
WARMUP=2
BUILD=1
GENERATOR=gapura-loadtest
GENERATOR_EXPLICIT=0 # 1 when --generator was given: then no fallback to wrk
SERVER_CORE=0
LOAD_CORE=1
PORT_BASE=18080
PORT_LAST=18999
RESULTS_DIR=$SCRIPT_DIR/results

usage() {
    cat <<EOF
Usage: bench/compare.sh [options]

Compares Gapura, nginx and HAProxy on the same answer, each with one worker
pinned to core $SERVER_CORE, loaded by one generator thread pinned to core $LOAD_CORE.

Options:
  --servers LIST     comma-separated subset of: ${KNOWN_SERVERS[*]} (default: $SERVERS)
  --scenarios LIST   comma-separated subset of: ${SCENARIO_ORDER[*]}, or "all"
                     (default: $SCENARIOS; the proxy scenarios are opt-in)
  --duration S       measured seconds per run (default: $DURATION)
  --warmup S         warm-up seconds per run before measuring (default: $WARMUP; 0 skips)
  --quick            smoke check: --duration 3 --warmup 1
  --generator G      load generator: gapura-loadtest or wrk (default: $GENERATOR).
                     When gapura-loadtest is the default and its binary is missing
                     and cannot be built, wrk is used and the report says so;
                     asked for explicitly, a missing binary is an error
  --no-build         do not run cargo; use \$GAPURA_BIN / \$LOADTEST_BIN or the
                     binaries in target/release
  --server-core N    core the server under test is pinned to (default: $SERVER_CORE)
  --load-core N      core the load generator (and the proxy upstream) is pinned to (default: $LOAD_CORE)
  --port-base N      first loopback port to try (default: $PORT_BASE; up to $PORT_LAST)
  --results-dir DIR  where the report goes (default: bench/results)
  -h, --help         this text

Environment:
  GAPURA_BIN         Gapura binary to use; set, it also skips the build
  LOADTEST_BIN       gapura-loadtest binary to use; set, it also skips its build

The report (markdown) goes to stdout and to DIR/compare-YYYYmmdd-HHMMSS.md, with
the generator's raw output and server logs in the .log file beside it.
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
    --generator) need_value "$@"; GENERATOR=$2; GENERATOR_EXPLICIT=1; shift 2 ;;
    --generator=*) GENERATOR=${1#*=}; GENERATOR_EXPLICIT=1; shift ;;
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
[[ " ${KNOWN_GENERATORS[*]} " == *" $GENERATOR "* ]] || die "unknown generator '$GENERATOR' (known: ${KNOWN_GENERATORS[*]})"
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
    [taskset]=util-linux [pgrep]=procps [ss]=iproute2 [python3]=python3)

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

tools=(curl taskset pgrep)
selected_server nginx || any_proxy_scenario && tools+=(nginx)
selected_server haproxy && tools+=(haproxy)
ensure_tools "${tools[@]}"

# ------------------------------------------------------------------- gapura --
target_dir=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
GAPURA_BIN=${GAPURA_BIN:-}
if selected_server gapura; then
    if [[ -z $GAPURA_BIN ]]; then
        if ((BUILD)); then
            say "building: cargo build --release -p gapura"
            (cd "$REPO_ROOT" && cargo build --release -p gapura)
        fi
        GAPURA_BIN=$target_dir/release/gapura
    fi
    [[ -x $GAPURA_BIN ]] || die "no Gapura binary at $GAPURA_BIN (build it, set GAPURA_BIN, or leave gapura out of --servers)"
fi

# ------------------------------------------------------------ load generator --
# gapura-loadtest by default. When it was not asked for by name and there is
# no binary and no way to build one, wrk takes its place and the report says so.
GENERATOR_NOTE= # said in the report's header when set
LOADTEST_BIN=${LOADTEST_BIN:-}
if [[ $GENERATOR == gapura-loadtest ]]; then
    unusable=
    if [[ -n $LOADTEST_BIN ]]; then
        [[ -x $LOADTEST_BIN ]] || unusable="LOADTEST_BIN=$LOADTEST_BIN is not an executable"
    else
        LOADTEST_BIN=$target_dir/release/gapura-loadtest
        if ((BUILD)); then
            say "building: cargo build --release -p gapura-loadtest"
            if ! (cd "$REPO_ROOT" && cargo build --release -p gapura-loadtest); then
                if [[ -x $LOADTEST_BIN ]]; then
                    GENERATOR_NOTE="\`cargo build --release -p gapura-loadtest\` failed; the existing $LOADTEST_BIN was used and may be older than the tree"
                    say "note: $GENERATOR_NOTE"
                else
                    unusable="no binary at $LOADTEST_BIN and \`cargo build --release -p gapura-loadtest\` failed"
                fi
            fi
        fi
        [[ -n $unusable || -x $LOADTEST_BIN ]] || unusable="no binary at $LOADTEST_BIN and --no-build was given"
    fi
    if [[ -n $unusable ]]; then
        ((!GENERATOR_EXPLICIT)) || die "--generator gapura-loadtest: $unusable"
        GENERATOR=wrk
        GENERATOR_NOTE="gapura-loadtest was not used ($unusable); wrk generated the load instead"
        say "note: $GENERATOR_NOTE"
    fi
fi
if [[ $GENERATOR == wrk ]]; then
    ensure_tools wrk
else
    ensure_tools python3 # reads the --json report (peers/loadtest-report.py)
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

# cpu_of PID...: sets REPLY to "USER SYS", the clock ticks used so far by each
# PID (all its threads, and children it has reaped), summed. Reads /proc with
# builtins only, so it forks nothing and takes well under a millisecond.
cpu_of() {
    local p line f user=0 sys=0
    for p in "$@"; do
        read -r line 2>/dev/null <"/proc/$p/stat" || continue
        line=${line##*) }
        read -r -a f <<<"$line"
        # f[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17.
        user=$((user + f[11] + f[13]))
        sys=$((sys + f[12] + f[14]))
    done
    REPLY="$user $sys"
}

# tree_cpu PID: prints "USER SYS" ticks of PID and every live descendant (nginx's worker).
tree_cpu() {
    local pids
    mapfile -t pids <<<"$1"$'\n'"$(descendants "$1")"
    cpu_of "${pids[@]}"
    echo "$REPLY"
}

printf 'hello, world\n' >"$WORK/expected.body"
cp "$PEERS/wrk-report.lua" "$WORK/wrk-respond.lua"
cat "$PEERS/wrk-pipeline.lua" "$PEERS/wrk-report.lua" >"$WORK/wrk-pipeline.lua"

# load_args CONNS DEPTH SECONDS PORT JSON: sets LOAD_ARGS, the generator's
# command for one run of SECONDS measured seconds (JSON: gapura-loadtest's report).
# gapura-loadtest warms up inside the measured process (--warmup); wrk has no
# such option, so its warm-up is a separate run of the same command.
load_args() {
    local conns=$1 depth=$2 secs=$3 port=$4 json=$5 script=$WORK/wrk-respond.lua
    if [[ $GENERATOR == wrk ]]; then
        ((depth > 1)) && script=$WORK/wrk-pipeline.lua
        LOAD_ARGS=(taskset -c "$LOAD_CORE" wrk -t1 -c"$conns" -d"${secs}s" --latency -s "$script" "http://127.0.0.1:$port/")
        ((depth > 1)) && LOAD_ARGS+=(-- "$depth")
    else
        LOAD_ARGS=(taskset -c "$LOAD_CORE" "$LOADTEST_BIN" -t1 -c"$conns" -d"${secs}s")
        ((WARMUP > 0)) && LOAD_ARGS+=(--warmup "${WARMUP}s")
        ((depth > 1)) && LOAD_ARGS+=(--pipeline "$depth")
        LOAD_ARGS+=(--no-progress --json "$json" "http://127.0.0.1:$port/")
    fi
    return 0
}

shown_args() { # shown_args: LOAD_ARGS as the report prints them, without temp-dir and repo prefixes
    local shown=${LOAD_ARGS[*]}
    shown=${shown//$WORK\//}
    echo "${shown//$REPO_ROOT\//}"
}

now_us() { # sets REPLY to the wall clock in microseconds, without forking
    local t=${EPOCHREALTIME/[.,]/}
    REPLY=$((10#$t))
}

reaped_child_ticks() { # sets REPLY to cutime + cstime of this shell: CPU of the children it has reaped
    local line f
    read -r line <"/proc/$$/stat"
    line=${line##*) }
    read -r -a f <<<"$line"
    REPLY=$((f[13] + f[14]))
}

run_warmup() { # run_warmup OUTFILE ARGS...: runs a discarded load in the background so cleanup can stop it
    local out=$1 pid
    shift
    "$@" >"$out" 2>&1 &
    pid=$!
    TRACKED+=("$pid")
    wait "$pid" || true
    untrack "$pid"
}

exec {NAP_FD}<> <(:) # never readable: `read -t` on it sleeps without forking
nap() { # nap MICROSECONDS
    local s
    (($1 > 0)) || return 0
    printf -v s '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000))
    read -r -t "$s" -u "$NAP_FD" _ || true
}

# measure SERVER_PID OUTFILE OPEN_US ARGS...: runs the load generator ARGS in
# the background (tracked, so cleanup can stop it) and waits for it. The
# server's CPU counters are read where the generator's measured window opens,
# and again once the generator has exited. OPEN_US 0: the window opens at the
# launch, and the counters are read just before it. OPEN_US > 0 (gapura-
# loadtest): the window opens OPEN_US after the generator computes its start
# time, which it does just before it spawns its first shard thread; the script
# watches /proc/PID/task for that thread (every 0.5 ms) and reads the counters
# OPEN_US later, with builtins only, so the read lands within a millisecond or
# two of the opening (M_LATE_US says how late it came).
# Sets M_RC (exit status), M_T0/M_T1 (µs), M_C0U/M_C0S/M_C1U/M_C1S (ticks),
# M_LATE_US and M_GEN_TICKS: the generator's whole CPU time, user + system, by
# how much this shell's cutime + cstime grew while `wait` reaped it (nothing
# else is reaped then: the counters are read right around that wait).
measure() {
    local spid=$1 out=$2 open_us=$3 pid anchor i pids tasks
    shift 3
    M_RC=0
    M_LATE_US=0
    mapfile -t pids <<<"$spid"$'\n'"$(descendants "$spid")"
    if ((open_us == 0)); then
        cpu_of "${pids[@]}"
        read -r M_C0U M_C0S <<<"$REPLY"
        now_us
        M_T0=$REPLY
    fi
    "$@" >"$out" 2>&1 &
    pid=$!
    TRACKED+=("$pid")
    now_us
    anchor=$REPLY
    if ((open_us > 0)); then
        for ((i = 0; i < 4000; i++)); do # up to about 2 s
            tasks=("/proc/$pid/task/"*)
            ((${#tasks[@]} < 2)) || break
            [[ -d /proc/$pid/task ]] || break
            nap 500
        done
        now_us
        ((i == 4000)) || anchor=$REPLY
        nap $((anchor + open_us - REPLY))
        now_us
        M_T0=$REPLY
        cpu_of "${pids[@]}"
        read -r M_C0U M_C0S <<<"$REPLY"
        M_LATE_US=$((M_T0 - anchor - open_us))
    fi
    local g0 g1
    reaped_child_ticks
    g0=$REPLY
    wait "$pid" || M_RC=$?
    reaped_child_ticks
    g1=$REPLY
    untrack "$pid"
    now_us
    M_T1=$REPLY
    read -r M_C1U M_C1S <<<"$(tree_cpu "$spid")"
    M_GEN_TICKS=$((g1 - g0))
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
    local key="$sc|$srv" stat line
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

    local json=$dir/load.json offset_us=0
    if ((WARMUP > 0)); then
        if [[ $GENERATOR == wrk ]]; then
            load_args "$conns" "$depth" "$WARMUP" "$port" ""
            run_warmup "$dir/warmup.out" "${LOAD_ARGS[@]}"
        else
            # gapura-loadtest's measured window opens --warmup after its
            # shards' common start, which it sets 20 ms after computing it.
            offset_us=$((20000 + WARMUP * 1000000))
        fi
    fi

    load_args "$conns" "$depth" "$DURATION" "$port" "$json"
    measure "$spid" "$dir/load.out" "$offset_us" "${LOAD_ARGS[@]}"

    if ! is_running "$spid"; then
        RES[$key|status]="failed: $srv exited during the run"
    fi
    stop_tree "$spid"
    stop_tree "$upid"
    if [[ $GENERATOR == gapura-loadtest ]]; then
        if [[ -s $json ]]; then
            python3 "$PEERS/loadtest-report.py" "$json" >>"$dir/load.out" 2>&1 || true
        fi
        echo "(server CPU read $((M_LATE_US / 1000)) ms after the measured window opened; generator CPU by /proc: $M_GEN_TICKS ticks)" >>"$dir/load.out"
    fi
    log_section "$sc $srv: $(shown_args)" "$dir/load.out" "$json" "$dir"/server/*.log "$dir"/server/error.log

    line=$(grep -E '^(WRKSTAT|LOADSTAT) ' "$dir/load.out" | tail -n 1 || true)
    if [[ -z $line ]]; then
        RES[$key|status]="failed: $GENERATOR gave no summary (exit $M_RC)"
        return 0
    fi
    for stat in ${line#* }; do W[${stat%%=*}]=${stat#*=}; done
    if [[ ${W[requests]:-0} == 0 ]]; then
        RES[$key|status]="failed: no responses"
        return 0
    fi
    if [[ ${W[missing_shards]:-0} != 0 ]]; then
        RES[$key|status]="failed: ${W[missing_shards]} gapura-loadtest shard(s) did not report"
        return 0
    fi
    local socket_errors=$((W[connect] + W[read] + W[write] + W[timeout] + ${W[parse]:-0}))
    local all_responses=$((W[requests] + ${W[warmup_requests]:-0}))
    RES[$key|requests]=${W[requests]}
    RES[$key|warmup_requests]=${W[warmup_requests]:-0}
    RES[$key|p50_us]=${W[p50_us]}
    RES[$key|p99_us]=${W[p99_us]}
    RES[$key|non2xx]=${W[status]}
    RES[$key|socket_errors]=$socket_errors
    RES[$key|errors]=$((socket_errors + W[status]))
    # The generator's CPU per response over its whole process (warm-up included
    # on both sides of the division): its own count where it reports one
    # (gapura-loadtest's cpu.per_request_us), else /proc.
    RES[$key|gen_proc_us]=$(awk -v t="$M_GEN_TICKS" -v tck="$CLK_TCK" -v n="$all_responses" \
        'BEGIN { printf "%.2f", t / tck * 1e6 / n }')
    RES[$key|gen_cpu_us]=${W[gen_cpu_us]:-${RES[$key|gen_proc_us]}}
    local rps cpu_us user_us sys_us busy_pct
    read -r rps cpu_us user_us sys_us busy_pct < <(
        awk -v n="${W[requests]}" -v d="${W[duration_us]}" \
            -v du=$((M_C1U - M_C0U)) -v ds=$((M_C1S - M_C0S)) -v tck="$CLK_TCK" \
            -v wall=$((M_T1 - M_T0)) 'BEGIN {
                printf "%.1f %.3f %.3f %.3f %.1f\n",
                    n / (d / 1e6), (du + ds) / tck * 1e6 / n, du / tck * 1e6 / n,
                    ds / tck * 1e6 / n, (du + ds) / tck / (wall / 1e6) * 100
            }')
    RES[$key|rps]=$rps
    RES[$key|cpu_us]=$cpu_us
    RES[$key|user_us]=$user_us
    RES[$key|sys_us]=$sys_us
    RES[$key|busy_pct]=$busy_pct
}

# ------------------------------------------------------------------ report --
# 0 is wrk's answer when its histogram walk finds no value (see NA_NOTE);
# gapura-loadtest reports a percentile of every non-empty histogram.
fmt_us() { awk -v u="$1" 'BEGIN { if (u == 0) printf "n/a"; else if (u < 1000) printf "%d µs", u; else printf "%.2f ms", u / 1000 }'; }
NA_NOTE="n/a: wrk 4.1 found no value at that percentile. Its coordinated-omission correction adds samples spaced by the mean per-connection request interval, which pipelining makes 16 times too short; samples added below the recorded minimum are counted but never reached, so high percentiles come back as 0. Rank pipelined runs by req/s and CPU per request."
fmt_rps() { awk -v r="$1" 'BEGIN { printf "%.0f", r }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else printf "—" }'; }

scenario_table() { # prints the markdown section of one scenario
    local sc=$1 srv key base kind conns depth
    read -r kind conns depth <<<"${SCENARIO_SPEC[$sc]}"
    load_args "$conns" "$depth" "$DURATION" PORT "$sc/SERVER/load.json"
    echo
    echo "## $sc"
    echo
    echo "${SCENARIO_TEXT[$sc]}."
    echo "Load: \`$(shown_args)\`"
    [[ $kind == proxy ]] && echo "Upstream: nginx \`return 200\`, one worker, pinned to core $LOAD_CORE beside the load generator."
    echo
    echo "| server | req/s | p50 | p99 | CPU µs/req | user / sys µs/req | CPU/req vs nginx | req/s vs nginx | core $SERVER_CORE busy | $GENERATOR CPU µs/req | errors |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    base="$sc|nginx"
    [[ ${RES[$base|status]-} == ok ]] || base=
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        if [[ ${RES[$key|status]} != ok ]]; then
            echo "| $srv | ${RES[$key|status]} | | | | | | | | | |"
            continue
        fi
        local cpu_ratio="—" rps_ratio="—" errs=${RES[$key|errors]}
        if [[ -n $base ]]; then
            cpu_ratio=$(ratio "${RES[$key|cpu_us]}" "${RES[$base|cpu_us]}")
            rps_ratio=$(ratio "${RES[$key|rps]}" "${RES[$base|rps]}")
        fi
        ((errs == 0)) || errs="$errs (non-2xx ${RES[$key|non2xx]}, socket ${RES[$key|socket_errors]})"
        printf '| %s | %s | %s | %s | %.2f | %.2f / %.2f | %s | %s | %.0f %% | %.2f | %s |\n' \
            "$srv" "$(fmt_rps "${RES[$key|rps]}")" "$(fmt_us "${RES[$key|p50_us]}")" \
            "$(fmt_us "${RES[$key|p99_us]}")" "${RES[$key|cpu_us]}" "${RES[$key|user_us]}" \
            "${RES[$key|sys_us]}" "$cpu_ratio" "$rps_ratio" "${RES[$key|busy_pct]}" \
            "${RES[$key|gen_cpu_us]}" "$errs"
    done
    echo
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        if [[ $GENERATOR == wrk && ${RES[$key|status]} == ok && (${RES[$key|p50_us]} == 0 || ${RES[$key|p99_us]} == 0) ]]; then
            echo "$NA_NOTE"
            echo
            break
        fi
    done
    local notes=()
    for srv in "${SEL_SERVERS[@]}"; do
        key="$sc|$srv"
        [[ ${RES[$key|status]} == ok ]] || continue
        if [[ $GENERATOR == wrk ]]; then
            notes+=("$srv ${RES[$key|requests]} requests, answer ${RES[$key|answer_bytes]} bytes")
        else
            notes+=("$srv ${RES[$key|requests]} requests (+${RES[$key|warmup_requests]} in warm-up), answer ${RES[$key|answer_bytes]} bytes, generator CPU ${RES[$key|gen_proc_us]} µs/req by /proc")
        fi
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
    gapura-loadtest)
        local v
        v=$(timeout 5 "$LOADTEST_BIN" --version 2>/dev/null) || v=
        v=${v%%$'\n'*}
        echo "${v:-gapura-loadtest} (\`$LOADTEST_BIN\`)"
        ;;
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
    local builds versions=() s sc kind conns depth warm
    builds=$(pgrep -c -x 'cargo|rustc' 2>/dev/null || true)
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
    echo "- Load generator: **$GENERATOR**, $(tool_version "$GENERATOR"), one thread (\`-t1\`) pinned to core $LOAD_CORE. Exact command per scenario (PORT: each server's port; SERVER: its name):"
    for sc in "${SEL_SCENARIOS[@]}"; do
        read -r kind conns depth <<<"${SCENARIO_SPEC[$sc]}"
        load_args "$conns" "$depth" "$DURATION" PORT "$sc/SERVER/load.json"
        echo "  - $sc: \`$(shown_args)\`"
    done
    [[ -z $GENERATOR_NOTE ]] || echo "- **Note:** $GENERATOR_NOTE."
    if ((WARMUP == 0)); then
        warm="no warm-up"
    elif [[ $GENERATOR == wrk ]]; then
        warm="${WARMUP} s warm-up (a separate wrk run of the same command, discarded)"
    else
        warm="${WARMUP} s warm-up (\`--warmup\`, in the same process and on the same connections; the server's CPU is read when the measured window opens)"
    fi
    echo "- Layout: server under test pinned to core $SERVER_CORE with one worker (nginx \`worker_processes 1\`, HAProxy \`nbthread 1\`, Gapura \`shards = 1\`); the load generator pinned to core $LOAD_CORE; $warm, then ${DURATION} s measured per run; \`ulimit -n\` $NOFILE"
    echo "- Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ ${builds:-0} -gt 0 ]]; then
        echo "- **Warning:** $builds cargo/rustc processes were running at start; these figures are noise."
    fi
    echo
    echo "CPU µs/req is the server's user + system CPU time (whole process tree) over the measured window divided by the responses $GENERATOR counted; lower is better. Ratios are against nginx in this same run. \"core $SERVER_CORE busy\" is that CPU time over the window's wall time: below ~100 % the server was waiting on the load generator, so its req/s says more about the generator than about the server."
    echo
    if [[ $GENERATOR == wrk ]]; then
        echo "\"wrk CPU µs/req\" is the load generator's own cost: wrk's user + system CPU time over its measured run (from /proc: this script's cutime + cstime when it reaps wrk) divided by the responses wrk counted. It is not part of the server's figure; it shows how hard the generator worked for each request, so runs with either generator can be compared."
    else
        echo "\"gapura-loadtest CPU µs/req\" is the load generator's own cost as it reports it (\`cpu.per_request_us\` in its JSON: user + system CPU time of its process over warm-up and measured window, getrusage, divided by the responses in both). \"Measured\" under each table also gives the same from /proc (its whole process, start and exit included). It is not part of the server's figure; it shows how hard the generator worked for each request, so runs with either generator can be compared (wrk spent about 1.3× gapura-loadtest's CPU per request in docs/loadtest.md)."
    fi
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
say "report: $REPORT (raw $GENERATOR output and server logs: $LOG_FILE)"

# Exit non-zero when a run failed (a server that is skipped on purpose is not a failure).
for key in "${!RES[@]}"; do
    [[ $key != *"|status" || ${RES[$key]} != failed:* ]] || exit 1
done
