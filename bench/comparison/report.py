"""The markdown report: its header (machine, versions, generator commands,
layout) and one table per scenario, written to stdout and to the report file."""
import os
import re
import shutil
import subprocess
import sys
import time

from .common import ROOT, online_cores, read_text
from .counts import LABELS
from .load import load_command, shown
from .scenarios import LAYOUTS, SCENARIOS, any_proxy_scenario, needs_nginx

# 0 is wrk's answer when its histogram walk finds no value (see NA_NOTE);
# gapura-loadtest reports a percentile of every non-empty histogram.
NA_NOTE = (
    "n/a: wrk 4.1 found no value at that percentile. Its coordinated-omission correction "
    "adds samples spaced by the mean per-connection request interval, which pipelining "
    "makes 16 times too short; samples added below the recorded minimum are counted but "
    "never reached, so high percentiles come back as 0. Rank pipelined runs by req/s and "
    "CPU per request.")


def fmt_us(u):
    """A latency in µs as the generator gave it (text; empty counts as 0)."""
    v = float(u or 0)
    if v == 0:
        return "n/a"
    if v < 1000:
        return "%d µs" % int(v)
    return "%.2f ms" % (v / 1000)


def ratio(a, b):
    return "%.2f×" % (float(a) / float(b)) if float(b) > 0 else "—"


def scenario_command(b, sc_name):
    """The generator's command for SC_NAME as the report prints it, with PORT
    and SERVER standing for each server's port and name."""
    sc = SCENARIOS[sc_name]
    cmd = load_command(b, sc.connections, sc.depth, b.opts.duration, "PORT",
                       f"{sc_name}/SERVER/load.json")
    return shown(b, cmd)


def scenario_table(b, sc_name, layout, results):
    """The markdown section of one scenario in one layout, with the pass's
    generator (b.generator): the figures, then the per-request counts."""
    sc = SCENARIOS[sc_name]
    opts = b.opts
    gen = b.generator
    heading = " · ".join(x for x in (sc_name, layout, gen) if x)
    out = ["", f"## {heading}", "", f"{sc.text}.", f"Load: `{scenario_command(b, sc_name)}`"]
    if sc.kind == "proxy":
        if layout == "shared":
            out.append(f"Upstream: nginx `return 200`, one worker, pinned to core "
                       f"{opts.server_core} beside the server under test (its CPU is not in "
                       "the server's figures).")
        else:
            out.append(f"Upstream: nginx `return 200`, one worker, pinned to core "
                       f"{opts.load_core} beside the load generator.")
    out += ["",
            f"| server | req/s | p50 | p99 | CPU µs/req | user / sys µs/req | CPU/req vs nginx "
            f"| CPU/req vs HAProxy | req/s vs nginx | core {opts.server_core} busy "
            f"| {gen} CPU µs/req | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    key = (gen, sc_name, layout)
    ok = {srv: results[key + (srv,)] for srv in opts.servers
          if results[key + (srv,)]["status"] == "ok"}
    base = ok.get("nginx")
    haproxy = ok.get("haproxy")
    for srv in opts.servers:
        r = results[key + (srv,)]
        if srv not in ok:
            out.append(f"| {srv} | {r['status']} | | | | | | | | | | |")
            continue
        cpu_ratio = ratio(r["cpu_us"], base["cpu_us"]) if base else "—"
        ha_ratio = ratio(r["cpu_us"], haproxy["cpu_us"]) if haproxy else "—"
        rps_ratio = ratio(r["rps"], base["rps"]) if base else "—"
        errs = str(r["errors"])
        if r["errors"] != 0:
            errs += f" (non-2xx {r['non2xx']}, socket {r['socket_errors']})"
        out.append(
            "| %s | %.0f | %s | %s | %.2f | %.2f / %.2f | %s | %s | %s | %.0f %% | %.2f | %s |" % (
                srv, float(r["rps"]), fmt_us(r["p50_us"]), fmt_us(r["p99_us"]),
                float(r["cpu_us"]), float(r["user_us"]), float(r["sys_us"]), cpu_ratio,
                ha_ratio, rps_ratio, float(r["busy_pct"]), float(r["gen_cpu_us"]), errs))
    out.append("")
    if gen == "wrk" and any(r["p50_us"] == "0" or r["p99_us"] == "0" for r in ok.values()):
        out += [NA_NOTE, ""]
    notes = []
    for srv, r in ok.items():
        if gen == "wrk":
            notes.append(f"{srv} {r['requests']} requests, answer {r['answer_bytes']} bytes")
        else:
            notes.append(f"{srv} {r['requests']} requests (+{r['warmup_requests']} in warm-up), "
                         f"answer {r['answer_bytes']} bytes, generator CPU "
                         f"{r['gen_proc_us']} µs/req by /proc")
    if notes:
        out.append("Measured: " + "; ".join(notes) + ".")
    out += counts_table(b, ok)
    return "\n".join(out) + "\n"


def counts_table(b, ok):
    """The per-request counts of the runs in OK (lines), or none when no
    counting run was asked for."""
    if b.opts.counts_secs == 0:
        return []
    out = ["", f"Per response, over a {b.opts.counts_secs} s run of the same load after the "
           "measured one (the server's processes by `perf stat`; TCP segments: the machine's "
           "`Tcp OutSegs`, every peer's segments):", "",
           "| server | " + " | ".join(LABELS) + " |",
           "|---|" + "---:|" * len(LABELS)]
    for srv, r in ok.items():
        counts = r.get("counts") or {}
        out.append(f"| {srv} | " + " | ".join(counts.get(label, "") for label in LABELS) + " |")
    if b.counts_note:
        out += ["", b.counts_note + "."]
    return out


def first_line(cmd, merge_stderr=True, timeout=None, need_success=False):
    """The first line a command prints ("" when it cannot run)."""
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if need_success and r.returncode != 0:
        return ""
    lines = r.stdout.decode("utf-8", "replace").splitlines()
    return lines[0] if lines else ""


def tool_version(b, name):
    if name == "nginx":  # "nginx version: nginx/1.22.1" -> "nginx 1.22.1"
        line = first_line(["nginx", "-v"])
        prefix = "nginx version: nginx/"
        return "nginx " + line[len(prefix):] if line.startswith(prefix) else ""
    if name == "haproxy":  # "HAProxy version 2.6.12 2023/12/16 - https://..." -> "HAProxy 2.6.12 2023/12/16"
        line = re.sub(r" - https.*", "", first_line(["haproxy", "-v"]), count=1)
        return line.replace(" version ", " ", 1) if " version " in line else ""
    if name == "wrk":  # "wrk 4.1.0 [epoll] Copyright (C) 2012 Will Glozer" -> "wrk 4.1.0 [epoll]"
        line = first_line(["wrk", "-v"])
        return re.sub(r" Copyright.*", "", line) if " Copyright" in line else ""
    if name == "gapura-loadtest":
        v = first_line([b.loadtest_bin, "--version"], merge_stderr=False, timeout=5,
                       need_success=True)
        return f"{v or 'gapura-loadtest'} (`{b.loadtest_bin}`)"
    # gapura, with the commit it was built from (when built from this tree)
    v = first_line([b.gapura_bin, "--version"], merge_stderr=False, timeout=5,
                   need_success=True)
    rev = first_line(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                     merge_stderr=False, need_success=True) or "unknown"
    try:
        clean = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        clean = False
    if not clean:
        rev += "+dirty tree"
    return f"{v or 'Gapura'} (commit {rev}, `{b.gapura_bin}`)"


def cpu_model():
    lines = []
    if shutil.which("lscpu"):
        text = subprocess.run(["lscpu"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL).stdout.decode("utf-8", "replace")
        lines = [m.group(1) for m in re.finditer(r"^Model name: *(.*)$", text, re.MULTILINE)]
    if not lines:
        lines = [m.group(1) for m in re.finditer(r"^model name\s*: (.*)$",
                                                 read_text("/proc/cpuinfo"), re.MULTILINE)]
    return (lines[0] if lines else "") or "unknown"


def build_processes():
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and read_text(f"/proc/{entry}/comm").strip() in ("cargo", "rustc"):
            count += 1
    return count


def report_header(b, command_line, nofile, note):
    opts = b.opts
    builds = build_processes()
    versions = []
    if needs_nginx(opts):
        versions.append(tool_version(b, "nginx"))
    if "haproxy" in opts.servers:
        versions.append(tool_version(b, "haproxy"))
    if any(s.startswith("gapura") for s in opts.servers):
        versions.append(tool_version(b, "gapura"))
    uname = os.uname()
    out = ["# Gapura, nginx and HAProxy side by side", "",
           f"- Command: `{command_line}`",
           "- Date: " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           f"- Kernel: {uname.sysname} {uname.release} {uname.machine}",
           f"- CPU: {cpu_model()}, {online_cores()} cores online"]
    out += [f"- {v}" for v in versions]
    current = b.generator
    for gen in b.generators:
        b.generator = gen
        out.append(f"- Load generator, one pass each: **{gen}**, {tool_version(b, gen)}, one "
                   f"thread (`-t1`) pinned to core {opts.load_core}. Exact command per scenario "
                   "(PORT: each server's port; SERVER: its name):")
        out += [f"  - {sc_name}: `{scenario_command(b, sc_name)}`" for sc_name in opts.scenarios]
    b.generator = current
    if note:
        out.append(f"- **Note:** {note}.")
    if opts.warmup == 0:
        warm = "no warm-up"
    else:
        warm = (f"{opts.warmup} s warm-up (gapura-loadtest: `--warmup`, in the same process and "
                "on the same connections, the server's CPU read when the measured window opens; "
                "wrk: a separate run of the same command, discarded)")
    out.append(f"- Layout: server under test pinned to core {opts.server_core} with one worker "
               "(nginx `worker_processes 1`, HAProxy `nbthread 1`, Gapura `shards = 1`, the floors one thread); the "
               f"load generator pinned to core {opts.load_core}; {warm}, then {opts.duration} s "
               f"measured per run; `ulimit -n` {nofile}")
    if any_proxy_scenario(opts):
        out.append("- Proxy layouts: " + "; ".join(
            f"**{name}**: {LAYOUTS[name]}" for name in opts.layouts))
    out.append("- Load average at start: " + " ".join(read_text("/proc/loadavg").split()[:3]))
    if builds > 0:
        out.append(f"- **Warning:** {builds} cargo/rustc processes were running at start; "
                   "these figures are noise.")
    out += ["",
            "CPU µs/req is the server's user + system CPU time (whole process tree) over the "
            "measured window divided by the responses the generator counted; lower is better. "
            "Ratios are against nginx and HAProxy in the same pass. "
            f"\"core {opts.server_core} busy\" is that CPU "
            "time over the window's wall time: below ~100 % the server was waiting on the load "
            "generator, so its req/s says more about the generator than about the server.",
            "",
            "The generator's CPU µs/req is its own cost, not part of the server's figure: "
            "gapura-loadtest's as it reports it (`cpu.per_request_us` in its JSON: user + "
            "system CPU time of its process over warm-up and measured window, divided by the "
            "responses in both; \"Measured\" gives the same from /proc), wrk's from /proc "
            "(this script's cutime + cstime when it reaps wrk, over the responses it counted). "
            "It shows how hard the generator worked for each request, so passes with either "
            "generator can be compared."]
    return "\n".join(out) + "\n"


def emit(text, report, mode):
    sys.stdout.write(text)
    sys.stdout.flush()
    with open(report, mode, encoding="utf-8") as f:
        f.write(text)
