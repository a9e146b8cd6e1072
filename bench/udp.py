#!/usr/bin/env python3
"""UDP datagrams per second and server CPU per datagram: Gapura's `[[udp]]`
relay against nginx's stream UDP proxy, in the same run and the same layout.

One echo upstream (`target/release/udp-echo`, a bench binary) runs pinned to
the load core for the whole run. Each round, each server in turn starts fresh
pinned to the server core with one worker (nginx: `worker_processes 1`;
Gapura: `shards = 1`), is checked by one datagram echoed through it, and is
loaded by `gapura-loadtest udp://...` (one thread, pinned to the load core).
Its CPU (utime + stime of its process tree, from /proc) is read where the
generator's measured window opens and again after it ends. A datagram is one
client datagram relayed to the upstream plus its echo relayed back.

  bench/udp.py [--rounds N] [--duration S] [--connections N] [--payload-size N]
               [--only gapura|nginx] [--gapura PATH]

Gapura's profile is peers/gapura-udp.toml.in, nginx's config
peers/nginx-udp.conf.in. A Gapura whose `gapura check` refuses the profile
(a binary without the relay) is reported as skipped and nginx is still
measured. Every process started here is stopped by its pid on exit, also on
error or Ctrl-C. All traffic goes to 127.0.0.1. Python 3.11, standard library
only. See bench/README.md.
"""
import argparse
import json
import os
import signal
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
import urllib.request

# Before the package is imported: its bytecode cache would otherwise be left
# in the tree, as bench/comparison/__pycache__.
sys.dont_write_bytecode = True

from comparison import common  # noqa: E402
from comparison.common import BENCH, PEERS, ROOT, read_text, say  # noqa: E402
from comparison.cpu import TICKS, cpu_ticks, measure  # noqa: E402
from comparison.procs import Processes, is_running, raise_nofile  # noqa: E402
from comparison.report import build_processes, cpu_model, tool_version  # noqa: E402
from comparison.servers import render, show_log_tails  # noqa: E402
from comparison.tools import ensure_tools, executable, target_dir  # noqa: E402

common.PROG = "udp.py"
SERVERS = ("gapura", "nginx")
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
PORT_LAST = 19999


def parse_args(argv):
    release = os.path.join(target_dir(), "release")
    p = argparse.ArgumentParser(
        prog="bench/udp.py",
        description="Gapura's UDP relay vs nginx's stream UDP proxy: datagrams/s and "
                    "server CPU per datagram, same run, same layout (bench/README.md).")
    p.add_argument("--gapura", default=os.environ.get("GAPURA_BIN")
                   or os.path.join(release, "gapura"), help="Gapura binary (%(default)s)")
    p.add_argument("--loadtest", default=os.environ.get("LOADTEST_BIN")
                   or os.path.join(release, "gapura-loadtest"),
                   help="gapura-loadtest binary (%(default)s)")
    p.add_argument("--echo", default=os.path.join(release, "udp-echo"),
                   help="echo upstream (%(default)s; "
                        "cargo build --release -p gapura-bench --bin udp-echo)")
    p.add_argument("--duration", type=int, default=10, help="measured seconds per run (10)")
    p.add_argument("--warmup", type=int, default=1,
                   help="warm-up seconds before each measured window, 0 skips it (1)")
    p.add_argument("--connections", "-c", type=int, default=64,
                   help="client UDP sockets, one datagram outstanding each (64)")
    p.add_argument("--payload-size", type=int, default=64, help="datagram payload bytes (64)")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds; the servers' order alternates, medians are reported (1)")
    p.add_argument("--only", choices=SERVERS, help="measure one server only")
    p.add_argument("--nginx-responses", type=int, default=0,
                   help="nginx `proxy_responses`: 0 leaves the directive out, so a session "
                        "lives until `proxy_timeout 30s` as Gapura's does (0); 1 ends a "
                        "session with its reply, so every datagram opens, connects and "
                        "closes a new upstream socket (about 2.3x nginx's CPU per datagram)")
    p.add_argument("--server-core", type=int, default=0, help="core of the server under test (0)")
    p.add_argument("--load-core", type=int, default=1,
                   help="core of the load generator and the echo upstream (1)")
    p.add_argument("--port-base", type=int, default=19000,
                   help=f"first loopback port tried (19000; up to {PORT_LAST})")
    p.add_argument("--results-dir", default=os.path.join(BENCH, "results"),
                   help="where the report and the raw log go (bench/results)")
    o = p.parse_args(argv)
    if o.duration < 1 or o.warmup < 0 or o.rounds < 1 or o.connections < 1:
        p.error("--duration, --rounds and --connections must be at least 1, --warmup at least 0")
    if not 1 <= o.payload_size <= 65507:
        p.error("--payload-size must be in 1..65507")
    if o.server_core == o.load_core:
        p.error("--server-core and --load-core must differ")
    if not 1024 <= o.port_base <= PORT_LAST:
        p.error(f"--port-base must be in 1024..{PORT_LAST}")
    o.servers = [o.only] if o.only else list(SERVERS)
    return o


# ---- ports ---------------------------------------------------------------

def ports_in_use():
    """Every local port in /proc/net/{tcp,tcp6,udp,udp6}, in any state."""
    used = set()
    for name in ("tcp", "tcp6", "udp", "udp6"):
        for line in read_text(f"/proc/net/{name}").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 1:
                used.add(int(fields[1].rsplit(":", 1)[1], 16))
    return used


def bindable(port):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


class Ports:
    """Loopback ports free for both UDP and TCP, each handed out once."""

    def __init__(self, first):
        self.cursor = first

    def next(self):
        while self.cursor <= PORT_LAST:
            port = self.cursor
            self.cursor += 1
            if port not in ports_in_use() and bindable(port):
                return port
        raise RuntimeError(f"no free loopback port left up to {PORT_LAST}")


# ---- servers -------------------------------------------------------------

def probe(port, pid, size, seconds=10.0):
    """Up to SECONDS for one datagram of SIZE bytes sent to PORT to come back
    unchanged, while PID lives. True when it did."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.settimeout(0.2)
    deadline = time.monotonic() + seconds
    n = 0
    try:
        while time.monotonic() < deadline and is_running(pid):
            n += 1
            token = (b"udp.py probe %d " % n).ljust(size, b".")[:size]
            try:
                s.send(token)
                while True:
                    if s.recv(65536) == token:
                        return True
            except socket.timeout:
                pass
            except ConnectionRefusedError:  # nothing listens there yet
                time.sleep(0.05)
        return False
    finally:
        s.close()


def ensure_stream_module():
    if os.path.isfile(STREAM_MODULE):
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"no {STREAM_MODULE} (apt-get install -y libnginx-mod-stream)")
    say("installing from Debian's packages: libnginx-mod-stream")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "libnginx-mod-stream"]):
        if subprocess.run(cmd).returncode != 0:
            raise RuntimeError("could not install libnginx-mod-stream")


def start(b, name, directory, port):
    """Starts NAME pinned to the server core and waits for its first echo.
    Returns (process, admin port or 0, None) or (None, 0, why) with nothing
    left running; a refused Gapura profile's why starts with "skipped"."""
    os.makedirs(directory, exist_ok=True)
    o = b.opts
    pin = ["taskset", "-c", str(o.server_core)]
    admin = 0
    if name == "nginx":
        conf = os.path.join(directory, "nginx.conf")
        responses = f"proxy_responses {o.nginx_responses};" if o.nginx_responses else ""
        render(os.path.join(PEERS, "nginx-udp.conf.in"), conf,
               {"PREFIX": directory, "PORT": port, "ECHO_PORT": b.echo_port,
                "RESPONSES": responses})
        cmd = [*pin, "nginx", "-p", directory + "/", "-c", conf,
               "-e", os.path.join(directory, "error.log")]
    else:
        conf = os.path.join(directory, "gapura.toml")
        admin = b.ports.next()
        render(os.path.join(PEERS, "gapura-udp.toml.in"), conf,
               {"PORT": port, "ECHO_PORT": b.echo_port, "HTTP_PORT": b.ports.next(),
                "ADMIN_PORT": admin})
        check = subprocess.run([o.gapura, "check", conf], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        text = check.stdout.decode("utf-8", "replace")
        b.log(f"gapura check {conf} (exit {check.returncode})", text)
        if check.returncode != 0:
            say("`gapura check` refuses the UDP profile (peers/gapura-udp.toml.in):")
            sys.stderr.write("".join("    " + line + "\n" for line in text.splitlines()[:20]))
            return None, 0, ("skipped: `gapura check` refuses the [[udp]] profile "
                             "(no UDP relay in this binary, or keys to adjust in "
                             "peers/gapura-udp.toml.in)")
        cmd = [*pin, o.gapura, "run", "--allow-root", "--profile", conf]
    proc = b.procs.start(cmd, os.path.join(directory, "server.log"))
    if not probe(port, proc.pid, o.payload_size):
        logs = [os.path.join(directory, f) for f in ("server.log", "error.log")]
        show_log_tails(logs)
        alive = is_running(proc.pid)
        b.procs.stop(proc)
        b.log_files(f"{name} (did not echo)", logs)
        return None, 0, (f"failed: {name} " + ("did not relay a datagram to the echo "
                                               "upstream and back within 10 s" if alive
                                               else "exited at start"))
    return proc, admin, None


# ---- one run -------------------------------------------------------------

def load_command(b, port, json_path):
    o = b.opts
    cmd = ["taskset", "-c", str(o.load_core), o.loadtest, "-t1", f"-c{o.connections}",
           f"-d{o.duration}s", "--payload-size", str(o.payload_size)]
    if o.warmup:
        cmd += ["--warmup", f"{o.warmup}s"]
    return cmd + ["--no-progress", "--json", json_path, f"udp://127.0.0.1:{port}"]


def run_one(b, name, rnd):
    """Start, check, measure, stop. Returns the run's result: its status
    ("ok", "failed: ..." or "skipped: ...") and, when measured, its figures."""
    o = b.opts
    directory = os.path.join(b.work, f"round{rnd}", name)
    port = b.ports.next()
    if not is_running(b.echo.pid):
        return {"status": "failed: the echo upstream is gone"}
    proc, admin, why = start(b, name, directory, port)
    if proc is None:
        return {"status": why}
    json_path = os.path.join(directory, "load.json")
    out_path = os.path.join(directory, "load.out")
    # gapura-loadtest's window opens 20 ms plus the warm-up after its start.
    open_us = 20000 + o.warmup * 1000000 if o.warmup else 0
    try:
        echo_before = sum(cpu_ticks([b.echo.pid]))
        m = measure(b, proc.pid, out_path, open_us, load_command(b, port, json_path))
        echo_ticks = sum(cpu_ticks([b.echo.pid])) - echo_before
        alive = is_running(proc.pid)
        if name == "gapura" and admin and alive:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as r:
                    metrics = r.read().decode("utf-8", "replace")
                b.log("gapura /metrics (udp lines)",
                      "".join(line + "\n" for line in metrics.splitlines() if "udp" in line))
            except Exception as e:  # a diagnostic only: never fails the run
                b.log("gapura /metrics", f"not read: {e}\n")
    finally:
        b.procs.stop(proc)
    b.log_files(f"round {rnd} {name}: {' '.join(load_command(b, port, 'load.json'))}",
                [os.path.join(directory, f) for f in ("nginx.conf", "gapura.toml")]
                + [out_path, json_path, os.path.join(directory, "server.log"),
                   os.path.join(directory, "error.log")])
    if not alive:
        return {"status": f"failed: {name} exited during the run"}
    try:
        with open(json_path, encoding="utf-8") as f:
            r = json.load(f)
    except (OSError, ValueError):
        return {"status": f"failed: gapura-loadtest wrote no report (exit {m.rc})"}
    s = r["summary"]
    replies, elapsed = s["requests"], s["elapsed_s"]
    if replies == 0 or elapsed <= 0 or m.wall_us <= 0:
        return {"status": "failed: no datagram came back in the measured window"}
    per = TICKS * replies / 1e6  # ticks -> µs per datagram
    pct = r["latency_us"]["percentiles"]
    return {
        "status": "ok",
        "dps": replies / elapsed,
        "cpu_us": (m.user_ticks + m.sys_ticks) / per,
        "user_us": m.user_ticks / per,
        "sys_us": m.sys_ticks / per,
        "busy_pct": (m.user_ticks + m.sys_ticks) / TICKS / (m.wall_us / 1e6) * 100,
        "p50_us": pct["50"], "p99_us": pct["99"],
        "timeouts": (r.get("udp") or {}).get("timeouts", 0),
        "errors": r["errors"]["total"],
        "gen_us": r["cpu"]["per_request_us"],
        # The echo served the warm-up too: its ticks over every datagram of
        # the run (the measured rate over the whole run), an estimate.
        "echo_us": echo_ticks * 1e6 / TICKS / max(1.0, replies / elapsed * (elapsed + o.warmup)),
        "late_ms": m.late_us / 1000,
    }


# ---- the report ----------------------------------------------------------

def row(label, r):
    if r["status"] != "ok":
        return f"| {label} | {r['status']} | | | | | | | |"
    return ("| %s | %.0f | %.2f | %.2f / %.2f | %.0f %% | %.0f / %.0f µs | %d | %d | %.2f |"
            % (label, r["dps"], r["cpu_us"], r["user_us"], r["sys_us"], r["busy_pct"],
               r["p50_us"], r["p99_us"], r["timeouts"], r["errors"], r["gen_us"]))


def ratio(a, b):
    return "%.2f×" % (a / b) if b > 0 else "—"


def report(b, command_line, results):
    o = b.opts
    out = ["# UDP relay: Gapura vs nginx", "",
           f"- Command: `{command_line}`",
           "- Date: " + time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "- Kernel: " + os.uname().release + f"; CPU: {cpu_model()}",
           "- nginx: " + (tool_version(b, "nginx") or "?") + " with the stream module; "
           + (f"`proxy_responses {o.nginx_responses}`" if o.nginx_responses
              else "no `proxy_responses`") + ", `proxy_timeout 30s`",
           "- Gapura: " + (tool_version(b, "gapura") if "gapura" in o.servers else "not run"),
           "- Load: " + tool_version(b, "gapura-loadtest") + ": `"
           + " ".join(load_command(b, "PORT", "load.json")).replace(ROOT + "/", "") + "`",
           f"- Layout: server on core {o.server_core} (one worker / shard); gapura-loadtest "
           f"and the echo upstream (`udp-echo --core {o.load_core}`) on core {o.load_core}",
           "- Load average at start: " + " ".join(read_text("/proc/loadavg").split()[:3])]
    if b.builds:
        out.append(f"- **Warning:** {b.builds} cargo/rustc processes were running at start; "
                   "these figures are noise, good for checking the program only.")
    out += ["", "A datagram: one client datagram relayed to the upstream and its echo relayed "
            "back. CPU is the server's user + system time over the measured window.", "",
            f"| round / server | datagrams/s | CPU µs/dgram | user / sys µs "
            f"| core {o.server_core} busy | p50 / p99 | timeouts | errors "
            "| generator CPU µs/dgram |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (rnd, name), r in results.items():
        out.append(row(f"{rnd} {name}", r))
    med = {}
    for name in o.servers:
        ok = [r for (_, n), r in results.items() if n == name and r["status"] == "ok"]
        if ok:
            med[name] = {k: statistics.median(r[k] for r in ok)
                         for k in ("dps", "cpu_us", "user_us", "sys_us", "echo_us")}
            med[name]["n"] = len(ok)
    out += ["", f"Medians over {o.rounds} round(s):", "",
            "| server | rounds | datagrams/s | CPU µs/dgram | user / sys µs | "
            "datagrams per CPU second |", "|---|---:|---:|---:|---:|---:|"]
    for name in o.servers:
        if name in med:
            v = med[name]
            out.append("| %s | %d | %.0f | %.2f | %.2f / %.2f | %.0f |" % (
                name, v["n"], v["dps"], v["cpu_us"], v["user_us"], v["sys_us"],
                1e6 / v["cpu_us"] if v["cpu_us"] else 0))
        else:
            status = next(r["status"] for (_, n), r in results.items() if n == name)
            out.append(f"| {name} | 0 | {status} | | | |")
    if "gapura" in med and "nginx" in med:
        g, n = med["gapura"], med["nginx"]
        out += ["", f"**Gapura / nginx, CPU per datagram: {ratio(g['cpu_us'], n['cpu_us'])}** "
                f"(user {ratio(g['user_us'], n['user_us'])}, system "
                f"{ratio(g['sys_us'], n['sys_us'])}); datagrams/s: {ratio(g['dps'], n['dps'])}."]
    if med:
        echo = statistics.median(v["echo_us"] for v in med.values())
        floor = 2 * echo
        out += ["", f"The floor: a relay receives and sends every exchange twice (client and "
                f"upstream side), the echo upstream once, batched 32 at a time with "
                f"recvmmsg/sendmmsg. The echo's CPU per datagram (median, estimated over the "
                f"whole run) is {echo:.2f} µs, so a relay doing only that essential work costs "
                f"about {floor:.2f} µs ({ratio(floor, med['nginx']['cpu_us']) if 'nginx' in med else '—'} "
                f"of nginx)."]
    return "\n".join(out) + "\n"


# ---- main ----------------------------------------------------------------

class Terminated(Exception):
    """SIGTERM arrived."""


def on_sigterm(signum, frame):
    raise Terminated()


def main():
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    command_line = " ".join(sys.argv)
    o = parse_args(sys.argv[1:])
    signal.signal(signal.SIGTERM, on_sigterm)
    procs = Processes()
    work = None
    try:
        for path, what in ((o.loadtest, "cargo build --release -p gapura-loadtest"),
                           (o.echo, "cargo build --release -p gapura-bench --bin udp-echo")):
            if not executable(path):
                raise RuntimeError(f"no executable {path} ({what})")
        if "gapura" in o.servers and not executable(o.gapura):
            raise RuntimeError(f"no Gapura binary at {o.gapura} "
                               "(cargo build --release -p gapura, or --only nginx)")
        ensure_tools(["taskset"] + (["nginx"] if "nginx" in o.servers else []))
        if "nginx" in o.servers:
            ensure_stream_module()
        raise_nofile()
        work = tempfile.mkdtemp(prefix="gapura-udp.", dir=os.environ.get("TMPDIR") or "/tmp")
        os.makedirs(o.results_dir, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        report_path = os.path.join(o.results_dir, f"udp-{stamp}.md")
        log_path = os.path.join(o.results_dir, f"udp-{stamp}.log")

        def log(title, text):
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(f"===== {title}\n{text}")

        def log_files(title, paths):
            log(title, "".join(f"--- {os.path.basename(p)}\n{read_text(p)}"
                               for p in paths if os.path.isfile(p)))

        b = types.SimpleNamespace(opts=o, procs=procs, work=work, ports=Ports(o.port_base),
                                  gapura_bin=o.gapura, loadtest_bin=o.loadtest, log=log,
                                  log_files=log_files, builds=build_processes())
        open(log_path, "w").close()

        b.echo_port = b.ports.next()
        b.echo = procs.start([o.echo, "--core", str(o.load_core), f"127.0.0.1:{b.echo_port}"],
                             os.path.join(work, "echo.log"))
        if not probe(b.echo_port, b.echo.pid, o.payload_size):
            raise RuntimeError("the echo upstream did not answer: "
                               + read_text(os.path.join(work, "echo.log")).strip())

        results = {}
        skipped = set()
        for rnd in range(1, o.rounds + 1):
            order = o.servers if rnd % 2 else o.servers[::-1]
            for name in order:
                if name in skipped:
                    continue
                say(f"round {rnd}: {name}")
                r = results[rnd, name] = run_one(b, name, rnd)
                if r["status"] != "ok":
                    say(f"round {rnd}: {name}: {r['status']}")
                if r["status"].startswith("skipped"):
                    skipped.add(name)
        text = report(b, command_line, results)
        sys.stdout.write(text)
        with open(report_path, "w", encoding="utf-8") as f:
            f.write(text)
        say(f"report: {report_path} (load reports, server logs: {log_path})")
        return 1 if any(r["status"].startswith("failed") for r in results.values()) else 0
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    except RuntimeError as e:
        say(str(e))
        return 1
    finally:
        # Stop whatever still runs and remove the temp dir; no signal may cut that short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        procs.stop_all()
        if work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
