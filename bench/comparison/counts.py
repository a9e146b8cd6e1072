"""The per-request counts that explain the CPU figures: the server's system
calls, io_uring_enter calls, submitted SQEs, poll arms and context switches
(`perf stat` on its processes and threads) and the machine's TCP segments
(`Tcp OutSegs` of /proc/net/snmp, which nstat shows as TcpOutSegs).

They come from a separate, shorter run of the same load right after the
measured one, so the tracepoints' own cost stays out of the CPU figures;
perf is attached before the generator starts and stopped after it exits, and
every count is divided by the responses the generator counted in that run."""
import os
import shutil
import signal
import subprocess
import time

from .common import read_text
from .procs import descendants

# (column label, perf event), in the report's order.
EVENTS = [
    ("syscalls", "raw_syscalls:sys_enter"),
    ("io_uring_enter", "syscalls:sys_enter_io_uring_enter"),
    ("SQEs", "io_uring:io_uring_submit_req"),
    ("poll arms", "io_uring:io_uring_poll_arm"),
    ("context switches", "context-switches"),
]
SEGMENTS = "TCP segments"
LABELS = [label for label, _ in EVENTS] + [SEGMENTS]


def usable_events():
    """(the EVENTS perf can count on this machine, a note naming what it
    cannot, or why there is no perf at all)."""
    if not shutil.which("perf"):
        return [], "perf is not installed (Debian: linux-perf); no per-request counts"
    usable, missing = [], []
    for label, event in EVENTS:
        try:
            r = subprocess.run(["perf", "stat", "-x,", "-e", event, "--", "true"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=20)
            ok = r.returncode == 0 and b"<not supported>" not in r.stderr
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        (usable if ok else missing).append((label, event))
    note = ""
    if missing:
        note = ("perf cannot count " + ", ".join(e for _, e in missing)
                + " here (perf_event_paranoid, tracefs or kernel version); those columns are empty")
    return usable, note


def tcp_out_segments():
    """The kernel's Tcp OutSegs counter (every TCP segment sent on the
    machine), or None when /proc/net/snmp cannot be read."""
    rows = [line.split() for line in read_text("/proc/net/snmp").splitlines()
            if line.startswith("Tcp:")]
    if len(rows) < 2 or "OutSegs" not in rows[0]:
        return None
    return int(rows[1][rows[0].index("OutSegs")])


def parse_perf(path, events):
    """{label: count} from `perf stat -x,` output; uncounted events are left out."""
    by_event = {event: label for label, event in events}
    counts = {}
    for line in read_text(path).splitlines():
        fields = line.split(",")
        if len(fields) < 3 or fields[2] not in by_event:
            continue
        if fields[0].strip().isdigit():
            counts[by_event[fields[2]]] = counts.get(by_event[fields[2]], 0) + int(fields[0])
    return counts


def count_run(b, server_pid, cmd, out_path):
    """Runs the generator command CMD once with perf attached to the server's
    processes. Returns (the raw counts as {label: count}, its exit status)."""
    counts = {}
    perf = None
    if b.count_events:
        pids = [server_pid, *descendants(server_pid)]
        perf_out = out_path + ".perf"
        perf = b.procs.start(["perf", "stat", "-x,", "-o", perf_out, "-e",
                              ",".join(event for _, event in b.count_events),
                              "-p", ",".join(str(p) for p in pids)], out_path + ".perf-log")
        time.sleep(0.5)  # attached: perf opens its counters within a few ms
    seg0 = tcp_out_segments()
    rc = b.procs.wait(b.procs.start(cmd, out_path))
    seg1 = tcp_out_segments()
    if perf is not None:
        try:
            os.kill(perf.pid, signal.SIGINT)  # perf stat prints its counts on SIGINT
        except ProcessLookupError:
            pass
        b.procs.wait(perf)
        counts = parse_perf(perf_out, b.count_events)
    if seg0 is not None and seg1 is not None:
        counts[SEGMENTS] = seg1 - seg0
    return counts, rc


def per_request(counts, responses):
    """{label: count per response, as text} for the report."""
    if responses <= 0:
        return {}
    return {label: "%.2f" % (n / responses) for label, n in counts.items()}
