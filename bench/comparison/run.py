"""The runs: one per scenario and server (start, check, warm up, measure,
stop) with its figures, and the whole comparison around them."""
import dataclasses
import glob
import os
import time

from .common import say
from .counts import count_run, per_request, usable_events
from .cpu import TICKS, measure
from .load import (add_loadtest_summary, last_summary, load_command, prepare_wrk_scripts,
                   shown, warm_up)
from .ports import Ports
from .procs import Processes, is_running, raise_nofile
from .report import emit, report_header, scenario_table
from .scenarios import SCENARIOS, Options, needs_nginx, runs_of
from .servers import check_answer, start_server
from .tools import ensure_tools, find_floor, find_gapura, find_generators


@dataclasses.dataclass
class Bench:
    """What every run needs: the options, the binaries and the shared state."""
    opts: Options
    generators: list  # the passes, in order
    generator: str  # the pass running now
    gapura_bin: str
    floor_bin: str
    loadtest_bin: str
    work: str  # private temp dir: configs, pid files, server logs
    log_file: str  # raw log beside the report
    procs: Processes
    ports: Ports
    count_events: list  # (label, perf event) perf can count here
    counts_note: str  # why some or all counts are missing


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


def run_one(b, sc_name, layout, srv):
    """Start, check, warm up, measure, count, stop. Returns the run's result:
    its status ("ok", "failed: ..." or "skipped: ...") and, where measured,
    its figures as the report prints them. LAYOUT places a proxy scenario's
    upstream: on the load core ("saturated") or on the server's ("shared")."""
    sc = SCENARIOS[sc_name]
    opts = b.opts
    directory = os.path.join(b.work, b.generator, sc_name, layout or "", srv)
    server_dir = os.path.join(directory, "server")
    os.makedirs(directory, exist_ok=True)
    res = {"status": "ok"}
    title = " ".join(x for x in (b.generator, sc_name, layout, srv) if x)
    port = b.ports.next()
    admin = b.ports.next() if srv.startswith("gapura") else 0
    upstream_port = 0
    upstream = None

    if sc.kind == "proxy":
        upstream_port = b.ports.next()
        upstream_core = opts.server_core if layout == "shared" else opts.load_core
        upstream, _ = start_server(b, "nginx", "respond", os.path.join(directory, "upstream"),
                                   upstream_core, upstream_port, 0, 0)
        if upstream is None:
            res["status"] = "failed: upstream nginx did not start"
            return res

    server, reason = start_server(b, srv, sc.kind, server_dir, opts.server_core,
                                  port, admin, upstream_port)
    if server is None:
        res["status"] = reason
        b.procs.stop(upstream)
        log_section(b, f"{title} (did not start)",
                    sorted(glob.glob(os.path.join(server_dir, "*.log")))
                    + sorted(glob.glob(os.path.join(server_dir, "*.check"))))
        return res

    answer_bytes, reason = check_answer(b, port)
    if answer_bytes is None:
        res["status"] = reason
        b.procs.stop(server)
        b.procs.stop(upstream)
        log_section(b, f"{title} (wrong answer)",
                    [os.path.join(b.work, "answer.hdr")]
                    + sorted(glob.glob(os.path.join(server_dir, "*.log"))))
        return res
    res["answer_bytes"] = answer_bytes

    json_path = os.path.join(directory, "load.json")
    out_path = os.path.join(directory, "load.out")
    open_us = warm_up(b, sc, port, directory)
    cmd = load_command(b, sc.connections, sc.depth, opts.duration, port, json_path)
    m = measure(b, server.pid, out_path, open_us, cmd)
    if opts.counts_secs > 0 and is_running(server.pid):
        res["counts"] = counts_per_request(b, sc, port, server.pid, directory)

    if not is_running(server.pid):
        res["status"] = f"failed: {srv} exited during the run"
    b.procs.stop(server)
    b.procs.stop(upstream)
    if b.generator == "gapura-loadtest":
        add_loadtest_summary(out_path, json_path, m)
    log_section(b, f"{title}: {shown(b, cmd)}",
                [out_path, json_path, os.path.join(directory, "counts.out"),
                 os.path.join(directory, "counts.out.perf"), *sorted(glob.glob(os.path.join(server_dir, "*.log")))])

    return figures(b, last_summary(out_path), m, res)


def counts_per_request(b, sc, port, server_pid, directory):
    """The counting run after the measured one (comparison/counts.py): the
    same load for --counts seconds with no warm-up. Returns {label: count
    per response, as text}; empty when the run failed."""
    counts_json = os.path.join(directory, "counts.json")
    counts_out = os.path.join(directory, "counts.out")
    cmd = load_command(b, sc.connections, sc.depth, b.opts.counts_secs, port, counts_json,
                       warmup=False)
    counts, rc = count_run(b, server_pid, cmd, counts_out)
    if b.generator == "gapura-loadtest":
        add_loadtest_summary(counts_out, counts_json, None)
    w = last_summary(counts_out)
    if rc != 0 or w is None:
        return {}
    return per_request(counts, int(w.get("requests") or 0) + int(w.get("warmup_requests") or 0))


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
    floor_bin = find_floor(opts)
    generators, loadtest_bin, note = find_generators(opts)
    if "wrk" in generators:
        ensure_tools(["wrk"])
    count_events, counts_note = ([], "") if opts.counts_secs == 0 else usable_events()

    nofile = raise_nofile()
    prepare_wrk_scripts(work)

    os.makedirs(opts.results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = os.path.join(opts.results_dir, f"compare-{stamp}.md")
    log_file = os.path.join(opts.results_dir, f"compare-{stamp}.log")
    open(log_file, "w").close()
    b = Bench(opts, generators, generators[0], gapura_bin, floor_bin, loadtest_bin, work,
              log_file, procs,
              Ports(opts.port_base), count_events, counts_note)

    emit(report_header(b, command_line, nofile, note), report, "w")
    results = {}
    for generator in generators:
        b.generator = generator
        for sc_name in opts.scenarios:
            for layout in runs_of(opts, sc_name):
                run = (generator, sc_name, layout)
                for srv in opts.servers:
                    what = " ".join(x for x in (generator, sc_name, layout, srv) if x)
                    say(what)
                    res = results[run + (srv,)] = run_one(b, sc_name, layout, srv)
                    if res["status"] != "ok":
                        say(f"{what}: {res['status']}")
                emit(scenario_table(b, sc_name, layout, results), report, "a")
    say(f"report: {report} (raw generator output and server logs: {log_file})")

    # Non-zero when a run failed (a server that is skipped on purpose is not a failure).
    return 1 if any(r["status"].startswith("failed:") for r in results.values()) else 0
