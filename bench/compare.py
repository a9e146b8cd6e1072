#!/usr/bin/env python3
"""Side-by-side comparison of Gapura, nginx and HAProxy (DESIGN §11).

Every server gives the same answer (200, text/plain, "hello, world\\n"), runs
with one worker pinned to one core, and is loaded by one load-generator
thread pinned to another core: gapura-loadtest and wrk, each in its own pass
by default. The proxy scenarios run in both layouts: the upstream on the load
core (the server's core saturated by the server alone) and on the server's
core. Per run the program records the generator's requests/s, p50/p99
latency, errors and its own CPU per request, and the server's CPU time (user
+ system over its whole process tree, from /proc) across the measured
window, so servers are ranked by CPU per request measured in the same run;
then a shorter run of the same load counts, per request, the server's system
calls, io_uring_enter calls, SQEs, poll arms and context switches (perf
stat) and the machine's TCP segments (/proc/net/snmp). See bench/README.md.

  bench/compare.py [--servers LIST] [--scenarios LIST] [--layouts LIST]
                   [--generator LIST] [--duration S] [--warmup S] [--counts S]
                   [--quick] [--no-build]

Python 3.11, standard library only. The servers, the load generator, curl
and taskset run as child processes; each is tracked by its pid and stopped
by that pid (and those of its descendants) when its run ends, on exit and
on Ctrl-C. All traffic goes to 127.0.0.1.

This file reads the command line and cleans up on exit; the package
bench/comparison/ does the rest.
"""
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile

# Before the package is imported: its bytecode cache would otherwise be left
# in the tree, as bench/comparison/__pycache__.
sys.dont_write_bytecode = True

from comparison import run
from comparison.common import BENCH, die, online_cores
from comparison.ports import PORT_LAST
from comparison.procs import Processes
from comparison.scenarios import KNOWN_GENERATORS, KNOWN_SERVERS, LAYOUTS, SCENARIOS, Options, floor_work

# Defaults, as text: the options are read as text and checked afterwards.
DEFAULTS = {
    "servers": "gapura,nginx,haproxy",
    "scenarios": "all",
    "layouts": "saturated,shared",
    "duration": "10",
    "warmup": "2",
    "counts": "3",
    "generator": "gapura-loadtest,wrk",
    "server_core": "0",
    "load_core": "1",
    "port_base": "18080",
    "results_dir": os.path.join(BENCH, "results"),
}
# Options that take a value, as `--opt VALUE` or `--opt=VALUE`.
VALUE_OPTIONS = {
    "--servers": "servers",
    "--scenarios": "scenarios",
    "--layouts": "layouts",
    "--duration": "duration",
    "--counts": "counts",
    "--warmup": "warmup",
    "--generator": "generator",
    "--server-core": "server_core",
    "--load-core": "load_core",
    "--port-base": "port_base",
    "--results-dir": "results_dir",
}


def usage(v):
    """The help text; it shows the values given so far as the defaults."""
    return f"""Usage: bench/compare.py [options]

Compares Gapura, nginx and HAProxy on the same answer, each with one worker
pinned to core {v['server_core']}, loaded by one generator thread pinned to core {v['load_core']}.

Options:
  --servers LIST     comma-separated subset of: {' '.join(KNOWN_SERVERS)} (default: {v['servers']}),
                     and floors with work added to each request: floor-monoio+200ns
  --scenarios LIST   comma-separated subset of: {' '.join(SCENARIOS)}, or "all"
                     (default: {v['scenarios']})
  --layouts LIST     where the proxy scenarios' upstream runs, comma-separated subset of:
                     {' '.join(LAYOUTS)} (default: {v['layouts']}; saturated: on the
                     load core, shared: on the server's core)
  --duration S       measured seconds per run (default: {v['duration']})
  --warmup S         warm-up seconds per run before measuring (default: {v['warmup']}; 0 skips)
  --counts S         seconds of the counting run after each measured run (perf stat and
                     TCP segments per request; default: {v['counts']}; 0 skips)
  --quick            smoke check: --duration 3 --warmup 1 --counts 2
  --generator LIST   load generators, comma-separated, each a pass of its own:
                     gapura-loadtest, wrk (default: {v['generator']}). When
                     gapura-loadtest is in the default and its binary is missing
                     and cannot be built, wrk takes its place and the report says
                     so; asked for explicitly, a missing binary is an error
  --no-build         do not run cargo; use $GAPURA_BIN / $LOADTEST_BIN or the
                     binaries in target/release
  --server-core N    core the server under test is pinned to (default: {v['server_core']})
  --load-core N      core the load generator (and the proxy upstream) is pinned to (default: {v['load_core']})
  --port-base N      first loopback port to try (default: {v['port_base']}; up to {PORT_LAST})
  --results-dir DIR  where the report goes (default: bench/results)
  -h, --help         this text

Environment:
  GAPURA_BIN         Gapura binary to use; set, it also skips the build
  LOADTEST_BIN       gapura-loadtest binary to use; set, it also skips its build

The report (markdown) goes to stdout and to DIR/compare-YYYYmmdd-HHMMSS.md, with
the generator's raw output and server logs in the .log file beside it."""


def parse_args(argv):
    """Reads the command line in order, so a later option overrides an
    earlier one (`--quick --duration 5` measures 5 s), then checks it."""
    v = dict(DEFAULTS)
    build = True
    generator_explicit = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in VALUE_OPTIONS and eq:
            i += 1
        elif arg in VALUE_OPTIONS:
            if i + 1 >= len(argv) or not argv[i + 1]:
                die(f"{arg} needs a value")
            value = argv[i + 1]
            i += 2
        elif arg == "--quick":
            v["duration"], v["warmup"], v["counts"] = "3", "1", "2"
            i += 1
            continue
        elif arg == "--no-build":
            build = False
            i += 1
            continue
        elif arg in ("-h", "--help"):
            print(usage(v))
            sys.exit(0)
        else:
            print(usage(v), file=sys.stderr)
            die(f"unknown argument: {arg}")
        v[VALUE_OPTIONS[name]] = value
        generator_explicit |= name == "--generator"

    def uint(key, msg):
        if not re.fullmatch(r"[0-9]+", v[key]):
            die(msg)
        return int(v[key])

    duration = uint("duration", "--duration must be a whole number of seconds")
    if duration <= 0:
        die("--duration must be at least 1 s")
    warmup = uint("warmup", "--warmup must be a whole number of seconds")
    server_core = uint("server_core", "--server-core must be a core number")
    load_core = uint("load_core", "--load-core must be a core number")
    if server_core == load_core:
        die("--server-core and --load-core must differ")
    port_base = uint("port_base", "--port-base must be a port number")
    counts = uint("counts", "--counts must be a whole number of seconds")
    if not 1024 <= port_base <= PORT_LAST:
        die(f"--port-base must be in 1024..{PORT_LAST}")

    def selection(text, known, what, option):
        """The names of a comma-separated list, each once, in the order given."""
        picked = []
        for name in text.split(","):
            if not name:
                continue
            if name not in known and not (what == "server" and floor_work(name)):
                die(f"unknown {what} '{name}' (known: {' '.join(known)}, "
                    f"or a floor with work added, e.g. floor-monoio+200ns)")
            if name not in picked:
                picked.append(name)
        if not picked:
            die(f"{option} selects nothing")
        return picked

    servers = selection(v["servers"], KNOWN_SERVERS, "server", "--servers")
    scenarios_text = ",".join(SCENARIOS) if v["scenarios"] == "all" else v["scenarios"]
    scenarios = selection(scenarios_text, list(SCENARIOS), "scenario", "--scenarios")
    layouts = selection(v["layouts"], list(LAYOUTS), "layout", "--layouts")
    generators = selection(v["generator"], KNOWN_GENERATORS, "generator", "--generator")

    cores = online_cores()
    if server_core >= cores or load_core >= cores:
        die(f"this machine has {cores} cores; pick --server-core/--load-core below that")
    return Options(servers, scenarios, duration, warmup, generators, generator_explicit,
                   layouts, counts, build, server_core, load_core, port_base, v["results_dir"])


def shown_word(arg):
    """A command-line word as the report shows it: quoted only where it needs it."""
    return arg if re.fullmatch(r"[A-Za-z0-9_./,=:@%+-]+", arg) else shlex.quote(arg)


class Terminated(Exception):
    """SIGTERM arrived."""


def on_sigterm(signum, frame):
    raise Terminated()


def main():
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    command_line = " ".join(shown_word(arg) for arg in sys.argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    procs = Processes()
    work = None
    try:
        opts = parse_args(sys.argv[1:])
        work = tempfile.mkdtemp(prefix="gapura-compare.", dir=os.environ.get("TMPDIR") or "/tmp")
        return run.compare(opts, command_line, procs, work)
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    finally:
        # Stop whatever still runs and remove the temp dir; no signal may cut that short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        if work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
