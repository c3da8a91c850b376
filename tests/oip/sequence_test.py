"""Sequences of the inference protocol (sequence_id / sequence_start /
sequence_end on model conv1d_update, served as decode sessions) driven by
Triton's own Python client (tritonclient[grpc] from PyPI) against the real
conv1d_server binary: a chain of steps equals one forward over the whole
sequence (float64 reference), interleaved sequences unary and streamed,
speculative commit (accepted_tokens), registered weights, the model config,
and every error.

usage: sequence_test.py CONV1D_SERVER   (exit 77: tritonclient missing)
"""
import os
import queue
import random
import sys
import time
import unittest

import oip_util

np = oip_util.require("numpy")
grpcclient = oip_util.require("tritonclient.grpc")
oip_util.require("ml_dtypes")
import tritonclient.utils as tutils  # noqa: E402
import tritonclient_test as tc  # noqa: E402  (helpers: inputs, tolerances)
from oip_util import forward  # noqa: E402

SERVER_BINARY = None
SEED = int(os.environ.get("OIP_TEST_SEED", random.randrange(1 << 30)))
tc.SEED = SEED


def chunks(rng, length):
    """Random step sizes (1..4 tokens) that add up to `length`."""
    out = []
    while length > 0:
        s = min(length, int(rng.integers(1, 5)))
        out.append(s)
        length -= s
    return out


class Fixture(tc.Fixture):
    def start_inputs(self, x, w, bias, dtype, wdtype, state=None):
        inputs = [tc.make_input("x", x, dtype), tc.make_input("weight", w, wdtype)]
        if bias is not None:
            inputs.append(tc.make_input("bias", bias, wdtype))
        if state is not None:
            inputs.append(tc.make_input("conv_state", state, dtype))
        return inputs

    def step(self, seq_id, x, dtype, start_inputs=None, end=False, **kw):
        inputs = start_inputs if start_inputs is not None else [tc.make_input("x", x, dtype)]
        r = self.client.infer("conv1d_update", inputs, sequence_id=seq_id,
                              sequence_start=start_inputs is not None, sequence_end=end, **kw)
        return r


class Chain(Fixture):
    def test_chain_of_steps_equals_one_forward(self):
        print(f"seed {SEED}", flush=True)
        rng = np.random.default_rng(SEED)
        case = 0
        for dtype, wdtype in (("FP32", "FP32"), ("FP16", "FP16"), ("BF16", "BF16"),
                              ("FP16", "FP32")):
            for silu in (False, True):
                case += 1
                b, d = int(rng.integers(1, 4)), int(rng.integers(1, 40))
                width = int(rng.integers(2, 6))
                length = int(rng.integers(1, 24))
                x = tc.rounded(rng, (b, d, length), dtype)
                w = tc.rounded(rng, (d, width), wdtype)
                bias = tc.rounded(rng, (d,), wdtype) if case % 2 else None
                init = tc.rounded(rng, (b, d, width - 1), dtype) if case % 3 else None
                params = {"activation": "silu" if silu else "none"}
                label = f"{dtype}/{wdtype} silu={silu} B={b} D={d} W={width} L={length}"
                ys, t = [], 0
                steps = chunks(rng, length)
                for i, s in enumerate(steps):
                    xs = x[:, :, t:t + s]
                    start = self.start_inputs(xs, w, bias, dtype, wdtype, init) if i == 0 else None
                    r = self.step(1000 + case, xs, dtype, start, end=i == len(steps) - 1,
                                  parameters=params if i == 0 else None)
                    self.assertEqual([o.name for o in r.get_response().outputs], ["y"])
                    ys.append(r.as_numpy("y").astype(np.float64))
                    t += s
                want, _ = forward(x, w, bias, init, silu)
                tc.assert_close(self, label, np.concatenate(ys, axis=2), want, dtype, width)

    def test_channel_last_longer_state_and_state_output(self):
        rng = np.random.default_rng(SEED + 1)
        b, d, width, length, k = 2, 5, 4, 9, 6
        x = tc.rounded(rng, (b, d, length), "FP32")
        w = tc.rounded(rng, (d, width), "FP32")
        init = tc.rounded(rng, (b, d, k), "FP32")  # K = 6 > W-1: the oldest go unused
        params = {"layout": "channel_last", "state_len": k}
        ys = []
        for i in range(length):
            xs = x[:, :, i:i + 1].transpose(0, 2, 1).copy()
            start = self.start_inputs(xs, w, None, "FP32", "FP32", init) if i == 0 else None
            outs = [grpcclient.InferRequestedOutput(n) for n in ("y", "conv_state_out")]
            r = self.step(7, xs, "FP32", start, end=i == length - 1, outputs=outs,
                          parameters=params if i in (0, 4) else None)
            ys.append(r.as_numpy("y").transpose(0, 2, 1))
            whole = np.concatenate([init, x[:, :, :i + 1]], axis=2)
            tc.assert_close(self, f"conv_state_out after step {i}", r.as_numpy("conv_state_out"),
                            whole[:, :, -k:], "FP32", 0)
        want, _ = forward(x, w, None, init[:, :, -(width - 1):])
        tc.assert_close(self, "y", np.concatenate(ys, axis=2), want, "FP32", width)

    def test_registered_weights_and_string_id(self):
        rng = np.random.default_rng(SEED + 2)
        d, width = 6, 3
        w, bias = tc.rounded(rng, (d, width), "FP32"), tc.rounded(rng, (d,), "FP32")
        tc.register_weights(self.server.url, "seqw", w, bias)
        x = tc.rounded(rng, (1, d, 5), "FP32")
        ys = []
        for i in range(5):
            inputs = [tc.make_input("x", x[:, :, i:i + 1], "FP32")]
            # Every request may repeat the start's weights_name (perf_analyzer does).
            r = self.client.infer("conv1d_update", inputs, sequence_id="chat-1",
                                  sequence_start=i == 0, sequence_end=i == 4,
                                  parameters={"weights_name": "seqw"})
            ys.append(r.as_numpy("y"))
        tc.assert_close(self, "y", np.concatenate(ys, axis=2), forward(x, w, bias)[0],
                        "FP32", width)

    def test_commit_rolls_back_rejected_tokens(self):
        rng = np.random.default_rng(SEED + 3)
        b, d, width = 1, 4, 4
        w = tc.rounded(rng, (d, width), "FP32")
        a = tc.rounded(rng, (b, d, 2), "FP32")       # accepted prefix
        draft = tc.rounded(rng, (b, d, 3), "FP32")   # speculative: keep 1 of 3
        nxt = tc.rounded(rng, (b, d, 2), "FP32")
        self.step(21, a, "FP32", self.start_inputs(a, w, None, "FP32", "FP32"),
                  parameters={"max_draft_tokens": 3})
        self.step(21, draft, "FP32")
        r = self.step(21, nxt, "FP32", end=True, parameters={"accepted_tokens": 1})
        kept = np.concatenate([a, draft[:, :, :1], nxt], axis=2)
        want, _ = forward(kept, w)
        tc.assert_close(self, "y after commit", r.as_numpy("y"), want[:, :, -2:], "FP32", width)


class Interleaved(Fixture):
    def make(self, rng, n):
        seqs = []
        for i in range(n):
            d, width, length = int(rng.integers(1, 9)), int(rng.integers(2, 5)), 6
            seqs.append({"id": 500 + i if i % 2 else f"s{i}",
                         "x": tc.rounded(rng, (1, d, length), "FP32"),
                         "w": tc.rounded(rng, (d, width), "FP32"), "ys": []})
        # An integer id and the string of the same digits are two sequences.
        seqs[1]["id"], seqs[2]["id"] = 77, "77"
        return seqs

    def request(self, s, i):
        xs = s["x"][:, :, i:i + 1]
        start = self.start_inputs(xs, s["w"], None, "FP32", "FP32") if i == 0 else None
        inputs = start or [tc.make_input("x", xs, "FP32")]
        return inputs, dict(sequence_id=s["id"], sequence_start=i == 0,
                            sequence_end=i == s["x"].shape[2] - 1)

    def check(self, seqs):
        for s in seqs:
            want, _ = forward(s["x"], s["w"])
            tc.assert_close(self, f"sequence {s['id']!r}", np.concatenate(s["ys"], axis=2),
                            want, "FP32", 4)

    def test_round_robin_unary(self):
        rng = np.random.default_rng(SEED + 4)
        seqs = self.make(rng, 5)
        for i in range(6):
            for s in seqs:
                inputs, kw = self.request(s, i)
                s["ys"].append(self.client.infer("conv1d_update", inputs, **kw).as_numpy("y"))
        self.check(seqs)

    def test_stream_with_every_step_in_flight(self):
        # All requests are sent before any answer: a sequence's requests
        # wait for each other on the server, in order.
        rng = np.random.default_rng(SEED + 5)
        seqs = self.make(rng, 5)
        results = queue.Queue()
        client = grpcclient.InferenceServerClient(self.server.url)
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        sent = 0
        for i in range(6):
            for n, s in enumerate(seqs):
                inputs, kw = self.request(s, i)
                client.async_stream_infer("conv1d_update", inputs, request_id=f"{n}:{i}", **kw)
                sent += 1
        answers = {}
        for _ in range(sent):
            r, e = results.get(timeout=30)
            self.assertIsNone(e, e)
            answers[r.get_response().id] = r.as_numpy("y")
        client.stop_stream()
        client.close()
        for n, s in enumerate(seqs):
            s["ys"] = [answers[f"{n}:{i}"] for i in range(6)]
        self.check(seqs)


class Config(Fixture):
    def test_update_is_a_sequence_model(self):
        config = self.client.get_model_config("conv1d_update", as_json=True)["config"]
        self.assertIn("sequence_batching", config)
        self.assertNotIn("dynamic_batching", config)
        self.assertGreater(int(config["sequence_batching"]["max_sequence_idle_microseconds"]), 0)
        optional = {i["name"] for i in config["input"] if i.get("optional")}
        self.assertEqual(optional, {"weight", "bias", "conv_state"})
        forward_config = self.client.get_model_config("conv1d_forward", as_json=True)["config"]
        self.assertNotIn("sequence_batching", forward_config)


class Errors(Fixture):
    def setUp(self):
        rng = np.random.default_rng(SEED + 6)
        self.x, self.w = tc.rounded(rng, (1, 4, 1), "FP32"), tc.rounded(rng, (4, 3), "FP32")

    def start(self, seq_id, **kw):
        return self.step(seq_id, self.x, "FP32",
                         self.start_inputs(self.x, self.w, None, "FP32", "FP32"), **kw)

    def test_unknown_duplicate_and_ended_ids(self):
        self.expect_error("NOT_FOUND", ["sequence_id 123456 is not open"],
                          self.step, 123456, self.x, "FP32")
        self.expect_error("NOT_FOUND", ['sequence_id "nope" is not open'],
                          self.step, "nope", self.x, "FP32")
        self.start(31)
        self.expect_error("ALREADY_EXISTS", ["sequence_id 31 is already open"], self.start, 31)
        self.step(31, self.x, "FP32", end=True)  # still open after the refused start
        self.expect_error("NOT_FOUND", ["sequence_id 31 is not open"],
                          self.step, 31, self.x, "FP32")
        self.start(31, end=True)  # an ended id can start again

    def test_sequence_parameters_on_other_models(self):
        good = [tc.make_input("x", self.x, "FP32"), tc.make_input("weight", self.w, "FP32")]
        for model in ("conv1d_forward", "conv1d_backward"):
            inputs = good + ([tc.make_input("dout", self.x, "FP32")]
                             if model == "conv1d_backward" else [])
            self.expect_error("INVALID_ARGUMENT", ["parameter 'sequence_id'",
                                                   "conv1d_update only"],
                              self.client.infer, model, inputs, sequence_id=5,
                              sequence_start=True)
            self.expect_error("INVALID_ARGUMENT", ["parameter 'state_len'",
                                                   "conv1d_update only"],
                              self.client.infer, model, inputs, parameters={"state_len": 4})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'state_len'", "needs parameter "
                                               "'sequence_id'"], self.client.infer,
                          "conv1d_update", good + [tc.make_input("conv_state", self.x, "FP32")],
                          parameters={"state_len": 4})

    def test_bad_requests_are_named_and_leave_the_sequence_open(self):
        self.expect_error("INVALID_ARGUMENT", ["parameter 'state_len' is 1", ">= 2"],
                          self.start, 41, parameters={"state_len": 1})
        self.expect_error("INVALID_ARGUMENT", ["conv_state.shape[2] is 2", "state_len"],
                          self.step, 41, self.x, "FP32",
                          self.start_inputs(self.x, self.w, None, "FP32", "FP32",
                                            np.zeros((1, 4, 2))), parameters={"state_len": 3})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'accepted_tokens'", "first request"],
                          self.start, 41, parameters={"accepted_tokens": 0})
        self.expect_error("INVALID_ARGUMENT", ["input 'weight' is missing"],
                          self.step, 41, self.x, "FP32", [tc.make_input("x", self.x, "FP32")])
        # A first request refused after the session opened (x's D is not the
        # weights') leaves no sequence behind: the id starts again.
        bad_x = np.zeros((1, 5, 1))
        self.expect_error("INVALID_ARGUMENT", ["x.shape[1] is 5", "D of the session"],
                          self.step, 43, bad_x, "FP32",
                          self.start_inputs(bad_x, self.w, None, "FP32", "FP32"))
        self.start(43, end=True)
        self.start(42)
        self.expect_error("INVALID_ARGUMENT", ["input 'weight'", "x only"], self.step, 42,
                          self.x, "FP32", [tc.make_input("x", self.x, "FP32"),
                                           tc.make_input("weight", self.w, "FP32")],
                          sequence_start=False)
        self.expect_error("INVALID_ARGUMENT", ["x.shape[1] is 5", "D of the session"],
                          self.step, 42, np.zeros((1, 5, 1)), "FP32")
        self.expect_error("INVALID_ARGUMENT", ["x.dtype is fp16", "session's dtype"],
                          self.step, 42, self.x, "FP16")
        self.expect_error("INVALID_ARGUMENT", ["parameter 'activation' differs",
                                               "sequence_id 42"],
                          self.step, 42, self.x, "FP32", parameters={"activation": "silu"})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'accepted_tokens'",
                                               "max_draft_tokens of 0"],
                          self.step, 42, self.x, "FP32", parameters={"accepted_tokens": 0})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'max_draft_tokens' is -1"],
                          self.step, 42, self.x, "FP32", parameters={"max_draft_tokens": -1})
        self.step(42, self.x, "FP32", end=True)  # the sequence survived every mistake

    def step(self, seq_id, x, dtype, start_inputs=None, end=False, sequence_start=None, **kw):
        inputs = start_inputs if start_inputs is not None else [tc.make_input("x", x, dtype)]
        start = start_inputs is not None if sequence_start is None else sequence_start
        return self.client.infer("conv1d_update", inputs, sequence_id=seq_id,
                                 sequence_start=start, sequence_end=end, **kw)


class Expiry(unittest.TestCase):
    def test_idle_sequence_expires(self):
        with oip_util.Server(SERVER_BINARY, "--session_idle_timeout_s=1") as server:
            client = grpcclient.InferenceServerClient(server.url)
            x, w = np.ones((1, 2, 1), np.float32), np.ones((2, 2), np.float32)
            client.infer("conv1d_update", [tc.make_input("x", x, "FP32"),
                                           tc.make_input("weight", w, "FP32")],
                         sequence_id=9, sequence_start=True)
            time.sleep(4)  # the idle timeout (1 s) plus the reaper's period (<= 1 s), with margin
            with self.assertRaises(tutils.InferenceServerException) as ctx:
                client.infer("conv1d_update", [tc.make_input("x", x, "FP32")], sequence_id=9)
            self.assertEqual(ctx.exception.status(), "StatusCode.NOT_FOUND")
            self.assertIn("sequence_id 9 is not open", ctx.exception.message())
            client.close()


class Principals(unittest.TestCase):
    def test_a_sequence_belongs_to_the_principal_that_started_it(self):
        import tempfile
        tokens = {"alice": "a" * 32, "bob": "b" * 32}
        with tempfile.NamedTemporaryFile("w", suffix=".tokens") as f:
            f.write("".join(f"{t} {p} infer\n" for p, t in tokens.items()))
            f.flush()
            hdr = {p: {"authorization": f"Bearer {t}"} for p, t in tokens.items()}
            with oip_util.Server(SERVER_BINARY, f"--auth_tokens_file={f.name}",
                                 headers=hdr["alice"]) as server:
                client = grpcclient.InferenceServerClient(server.url)
                x, w = np.ones((1, 2, 1), np.float32), np.ones((2, 2), np.float32)
                client.infer("conv1d_update", [tc.make_input("x", x, "FP32"),
                                               tc.make_input("weight", w, "FP32")],
                             sequence_id=5, sequence_start=True, headers=hdr["alice"])
                with self.assertRaises(tutils.InferenceServerException) as ctx:
                    client.infer("conv1d_update", [tc.make_input("x", x, "FP32")],
                                 sequence_id=5, headers=hdr["bob"])
                self.assertEqual(ctx.exception.status(), "StatusCode.NOT_FOUND")
                # Bob's id 5 is his own sequence; Alice's goes on.
                client.infer("conv1d_update", [tc.make_input("x", x, "FP32"),
                                               tc.make_input("weight", w, "FP32")],
                             sequence_id=5, sequence_start=True, sequence_end=True,
                             headers=hdr["bob"])
                r = client.infer("conv1d_update", [tc.make_input("x", x, "FP32")],
                                 sequence_id=5, sequence_end=True, headers=hdr["alice"])
                # y = w0 * x[t-1] + w1 * x[t] = 2 with the first step's 1 in the state.
                np.testing.assert_array_equal(r.as_numpy("y"), np.full((1, 2, 1), 2.0))
                client.close()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    SERVER_BINARY = tc.SERVER_BINARY = sys.argv.pop(1)
    unittest.main(verbosity=2)
