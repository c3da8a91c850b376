"""Triton's load generator perf_analyzer (PyPI perf-analyzer) drives the
real conv1d_server (CPU backend) through the inference protocol at
concurrency 1..8, once with tensors in the gRPC messages and once with
--shared-memory=system, and its reports are checked: a row per concurrency
with positive throughput and latencies, server-side statistics, and (from
the access log) request messages that carry tensor bytes only in the first
run. A third run drives conv1d_update as the sequence model it reports
(--sequence-length: every sequence a decode session stepped token by token)
and checks, from the server's metrics, that the sequences opened sessions
and closed them.

usage: perf_analyzer_test.py CONV1D_SERVER PERF_ANALYZER
exit 77 (skipped) when PERF_ANALYZER is missing or cannot run here
(scripts/install_oip_tools.sh says why it may not).
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

import oip_util
import server_launcher

oip_util.require("tritonclient.grpc")

B, D, L, W = 1, 64, 256, 4
X_BYTES = B * D * L * 4
CONCURRENCY = range(1, 9)


def run_pa(pa, url, data, report, *extra, model="conv1d_forward"):
    cmd = [pa, "-m", model, "-i", "grpc", "-u", url, "--input-data", data,
           f"--concurrency-range={CONCURRENCY.start}:{CONCURRENCY.stop - 1}:1",
           "--measurement-interval=300", "--stability-percentage=80", "--max-trials=10",
           "-f", report, *extra]
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    print(r.stdout[-3000:], r.stderr[-2000:], sep="\n", flush=True)
    if r.returncode != 0:
        raise AssertionError(f"perf_analyzer exited with {r.returncode}")
    if "error" in r.stdout.lower():
        raise AssertionError("perf_analyzer reported an error")
    return r.stdout


def check_report(report, stdout):
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    got = sorted(int(r["Concurrency"]) for r in rows)  # rows come by throughput
    if got != list(CONCURRENCY):
        raise AssertionError(f"report rows for concurrency {got}, expected {list(CONCURRENCY)}")
    for r in rows:
        if float(r["Inferences/Second"]) <= 0 or float(r["p50 latency"]) <= 0:
            raise AssertionError(f"non-positive throughput or latency: {r}")
        if float(r["p99 latency"]) < float(r["p50 latency"]):
            raise AssertionError(f"p99 below p50: {r}")
    # Server-side figures come from ModelStatistics.
    if "Server:" not in stdout or not re.search(r"Execution count: [1-9]", stdout):
        raise AssertionError("no server-side statistics in the report")
    print("report rows:", [(r["Concurrency"], r["Inferences/Second"]) for r in rows])


def metric(url, name):
    """The sum of a metric's samples from the server's Prometheus text."""
    import urllib.request
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def sequence_run(server, pa, tmp, rng):
    """conv1d_update driven as a sequence model: x of one token per request,
    the weights a registered set named by a request parameter."""
    import tritonclient_test as tc
    d, w = 64, 4
    data = os.path.join(tmp, "seq.json")
    with open(data, "w") as f:
        json.dump({"data": [{"x": {"content": [rng.uniform(-1, 1) for _ in range(d)],
                                   "shape": [1, d, 1]}}]}, f)
    metrics = f"127.0.0.1:{server_launcher.free_port()}"
    with oip_util.Server(server, f"--metrics_listen={metrics}") as s:
        import numpy as np
        tc.register_weights(s.url, "seqw", np.ones((d, w)), np.zeros(d))
        report = os.path.join(tmp, "seq.csv")
        out = run_pa(pa, s.url, data, report, "--sequence-length=8",
                     "--request-parameter=weights_name:seqw:string", model="conv1d_update")
        check_report(report, out)
        sequences = sum(int(n) for n in re.findall(r"Sequence count: (\d+)", out))
        opened = metric(metrics, 'conv1d_sessions_total{event="opened"}')
        still_open = metric(metrics, "conv1d_sessions_open")
    print(f"sequences: {sequences} reported, {opened:.0f} sessions opened, "
          f"{still_open:.0f} open at the end")
    if sequences <= 0 or opened < sequences:
        raise AssertionError("perf_analyzer's sequences did not open decode sessions")
    # perf_analyzer ends the sequences it started; at most one per
    # concurrent context may still be open when it stops measuring.
    if still_open > CONCURRENCY.stop - 1:
        raise AssertionError(f"{still_open} sessions left open")


def infer_request_bytes(access_log):
    sizes = []
    with open(access_log) as f:
        for line in f:
            if "method=ModelInfer" in line and "code=OK" in line:
                sizes.append(int(re.search(r"request_bytes=(\d+)", line).group(1)))
    return sizes


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    server, pa = sys.argv[1], sys.argv[2]
    try:
        v = subprocess.run([pa, "--version"], capture_output=True, text=True, timeout=30)
        runs = v.returncode == 0
        why = (v.stderr or v.stdout).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        runs, why = False, str(e)
    if not runs:
        print(f"SKIP: {pa} does not run here: {why}")
        return oip_util.SKIP

    import random
    rng = random.Random(7)

    def values(n):
        return [rng.uniform(-1, 1) for _ in range(n)]
    tensors = {"x": ([B, D, L], values(B * D * L)), "weight": ([D, W], values(D * W))}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.json")
        with open(data, "w") as f:
            json.dump({"data": [{k: {"content": c, "shape": s} for k, (s, c) in
                                 tensors.items()}]}, f)
        log = os.path.join(tmp, "access.log")
        with oip_util.Server(server, f"--access_log={log}") as s:
            out = run_pa(pa, s.url, data, os.path.join(tmp, "grpc.csv"))
            check_report(os.path.join(tmp, "grpc.csv"), out)
        sizes = infer_request_bytes(log)
        if not sizes or min(sizes) < X_BYTES:
            raise AssertionError(f"gRPC run: requests of {min(sizes or [0])} bytes, "
                                 f"expected at least x's {X_BYTES}")

        # perf_analyzer's shared-memory mode refuses models with optional
        # inputs: the server then requires every input, and the data has all.
        tensors["bias"] = ([D], values(D))
        tensors["initial_states"] = ([B, D, W - 1], values(B * D * (W - 1)))
        with open(data, "w") as f:
            json.dump({"data": [{k: {"content": c, "shape": s} for k, (s, c) in
                                 tensors.items()}]}, f)
        log_shm = os.path.join(tmp, "access_shm.log")
        with oip_util.Server(server, f"--access_log={log_shm}",
                             "--oip_require_all_inputs") as s:
            out = run_pa(pa, s.url, data, os.path.join(tmp, "shm.csv"),
                         "--shared-memory=system", f"--output-shared-memory-size={X_BYTES}")
            check_report(os.path.join(tmp, "shm.csv"), out)
        with open(log_shm) as f:
            text = f.read()
        if "method=SystemSharedMemoryRegister" not in text:
            raise AssertionError("shared-memory run registered no region")
        sizes = infer_request_bytes(log_shm)
        if not sizes or max(sizes) >= X_BYTES // 16:
            raise AssertionError(f"shared-memory run: requests of up to {max(sizes or [0])} "
                                 "bytes carry tensor data")

        sequence_run(server, pa, tmp, rng)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
