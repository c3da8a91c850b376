#!/usr/bin/env python3
"""Joins conv1d_load --json results into bench/results/e2e-<device>-<date>.csv.

usage: e2e_to_csv.py OUT.csv BACKEND:WORKLOAD:FILE.json ...
Columns: backend,workload,concurrency,throughput_rps,gbps,p50_us,p99_us
BACKEND is a server label: gpu, echo, or either with "-strings" (run with
--host_tensor_min_bytes=-1). The printed ratio divides gpu by the faster of
the echo servers (the transport ceiling).
"""
import csv
import json
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for spec in sys.argv[2:]:
        backend, workload, path = spec.split(":", 2)
        with open(path, encoding="utf-8") as f:
            steps = json.load(f)["steps"]
        for s in steps:
            rows.append([backend, workload, s["concurrency"], f'{s["throughput_rps"]:.1f}',
                         f'{s["gbps"]:.3f}', f'{s["p50_us"]:.0f}', f'{s["p99_us"]:.0f}'])
    with open(sys.argv[1], "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["backend", "workload", "concurrency", "throughput_rps", "gbps",
                    "p50_us", "p99_us"])
        w.writerows(rows)
    # gpu/echo ratio at the highest concurrency, per workload.
    by = {(r[0], r[1], int(r[2])): float(r[3]) for r in rows}
    print(f'{"workload":<12} {"conc":>5} {"gpu req/s":>10} {"echo req/s":>10} {"gpu/echo":>8}')
    for (backend, workload, conc), rps in sorted(by.items()):
        if backend != "gpu":
            continue
        echoes = [v for (b, w, c), v in by.items()
                  if b.startswith("echo") and w == workload and c == conc]
        echo = max(echoes) if echoes else 0
        ratio = f"{rps / echo:.2f}" if echo else "-"
        print(f"{workload:<12} {conc:>5} {rps:>10.0f} {echo:>10.0f} {ratio:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
