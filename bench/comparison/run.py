"""The runs: one per scenario and server (start, check, warm up, measure,
stop) with its figures, and the whole comparison around them."""
import dataclasses
import glob
import os
import time

from .common import say
from .cpu import TICKS, measure
from .load import (add_loadtest_summary, last_summary, load_command, prepare_wrk_scripts,
                   shown, warm_up)
from .ports import Ports
from .procs import Processes, is_running, raise_nofile
from .report import emit, report_header, scenario_table
from .scenarios import SCENARIOS, Options, needs_nginx
from .servers import check_answer, start_server
from .tools import ensure_tools, find_gapura, find_generator


@dataclasses.dataclass
class Bench:
    """What every run needs: the options, the binaries and the shared state."""
    opts: Options
    generator: str
    gapura_bin: str
    loadtest_bin: str
    work: str  # private temp dir: configs, pid files, server logs
    log_file: str  # raw log beside the report
    procs: Processes
    ports: Ports


def log_section(b, title, paths):
    """Appends TITLE and every non-empty file of PATHS (each once) to the raw log."""
    with open(b.log_file, "ab") as log:
        log.write(f"===== {title}\n".encode())
        done = set()
        for path in paths:
            if path in done or not os.path.isfile(path) or os.path.getsize(path) == 0:
                continue
            done.add(path)
            log.write(f"--- {os.path.basename(path)}\n".encode())
            with open(path, "rb") as f:
                log.write(f.read())


def run_one(b, sc_name, srv):
    """Start, check, warm up, measure, stop. Returns the run's result: its
    status ("ok", "failed: ..." or "skipped: ...") and, where measured, its
    figures as the report prints them."""
    sc = SCENARIOS[sc_name]
    opts = b.opts
    directory = os.path.join(b.work, sc_name, srv)
    server_dir = os.path.join(directory, "server")
    os.makedirs(directory, exist_ok=True)
    res = {"status": "ok"}
    port = b.ports.next()
    admin = b.ports.next() if srv == "gapura" else 0
    upstream_port = 0
    upstream = None

    if sc.kind == "proxy":
        upstream_port = b.ports.next()
        upstream, _ = start_server(b, "nginx", "respond", os.path.join(directory, "upstream"),
                                   opts.load_core, upstream_port, 0, 0)
        if upstream is None:
            res["status"] = "failed: upstream nginx did not start"
            return res

    server, reason = start_server(b, srv, sc.kind, server_dir, opts.server_core,
                                  port, admin, upstream_port)
    if server is None:
        res["status"] = reason
        b.procs.stop(upstream)
        log_section(b, f"{sc_name} {srv} (did not start)",
                    sorted(glob.glob(os.path.join(server_dir, "*.log")))
                    + sorted(glob.glob(os.path.join(server_dir, "*.check"))))
        return res

    answer_bytes, reason = check_answer(b, port)
    if answer_bytes is None:
        res["status"] = reason
        b.procs.stop(server)
        b.procs.stop(upstream)
        log_section(b, f"{sc_name} {srv} (wrong answer)",
                    [os.path.join(b.work, "answer.hdr")]
                    + sorted(glob.glob(os.path.join(server_dir, "*.log"))))
        return res
    res["answer_bytes"] = answer_bytes

    json_path = os.path.join(directory, "load.json")
    out_path = os.path.join(directory, "load.out")
    open_us = warm_up(b, sc, port, directory)
    cmd = load_command(b, sc.connections, sc.depth, opts.duration, port, json_path)
    m = measure(b, server.pid, out_path, open_us, cmd)

    if not is_running(server.pid):
        res["status"] = f"failed: {srv} exited during the run"
    b.procs.stop(server)
    b.procs.stop(upstream)
    if b.generator == "gapura-loadtest":
        add_loadtest_summary(out_path, json_path, m)
    log_section(b, f"{sc_name} {srv}: {shown(b, cmd)}",
                [out_path, json_path, *sorted(glob.glob(os.path.join(server_dir, "*.log")))])

    return figures(b, last_summary(out_path), m, res)


def figures(b, w, m, res):
    """Fills RES with one run's figures from the generator's summary W and the
    measurement M, as the report prints them; or sets its status to why not."""
    if w is None:
        res["status"] = f"failed: {b.generator} gave no summary (exit {m.rc})"
        return res
    if (w.get("requests") or "0") == "0":
        res["status"] = "failed: no responses"
        return res
    if (w.get("missing_shards") or "0") != "0":
        res["status"] = f"failed: {w['missing_shards']} gapura-loadtest shard(s) did not report"
        return res

    def count(key):
        return int(w.get(key) or 0)

    requests = count("requests")
    duration_us = count("duration_us")
    if duration_us <= 0 or m.wall_us <= 0:
        res["status"] = f"failed: {b.generator} reported an empty measured window"
        return res
    socket_errors = sum(count(k) for k in ("connect", "read", "write", "timeout", "parse"))
    all_responses = requests + count("warmup_requests")
    res.update(
        requests=w["requests"],
        warmup_requests=w.get("warmup_requests") or "0",
        p50_us=w.get("p50_us", ""),
        p99_us=w.get("p99_us", ""),
        non2xx=count("status"),
        socket_errors=socket_errors,
        errors=socket_errors + count("status"),
    )
    # The generator's CPU per response over its whole process (warm-up included
    # on both sides of the division): its own count where it reports one
    # (gapura-loadtest's cpu.per_request_us), else /proc.
    res["gen_proc_us"] = "%.2f" % (m.gen_ticks / TICKS * 1e6 / all_responses)
    res["gen_cpu_us"] = w.get("gen_cpu_us") or res["gen_proc_us"]
    # The server's figures over the measured window, per response.
    ticks = m.user_ticks + m.sys_ticks
    res["rps"] = "%.1f" % (requests / (duration_us / 1e6))
    res["cpu_us"] = "%.3f" % (ticks / TICKS * 1e6 / requests)
    res["user_us"] = "%.3f" % (m.user_ticks / TICKS * 1e6 / requests)
    res["sys_us"] = "%.3f" % (m.sys_ticks / TICKS * 1e6 / requests)
    res["busy_pct"] = "%.1f" % (ticks / TICKS / (m.wall_us / 1e6) * 100)
    return res


def compare(opts, command_line, procs, work):
    """Everything after the options: tools, builds, runs and the report, with
    WORK as the private temp dir. Returns the exit status."""
    tools = ["curl", "taskset"]
    if needs_nginx(opts):
        tools.append("nginx")
    if "haproxy" in opts.servers:
        tools.append("haproxy")
    ensure_tools(tools)
    gapura_bin = find_gapura(opts)
    generator, loadtest_bin, note = find_generator(opts)
    if generator == "wrk":
        ensure_tools(["wrk"])

    nofile = raise_nofile()
    prepare_wrk_scripts(work)

    os.makedirs(opts.results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = os.path.join(opts.results_dir, f"compare-{stamp}.md")
    log_file = os.path.join(opts.results_dir, f"compare-{stamp}.log")
    open(log_file, "w").close()
    b = Bench(opts, generator, gapura_bin, loadtest_bin, work, log_file, procs,
              Ports(opts.port_base))

    emit(report_header(b, command_line, nofile, note), report, "w")
    results = {}
    for sc_name in opts.scenarios:
        for srv in opts.servers:
            say(f"{sc_name}: {srv}")
            res = results[sc_name, srv] = run_one(b, sc_name, srv)
            if res["status"] != "ok":
                say(f"{sc_name}: {srv}: {res['status']}")
        emit(scenario_table(b, sc_name, results), report, "a")
    say(f"report: {report} (raw {generator} output and server logs: {log_file})")

    # Non-zero when a run failed (a server that is skipped on purpose is not a failure).
    return 1 if any(r["status"].startswith("failed:") for r in results.values()) else 0
