#!/usr/bin/env python3
"""Security of a live conv1d_server --backend=cpu over loopback: listeners,
TLS, mutual TLS, bearer tokens with roles and weight-set and session
ownership, token reload on SIGHUP, certificate reload, and the access log's
audit lines. Certificates are made for each run with the openssl command;
clients are the Python package, conv1d_client and conv1d_load.

usage: security_e2e_test.py SERVER CLIENT LOAD   (PYTHONPATH: stubs + package)
"""
import os
import secrets
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
import unittest
import urllib.request

import grpc

import conv1d_client
import numpy as np

from conv1d_client import Client
from conv1d_client.client import reference_forward
from e2e_util import make_ca, make_leaf, run, seed_for_test
from server_launcher import Server

SERVER, CLI, LOAD = sys.argv[1:4]
SEED = seed_for_test(31)


def code_of(fn):
    """The gRPC code of a client call: the Python client raises typed
    Conv1dError subclasses (carrying .code), a raw stub grpc.RpcError."""
    try:
        fn()
        return grpc.StatusCode.OK
    except conv1d_client.Conv1dError as e:
        return e.code
    except grpc.RpcError as e:
        return e.code()


def cpu_server(*args, client_args=()):
    """A conv1d_server (CPU backend) on free loopback ports; ready (health
    SERVING via the CLI with `client_args`) on entry."""
    return Server(SERVER, CLI, "--backend=cpu", *args, client_args=client_args)


class Security(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="conv1d-security-")
        d = cls.dir
        make_ca(d, "ca")
        make_ca(d, "ca2")
        make_leaf(d, "server", "ca")
        make_leaf(d, "server2", "ca2")
        make_leaf(d, "client", "ca")
        make_leaf(d, "stranger", "ca2")
        cls.tok = {name: secrets.token_hex(16) for name in ("alice", "bob", "ops", "carol")}
        cls.tokens_file = cls.path("tokens")
        cls.write_tokens([("alice", "infer"), ("bob", "infer"), ("ops", "admin")])
        with open(cls.path("alice.token"), "w") as f:
            f.write(cls.tok["alice"] + "\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def write_tokens(cls, entries, extra=""):
        tmp = cls.tokens_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("# token principal role\n")
            for name, role in entries:
                f.write(f"{cls.tok[name]} {name} {role}\n")
            f.write(extra)
        os.replace(tmp, cls.tokens_file)

    def setUp(self):
        self.rng = np.random.default_rng(SEED)

    def tls(self, client_cert=True, ca="ca"):
        kw = {"tls_ca": self.path(f"{ca}.pem"), "timeout_s": 5, "max_attempts": 1}
        if client_cert:
            kw.update(tls_cert=self.path("client.pem"), tls_key=self.path("client.key"))
        return kw

    # -- listeners --------------------------------------------------------

    def test_second_server_on_a_taken_port_exits_2(self):
        with cpu_server() as first:
            r = run([SERVER, f"--listen={first.target}", "--metrics_listen=", "--backend=cpu"],
                    timeout=20)
            self.assertEqual(r.returncode, 2)
            self.assertIn(str(first.port), r.stderr)
            self.assertIn("in use", r.stderr)
            # The first still answers every call itself.
            with Client(first.target, timeout_s=5) as c:
                self.assertEqual(c.health(), "SERVING")

    def test_invalid_addresses_exit_2(self):
        for flag in ("--listen=127.0.0.1:99999", "--listen=not-an-address",
                     "--listen=:50051", "--metrics_listen=127.0.0.1:70000"):
            r = run([SERVER, flag, "--backend=cpu"], timeout=20)
            self.assertEqual(r.returncode, 2, flag)
            self.assertIn(flag.split("=")[0], r.stderr)

    def test_idle_metrics_connections_do_not_stall_a_scrape(self):
        with cpu_server() as srv:
            idle = [socket.create_connection(("127.0.0.1", srv.metrics_port)) for _ in range(4)]
            try:
                start = time.monotonic()
                body = urllib.request.urlopen(
                    f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=5).read().decode()
                took = time.monotonic() - start
            finally:
                for s in idle:
                    s.close()
            self.assertIn("conv1d_build_info", body)
            # A scrape held up by the idle connections waits out the
            # exporter's 5 s request timeout; an unhindered one takes
            # milliseconds, or a second or two on a loaded machine.
            self.assertLess(took, 3.0)

    def test_metrics_over_mtls(self):
        cert, key = self.path("metrics.pem"), self.path("metrics.key")
        shutil.copy(self.path("server.pem"), cert)
        shutil.copy(self.path("server.key"), key)
        with cpu_server(f"--metrics_tls_cert={cert}", f"--metrics_tls_key={key}",
                        f"--metrics_tls_client_ca={self.path('ca.pem')}") as srv:
            url = f"https://127.0.0.1:{srv.metrics_port}/metrics"

            def scrape(ca="ca", client=True):
                ctx = ssl.create_default_context(cafile=self.path(f"{ca}.pem"))
                if client:
                    ctx.load_cert_chain(self.path("client.pem"), self.path("client.key"))
                return urllib.request.urlopen(url, context=ctx, timeout=5).read().decode()

            self.assertIn("conv1d_build_info", scrape())
            with self.assertRaises(Exception):
                scrape(client=False)
            with self.assertRaises(Exception):
                urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics",
                                       timeout=5).read()
            # Idle connections to the TLS port do not stall a scrape either.
            idle = [socket.create_connection(("127.0.0.1", srv.metrics_port)) for _ in range(4)]
            try:
                start = time.monotonic()
                self.assertIn("conv1d_build_info", scrape())
                self.assertLess(time.monotonic() - start, 3.0)  # held up: 5 s
            finally:
                for sock in idle:
                    sock.close()
            # A renewed certificate is served from the next handshake on.
            shutil.copy(self.path("server2.key"), key + ".new")
            shutil.copy(self.path("server2.pem"), cert + ".new")
            os.replace(key + ".new", key)
            os.replace(cert + ".new", cert)
            self.assertIn("conv1d_build_info", scrape(ca="ca2"))
            with self.assertRaises(Exception):
                scrape(ca="ca")

    # -- TLS --------------------------------------------------------------

    def test_tls_refuses_plaintext(self):
        with cpu_server(f"--tls_cert={self.path('server.pem')}",
                        f"--tls_key={self.path('server.key')}",
                        client_args=[f"--tls_ca={self.path('ca.pem')}"]) as srv:
            with Client(srv.target, **self.tls(client_cert=False)) as c:
                self.assertTrue(c.server_info().version)
            with Client(srv.target, timeout_s=3, max_attempts=1) as plain:
                self.assertEqual(code_of(plain.server_info), grpc.StatusCode.UNAVAILABLE)
            # A CA that did not sign the server's certificate is refused.
            with Client(srv.target, **self.tls(client_cert=False, ca="ca2")) as wrong:
                self.assertEqual(code_of(wrong.server_info), grpc.StatusCode.UNAVAILABLE)
            r = run([CLI, f"--target={srv.target}", "--timeout_s=3", "--attempts=1", "info"])
            self.assertNotEqual(r.returncode, 0)

    def test_mtls_requires_a_client_certificate(self):
        args = [f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('server.key')}",
                f"--tls_client_ca={self.path('ca.pem')}"]
        cli_tls = [f"--tls_ca={self.path('ca.pem')}", f"--tls_cert={self.path('client.pem')}",
                   f"--tls_key={self.path('client.key')}"]
        with cpu_server(*args, client_args=cli_tls) as srv:
            with Client(srv.target, **self.tls(client_cert=False)) as no_cert:
                self.assertEqual(code_of(no_cert.server_info), grpc.StatusCode.UNAVAILABLE)
            stranger = self.tls()
            stranger.update(tls_cert=self.path("stranger.pem"), tls_key=self.path("stranger.key"))
            with Client(srv.target, **stranger) as c:
                self.assertEqual(code_of(c.server_info), grpc.StatusCode.UNAVAILABLE)
            with Client(srv.target, **self.tls()) as c:
                x = self.rng.uniform(-1, 1, (2, 8, 33)).astype(np.float32)
                w = self.rng.uniform(-0.6, 0.6, (8, 4)).astype(np.float32)
                y = c.forward(x, w).y
                np.testing.assert_allclose(y, reference_forward(x, w)[0], rtol=1e-5, atol=1e-6)
            r = run([CLI, f"--target={srv.target}", "--timeout_s=5", *cli_tls, "forward",
                     "--shape=2x16x40", "--verify"])
            self.assertEqual(r.returncode, 0)
            for attempt in range(3):
                r = run([LOAD, f"--target={srv.target}", *cli_tls, "--concurrency=2",
                         "--duration_s=0.5", "--warmup_s=0.1", "--window_s=0.25",
                         "--max_trials=2", "--shape=1x64x32"], timeout=60)
                self.assertRegex(r.stdout, r"concurrency 2 .* errors 0\b")
                self.assertIn(" 0 errors, 0 wrong answers", r.stdout)
                # conv1d_load can die of SIGSEGV in gRPC's callback thread
                # while the process exits, after its report (a race in its
                # shutdown, not in TLS): such a run is repeated.
                if r.returncode != -signal.SIGSEGV:
                    break
                print(f"conv1d_load crashed at exit (attempt {attempt + 1}); again", flush=True)
            self.assertEqual(r.returncode, 0)

    def test_certificate_reload_without_restart(self):
        cert, key = self.path("live.pem"), self.path("live.key")
        shutil.copy(self.path("server.pem"), cert)
        shutil.copy(self.path("server.key"), key)
        with cpu_server(f"--tls_cert={cert}", f"--tls_key={key}", "--tls_reload_interval_s=1",
                        client_args=[f"--tls_ca={self.path('ca.pem')}"]) as srv:
            with Client(srv.target, **self.tls(client_cert=False, ca="ca2")) as c:
                self.assertEqual(code_of(c.server_info), grpc.StatusCode.UNAVAILABLE)
            # The renewed pair, signed by another CA, written as a renewal
            # tool would (each file replaced at once).
            shutil.copy(self.path("server2.key"), key + ".new")
            shutil.copy(self.path("server2.pem"), cert + ".new")
            os.replace(key + ".new", key)
            os.replace(cert + ".new", cert)
            deadline = time.time() + 10
            code = None
            while time.time() < deadline:
                with Client(srv.target, **self.tls(client_cert=False, ca="ca2")) as c:
                    code = code_of(c.server_info)
                if code == grpc.StatusCode.OK:
                    break
                time.sleep(0.25)
            self.assertEqual(code, grpc.StatusCode.OK)
            with Client(srv.target, **self.tls(client_cert=False, ca="ca")) as old:
                self.assertEqual(code_of(old.server_info), grpc.StatusCode.UNAVAILABLE)

    # -- tokens -----------------------------------------------------------

    def auth_server(self, *extra, client_args=()):
        self.access_log = self.path(f"access-{secrets.token_hex(4)}.log")
        return cpu_server(f"--auth_tokens_file={self.tokens_file}",
                          f"--access_log={self.access_log}", *extra, client_args=client_args)

    def test_tokens_roles_and_ownership(self):
        self.write_tokens([("alice", "infer"), ("bob", "infer"), ("ops", "admin")])
        with self.auth_server() as srv:
            t = srv.target
            anon = Client(t, timeout_s=5, max_attempts=1)
            alice = Client(t, timeout_s=5, max_attempts=1, token_file=self.path("alice.token"))
            bob = Client(t, timeout_s=5, max_attempts=1, token=self.tok["bob"])
            ops = Client(t, timeout_s=5, max_attempts=1, token=self.tok["ops"])
            forged = Client(t, timeout_s=5, max_attempts=1, token="f" * 32)
            x = self.rng.uniform(-1, 1, (1, 8, 20)).astype(np.float32)
            w = self.rng.uniform(-0.6, 0.6, (8, 4)).astype(np.float32)
            w2 = self.rng.uniform(-0.6, 0.6, (8, 4)).astype(np.float32)

            # Health stays open (probes); everything else needs a token.
            self.assertEqual(anon.health(), "SERVING")
            self.assertEqual(code_of(anon.server_info), grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(code_of(lambda: anon.forward(x, w)), grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(code_of(forged.server_info), grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(code_of(lambda: anon.register_weights("m", w)),
                             grpc.StatusCode.UNAUTHENTICATED)

            alice.register_weights("alice/m", w)
            # Another infer principal can neither replace, remove nor use it.
            self.assertEqual(code_of(lambda: bob.register_weights("alice/m", w2, replace=True)),
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(code_of(lambda: bob.unregister_weights("alice/m")),
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(code_of(lambda: bob.forward(x, weights_name="alice/m")),
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual([i.name for i in bob.list_weights()], [])
            # Its owner's set is unchanged: answers match the first weights.
            y = alice.forward(x, weights_name="alice/m").y
            np.testing.assert_allclose(y, reference_forward(x, w)[0], rtol=1e-5, atol=1e-6)

            # An admin's set is shared: usable by all, changed by admins only.
            ops.register_weights("shared", w2)
            y = bob.forward(x, weights_name="shared").y
            np.testing.assert_allclose(y, reference_forward(x, w2)[0], rtol=1e-5, atol=1e-6)
            self.assertEqual(code_of(lambda: bob.register_weights("shared", w, replace=True)),
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(code_of(lambda: alice.unregister_weights("shared")),
                             grpc.StatusCode.PERMISSION_DENIED)
            # An admin may change any set.
            ops.register_weights("alice/m", w2, replace=True)
            y = alice.forward(x, weights_name="alice/m").y
            np.testing.assert_allclose(y, reference_forward(x, w2)[0], rtol=1e-5, atol=1e-6)
            # The replacement belongs to the admin that registered it.
            self.assertEqual(code_of(lambda: alice.unregister_weights("alice/m")),
                             grpc.StatusCode.PERMISSION_DENIED)
            ops.unregister_weights("alice/m")
            self.assertEqual(sorted(i.name for i in alice.list_weights()), ["shared"])

            # The CLI sends the token too.
            r = run([CLI, f"--target={t}", "--timeout_s=5", "info"])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("UNAUTHENTICATED", r.stderr)
            r = run([CLI, f"--target={t}", "--timeout_s=5", f"--token={self.tok['bob']}", "list"])
            self.assertEqual(r.returncode, 0)
            for c in (anon, alice, bob, ops, forged):
                c.close()
        # Weight changes are in the access log, refused ones included.
        with open(self.access_log) as f:
            lines = f.read().splitlines()
        audit = [l for l in lines if "action=" in l]
        self.assertTrue(any("principal=alice action=register weights=alice/m" in l and "code=OK" in l
                            for l in audit), audit)
        self.assertTrue(any("principal=bob action=replace weights=alice/m" in l and
                            "code=PERMISSION_DENIED" in l for l in audit), audit)
        self.assertTrue(any("principal=bob action=unregister weights=alice/m" in l and
                            "code=PERMISSION_DENIED" in l for l in audit), audit)
        self.assertTrue(any("principal=ops action=replace weights=alice/m" in l and "code=OK" in l
                            for l in audit), audit)

    def test_sessions_belong_to_their_opener(self):
        self.write_tokens([("alice", "infer"), ("bob", "infer"), ("ops", "admin")])
        with self.auth_server() as srv:
            t = srv.target
            alice = Client(t, timeout_s=5, max_attempts=1, token=self.tok["alice"])
            bob = Client(t, timeout_s=5, max_attempts=1, token=self.tok["bob"])
            ops = Client(t, timeout_s=5, max_attempts=1, token=self.tok["ops"])
            x = self.rng.uniform(-1, 1, (1, 8, 12)).astype(np.float32)
            w = self.rng.uniform(-0.6, 0.6, (8, 4)).astype(np.float32)
            want = reference_forward(x, w)[0]
            s = alice.open_session(w, prefill=x[:, :, :4], max_draft_tokens=2)
            sid = s.session_id
            # To bob the session does not exist; the admin may close it only.
            for name, c in (("bob", bob), ("ops", ops)):
                code = (grpc.StatusCode.NOT_FOUND if name == "bob"
                        else grpc.StatusCode.PERMISSION_DENIED)
                for call in (lambda: c.session_step(sid, x[:, :, 4:6]),
                             lambda: c.commit_session(sid, 0),
                             lambda: c.fork_session(sid),
                             lambda: c.export_session(sid)):
                    self.assertEqual(code_of(call), code, name)
            self.assertEqual(code_of(lambda: bob.close_session(sid)), grpc.StatusCode.NOT_FOUND)
            # Alice's session goes on as if nobody had called.
            y = alice.session_step(sid, x[:, :, 4:])
            np.testing.assert_allclose(np.concatenate([s.y, y], axis=2), want,
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(alice.export_session(sid), x[:, :, -3:])
            ops.close_session(sid)
            self.assertEqual(code_of(lambda: alice.export_session(sid)),
                             grpc.StatusCode.NOT_FOUND)
            for c in (alice, bob, ops):
                c.close()

    def test_token_file_reload_on_sighup(self):
        self.write_tokens([("alice", "infer"), ("bob", "infer")])
        with self.auth_server() as srv:
            bob = Client(srv.target, timeout_s=5, max_attempts=1, token=self.tok["bob"])
            carol = Client(srv.target, timeout_s=5, max_attempts=1, token=self.tok["carol"])
            self.assertEqual(code_of(bob.server_info), grpc.StatusCode.OK)
            self.assertEqual(code_of(carol.server_info), grpc.StatusCode.UNAUTHENTICATED)
            self.write_tokens([("alice", "infer"), ("carol", "admin")])
            srv.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while (code_of(carol.server_info) != grpc.StatusCode.OK
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            self.assertEqual(code_of(carol.server_info), grpc.StatusCode.OK)
            self.assertEqual(code_of(bob.server_info), grpc.StatusCode.UNAUTHENTICATED)
            # A broken file keeps the tokens in force.
            self.write_tokens([("alice", "infer")], extra="short bob infer\n")
            srv.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            self.assertIsNone(srv.proc.poll())
            self.assertEqual(code_of(carol.server_info), grpc.StatusCode.OK)
            bob.close()
            carol.close()

    def test_closed_health_needs_tls_and_a_token(self):
        self.write_tokens([("alice", "infer"), ("bob", "infer"), ("ops", "admin")])
        r = run([SERVER, "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                 f"--auth_tokens_file={self.tokens_file}", "--auth_health_open=false"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--auth_health_open", r.stderr)
        tls = [f"--tls_cert={self.path('server.pem')}", f"--tls_key={self.path('server.key')}"]
        cli = [f"--tls_ca={self.path('ca.pem')}", f"--token={self.tok['alice']}"]
        with self.auth_server(*tls, "--auth_health_open=false", client_args=cli) as srv:
            with Client(srv.target, **self.tls(client_cert=False)) as anon:
                self.assertEqual(code_of(anon.health), grpc.StatusCode.UNAUTHENTICATED)
            with Client(srv.target, token=self.tok["alice"], **self.tls(client_cert=False)) as c:
                self.assertEqual(c.health(), "SERVING")

    def test_bad_token_files_exit_2(self):
        bad = self.path("bad.tokens")
        for text in ("", "tooshort alice infer\n", f"{'a' * 20} alice root\n",
                     f"{'a' * 20} alice infer\n{'a' * 20} bob infer\n"):
            with open(bad, "w") as f:
                f.write(text)
            r = run([SERVER, "--listen=127.0.0.1:0", "--metrics_listen=", "--backend=cpu",
                     f"--auth_tokens_file={bad}"])
            self.assertEqual(r.returncode, 2, text)
            self.assertIn("auth_tokens_file", r.stderr)
            self.assertNotIn("a" * 20, r.stderr, "a token must never be printed")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
