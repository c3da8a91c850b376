#!/usr/bin/env python3
"""Scale-out check (ctest label `e2e`): three echo-backend servers on loopback,
one load generator balancing over all of them with --target=a,b,c.

Passes when every server's conv1d_requests_total (read from its own /metrics)
grew by a fair share of the run -- each within 20 % of a third -- no RPC ended
with a non-OK code, the load generator reported no errors, and every server
exits 0 on SIGTERM.

  scale_out_test.py --server BIN --client BIN --load BIN [--seconds S]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

from server_launcher import Server

REPLICAS = 3
FAIR_TOLERANCE = 0.20
SAMPLE_RE = re.compile(r'^conv1d_requests_total\{([^}]*)\}\s+(\S+)$', re.M)


def request_counts(metrics_port):
    """{(method, code): count} from one server's conv1d_requests_total."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    counts = {}
    for labels, value in SAMPLE_RE.findall(text):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (kv.get("method", ""), kv.get("code", ""))
        counts[key] = counts.get(key, 0.0) + float(value)
    if "conv1d_requests_total" not in text:
        raise RuntimeError(f"no conv1d_requests_total on :{metrics_port}/metrics")
    return counts


def load_totals(report):
    """(requests, errors) summed over the steps of a conv1d_load --json report."""
    steps = report.get("steps") if isinstance(report, dict) else report
    if isinstance(steps, dict):
        steps = [steps]
    if not steps:
        steps = [report]
    req = sum(int(s.get("requests", 0)) for s in steps)
    err = sum(max(int(s.get("errors", 0)), int(s.get("errors_total", 0))) for s in steps)
    if isinstance(report, dict):
        err = max(err, int(report.get("total_errors", 0)))
    return req, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--load", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="conv1d-scale-")
    servers, logs = [], []
    failures = []
    try:
        for i in range(REPLICAS):
            log = open(os.path.join(tmp, f"server{i}.log"), "w+")
            logs.append(log)
            servers.append(Server(a.server, a.client, "--backend=echo", "--drain_timeout_s=5",
                                  "--log_level=info", output=log, start_timeout_s=30))
        targets = [srv.target for srv in servers]
        metrics_ports = [srv.metrics_port for srv in servers]
        procs = [srv.proc for srv in servers]
        before = [request_counts(m) for m in metrics_ports]

        report_path = os.path.join(tmp, "load.json")
        # Inline weights (registered sets live on one replica only); channels a
        # multiple of the replicas, since calls rotate over channels and each
        # channel is bound to one replica.
        window_s = a.seconds / 3
        cmd = [a.load, f"--target={','.join(targets)}", f"--json={report_path}",
               "--op=fwd", "--shape=1x512x64", "--concurrency=6",
               f"--channels={2 * REPLICAS}", f"--warmup_s={window_s / 2}",
               f"--window_s={window_s}", f"--duration_s={2 * window_s}",
               "--stable_windows=2", "--max_trials=3",
               "--progress=false"]
        print("running:", " ".join(cmd))
        run = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=a.seconds * 10 + 60)
        if run.returncode != 0:
            failures.append(f"conv1d_load exited {run.returncode}:\n{run.stdout}{run.stderr}")
        after = [request_counts(m) for m in metrics_ports]

        deltas, bad_codes = [], {}
        for i, (b, c) in enumerate(zip(before, after)):
            d = {k: c[k] - b.get(k, 0.0) for k in c if c[k] - b.get(k, 0.0) > 0}
            deltas.append(sum(d.values()))
            for (method, code), n in d.items():
                if code != "OK":
                    bad_codes[(targets[i], method, code)] = n
        total = sum(deltas)
        print("requests per server:", dict(zip(targets, deltas)))
        if total <= 0:
            failures.append("no request reached any server")
        else:
            share = total / REPLICAS
            for t, d in zip(targets, deltas):
                if abs(d - share) > FAIR_TOLERANCE * share:
                    failures.append(f"{t} served {d:.0f} of {total:.0f} requests, outside "
                                    f"{share:.0f} +/- {FAIR_TOLERANCE:.0%}")
        if bad_codes:
            failures.append(f"RPCs ended with non-OK codes: {bad_codes}")
        if os.path.exists(report_path):
            req, err = load_totals(json.load(open(report_path)))
            print(f"load generator: {req} requests, {err} errors")
            if err:
                failures.append(f"load generator counted {err} failed requests")
            if req <= 0:
                failures.append("load generator reported no requests")
            elif total + 0.5 < req:
                failures.append(f"servers counted {total:.0f} requests, fewer than the "
                                f"{req} the load generator completed")
        else:
            failures.append("conv1d_load wrote no --json report")

        for t, p in zip(targets, procs):
            p.send_signal(signal.SIGTERM)
        for t, p in zip(targets, procs):
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            if rc != 0:
                failures.append(f"server {t} exited {rc} after SIGTERM (want 0)")
    except Exception as e:  # a setup failure is a test failure, with the logs
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        for srv in servers:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()
        if failures:
            for i, log in enumerate(logs):
                log.seek(0)
                tail = log.read()[-2000:]
                print(f"--- server {i} log tail ---\n{tail}", file=sys.stderr)
        for log in logs:
            log.close()

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print("PASS: load spread evenly over", REPLICAS, "replicas")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
