#!/usr/bin/env python3
"""One table per scenario from a bench/compare.py report: every layout,
generator and server of the scenario in rows, with the server's CPU per
request, its ratios to nginx and HAProxy, and the per-request counts of the
counting run. docs/performance.md's comparison tables are this program's
output.

  bench/compare-summary.py bench/results/compare-STAMP.md

Python 3.11, standard library only; reads the report, prints markdown.
"""
import collections
import sys


def read_report(path):
    """{scenario: [(layout, generator, {server: figures}, {server: counts})]}
    in the report's order; figures and counts are the table cells after the
    server's name."""
    scenarios = collections.OrderedDict()
    run = None
    table = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("## "):
                parts = [p.strip() for p in line[3:].split("·")]
                layout = parts[1] if len(parts) == 3 else ""
                run = (layout, parts[-1], {}, {})
                scenarios.setdefault(parts[0], []).append(run)
                table = None
            elif run is None:
                continue
            elif line.startswith("| server | req/s"):
                table = run[2]
            elif line.startswith("| server | syscalls"):
                table = run[3]
            elif line.startswith("| ") and table is not None:
                cells = [c.strip() for c in line.strip("|").split("|")]
                table[cells[0]] = cells[1:]
            elif not line.startswith("|"):
                table = None
    return scenarios


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-3].strip())
    for sc, runs in read_report(sys.argv[1]).items():
        print(f"\n### {sc}\n")
        print("| layout | generator | server | req/s | p99 | CPU µs/req | user / sys | vs nginx "
              "| vs HAProxy | busy | syscalls | io_uring_enter | SQEs | poll arms |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for layout, gen, figures, counts in runs:
            first = True
            for srv, c in figures.items():
                lead = f"| {(layout or '—') if first else ''} | {gen if first else ''} "
                first = False
                if len(c) < 11:  # a failed or skipped run: its status
                    print(f"{lead}| {srv} | {c[0]} |" + " |" * 10)
                    continue
                rps, _p50, p99, cpu, split, vs_nginx, vs_haproxy, _rps_ratio, busy = c[:9]
                k = (counts.get(srv) or []) + [""] * 4
                bold = (lambda x: f"**{x}**") if srv == "gapura" else (lambda x: x)
                print(f"{lead}| {bold(srv)} | {int(float(rps)):,} | {p99} | {bold(cpu)} | {split} "
                      f"| {vs_nginx} | {vs_haproxy} | {busy} | {k[0]} | {k[1]} | {k[2]} | {k[3]} |")


if __name__ == "__main__":
    main()
