#!/usr/bin/env python3
"""conv1d_client against live servers.

usage: cli_e2e_test.py SERVER CLIENT
Checks: health exits 0 when SERVING; forward/backward/update --verify exit 0
against the cpu backend and 1 against the echo backend (wrong answers), and
so does decode (a decode session, steps joined and checked as a Forward);
registered weights; .npy in and out against a NumPy float64 reference;
the exit table (--help and --version 0, every bad value 2 before anything is
sent, a failed call or wrong answer 1); describe by server reflection.
"""
import os
import sys
import unittest

import numpy as np

from e2e_util import run, seed_for_test, tmpdir
from server_launcher import Server

SERVER, CLIENT = sys.argv[1:3]


class CliAgainstCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(SERVER, CLIENT, "--backend=cpu")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def cli(self, *args):
        return run([CLIENT, f"--target={self.srv.target}", *args])

    def test_health_and_info(self):
        r = self.cli("health")
        self.assertEqual(r.returncode, 0)
        self.assertIn("SERVING", r.stdout)
        r = self.cli("info")
        self.assertEqual(r.returncode, 0)
        self.assertIn("cpu", r.stdout)

    def test_ops_verify(self):
        for args in (["forward", "--shape=2x64x100", "--initial_states", "--final_states"],
                     ["forward", "--shape=1x32x33", "--dtype=bf16", "--layout=cl", "--width=3"],
                     ["backward", "--shape=2x16x50", "--initial_states", "--dinitial_states",
                      "--dfinal_states"],
                     ["backward", "--shape=1x16x40", "--dtype=fp16", "--weight_dtype=fp32",
                      "--grad_fp32"],
                     ["update", "--shape=3x48x2", "--state_len=5", "--activation=none"]):
            r = self.cli("--verify", "--seed=7", *args)
            self.assertEqual(r.returncode, 0, args)
            self.assertIn("verify           OK", r.stdout)

    def test_decode_session_verify(self):
        for args in (["--shape=2x64x50", "--step_tokens=3"],
                     ["--shape=1x32x20", "--dtype=bf16", "--layout=cl", "--state_len=6"]):
            r = self.cli("decode", "--verify", "--seed=5", *args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
            self.assertIn("verify           OK", r.stdout)
            self.assertIn("step latency", r.stdout)

    def test_registered_weights(self):
        common = ["--weights_name=cli_test_w", "--shape=1x40x10", "--seed=3"]
        self.assertEqual(self.cli("register", "--replace", *common).returncode, 0)
        r = self.cli("list")
        self.assertIn("cli_test_w", r.stdout)
        self.assertEqual(self.cli("forward", "--verify", *common).returncode, 0)
        # Different local weights: the check must notice.
        r = self.cli("forward", "--verify", "--weights_name=cli_test_w", "--shape=1x40x10",
                     "--seed=4")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(self.cli("unregister", "--weights_name=cli_test_w").returncode, 0)
        self.assertNotIn("cli_test_w", self.cli("list").stdout)
        self.assertEqual(self.cli("forward", *common).returncode, 1)  # NOT_FOUND

    def test_npy_in_and_out(self):
        d = tmpdir()
        rng = np.random.default_rng(seed_for_test(5))
        x = rng.uniform(-1, 1, (2, 24, 37)).astype(np.float32)
        w = rng.uniform(-0.5, 0.5, (24, 4)).astype(np.float32)
        b = rng.uniform(-0.5, 0.5, 24).astype(np.float32)
        for name, a in (("x", x), ("w", w), ("b", b)):
            np.save(os.path.join(d, name + ".npy"), a)
        prefix = os.path.join(d, "out_")
        r = self.cli("forward", f"--x_file={d}/x.npy", f"--weight_file={d}/w.npy",
                     f"--bias_file={d}/b.npy", "--final_states", f"--out_prefix={prefix}")
        self.assertEqual(r.returncode, 0)
        y = np.load(prefix + "y.npy")
        self.assertEqual(y.dtype, np.float32)
        xp = np.concatenate([np.zeros((2, 24, 3)), x.astype(np.float64)], axis=2)
        z = sum(w[None, :, k:k + 1].astype(np.float64) * xp[:, :, k:k + 37] for k in range(4))
        z += b[None, :, None]
        ref = z / (1 + np.exp(-z))
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.load(prefix + "final_states.npy"), x[:, :, -3:])
        # bf16 as uint16 bits both ways.
        xb = (x.view(np.uint32) >> 16).astype(np.uint16)
        np.save(os.path.join(d, "xb.npy"), xb)
        r = self.cli("forward", "--dtype=bf16", f"--x_file={d}/xb.npy", "--verify",
                     f"--out_prefix={prefix}b_")
        self.assertEqual(r.returncode, 0)
        yb = np.load(prefix + "b_y.npy")
        self.assertEqual((yb.dtype, yb.shape), (np.uint16, x.shape))


    def test_health_follows_the_listen_flag_of_a_process(self):
        # What a container's HEALTHCHECK does with the server as PID 1.
        r = run([CLIENT, f"--listen_of_pid={self.srv.proc.pid}", "--timeout_s=10", "health"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "SERVING")
        r = run([CLIENT, "--listen_of_pid=999999999", "health"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("/proc/999999999/cmdline", r.stderr)

    def test_describe_by_reflection(self):
        r = self.cli("describe")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("service conv1d.v1.Conv1d {", r.stdout)
        self.assertIn("rpc Forward(conv1d.v1.ForwardRequest) returns (conv1d.v1.ForwardResponse);",
                      r.stdout)
        self.assertIn("service grpc.health.v1.Health {", r.stdout)
        self.assertIn("message conv1d.v1.ForwardRequest {", r.stdout)
        self.assertRegex(r.stdout, r"  conv1d\.v1\.Tensor x = 1;")
        r = self.cli("describe", "--service=conv1d.v1.Tensor")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("message conv1d.v1.Tensor {", r.stdout)
        self.assertIn("bytes data = ", r.stdout)
        self.assertNotIn("service conv1d.v1.Conv1d", r.stdout)
        r = self.cli("describe", "--service=conv1d.v1.Conv1d.Update")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("message conv1d.v1.UpdateRequest {", r.stdout)
        r = self.cli("describe", "--service=conv1d.v1.NoSuchThing")
        self.assertEqual(r.returncode, 1)
        self.assertIn("NoSuchThing", r.stderr)


class CliExitCodes(unittest.TestCase):
    """The exit table: 0 ok, 1 failure at run time, 2 bad usage. Bad values
    are checked against a target where nothing listens: a 2 proves that the
    value was refused before anything was sent."""

    NOWHERE = "--target=127.0.0.1:1"

    def test_help_and_version_exit_0(self):
        for flag in ("--help", "-h", "--helpfull"):
            r = run([CLIENT, flag])
            self.assertEqual(r.returncode, 0, flag)
            self.assertIn("describe", r.stdout)
        r = run([CLIENT, "--version"])
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^conv1d_client \d+\.\d+\.\d+ \(git [0-9a-f]{7,}|unknown\)")

    def test_bad_values_exit_2_naming_the_flag(self):
        cases = [
            (["forward", "--shape=100000x100000x100000"], "shape"),
            (["forward", "--shape=1x4x8", "--width=0"], "width"),
            (["forward", "--shape=1x4x8", "--repeat=0"], "--repeat"),
            (["forward", "--shape=1x4x8", "--repeat=-3"], "--repeat"),
            (["backward", "--shape=4x1073741824x4", "--dtype=bf16"], "shape"),
            (["update", "--shape=1x4x1", "--width=4", "--state_len=2"], "state_len"),
            (["forward", "--shape=1x4x8", "--timeout_s=0"], "--timeout_s"),
            (["forward", "--shape=1x4x8", "--attempts=0"], "--attempts"),
            (["forward", "--shape=1x4x8", "--dtype=fp64"], "fp64"),
            (["forward", "--shape=2x3"], "shape"),
            (["forward", "--x_file=/nonexistent/x.npy"], "x.npy"),
            (["register"], "--weights_name"),
            (["frobnicate"], "unknown command 'frobnicate'"),
            (["forward", "--no_such_flag=1"], "no_such_flag"),
            (["forward", "--width=abc"], "width"),
            ([], "no command"),
            (["forward", "backward"], "one command"),
        ]
        for args, needle in cases:
            r = run([CLIENT, self.NOWHERE, "--timeout_s=1", *args]
                    if "--timeout_s=0" not in args else [CLIENT, self.NOWHERE, *args])
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(needle, r.stderr, args)
            self.assertNotIn("bad_alloc", r.stderr, args)

    def test_unknown_command_error_is_its_own_line(self):
        r = run([CLIENT, "frobnicate"])
        first = r.stderr.splitlines()[0]
        self.assertTrue(first.startswith("conv1d_client: unknown command 'frobnicate'"), first)
        self.assertIn("(see conv1d_client --help)", r.stderr)

    def test_failed_call_exits_1(self):
        # A refused connection fails at once; the deadline only has to
        # outlast a stall of this loaded machine, or the call would end
        # DEADLINE_EXCEEDED instead.
        r = run([CLIENT, self.NOWHERE, "--timeout_s=10", "--attempts=1", "forward",
                 "--shape=1x4x8"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAVAILABLE", r.stderr)


class CliAgainstEcho(unittest.TestCase):
    def test_verify_fails_on_wrong_answers(self):
        with Server(SERVER, CLIENT, "--backend=echo") as srv:
            r = run([CLIENT, f"--target={srv.target}", "forward", "--verify",
                     "--shape=1x16x20"])
            self.assertEqual(r.returncode, 1)
            self.assertIn("wrong answer", r.stderr)
            # The echo backend keeps sessions too, and its y is x: wrong.
            r = run([CLIENT, f"--target={srv.target}", "decode", "--verify",
                     "--shape=1x16x20"])
            self.assertEqual(r.returncode, 1)
            self.assertIn("wrong answer", r.stderr)

    def test_health_fails_without_server(self):
        r = run([CLIENT, "--target=127.0.0.1:1", "--timeout_s=1", "health"])
        self.assertEqual(r.returncode, 1)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
