"""The inference protocol frontend driven by Triton's own Python client
(tritonclient[grpc] from PyPI) against the real conv1d_server binary:
health and metadata, inference of every op and dtype against a float64
reference, typed contents, registered weight sets, streaming, system shared
memory, and bad input.

usage: tritonclient_test.py CONV1D_SERVER   (exit 77: tritonclient missing)
"""
import os
import random
import sys
import unittest

import oip_util

np = oip_util.require("numpy")
grpcclient = oip_util.require("tritonclient.grpc")
oip_util.require("ml_dtypes")
import grpc  # noqa: E402  (installed with tritonclient[grpc])
import ml_dtypes  # noqa: E402
import tritonclient.utils as tutils  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402
from oip_util import backward, forward, update  # noqa: E402

SERVER_BINARY = None
SEED = int(os.environ.get("OIP_TEST_SEED", random.randrange(1 << 30)))
NP_DTYPE = {"FP32": np.float32, "FP16": np.float16, "BF16": ml_dtypes.bfloat16}
# Unit roundoff of each dtype: outputs are rounded once from fp32 sums.
EPS = {"FP32": 2.0 ** -23, "FP16": 2.0 ** -11, "BF16": 2.0 ** -8}


def rounded(rng, shape, dtype):
    """Random values in [-1, 1) already representable in `dtype`, as float64."""
    return rng.uniform(-1, 1, shape).astype(NP_DTYPE[dtype]).astype(np.float64)


def make_input(name, value, dtype):
    t = grpcclient.InferInput(name, list(value.shape), dtype)
    t.set_data_from_numpy(value.astype(NP_DTYPE[dtype]))
    return t


def assert_close(test, name, got, want, dtype, terms):
    """|got - want| within a few roundings of the output dtype, plus fp32
    accumulation over `terms` products, relative to the largest value."""
    got = np.asarray(got, dtype=np.float64)
    test.assertEqual(got.shape, want.shape, name)
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    tol = scale * (4 * EPS[dtype] + terms * 2.0 ** -22)
    err = float(np.abs(got - want).max()) if want.size else 0.0
    test.assertLessEqual(err, tol, f"{name}: max error {err:g} > {tol:g} (seed {SEED})")


class Fixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = oip_util.Server(SERVER_BINARY)
        cls.client = grpcclient.InferenceServerClient(cls.server.url)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.assert_clean_exit(cls.server.stop())

    @staticmethod
    def assert_clean_exit(code):
        if code != 0:
            raise AssertionError(f"server exited with {code}")

    def expect_error(self, code, fragments, fn, *args, **kwargs):
        with self.assertRaises(tutils.InferenceServerException) as ctx:
            fn(*args, **kwargs)
        e = ctx.exception
        self.assertEqual(e.status(), f"StatusCode.{code}", e.message())
        for f in fragments:
            self.assertIn(f, e.message())
        return e


class HealthAndMetadata(Fixture):
    def test_live_ready_and_models(self):
        c = self.client
        self.assertTrue(c.is_server_live())
        self.assertTrue(c.is_server_ready())
        for m in ("conv1d_forward", "conv1d_backward", "conv1d_update"):
            self.assertTrue(c.is_model_ready(m))
        self.expect_error("NOT_FOUND", ["conv1d_sideways"], c.is_model_ready, "conv1d_sideways")
        self.expect_error("NOT_FOUND", ["no version '7'"], c.is_model_ready,
                          "conv1d_forward", "7")
        meta = c.get_server_metadata(as_json=True)
        self.assertEqual(meta["name"], "conv1d-serve")
        self.assertIn("system_shared_memory", meta["extensions"])
        index = c.get_model_repository_index(as_json=True)
        self.assertEqual(sorted(m["name"] for m in index["models"]),
                         ["conv1d_backward", "conv1d_forward", "conv1d_update"])

    def test_reflection_and_health_list_the_service(self):
        # Raw calls with hand-encoded messages (no generated stubs needed):
        # ServerReflectionRequest{list_services: ""} (field 7) and
        # HealthCheckRequest{service} (field 1).
        name = b"inference.GRPCInferenceService"
        with grpc.insecure_channel(self.server.url) as ch:
            info = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/"
                                    "ServerReflectionInfo")
            answers = list(info(iter([b"\x3a\x00"]), timeout=10))
            self.assertEqual(len(answers), 1)
            self.assertIn(name, answers[0])
            self.assertIn(b"conv1d.v1.Conv1d", answers[0])
            check = ch.unary_unary("/grpc.health.v1.Health/Check")
            answer = check(b"\x0a" + bytes([len(name)]) + name, timeout=10)
            self.assertEqual(answer, b"\x08\x01")  # status: SERVING

    def test_metadata_and_config_name_every_tensor(self):
        want = {
            "conv1d_forward": (["x", "weight", "bias", "initial_states"], ["y", "final_states"]),
            "conv1d_backward": (["x", "weight", "bias", "initial_states", "dout",
                                 "dfinal_states"],
                                ["dx", "dweight", "dbias", "dinitial_states"]),
            "conv1d_update": (["x", "weight", "bias", "conv_state"], ["y", "conv_state_out"]),
        }
        for model, (inputs, outputs) in want.items():
            meta = self.client.get_model_metadata(model, as_json=True)
            self.assertEqual([t["name"] for t in meta["inputs"]], inputs)
            self.assertEqual([t["name"] for t in meta["outputs"]], outputs)
            for t in meta["inputs"] + meta["outputs"]:
                self.assertTrue(all(int(d) == -1 for d in t["shape"]), t)
            config = self.client.get_model_config(model, as_json=True)["config"]
            self.assertEqual(config.get("max_batch_size", 0), 0)
            optional = {i["name"] for i in config["input"] if i.get("optional")}
            self.assertNotIn("x", optional)
            self.assertIn("weight", optional)

    def test_statistics_count_inferences(self):
        before = self.client.get_inference_statistics("conv1d_forward", as_json=True)
        rng = np.random.default_rng(SEED)
        x, w = rounded(rng, (3, 4, 5), "FP32"), rounded(rng, (4, 2), "FP32")
        self.client.infer("conv1d_forward", [make_input("x", x, "FP32"),
                                             make_input("weight", w, "FP32")])
        after = self.client.get_inference_statistics("conv1d_forward", as_json=True)

        def count(stats, key):
            s = stats["model_stats"][0]
            return int(s.get(key, 0))
        self.assertEqual(count(after, "inference_count") - count(before, "inference_count"), 3)


class Infer(Fixture):
    def run_case(self, rng, op, dtype, wdtype, layout, silu, bias, states, width):
        b, d, length = int(rng.integers(1, 4)), int(rng.integers(1, 33)), int(rng.integers(1, 40))
        k = width - 1
        x = rounded(rng, (b, d, length), dtype)
        w = rounded(rng, (d, width), wdtype)
        bvec = rounded(rng, (d,), wdtype) if bias else None
        wire = (lambda a: a.transpose(0, 2, 1)) if layout == "channel_last" else (lambda a: a)
        inputs = [make_input("x", wire(x), dtype), make_input("weight", w, wdtype)]
        if bias:
            inputs.append(make_input("bias", bvec, wdtype))
        params = {"activation": "silu" if silu else "none", "layout": layout}
        label = f"{op} {dtype}/{wdtype} {layout} silu={silu} bias={bias} states={states} W={width}"
        if op == "forward":
            init = rounded(rng, (b, d, k), dtype) if states else None
            if states:
                inputs.append(make_input("initial_states", init, dtype))
            outs = [grpcclient.InferRequestedOutput(n) for n in ("y", "final_states")]
            r = self.client.infer("conv1d_forward", inputs, outputs=outs, parameters=params)
            y, fin = forward(x, w, bvec, init, silu)
            assert_close(self, label + " y", wire(r.as_numpy("y")), y, dtype, width)
            assert_close(self, label + " final_states", r.as_numpy("final_states"), fin, dtype, 0)
        elif op == "backward":
            dout = rounded(rng, (b, d, length), dtype)
            inputs.append(make_input("dout", wire(dout), dtype))
            init = rounded(rng, (b, d, k), dtype) if states else None
            dfin = rounded(rng, (b, d, k), dtype) if states else None
            if states:
                inputs += [make_input("initial_states", init, dtype),
                           make_input("dfinal_states", dfin, dtype)]
            names = ["dx", "dweight"] + (["dbias"] if bias else []) + ["dinitial_states"]
            outs = [grpcclient.InferRequestedOutput(n) for n in names]
            r = self.client.infer("conv1d_backward", inputs, outputs=outs, parameters=params)
            dx, dw, db, dinit = backward(x, w, dout, bvec, init, dfin, silu)
            assert_close(self, label + " dx", wire(r.as_numpy("dx")), dx, dtype, width)
            assert_close(self, label + " dweight", r.as_numpy("dweight"), dw, wdtype, b * length)
            if bias:
                assert_close(self, label + " dbias", r.as_numpy("dbias"), db, wdtype, b * length)
            assert_close(self, label + " dinitial_states", r.as_numpy("dinitial_states"),
                         dinit, dtype, width)
        else:
            state_len = max(k, 1) + int(rng.integers(0, 3))
            state = rounded(rng, (b, d, state_len), dtype)
            inputs.append(make_input("conv_state", state, dtype))
            r = self.client.infer("conv1d_update", inputs, parameters=params)
            self.assertEqual([o.name for o in r.get_response().outputs], ["y", "conv_state_out"])
            y, new_state = update(x, state, w, bvec, silu)
            assert_close(self, label + " y", wire(r.as_numpy("y")), y, dtype, width)
            assert_close(self, label + " conv_state_out", r.as_numpy("conv_state_out"),
                         new_state, dtype, 0)

    def test_every_op_and_dtype_matches_float64_reference(self):
        print(f"seed {SEED}", flush=True)
        rng = np.random.default_rng(SEED)
        for op in ("forward", "backward", "update"):
            for dtype in ("FP32", "FP16", "BF16"):
                for i in range(3):
                    self.run_case(rng, op, dtype, dtype,
                                  "channel_last" if i == 1 else "channel_first",
                                  silu=i != 0, bias=i != 2, states=i != 1,
                                  width=[4, 2, 7][i])
            # Weights of another dtype than the activations.
            self.run_case(rng, op, "BF16", "FP32", "channel_first", True, True, True, 4)

    def test_typed_fp32_contents(self):
        rng = np.random.default_rng(SEED + 1)
        x, w = rounded(rng, (2, 5, 9), "FP32"), rounded(rng, (5, 3), "FP32")
        inputs = []
        for name, v in (("x", x), ("weight", w)):
            t = grpcclient.InferInput(name, list(v.shape), "FP32")
            t._get_tensor().contents.fp32_contents.extend(v.ravel().tolist())
            inputs.append(t)
        r = self.client.infer("conv1d_forward", inputs)
        assert_close(self, "typed y", r.as_numpy("y"), forward(x, w)[0], "FP32", 3)

    def test_registered_weights_by_name(self):
        rng = np.random.default_rng(SEED + 2)
        w = rounded(rng, (6, 4), "FP32")
        bias = rounded(rng, (6,), "FP32")
        register_weights(self.server.url, "oip_set", w, bias)
        x = rounded(rng, (2, 6, 10), "FP32")
        r = self.client.infer("conv1d_forward", [make_input("x", x, "FP32")],
                              parameters={"weights_name": "oip_set"})
        assert_close(self, "y", r.as_numpy("y"), forward(x, w, bias)[0], "FP32", 4)
        self.expect_error("NOT_FOUND", ["weights_name \"nope\""], self.client.infer,
                          "conv1d_forward", [make_input("x", x, "FP32")],
                          parameters={"weights_name": "nope"})


def register_weights(url, name, w, bias):
    """conv1d.v1 RegisterWeights, encoded by hand (no generated stubs)."""
    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(num, payload):
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    def tensor(a):
        shape = b"".join(varint(d) for d in a.shape)
        return varint(1 << 3) + varint(1) + field(2, shape) + field(3, a.astype(np.float32).tobytes())
    msg = field(1, name.encode()) + field(2, tensor(w)) + field(3, tensor(bias))
    with grpc.insecure_channel(url) as ch:
        ch.unary_unary("/conv1d.v1.Conv1d/RegisterWeights")(msg, timeout=10)


class Stream(Fixture):
    def test_stream_answers_every_request_and_survives_a_bad_one(self):
        import queue
        results = queue.Queue()
        rng = np.random.default_rng(SEED + 3)
        self.client.start_stream(callback=lambda result, error: results.put((result, error)))
        want = {}
        try:
            for i in range(8):
                x, w = rounded(rng, (1, 4, 6 + i), "FP32"), rounded(rng, (4, 3), "FP32")
                want[str(i)] = forward(x, w)[0]
                self.client.async_stream_infer(
                    "conv1d_forward", [make_input("x", x, "FP32"), make_input("weight", w, "FP32")],
                    request_id=str(i))
            self.client.async_stream_infer("conv1d_forward", [make_input("x", x, "FP32")],
                                           request_id="bad")
            got, errors = {}, []
            for _ in range(9):
                result, error = results.get(timeout=20)
                if error is not None:
                    errors.append(error)
                else:
                    got[result.get_response().id] = result.as_numpy("y")
        finally:
            self.client.stop_stream()
        self.assertEqual(len(errors), 1)
        self.assertIn("input 'weight' is missing", errors[0].message())
        self.assertEqual(sorted(got), sorted(want))
        for k, y in got.items():
            assert_close(self, f"stream y {k}", y, want[k], "FP32", 3)


class SystemSharedMemory(Fixture):
    def test_register_infer_status_unregister(self):
        c = self.client
        rng = np.random.default_rng(SEED + 4)
        x, w = rounded(rng, (2, 8, 32), "FP32"), rounded(rng, (8, 4), "FP32")
        xs, ws = x.astype(np.float32), w.astype(np.float32)
        key_in, key_out = f"/oip_test_in_{os.getpid()}", f"/oip_test_out_{os.getpid()}"
        h_in = shm.create_shared_memory_region("in", key_in, 4096)
        h_out = shm.create_shared_memory_region("out", key_out, 4096)
        try:
            shm.set_shared_memory_region(h_in, [xs])
            shm.set_shared_memory_region(h_in, [ws], offset=xs.nbytes)
            c.register_system_shared_memory("in", key_in, 4096)
            c.register_system_shared_memory("out", key_out, 4096, offset=0)
            status = c.get_system_shared_memory_status(as_json=True)["regions"]
            self.assertEqual(status["in"]["key"], key_in)
            self.assertEqual(int(status["out"]["byte_size"]), 4096)

            def shm_input(name, shape, region, nbytes, offset=0):
                t = grpcclient.InferInput(name, list(shape), "FP32")
                t.set_shared_memory(region, nbytes, offset=offset)
                return t
            ix = shm_input("x", x.shape, "in", xs.nbytes)
            iw = shm_input("weight", w.shape, "in", ws.nbytes, offset=xs.nbytes)
            oy = grpcclient.InferRequestedOutput("y")
            oy.set_shared_memory("out", xs.nbytes)
            r = c.infer("conv1d_forward", [ix, iw], outputs=[oy])
            out = r.get_output("y")
            self.assertEqual(list(out.shape), list(x.shape))
            y = shm.get_contents_as_numpy(h_out, np.float32, x.shape)
            assert_close(self, "shm y", y, forward(x, w)[0], "FP32", 4)

            # Bounds are checked against the region on every request.
            self.expect_error("INVALID_ARGUMENT", ["input 'x'", "do not fit", "\"in\""],
                              c.infer, "conv1d_forward",
                              [shm_input("x", x.shape, "in", xs.nbytes, offset=4000), iw],
                              outputs=[oy])
            small = grpcclient.InferRequestedOutput("y")
            small.set_shared_memory("out", 16)
            self.expect_error("INVALID_ARGUMENT", ["output 'y'", "less than"],
                              c.infer, "conv1d_forward", [ix, iw], outputs=[small])
            self.expect_error("INVALID_ARGUMENT", ["x has 2044 bytes, expected 2048"],
                              c.infer, "conv1d_forward",
                              [shm_input("x", x.shape, "in", xs.nbytes - 4), iw])

            c.unregister_system_shared_memory("in")
            self.assertNotIn("in", c.get_system_shared_memory_status(as_json=True)
                             .get("regions", {}))
            self.expect_error("NOT_FOUND", ["input 'x'", "\"in\" is not registered"],
                              c.infer, "conv1d_forward", [ix, iw])
            self.expect_error("NOT_FOUND", ["\"gone\""], c.register_system_shared_memory,
                              "gone", "/oip_test_no_such_key", 64)
            self.expect_error("INVALID_ARGUMENT", ["has 4096 bytes"],
                              c.register_system_shared_memory, "big", key_out, 8192)
        finally:
            c.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(h_in)
            shm.destroy_shared_memory_region(h_out)
        self.assertEqual(c.get_system_shared_memory_status(as_json=True).get("regions", {}), {})

    def test_cuda_shared_memory_is_refused_clearly(self):
        # The CPU backend cannot touch device memory: registration names the
        # region and the reason; nothing is listed or can be unregistered.
        self.expect_error("FAILED_PRECONDITION",
                          ["\"g\"", "cpu backend cannot read or write device memory"],
                          self.client.register_cuda_shared_memory, "g", b"\0" * 64, 0, 64)
        self.assertEqual(self.client.get_cuda_shared_memory_status(as_json=True)
                         .get("regions", {}), {})
        self.expect_error("NOT_FOUND", ["CUDA shared-memory region \"g\" is not registered"],
                          self.client.unregister_cuda_shared_memory, "g")


class BadInput(Fixture):
    def setUp(self):
        rng = np.random.default_rng(SEED + 5)
        self.x, self.w = rounded(rng, (2, 4, 8), "FP32"), rounded(rng, (4, 3), "FP32")

    def infer(self, inputs, model="conv1d_forward", **kw):
        return self.client.infer(model, inputs, **kw)

    def test_each_mistake_is_named(self):
        x, w = self.x, self.w
        good = lambda: [make_input("x", x, "FP32"), make_input("weight", w, "FP32")]  # noqa
        self.expect_error("INVALID_ARGUMENT", ["input 'weights'", "x, weight, bias"],
                          self.infer, [make_input("x", x, "FP32"),
                                       make_input("weights", w, "FP32")])
        self.expect_error("INVALID_ARGUMENT", ["weight.shape[0] is 3", "D of x"],
                          self.infer, [make_input("x", x, "FP32"),
                                       make_input("weight", w.T.copy(), "FP32")])
        self.expect_error("INVALID_ARGUMENT", ["x.shape", "rank 2"],
                          self.infer, [make_input("x", x[0], "FP32"),
                                       make_input("weight", w, "FP32")])
        t = grpcclient.InferInput("x", list(x.shape), "INT32")
        t.set_data_from_numpy(x.astype(np.int32))
        self.expect_error("INVALID_ARGUMENT", ["input 'x'", "INT32"],
                          self.infer, [t, make_input("weight", w, "FP32")])
        self.expect_error("INVALID_ARGUMENT", ["dout.dtype is fp16", "x's dtype"],
                          self.infer, [make_input("x", x, "FP32"), make_input("weight", w, "FP32"),
                                       make_input("dout", x, "FP16")], model="conv1d_backward")
        self.expect_error("INVALID_ARGUMENT", ["input 'dout' is missing"],
                          self.infer, good(), model="conv1d_backward")
        self.expect_error("INVALID_ARGUMENT", ["parameter 'activation'", "relu"],
                          self.infer, good(), parameters={"activation": "relu"})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'colour' is not known"],
                          self.infer, good(), parameters={"colour": "blue"})
        self.expect_error("INVALID_ARGUMENT", ["parameter 'sequence_id'", "conv1d_update only"],
                          self.infer, good(), sequence_id=7, sequence_start=True)
        self.expect_error("INVALID_ARGUMENT", ["output 'z'", "y, final_states"],
                          self.infer, good(), outputs=[grpcclient.InferRequestedOutput("z")])
        self.expect_error("NOT_FOUND", ["model 'conv1d'"], self.infer, good(), model="conv1d")
        self.expect_error("INVALID_ARGUMENT", ["output 'dbias'", "bias"],
                          self.infer, good() + [make_input("dout", x, "FP32")],
                          model="conv1d_backward",
                          outputs=[grpcclient.InferRequestedOutput("dbias")])

    def test_raw_contents_of_wrong_size(self):
        t = grpcclient.InferInput("x", [2, 4, 8], "FP32")
        t.set_data_from_numpy(self.x.astype(np.float32))
        t.set_shape([2, 4, 9])  # 8 columns sent, 9 declared
        self.expect_error("INVALID_ARGUMENT", ["x has 256 bytes, expected 288"],
                          self.infer, [t, make_input("weight", self.w, "FP32")])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    SERVER_BINARY = sys.argv.pop(1)
    unittest.main(verbosity=2)
