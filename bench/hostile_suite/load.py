"""The load generators: wrk (installed on demand, run on the load core, its
summary parsed) and gapura-loadtest's JSON report."""
import json
import os
import re
import shutil
import subprocess

from . import common
from .common import CouldNotRun, pinned, say


def ensure_tools(ctx, *tools):
    packages = {"wrk": "wrk", "slowhttptest": "slowhttptest"}
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    if ctx.apt_tried or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CouldNotRun(f"missing {', '.join(missing)} (install: apt-get install -y "
                          f"{' '.join(packages[t] for t in missing)})")
    ctx.apt_tried = True
    say(f"  installing {', '.join(missing)}: apt-get update && apt-get install -y wrk slowhttptest")
    r = subprocess.run("apt-get update && apt-get install -y wrk slowhttptest", shell=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or any(shutil.which(t) is None for t in missing):
        raise CouldNotRun(f"apt-get could not install {', '.join(missing)}: {r.stdout[-300:]}")


def to_ms(num, unit):
    return float(num) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(out):
    r = {"rps": None, "p99_ms": None, "requests": None, "socket_errors": 0, "non2xx": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M)
    if m:
        r["p99_ms"] = to_ms(m.group(1), m.group(2))
    m = re.search(r"(\d+) requests in", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["socket_errors"] = sum(int(x) for x in m.groups())
        r["socket_detail"] = m.group(0)
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    return r


def start_wrk(ctx, url, conns, secs, out_path):
    f = open(out_path, "w")
    try:
        return ctx.procs.start(pinned(common.LOAD_CORE, ["wrk", "-t1", f"-c{conns}",
                                                         f"-d{secs}s", "--latency", url]),
                               stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        f.close()


def finish_wrk(ctx, proc, secs, out_path):
    try:
        proc.wait(timeout=secs + 30)
    except subprocess.TimeoutExpired:
        ctx.procs.stop(proc)
        raise CouldNotRun("wrk did not finish in time")
    ctx.procs.stop(proc)
    with open(out_path) as f:
        out = f.read()
    r = parse_wrk(out)
    if r["rps"] is None:
        raise CouldNotRun(f"wrk printed no figures: {out[-300:]}")
    return r


def run_wrk(ctx, url, conns, secs, name):
    path = os.path.join(ctx.work, f"{name}.wrk")
    return finish_wrk(ctx, start_wrk(ctx, url, conns, secs, path), secs, path)


def fmt_wrk(r):
    return (f"{r['rps']:.0f} req/s, p99 {r['p99_ms']:.3f} ms, {r['requests']} requests, "
            f"socket errors {r['socket_errors']}, non-2xx/3xx {r['non2xx']}")


def read_report(path):
    with open(path) as f:
        r = json.load(f)
    status = {int(k): v for k, v in r.get("status_counts", {}).items()}
    return {"status": status, "errors": r["errors"]["total"],
            "ok": sum(v for k, v in status.items() if 200 <= k < 300),
            "all": sum(status.values()) + r["errors"]["total"]}
