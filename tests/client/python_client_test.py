#!/usr/bin/env python3
"""The Python conv1d_client package against a live conv1d_server --backend=cpu,
forward and backward checked against NumPy float64 references.

usage: python_client_test.py SERVER CLIENT   (PYTHONPATH: client/python)
"""
import asyncio
import sys
import unittest

import grpc
import numpy as np

import conv1d_client
from conv1d_client import Client, bf16_to_float32, float32_to_bf16
from conv1d_client.aio import AsyncClient
from conv1d_client.client import reference_backward, reference_forward
from e2e_util import seed_for_test
from server_launcher import Server

SERVER, CLIENT = sys.argv[1:3]


class PythonClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(SERVER, CLIENT, "--backend=cpu")
        cls.c = Client(cls.srv.target, timeout_s=30)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.srv.stop()

    def setUp(self):
        self.rng = np.random.default_rng(seed_for_test(11))

    def data(self, b, d, l, w):
        x = self.rng.uniform(-1, 1, (b, d, l)).astype(np.float32)
        weight = self.rng.uniform(-0.6, 0.6, (d, w)).astype(np.float32)
        bias = self.rng.uniform(-0.5, 0.5, d).astype(np.float32)
        init = self.rng.uniform(-1, 1, (b, d, w - 1)).astype(np.float32)
        return x, weight, bias, init

    def test_health_and_info(self):
        self.assertEqual(self.c.health(), "SERVING")
        self.assertEqual(self.c.server_info().backend, "cpu")

    def test_forward_fp32_matches_float64_reference(self):
        x, w, b, init = self.data(3, 40, 129, 4)
        y, final = self.c.forward(x, w, b, initial_states=init, return_final_states=True)
        ref, ref_final = reference_forward(x, w, b, init)
        self.assertEqual(y.dtype, np.float32)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(final, ref_final.astype(np.float32))

    def test_backward_fp32_matches_float64_reference(self):
        x, w, b, init = self.data(2, 24, 77, 4)
        dout = self.rng.uniform(-1, 1, x.shape).astype(np.float32)
        dfinal = self.rng.uniform(-1, 1, init.shape).astype(np.float32)
        dx, dw, db, dinit = self.c.backward(x, dout, w, b, initial_states=init,
                                            dfinal_states=dfinal, return_dinitial_states=True)
        rdx, rdw, rdb, rdinit = reference_backward(x, w, dout, b, init, dfinal)
        self.assertEqual((dx.dtype, dx.shape), (np.float32, x.shape))
        np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dinit, rdinit, rtol=1e-5, atol=1e-5)
        # dweight and dbias sum over B*L products: the tolerance grows with them.
        np.testing.assert_allclose(dw, rdw, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(db, rdb, rtol=1e-4, atol=1e-4)

    def test_backward_channel_last_no_bias_no_activation(self):
        x, w, _, _ = self.data(1, 16, 33, 3)
        dout = self.rng.uniform(-1, 1, x.shape).astype(np.float32)
        dx, dw, db, dinit = self.c.backward(
            np.ascontiguousarray(x.transpose(0, 2, 1)),
            np.ascontiguousarray(dout.transpose(0, 2, 1)), w, None, layout="cl",
            activation="none")
        self.assertIsNone(db)
        self.assertIsNone(dinit)
        rdx, rdw, _, _ = reference_backward(x, w, dout, silu=False)
        np.testing.assert_allclose(dx.transpose(0, 2, 1), rdx, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dw, rdw, rtol=1e-4, atol=1e-4)

    def test_forward_channel_last_no_activation(self):
        x, w, b, _ = self.data(2, 24, 17, 3)
        y, final = self.c.forward(np.ascontiguousarray(x.transpose(0, 2, 1)), w, None,
                                  layout="cl", activation="none")
        self.assertIsNone(final)
        ref, _ = reference_forward(x, w, None, None, silu=False)
        np.testing.assert_allclose(y.transpose(0, 2, 1), ref, rtol=1e-5, atol=1e-6)

    def test_forward_fp16_and_bf16(self):
        x, w, b, _ = self.data(1, 32, 64, 4)
        y16, _ = self.c.forward(x.astype(np.float16), w.astype(np.float16), b.astype(np.float16))
        ref, _ = reference_forward(x.astype(np.float16), w.astype(np.float16), b.astype(np.float16))
        self.assertEqual(y16.dtype, np.float16)
        np.testing.assert_allclose(y16.astype(np.float64), ref, rtol=4e-3, atol=4e-3)
        xb, wb, bb = float32_to_bf16(x), float32_to_bf16(w), float32_to_bf16(b)
        yb, _ = self.c.forward(xb, wb, bb)
        self.assertEqual(yb.dtype, np.uint16)
        ref, _ = reference_forward(bf16_to_float32(xb), bf16_to_float32(wb), bf16_to_float32(bb))
        np.testing.assert_allclose(bf16_to_float32(yb), ref, rtol=2e-2, atol=2e-2)

    def test_registered_weights_and_update(self):
        x, w, b, _ = self.data(2, 16, 1, 4)
        self.c.register_weights("py_test_w", w, b, replace=True)
        self.assertIn("py_test_w", [i.name for i in self.c.list_weights()])
        state = self.rng.uniform(-1, 1, (2, 16, 3)).astype(np.float32)
        y, new_state = self.c.update(x, state, weights_name="py_test_w")
        ref, ref_state = reference_forward(x, w, b, state)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(new_state, ref_state.astype(np.float32))
        self.c.unregister_weights("py_test_w")
        self.assertNotIn("py_test_w", [i.name for i in self.c.list_weights()])

    def test_decode_session_chain_commit_fork_equal_the_reference(self):
        x, w, b, _ = self.data(2, 8, 40, 4)
        ref, ref_state = reference_forward(x, w, b)
        with self.c.decode(w, b, batch=2, max_draft_tokens=2, prefill=x[:, :, :10]) as s:
            ys = [s.prefill_y]
            for t in range(10, 40, 4):
                n = min(4, 40 - t)
                draft = np.concatenate(
                    [x[:, :, t:t + n], self.rng.uniform(-1, 1, (2, 8, 2)).astype(np.float32)],
                    axis=2)
                ys.append(s.step(draft)[:, :, :n])
                s.commit(n)  # the two extra draft tokens roll back
            np.testing.assert_allclose(np.concatenate(ys, axis=2), ref, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(s.export(), ref_state.astype(np.float32))
            fork_id = s.fork()
        # The fork outlives its stream; take it over on a new one.
        tail = self.rng.uniform(-1, 1, (2, 8, 5)).astype(np.float32)
        with self.c.decode(session_id=fork_id) as f:
            y = f.step(tail)
        full = np.concatenate([x, tail], axis=2)
        ref_full, _ = reference_forward(full, w, b)
        np.testing.assert_allclose(y, ref_full[:, :, 40:], rtol=1e-5, atol=1e-6)

    def test_unary_session_and_errors(self):
        x, w, b, _ = self.data(1, 8, 12, 4)
        opened = self.c.open_session(w, b, batch=1)
        ys = [self.c.session_step(opened.session_id, x[:, :, t:t + 3]) for t in range(0, 12, 3)]
        ref, ref_state = reference_forward(x, w, b)
        np.testing.assert_allclose(np.concatenate(ys, axis=2), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(self.c.export_session(opened.session_id),
                                      ref_state.astype(np.float32))
        with self.assertRaises(conv1d_client.InvalidArgumentError) as e:
            self.c.session_step(opened.session_id, x[:, :4, :1])
        self.assertIn("x.shape[1]", e.exception.message)
        self.c.close_session(opened.session_id)
        with self.assertRaises(conv1d_client.NotFoundError):
            self.c.session_step(opened.session_id, x[:, :, :1])

    def test_bad_request_raises_invalid_argument_naming_the_field(self):
        x, w, b, _ = self.data(1, 8, 16, 4)
        with self.assertRaises(conv1d_client.InvalidArgumentError) as cm:
            self.c.forward(x, w[:4], b)
        e = cm.exception
        self.assertIsInstance(e, conv1d_client.Conv1dError)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.method, "Forward")
        self.assertIn("weight", e.message)
        self.assertTrue(e.request_id, "the server's x-request-id trailer")
        self.assertIn(e.message, str(e))

    def test_unknown_weights_raise_not_found(self):
        x, _, _, _ = self.data(1, 8, 16, 4)
        with self.assertRaises(conv1d_client.NotFoundError) as cm:
            self.c.forward(x, weights_name="py_no_such_set")
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("py_no_such_set", cm.exception.message)

    def test_bad_local_argument_raises_value_error_before_sending(self):
        x, w, b, _ = self.data(1, 8, 16, 4)
        with self.assertRaisesRegex(ValueError, "layout"):
            self.c.forward(x, w, b, layout="nchw")
        with self.assertRaisesRegex(ValueError, "weight"):
            self.c.forward(x)

    def test_unreachable_server_raises_unavailable(self):
        # Refused at once: the deadline only has to outlast a loaded machine.
        with Client("127.0.0.1:1", timeout_s=10, max_attempts=2) as c:
            with self.assertRaises(conv1d_client.UnavailableError):
                c.server_info()

    def test_asyncio_client_matches_reference(self):
        x, w, b, init = self.data(2, 16, 40, 4)

        async def go():
            async with AsyncClient(self.srv.target, timeout_s=30) as c:
                self.assertEqual(await c.health(), "SERVING")
                results = await asyncio.gather(
                    *(c.forward(x[i:i + 1], w, b, initial_states=init[i:i + 1])
                      for i in range(2)))
                with self.assertRaises(conv1d_client.InvalidArgumentError) as cm:
                    await c.forward(x, w[:3], b)
                self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                return results

        results = asyncio.run(go())
        ref, _ = reference_forward(x, w, b, init)
        for i, (y, final) in enumerate(results):
            self.assertIsNone(final)
            np.testing.assert_allclose(y[0], ref[i], rtol=1e-5, atol=1e-6)

    def test_bf16_conversion_rounds_to_nearest_even(self):
        v = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -2.5], dtype=np.float32)
        bits = float32_to_bf16(v)
        np.testing.assert_array_equal(bits, np.array([0x3F80, 0x3F80, 0x3F82, 0xC020], np.uint16))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
