#!/usr/bin/env python3
"""conv1d_load against a live conv1d_server (--backend=echo, and cpu where
answers are checked).

usage: load_e2e_test.py SERVER CLIENT LOAD
Checks: request counts equal the server's own count, percentiles are ordered,
JSON and CSV parse and carry the same fields and values, --duration_s is the
measured time per step in windows of --window_s, open loop holds its rate, an
overloaded server's RESOURCE_EXHAUSTED answers are reported by code with exit
status 1 (0 with --allow_errors, still reported), sampled verification against
the CPU backend counts no wrong answer, and the progress line is drawn on a
terminal only; session workloads (session, unary-decode-fwd) check every
step (none wrong against cpu, wrong against echo), or with
--verify_step_fraction a counted sample of them that still finds wrong
answers; per-window and per-workload
rows add up to their step; --search
finds a load whose p99 is under the bound (CPU backend) and says when none is;
a schedule file sets the send times and .npy files the inputs; an open-loop
step that falls behind ends early, marked overloaded, and the sweep stops;
statistics of nothing are n/a; GPU gauges are scraped from --gpu_metrics_url.
"""
import csv
import http.server
import json
import os
import pty
import subprocess
import sys
import threading
import unittest

import numpy as np

from e2e_util import run, seed_for_test, tmpdir
from server_launcher import Server

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

    def check_row(self, row, obj):
        """Every field of a JSON object is a CSV column holding the same value."""
        for key, value in obj.items():
            if key in ("window_rows", "workload_rows", "window", "workload", "name"):
                continue
            self.assertIn(key, row, f"CSV lacks the JSON field {key}")
            if key == "errors_by_code":
                cell = dict(kv.split(":") for kv in row[key].split(";") if kv)
                self.assertEqual({k: int(v) for k, v in cell.items()}, value)
            elif isinstance(value, bool):
                self.assertEqual(row[key], "true" if value else "false", key)
            elif value is None:
                self.assertEqual(row[key], "n/a", key)
            else:
                self.assertEqual(float(row[key]), value, key)

    def check_csv_matches_json(self, rows, steps, mode):
        """Step, window and workload rows hold the JSON's values, in order."""
        self.assertEqual(len([r for r in rows if r["row"] == "step"]), len(steps))
        i = 0
        for n, s in enumerate(steps):
            row = rows[i]
            self.assertEqual((row["row"], row["step"], row["mode"]), ("step", str(n), mode))
            self.assertEqual(row["rate" if mode == "concurrency" else "concurrency"], "")
            self.check_row(row, s)
            i += 1
            for kind in ("window", "workload"):
                for k, obj in enumerate(s[f"{kind}_rows"]):
                    row = rows[i]
                    self.assertEqual((row["row"], row["step"], row["index"]),
                                     (kind, str(n), str(k)))
                    self.check_row(row, obj)
                    i += 1
        self.assertEqual(i, len(rows))

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
        self.assertEqual([int(row["concurrency"]) for row in rows if row["row"] == "step"], [1, 8])
        for s in steps:
            # Every window has its row; the reported windows' rows add up to the step.
            self.assertEqual(len(s["window_rows"]), s["windows"])
            reported = s["window_rows"][-2:] if s["stable"] else s["window_rows"][-2:]
            self.assertEqual(sum(w["requests"] for w in reported), s["requests"])
            self.assertEqual(sum(w["server_requests"] for w in reported), s["server_requests"])
            (w,) = s["workload_rows"]
            self.assertEqual(w["requests"], s["requests"])
            self.assertEqual(w["p99_us"], s["p99_us"])

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


    def test_mix_has_a_row_per_workload(self):
        d = tmpdir()
        mix, js, cs = (os.path.join(d, n) for n in ("mix.txt", "r.json", "r.csv"))
        with open(mix, "w") as f:
            f.write("weight=3 shape=1x64x16\nweight=1 op=bwd shape=2x32x8 dtype=fp16\n")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            r = run([LOAD, f"--target={srv.target}", f"--mix={mix}", "--concurrency=4",
                     "--duration_s=0.6", "--warmup_s=0.1", "--stable_windows=2",
                     "--stability_pct=1000", f"--json={js}", f"--csv={cs}"])
            self.assertEqual(r.returncode, 0)
        with open(js) as f:
            (s,) = json.load(f)["steps"]
        fwd, bwd = s["workload_rows"]
        self.assertIn("fwd fp32/fp32 1x64x16", fwd["name"])
        self.assertIn("bwd fp16/fp16 2x32x8", bwd["name"])
        self.assertEqual(fwd["requests"] + bwd["requests"], s["requests"])
        self.assertAlmostEqual(fwd["throughput_rps"] + bwd["throughput_rps"],
                               s["throughput_rps"], delta=s["throughput_rps"] * 1e-4 + 1e-3)
        # Shares follow the mix weights (3:1), within sampling noise.
        self.assertGreater(fwd["requests"], 1.5 * bwd["requests"])
        self.assertLessEqual(max(fwd["p99_us"], bwd["p99_us"]), s["max_us"])
        with open(cs) as f:
            rows = list(csv.DictReader(f))
        self.check_csv_matches_json(rows, [s], "concurrency")
        self.assertEqual([r["name"] for r in rows if r["row"] == "workload"],
                         [fwd["name"], bwd["name"]])

    def test_open_loop_falling_behind_ends_early_and_stops_the_sweep(self):
        js = os.path.join(tmpdir(), "r.json")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            # 8 in flight at most: a million requests/s cannot be sent, so the
            # sends fall behind their schedule at once.
            r = run([LOAD, f"--target={srv.target}", "--rate=1000000,2000000",
                     "--shape=1x64x16", "--max_outstanding=8", "--max_behind_ms=100",
                     "--duration_s=4", "--warmup_s=0.1", "--stable_windows=2",
                     f"--json={js}"])
        with open(js) as f:
            rep = json.load(f)
        (s,) = rep["steps"]  # the second level is not run
        self.assertTrue(s["overloaded"], s)
        self.assertLess(s["measured_s"], 2.0)
        # The send that ended the step was over 100 ms behind; the report keeps
        # six significant digits, so 100.0004 ms reads 100000.
        self.assertGreaterEqual(s["max_late_us"], 100e3)
        self.assertIn("OVERLOADED (ended early)", r.stdout)
        self.assertIn("the higher levels are not run", r.stdout)

    def test_nothing_succeeded_reports_na(self):
        d = tmpdir()
        js, cs = os.path.join(d, "r.json"), os.path.join(d, "r.csv")
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            # Width 300 is refused by the server: every request fails.
            r = run([LOAD, f"--target={srv.target}", "--concurrency=1", "--shape=1x16x16",
                     "--width=300", "--duration_s=0.3", "--warmup_s=0.1",
                     "--stable_windows=1", f"--json={js}", f"--csv={cs}"])
            self.assertEqual(r.returncode, 1)
        with open(js) as f:
            (s,) = json.load(f)["steps"]
        self.assertEqual(s["errors"], s["requests"])
        self.assertGreater(s["errors_by_code"]["INVALID_ARGUMENT"], 0)
        for key in ("p50_us", "p90_us", "p99_us", "max_us", "mean_us"):
            self.assertIsNone(s[key], key)
        self.assertRegex(r.stdout, r"p50\s+n/a\s+p90\s+n/a")
        with open(cs) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(rows[0]["p50_us"], "n/a")
        self.check_csv_matches_json(rows, [s], "concurrency")

    def test_gpu_gauges_from_metrics_url(self):
        """DCGM-style gauges of two devices, served over HTTP: utilization and
        power are averaged over devices, memory summed (MiB to bytes)."""
        body = ("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 40\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 60\n'
                'DCGM_FI_DEV_POWER_USAGE{gpu="0"} 300\nDCGM_FI_DEV_POWER_USAGE{gpu="1"} 350\n'
                'DCGM_FI_DEV_FB_USED{gpu="0"} 1000\nDCGM_FI_DEV_FB_USED{gpu="1"} 2000\n').encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        js = os.path.join(tmpdir(), "r.json")
        try:
            with Server(SERVER, CLIENT, "--backend=echo") as srv:
                r = run([LOAD, f"--target={srv.target}", "--concurrency=1", "--shape=1x16x16",
                         "--duration_s=0.4", "--warmup_s=0.1", "--stable_windows=2",
                         "--stability_pct=1000", f"--json={js}",
                         f"--gpu_metrics_url=http://127.0.0.1:{httpd.server_port}/metrics"])
                self.assertEqual(r.returncode, 0)
        finally:
            httpd.shutdown()
        with open(js) as f:
            (s,) = json.load(f)["steps"]
        self.assertEqual(s["gpu_util_pct"], 50)
        self.assertEqual(s["gpu_power_w"], 325)
        self.assertEqual(s["gpu_memory_bytes"], 3000 * 2 ** 20)
        for w in s["window_rows"]:
            self.assertEqual(w["gpu_util_pct"], 50)
        self.assertIn("gpu 50 % 325 W 3.15 GB", r.stdout)


class LoadAgainstCpu(unittest.TestCase):
    def test_search_finds_a_load_under_the_p99_bound(self):
        js = os.path.join(tmpdir(), "r.json")
        bound_ms = 50.0
        with Server(SERVER, CLIENT, "--backend=cpu") as srv:
            r = run([LOAD, f"--target={srv.target}", "--search", f"--search_p99_ms={bound_ms}",
                     "--concurrency=1:16:2", "--search_steps=2", "--shape=1x64x64",
                     "--duration_s=0.4", "--warmup_s=0.1", "--stable_windows=2",
                     "--max_trials=3", "--stability_pct=1000", f"--json={js}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(js) as f:
            rep = json.load(f)
        found = rep["search"]
        self.assertTrue(found["found"], found)
        self.assertEqual(found["p99_bound_us"], bound_ms * 1e3)
        best = rep["steps"][found["step"]]
        self.assertLessEqual(best["p99_us"], bound_ms * 1e3)
        self.assertEqual(best["errors"], 0)
        self.assertEqual(found["concurrency"], best["concurrency"])
        self.assertEqual(found["throughput_rps"], best["throughput_rps"])
        self.assertEqual(found["p99_us"], best["p99_us"])
        # The best is the highest throughput among the steps that held.
        held = [s for s in rep["steps"] if s["errors"] == 0 and s["p99_us"] <= bound_ms * 1e3]
        self.assertEqual(max(s["throughput_rps"] for s in held), best["throughput_rps"])
        self.assertRegex(r.stdout, r"search: best concurrency \d+: [\d.]+ req/s with p99 ")

    def test_search_without_a_level_under_the_bound_exits_1(self):
        js = os.path.join(tmpdir(), "r.json")
        with Server(SERVER, CLIENT, "--backend=cpu") as srv:
            r = run([LOAD, f"--target={srv.target}", "--search", "--search_p99_ms=0.000001",
                     "--concurrency=1:4:2", "--shape=1x64x64", "--duration_s=0.2",
                     "--warmup_s=0.05", "--stable_windows=1", f"--json={js}"])
            self.assertEqual(r.returncode, 1)
        with open(js) as f:
            rep = json.load(f)
        self.assertEqual(rep["search"], {"p99_bound_us": 0.001, "found": False})
        self.assertEqual(len(rep["steps"]), 1)  # the first level missed: nothing to bisect
        self.assertIn("search: no step kept p99 under", r.stdout)

    def test_schedule_file_and_npy_inputs(self):
        d = tmpdir()
        sched, xf, js = (os.path.join(d, n) for n in ("s.txt", "x.npy", "r.json"))
        # 100 sends 4 ms apart: 250 requests/s, repeated for the whole step.
        with open(sched, "w") as f:
            f.write("# seconds from the start\n" + "".join(f"{i * 0.004:.3f}\n" for i in range(100)))
        rng = np.random.default_rng(seed_for_test(5))
        np.save(xf, rng.uniform(-1, 1, (2, 24, 33)).astype(np.float32))
        with Server(SERVER, CLIENT, "--backend=cpu") as srv:
            before = srv.metric("conv1d_requests_total", FORWARD)
            r = run([LOAD, f"--target={srv.target}", f"--schedule={sched}", f"--x_file={xf}",
                     "--verify_fraction=1", "--duration_s=0.8", "--warmup_s=0.2",
                     "--stable_windows=2", "--stability_pct=1000", f"--json={js}"])
            self.assertEqual(r.returncode, 0, r.stderr)
            after = srv.metric("conv1d_requests_total", FORWARD)
        with open(js) as f:
            rep = json.load(f)
        self.assertEqual(rep["mode"], "schedule")
        self.assertIn("fwd fp32/fp32 2x24x33", rep["workloads"][0])  # shape from the file
        (s,) = rep["steps"]
        self.assertAlmostEqual(s["rate"], 250, delta=0.01)
        self.assertGreater(s["throughput_rps"], 150)
        self.assertLess(s["throughput_rps"], 350)
        self.assertEqual(after - before, s["completed_total"])
        # Answers checked against the CPU reference of the file's x.
        self.assertGreater(s["verified"], 0)
        self.assertEqual(s["wrong"], 0)

    def test_bad_values_exit_2(self):
        for args, needle in [(["--concurrency=0"], "concurrency"),
                             (["--search"], "--search_p99_ms"),
                             (["--rate=10", "--schedule=/nonexistent"], "one of"),
                             (["--schedule=/nonexistent"], "/nonexistent"),
                             (["--shape=100000x100000x100000"], "shape"),
                             (["--width=0"], "width"),
                             (["--x_file=/nonexistent.npy"], "--x_file"),
                             (["--timeout_s=0"], "--timeout_s"),
                             (["--verify_fraction=1.5"], "--verify_fraction"),
                             (["--duration_s=-1"], "--duration_s"),
                             (["--max_outstanding=0"], "--max_outstanding"),
                             (["--no_such_flag"], "no_such_flag")]:
            r = run([LOAD, "--target=127.0.0.1:1", *args])
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(needle, r.stderr, args)
        self.assertEqual(run([LOAD, "--help"]).returncode, 0)


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
            self.assertEqual(int(x["checked"]), int(x["steps"]), x)
            self.assertGreater(float(x["steps_per_s"]), 0, x)
            self.assertLessEqual(float(x["p50_us"]), float(x["p99_us"]), x)
        self.assertIn("total: 0 errors, 0 wrong steps", r.stdout)

    def test_session_modes_check_a_sample_of_steps(self):
        # A quarter of the steps checked: every chain still advances at
        # every step, so the checked ones (fp16, several tokens) all agree.
        out = os.path.join(tmpdir(), "f.csv")
        with Server(SERVER, CLIENT, "--backend=cpu", "--threads=1") as srv:
            r = run([LOAD, f"--target={srv.target}", "--mode=session,unary-decode-fwd",
                     "--concurrency=2", "--shape=1x40x4", "--dtype=fp16",
                     "--step_tokens_min=1", "--chain_steps=30", "--duration_s=0.5",
                     "--warmup_s=0.1", "--verify_step_fraction=0.25", f"--csv={out}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            rows = list(csv.DictReader(f))
        for x in rows:
            self.assertEqual(int(x["wrong"]), 0, x)
            self.assertGreater(int(x["checked"]), 0, x)
            self.assertLess(int(x["checked"]), int(x["steps"]), x)
        self.assertRegex(r.stdout,
                         r"total: 0 errors, 0 wrong steps; \d+ of \d+ measured steps checked")
        r = run([LOAD, "--target=127.0.0.1:1", "--mode=session", "--shape=1x16x1",
                 "--verify_step_fraction=1.5"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--verify_step_fraction", r.stderr)

    def test_session_modes_random_steps_and_chains(self):
        # Steps of 1..5 tokens, chains of 3..12 steps, bf16 channel-last:
        # every step checked, both modes agree with the server.
        out = os.path.join(tmpdir(), "r.csv")
        with Server(SERVER, CLIENT, "--backend=cpu", "--threads=1") as srv:
            r = run([LOAD, f"--target={srv.target}", "--mode=session,unary-decode-fwd",
                     "--concurrency=2", "--shape=2x48x5", "--dtype=bf16", "--layout=cl",
                     "--step_tokens_min=1", "--chain_steps=12", "--chain_steps_min=3",
                     "--duration_s=0.5", "--warmup_s=0.1", f"--csv={out}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 2)
        for x in rows:
            self.assertEqual(int(x["errors"]), 0, x)
            self.assertEqual(int(x["wrong"]), 0, x)
            self.assertGreater(int(x["chains"]), 0, x)
        r = run([LOAD, "--target=127.0.0.1:1", "--mode=session", "--concurrency=1",
                 "--shape=1x16x2", "--step_tokens_min=3"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--step_tokens_min", r.stderr)

    def test_session_mode_finds_wrong_steps(self):
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            r = run([LOAD, f"--target={srv.target}", "--mode=session", "--concurrency=1",
                     "--shape=1x16x1", "--duration_s=0.2", "--warmup_s=0"])
            self.assertEqual(r.returncode, 1)
            self.assertIn("wrong steps", r.stderr)
            self.assertIn("wrong answer", r.stderr)
            r = run([LOAD, f"--target={srv.target}", "--mode=session", "--concurrency=2",
                     "--shape=1x16x1", "--duration_s=0.3", "--warmup_s=0",
                     "--verify_step_fraction=0.1"])
            self.assertEqual(r.returncode, 1)
            self.assertIn("wrong steps", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
