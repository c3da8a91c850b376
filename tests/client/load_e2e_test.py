#!/usr/bin/env python3
"""conv1d_load against a live conv1d_server (--backend=echo, and cpu where
answers are checked).

usage: load_e2e_test.py SERVER CLIENT LOAD
Checks: request counts equal the server's own count, percentiles are ordered,
JSON and CSV parse and carry the same fields and values, --duration_s is the
measured time per step in windows of --window_s, open loop holds its rate, an
overloaded server's RESOURCE_EXHAUSTED answers are reported by code with exit
status 1 (0 with --allow_errors, still reported), sampled verification against
the CPU backend counts no wrong answer, the progress line is drawn on a
terminal only, and session workloads (session, unary-decode-fwd) check every
step (none wrong against cpu, wrong against echo).
"""
import csv
import json
import os
import pty
import subprocess
import sys
import unittest

from e2e_util import Server, run, tmpdir

SERVER, CLIENT, LOAD = sys.argv[1:4]
FORWARD = 'method="Forward"'


class LoadAgainstEcho(unittest.TestCase):
    def check_step(self, s):
        self.assertGreater(s["requests"], 0)
        self.assertEqual(s["errors"], 0, s)
        self.assertEqual(s["errors_by_code"], {})
        p = [s["p50_us"], s["p90_us"], s["p95_us"], s["p99_us"], s["p999_us"], s["max_us"]]
        self.assertGreater(p[0], 0)
        self.assertEqual(p, sorted(p), s)
        self.assertGreater(s["throughput_rps"], 0)
        self.assertGreater(s["gbps"], 0)

    def check_csv_matches_json(self, rows, steps, mode):
        """Every JSON step field is a CSV column holding the same value."""
        self.assertEqual(len(rows), len(steps))
        for row, s in zip(rows, steps):
            self.assertEqual(row["mode"], mode)
            self.assertEqual(row["rate" if mode == "concurrency" else "concurrency"], "")
            for key, value in s.items():
                self.assertIn(key, row, f"CSV lacks the JSON step field {key}")
                if key == "errors_by_code":
                    cell = dict(kv.split(":") for kv in row[key].split(";") if kv)
                    self.assertEqual({k: int(v) for k, v in cell.items()}, value)
                elif isinstance(value, bool):
                    self.assertEqual(row[key], "true" if value else "false", key)
                else:
                    self.assertEqual(float(row[key]), value, key)

    def assert_no_progress_line(self, r):
        """Not a terminal: no live progress line (drawn with carriage returns)."""
        self.assertNotIn("\r", r.stdout)
        self.assertNotIn("\033[K", r.stdout)

    def test_closed_loop_counts_match_server(self):
        d = tmpdir()
        js, cs = os.path.join(d, "r.json"), os.path.join(d, "r.csv")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            before = srv.metric("conv1d_requests_total", FORWARD)
            r = run([LOAD, f"--target={srv.target}", "--concurrency=1:8:8", "--shape=1x256x64",
                     "--duration_s=0.8", "--warmup_s=0.2", "--max_trials=4", "--stable_windows=2",
                     "--stability_pct=50", f"--json={js}", f"--csv={cs}",
                     f"--metrics_url={srv.metrics_url}", f"--requests_filter={FORWARD}"])
            self.assertEqual(r.returncode, 0)
            self.assert_no_progress_line(r)
            after = srv.metric("conv1d_requests_total", FORWARD)
        with open(js) as f:
            rep = json.load(f)
        steps = rep["steps"]
        self.assertEqual([s["concurrency"] for s in steps], [1, 8])
        for s in steps:
            self.check_step(s)
            self.assertEqual(s["sent_total"], s["completed_total"])
            self.assertGreaterEqual(s["completed_total"], s["requests"])
            self.assertGreaterEqual(s["windows"], 2)
            self.assertIn("server_queue_mean_us", s)
        total = sum(s["completed_total"] for s in steps)
        self.assertEqual(rep["total_requests"], total)
        # The server counted exactly the requests the load generator sent.
        self.assertEqual(after - before, total)
        self.assertEqual(rep["server_requests_delta"], total)
        with open(cs) as f:
            rows = list(csv.DictReader(f))
        self.check_csv_matches_json(rows, steps, "concurrency")
        self.assertEqual([int(row["concurrency"]) for row in rows], [1, 8])

    def test_duration_is_measured_time_in_windows(self):
        d = tmpdir()
        js, cs = os.path.join(d, "r.json"), os.path.join(d, "r.csv")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            # The stability rule holds at once (1000 %); --max_trials=2 is
            # raised to the 3 windows that --duration_s needs.
            r = run([LOAD, f"--target={srv.target}", "--concurrency=2", "--shape=1x64x16",
                     "--duration_s=0.6", "--window_s=0.2", "--warmup_s=0.1",
                     "--stable_windows=2", "--stability_pct=1000", "--max_trials=2",
                     f"--json={js}", f"--csv={cs}"])
            self.assertEqual(r.returncode, 0)
            self.assertIn("at least 0.6 s measured in windows of 0.2 s", r.stdout)
        with open(js) as f:
            (s,) = json.load(f)["steps"]
        self.assertEqual(s["windows"], 3)
        self.assertEqual(s["window_s"], 0.2)
        self.assertGreaterEqual(s["measured_s"], 0.55)
        self.assertLess(s["measured_s"], 1.5)
        self.assertTrue(s["stable"])
        with open(cs) as f:
            self.check_csv_matches_json(list(csv.DictReader(f)), [s], "concurrency")

    def test_open_loop_holds_rate(self):
        d = tmpdir()
        js, cs = os.path.join(d, "r.json"), os.path.join(d, "r.csv")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            r = run([LOAD, f"--target={srv.target}", "--rate=200", "--arrival=poisson",
                     "--preset=decode-fwd", "--duration_s=1.5", "--warmup_s=0.2",
                     "--max_trials=3", "--stable_windows=3", f"--json={js}", f"--csv={cs}"])
            self.assertEqual(r.returncode, 0)
        with open(js) as f:
            rep = json.load(f)
        (s,) = rep["steps"]
        with open(cs) as f:
            self.check_csv_matches_json(list(csv.DictReader(f)), [s], "rate")
        self.assertEqual(s["rate"], 200)
        self.check_step(s)
        self.assertIn("late_sends", s)
        self.assertGreater(s["throughput_rps"], 120)
        self.assertLess(s["throughput_rps"], 300)

    def overload_run(self, *extra):
        """conv1d_load at 64 in flight against a server queueing one request."""
        js = os.path.join(tmpdir(), "r.json")
        with Server(SERVER, CLIENT, "--backend=echo", "--max_queued_requests=1",
                    "--max_queue_delay_us=20000", "--max_batch_requests=1024") as srv:
            r = run([LOAD, f"--target={srv.target}", "--concurrency=64", "--shape=1x64x16",
                     "--duration_s=0.6", "--warmup_s=0.1", "--max_trials=2",
                     "--stable_windows=2", f"--json={js}", *extra])
        with open(js) as f:
            rep = json.load(f)
        (s,) = rep["steps"]
        self.assertGreater(s["errors_by_code"].get("RESOURCE_EXHAUSTED", 0), 0, s)
        self.assertEqual(s["errors"], sum(s["errors_by_code"].values()))
        self.assertGreater(rep["total_errors"], 0)
        self.assertRegex(r.stdout, r"total: \d+ requests, [1-9]\d* errors")
        self.assertIn("RESOURCE_EXHAUSTED=", r.stdout)
        return r

    def test_overload_reports_resource_exhausted(self):
        self.assertEqual(self.overload_run().returncode, 1)

    def test_allow_errors_exits_zero_and_still_reports_them(self):
        self.assertEqual(self.overload_run("--allow_errors").returncode, 0)

    def test_progress_line_only_on_a_terminal(self):
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            cmd = [LOAD, f"--target={srv.target}", "--concurrency=1", "--shape=1x64x16",
                   "--duration_s=0.6", "--warmup_s=0.6", "--stable_windows=1",
                   "--stability_pct=1000"]
            piped = run(cmd)
            self.assertEqual(piped.returncode, 0)
            self.assert_no_progress_line(piped)
            # The same run with stdout on a pseudo-terminal draws it.
            master, slave = pty.openpty()
            p = subprocess.Popen(cmd, stdout=slave, stderr=subprocess.PIPE)
            os.close(slave)
            out = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            os.close(master)
            self.assertEqual(p.wait(timeout=30), 0, p.stderr.read())
        self.assertIn(b"\r\033[K[concurrency 1]", out)


class LoadAgainstCpu(unittest.TestCase):
    def test_verify_fraction_counts_no_wrong_answers(self):
        js = os.path.join(tmpdir(), "r.json")
        with Server(SERVER, CLIENT, "--backend=cpu", "--threads=1") as srv:
            r = run([LOAD, f"--target={srv.target}", "--concurrency=2", "--shape=2x64x40",
                     "--dtype=bf16", "--verify_fraction=1", "--duration_s=0.6",
                     "--warmup_s=0.1", "--stable_windows=2", "--stability_pct=1000",
                     f"--json={js}"])
            self.assertEqual(r.returncode, 0)
        with open(js) as f:
            rep = json.load(f)
        (s,) = rep["steps"]
        self.assertGreater(s["verified"], 0, s)
        self.assertEqual(s["wrong"], 0, s)
        self.assertEqual(rep["wrong_answers"], 0)
        self.assertIn(f"verified {s['verified']} wrong 0", r.stdout)

    def test_session_modes_check_every_step(self):
        out = os.path.join(tmpdir(), "s.csv")
        with Server(SERVER, CLIENT, "--backend=cpu", "--threads=1") as srv:
            r = run([LOAD, f"--target={srv.target}", "--mode=session,unary-decode-fwd",
                     "--concurrency=1,3", "--shape=2x64x2", "--duration_s=0.4",
                     "--warmup_s=0.1", "--chain_steps=40", f"--csv={out}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(x["mode"], x["concurrency"]) for x in rows],
                         [("session", "1"), ("unary-decode-fwd", "1"),
                          ("session", "3"), ("unary-decode-fwd", "3")])
        for x in rows:
            self.assertGreater(int(x["steps"]), 0, x)
            self.assertEqual(int(x["errors"]), 0, x)
            self.assertEqual(int(x["wrong"]), 0, x)
            self.assertGreater(float(x["steps_per_s"]), 0, x)
            self.assertLessEqual(float(x["p50_us"]), float(x["p99_us"]), x)
        self.assertIn("total: 0 errors, 0 wrong steps", r.stdout)

    def test_session_mode_finds_wrong_steps(self):
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            r = run([LOAD, f"--target={srv.target}", "--mode=session", "--concurrency=1",
                     "--shape=1x16x1", "--duration_s=0.2", "--warmup_s=0"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("wrong steps", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
