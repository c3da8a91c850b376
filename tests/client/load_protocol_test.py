#!/usr/bin/env python3
"""conv1d_load's protocol comparison against a live conv1d_server (CPU
backend): --protocol=v1,oip --memory=grpc,system over two presets writes a
CSV row per protocol, memory, workload and concurrency, every answer checked
against the CPU reference (none wrong); the server's access log shows the
inference protocol's ModelInfer calls, the regions registered and
unregistered, and requests that carry tensor bytes only in the grpc runs;
bad values are usage errors (exit 2) naming the flag.

usage: load_protocol_test.py SERVER CLIENT LOAD
"""
import csv
import os
import re
import sys
import unittest

from e2e_util import run, tmpdir
from server_launcher import Server

SERVER, CLIENT, LOAD = sys.argv[1:4]
COLUMNS = ["protocol", "memory", "workload", "concurrency", "throughput_rps", "p50_us",
           "p99_us"]


class ProtocolMatrix(unittest.TestCase):
    def test_rows_for_every_protocol_and_memory(self):
        d = tmpdir()
        out, log = os.path.join(d, "p.csv"), os.path.join(d, "access.log")
        with Server(SERVER, CLIENT, "--backend=cpu", f"--access_log={log}") as srv:
            r = run([LOAD, f"--target={srv.target}", "--protocol=v1,oip",
                     "--memory=grpc,system", "--preset=small-fwd,decode-fwd",
                     "--concurrency=1,2", "--duration_s=0.3", "--warmup_s=0.1",
                     "--stable_windows=1", "--verify_fraction=1", f"--csv={out}"],
                    timeout=100)
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, newline="") as f:
            reader = csv.DictReader(f)
            self.assertEqual(reader.fieldnames[:len(COLUMNS)], COLUMNS)
            rows = list(reader)
        keys = sorted((r["protocol"], r["memory"], r["workload"], r["concurrency"]) for r in rows)
        want = sorted((p, m, w, c) for p in ("v1", "oip") for m in ("grpc", "system")
                      for w in ("small-fwd", "decode-fwd") for c in ("1", "2"))
        self.assertEqual(keys, want)
        for row in rows:
            self.assertGreater(float(row["throughput_rps"]), 0, row)
            self.assertGreater(int(row["requests"]), 0, row)
            self.assertEqual(int(row["errors"]), 0, row)
            self.assertGreater(int(row["verified"]), 0, row)
            self.assertEqual(int(row["wrong"]), 0, row)
            self.assertLessEqual(float(row["p50_us"]), float(row["p99_us"]), row)
        with open(log) as f:
            text = f.read()
        self.assertIn("method=ModelInfer", text)
        self.assertIn("method=Forward", text)
        # One region per protocol, registered and unregistered.
        for method in ("SystemSharedMemoryRegister", "SystemSharedMemoryUnregister"):
            self.assertEqual(len(re.findall(rf"method={method} .*code=OK", text)), 4, method)
        sizes = [int(m) for m in re.findall(r"method=(?:Forward|ModelInfer) .*"
                                            r"request_bytes=(\d+)", text)]
        x_bytes = 2048 * 128 * 4  # small-fwd's x
        self.assertTrue(any(s >= x_bytes for s in sizes), "no request carried x")
        self.assertGreater(sum(1 for s in sizes if s < 4096), 0,
                           "no request carried region references only")

    def test_bad_values_are_usage_errors(self):
        for flag, value in (("protocol", "http"), ("memory", "cuda")):
            r = run([LOAD, "--target=127.0.0.1:1", f"--{flag}={value}", "--duration_s=0.1"])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"--{flag}: '{value}'", r.stderr)
        r = run([LOAD, "--target=127.0.0.1:1", "--memory=system", "--rate=10",
                 "--duration_s=0.1"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--memory=system takes --concurrency", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[4:], verbosity=2)
