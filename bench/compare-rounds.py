#!/usr/bin/env python3
"""Runs bench/compare.py several times and summarises the server CPU per
request of each server and scenario across the rounds.

A shared machine's neighbours only ever add CPU to a run, and a single run of
each server can land in a quiet or a busy moment: the peers' figures move by
about 10 % between runs. Repeating the whole comparison interleaves the
servers over time; the median and the lower quartile of each server's rounds,
and their ratios to nginx and HAProxy, are the steadier figures.

  bench/compare-rounds.py --rounds 5 [compare.py arguments...]

For example:

  bench/compare-rounds.py --rounds 5 --servers gapura,nginx,haproxy \\
      --scenarios proxy-c64,proxy-c256 --duration 4 --warmup 1 --no-build

Each round's report stays in bench/results/rounds-STAMP/round-N/.
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_report(path):
    """{scenario: {server: (cpu_us, p99_text)}} from one compare.py report,
    whose tables (comparison/report.py) give p99 in the fourth column and
    CPU µs/req in the fifth."""
    out = {}
    scenario = None
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                scenario = line[3:].strip()
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if scenario is None or len(cells) < 6 or not line.startswith("| "):
                continue
            try:
                cpu = float(cells[4])
            except ValueError:
                continue
            out.setdefault(scenario, {})[cells[0]] = (cpu, cells[3])
    return out


def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-h", "--help", action="store_true")
    args, rest = ap.parse_known_args()
    if args.help:
        print(__doc__)
        return
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    base = os.path.join(HERE, "results", "rounds-" + time.strftime("%Y%m%d-%H%M%S"))
    runs = []
    for i in range(args.rounds):
        d = os.path.join(base, f"round-{i + 1}")
        os.makedirs(d, exist_ok=True)
        cmd = [sys.executable, os.path.join(HERE, "compare.py"), *rest, "--results-dir", d]
        print(f"round {i + 1}/{args.rounds}: {' '.join(cmd)}", file=sys.stderr)
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit(f"compare.py failed in round {i + 1} (exit {r.returncode}); see {d}")
        reports = sorted(glob.glob(os.path.join(d, "compare-*.md")))
        if not reports:
            sys.exit(f"no report in {d}")
        runs.append(parse_report(reports[-1]))
    print(f"# {args.rounds} rounds of: bench/compare.py {' '.join(rest)}\n")
    summarise(runs)
    print(f"Reports: {os.path.relpath(base, os.path.dirname(HERE))}/round-*/")


def summarise(runs):
    """One table per scenario: each server's rounds, median and lower
    quartile, and their ratios to nginx, HAProxy and the floor."""
    print("Server CPU µs per request; each round runs every server once, in turn.\n")
    for sc in runs[0]:
        servers = list(runs[0][sc])
        print(f"## {sc}\n")
        # The floor, when it ran: the minimal server doing only the
        # essential work; each server's ratio to it in the same rounds.
        floor = next((f for f in ("floor-monoio", "floor-ring") if f in servers), None)
        floor_cols = (f" | median vs {floor} | lower quartile vs {floor} "
                      f"| per-round median vs {floor}") if floor else ""
        # The floor that also answers with a Date line and keeps a timer
        # pending (floor-proxy --dated), when it ran: the per-round ratio.
        dated = "floor-monoio-dated" if "floor-monoio-dated" in servers else None
        if dated:
            floor_cols += f" | per-round median vs {dated}"
        print("| server | rounds (CPU µs/req) | median | lower quartile "
              "| median vs nginx | lower quartile vs nginx | median vs haproxy "
              f"| lower quartile vs haproxy{floor_cols} | p99 per round |")
        print("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" * 3 if floor else "")
              + ("---:|" if dated else "") + "---|")
        stats = {}
        for srv in servers:
            vals = [r[sc][srv][0] for r in runs if srv in r.get(sc, {})]
            if not vals:
                continue
            q = statistics.quantiles(vals, n=4)[0] if len(vals) >= 2 else vals[0]
            stats[srv] = (vals, statistics.median(vals), q)
        def per_round(srv, base):
            # Each round's own ratio cancels load that drifts slower than
            # a round.
            paired = [r[sc][srv][0] / r[sc][base][0] for r in runs
                      if srv in r.get(sc, {}) and r[sc].get(base, (0,))[0] > 0]
            return f"{statistics.median(paired):.2f}×" if paired else "—"

        for srv, (vals, med, q) in stats.items():
            def vs(peer, i):
                p = stats.get(peer)
                return f"{(med if i == 1 else q) / p[i]:.2f}×" if p else "—"
            p99 = ", ".join(r[sc][srv][1] for r in runs if srv in r.get(sc, {}))
            cols = ""
            if floor:
                cols = f" | {vs(floor, 1)} | {vs(floor, 2)} | {per_round(srv, floor)}"
            if dated:
                cols += f" | {per_round(srv, dated)}"
            print(f"| {srv} | {', '.join(f'{v:.2f}' for v in vals)} | {med:.2f} | {q:.2f} "
                  f"| {vs('nginx', 1)} | {vs('nginx', 2)} | {vs('haproxy', 1)} "
                  f"| {vs('haproxy', 2)}{cols} | {p99} |")
        print()


if __name__ == "__main__":
    main()
