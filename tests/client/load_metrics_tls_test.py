#!/usr/bin/env python3
"""conv1d_load scraping a live conv1d_server's /metrics over HTTPS
(--metrics_tls_cert/--metrics_tls_key, and mutual TLS with
--metrics_tls_client_ca), with certificates made for each run by the openssl
command.

usage: load_metrics_tls_test.py SERVER CLIENT LOAD
Checks: over https:// (a host name: SNI and a DNS name checked; an address:
an IP name checked) the steps carry the server's figures, and the requests
the server counted equal those conv1d_load sent; a CA that did not sign the
server's certificate, a host the certificate does not name, a missing or
foreign client certificate under mutual TLS are each refused with a message
naming the URL and why, and the run goes on without server figures; bad
--metrics_tls_* flags exit 2 naming the flag.
"""
import json
import os
import shutil
import ssl
import sys
import tempfile
import unittest
import urllib.request

from e2e_util import make_ca, make_leaf, run
from server_launcher import Server, sum_metric

SERVER, CLIENT, LOAD = sys.argv[1:4]
FORWARD = 'method="Forward"'
# Short steps: two windows of 0.25 s after 0.1 s of warm-up.
SHORT = ["--concurrency=2", "--shape=1x64x32", "--duration_s=0.5", "--window_s=0.25",
         "--warmup_s=0.1", "--stable_windows=2", "--max_trials=2", "--noprogress"]


class LoadMetricsOverTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="conv1d-load-metrics-tls-")
        d = cls.dir
        make_ca(d, "ca")
        make_ca(d, "ca2")
        make_leaf(d, "server", "ca")                          # localhost and 127.0.0.1
        make_leaf(d, "named", "ca", san="DNS:localhost")      # no IP name
        make_leaf(d, "client", "ca")
        make_leaf(d, "stranger", "ca2")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    def server(self, cert, *args):
        return Server(SERVER, CLIENT, "--backend=echo",
                      f"--metrics_tls_cert={self.path(cert)}.pem",
                      f"--metrics_tls_key={self.path(cert)}.key", *args)

    def scrape(self, url, client=None):
        """/metrics over HTTPS from Python's own TLS stack (the test's view)."""
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if client:
            ctx.load_cert_chain(self.path(f"{client}.pem"), self.path(f"{client}.key"))
        return urllib.request.urlopen(url, context=ctx, timeout=5).read().decode()

    def load(self, srv, *flags):
        """A short conv1d_load run against `srv`: (process, JSON report)."""
        out = self.path("report.json")
        if os.path.exists(out):
            os.remove(out)
        r = run([LOAD, f"--target={srv.target}", *SHORT, f"--json={out}",
                 f"--requests_filter={FORWARD}", *flags], timeout=60)
        report = None
        if os.path.exists(out):
            with open(out) as f:
                report = json.load(f)
        return r, report

    def assert_server_figures(self, report, counted):
        steps = report["steps"]
        self.assertTrue(steps)
        total = sum(s["completed_total"] for s in steps)
        self.assertGreater(total, 0)
        for s in steps:
            self.assertEqual(s["errors"], 0, s)
            self.assertIn("server_queue_mean_us", s)
            self.assertIn("server_compute_mean_us", s)
            self.assertGreater(s["server_requests"], 0)
            for w in s["window_rows"]:
                self.assertIn("server_queue_mean_us", w)
        # The counter read over HTTPS is the server's own: it moved by
        # exactly the requests sent.
        self.assertEqual(report["server_requests_delta"], total)
        self.assertEqual(counted, total)

    def assert_no_server_figures(self, report):
        for s in report["steps"]:
            self.assertNotIn("server_queue_mean_us", s)
            self.assertNotIn("server_compute_mean_us", s)
        self.assertNotIn("server_requests_delta", report)

    def test_https_scrape_reports_server_figures(self):
        with self.server("server") as srv:
            by_name = f"https://localhost:{srv.metrics_port}/metrics"
            by_ip = f"https://127.0.0.1:{srv.metrics_port}/metrics"
            before = sum_metric(self.scrape(by_ip), "conv1d_requests_total", FORWARD)
            # The name (SNI, DNS name) for the server figures; the address
            # (IP name) for the "GPU" gauge, read from a gauge the server has.
            r, report = self.load(srv, f"--metrics_url={by_name}", f"--gpu_metrics_url={by_ip}",
                                  "--gpu_util_metric=conv1d_build_info",
                                  f"--metrics_tls_ca={self.path('ca.pem')}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("scrape failed", r.stderr)
            after = sum_metric(self.scrape(by_ip), "conv1d_requests_total", FORWARD)
            self.assert_server_figures(report, after - before)
            for s in report["steps"]:
                self.assertEqual(s["gpu_util_pct"], 1)

            # A CA that did not sign the server's certificate: refused, named.
            r, report = self.load(srv, f"--metrics_url={by_name}",
                                  f"--metrics_tls_ca={self.path('ca2.pem')}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{by_name}: TLS handshake failed: certificate verify failed", r.stderr)
            self.assert_no_server_figures(report)

    def test_mutual_tls(self):
        with self.server("named", f"--metrics_tls_client_ca={self.path('ca.pem')}") as srv:
            url = f"https://localhost:{srv.metrics_port}/metrics"
            by_ip = f"https://127.0.0.1:{srv.metrics_port}/metrics"
            ca = f"--metrics_tls_ca={self.path('ca.pem')}"
            before = sum_metric(self.scrape(url, client="client"), "conv1d_requests_total",
                                FORWARD)
            r, report = self.load(srv, f"--metrics_url={url}", ca,
                                  f"--metrics_tls_cert={self.path('client.pem')}",
                                  f"--metrics_tls_key={self.path('client.key')}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("scrape failed", r.stderr)
            after = sum_metric(self.scrape(url, client="client"), "conv1d_requests_total",
                               FORWARD)
            self.assert_server_figures(report, after - before)

            # No client certificate: the server refuses the connection. An
            # address the certificate does not name: conv1d_load refuses it.
            r, report = self.load(srv, f"--metrics_url={url}", f"--gpu_metrics_url={by_ip}", ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, f"metrics scrape failed: UNAVAILABLE: {url}: TLS "
                                       r"(handshake|connection) failed: .*certificate required")
            self.assertIn(f"GPU metrics scrape failed: UNAVAILABLE: {by_ip}: TLS handshake "
                          "failed: certificate verify failed: IP address mismatch", r.stderr)
            self.assert_no_server_figures(report)

            # A client certificate of another CA is refused too.
            r, report = self.load(srv, f"--metrics_url={url}", ca,
                                  f"--metrics_tls_cert={self.path('stranger.pem')}",
                                  f"--metrics_tls_key={self.path('stranger.key')}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, f"metrics scrape failed: UNAVAILABLE: {url}: TLS "
                                       r"(handshake|connection) failed: .*unknown ca")
            self.assert_no_server_figures(report)

    def test_bad_tls_flags_exit_2_naming_the_flag(self):
        https = "--metrics_url=https://localhost:1/metrics"
        cert, key = f"--metrics_tls_cert={self.path('client.pem')}", \
            f"--metrics_tls_key={self.path('client.key')}"
        absent, ca_key = self.path("absent.pem"), self.path("ca.key")
        cases = [
            ([https, cert], "--metrics_tls_cert: needs --metrics_tls_key"),
            ([https, key], "--metrics_tls_key: needs --metrics_tls_cert"),
            ([https, f"--metrics_tls_ca={absent}"], f"--metrics_tls_ca: cannot read '{absent}'"),
            ([https, f"--metrics_tls_ca={ca_key}"],
             f"--metrics_tls_ca: '{ca_key}' is not a PEM CA bundle"),
            ([https, cert, f"--metrics_tls_key={self.path('stranger.key')}"],
             f"--metrics_tls_key: '{self.path('stranger.key')}' is not the key of "
             "--metrics_tls_cert"),
            (["--metrics_url=http://localhost:1/metrics",
              f"--metrics_tls_ca={self.path('ca.pem')}"],
             "--metrics_tls_ca: needs an https:// --metrics_url or --gpu_metrics_url"),
            (["--gpu_metrics_url=https://localhost:1/metrics", f"--metrics_tls_ca={absent}"],
             f"--metrics_tls_ca: cannot read '{absent}'"),
        ]
        for flags, message in cases:
            r = run([LOAD, "--target=127.0.0.1:1", *flags], timeout=30)
            self.assertEqual(r.returncode, 2, flags)
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
