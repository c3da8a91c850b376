"""Client: typed calls of conv1d.v1 with deadlines and retries."""

import collections
import random
import time

import grpc
import numpy as np

from conv1d_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from conv1d_client.session import DecodeSession
from conv1d_client.tensors import from_tensor, to_tensor

ForwardResult = collections.namedtuple("ForwardResult", ["y", "final_states"])
BackwardResult = collections.namedtuple(
    "BackwardResult", ["dx", "dweight", "dbias", "dinitial_states"])
UpdateResult = collections.namedtuple("UpdateResult", ["y", "conv_state"])
OpenedSession = collections.namedtuple("OpenedSession", ["session_id", "state_len", "y"])

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
_LAYOUTS = {"cf": pb.LAYOUT_CHANNEL_FIRST, "cl": pb.LAYOUT_CHANNEL_LAST}
_ACTIVATIONS = {"none": pb.ACTIVATION_NONE, "silu": pb.ACTIVATION_SILU}


class _BearerToken(grpc.UnaryUnaryClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary call."""

    def __init__(self, token):
        self._metadata = ("authorization", f"Bearer {token}")

    def intercept_unary_unary(self, continuation, details, request):
        metadata = list(details.metadata or ())
        metadata.append(self._metadata)
        details = _CallDetails(details.method, details.timeout, metadata,
                               details.credentials, details.wait_for_ready,
                               details.compression)
        return continuation(details, request)


class _CallDetails(
        collections.namedtuple(
            "_CallDetails",
            ("method", "timeout", "metadata", "credentials", "wait_for_ready",
             "compression")),
        grpc.ClientCallDetails):
    pass


class Client:
    """A connection to one conv1d_server.

    Arrays are [B, D, L] (layout="cf") or [B, L, D] (layout="cl"); weight is
    [D, W], bias [D], states [B, D, W-1]. Weights are sent inline unless
    ``weights_name`` names a set registered with ``register_weights``.
    Calls retry UNAVAILABLE / RESOURCE_EXHAUSTED with exponential backoff and
    jitter (the server's grpc-retry-pushback-ms trailer wins) within one
    deadline of ``timeout_s``. Thread-safe, as grpc channels are.

    Security (docs/security.md): ``tls_ca`` (PEM file of the CA that signed
    the server's certificate) switches to TLS; ``tls_cert`` and ``tls_key``
    add a client certificate for mutual TLS. ``token`` (or ``token_file``,
    whose first line is the token) is sent as ``authorization: Bearer`` on
    every call, over TLS or plaintext.
    """

    def __init__(self, target="localhost:50051", timeout_s=60.0,
                 max_attempts=4, max_message_bytes=1 << 30, *, tls_ca=None,
                 tls_cert=None, tls_key=None, token=None, token_file=None):
        opts = [("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes)]
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if tls_cert and not tls_ca:
            raise ValueError("tls_cert needs tls_ca")
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        if tls_ca:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca),
                private_key=read(tls_key) if tls_key else None,
                certificate_chain=read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        if token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
            if not token:
                raise ValueError(f"token_file {token_file}: first line is empty")
        if token:
            # An interceptor rather than call credentials: gRPC sends call
            # credentials over TLS only, and a token over a loopback or
            # sidecar-encrypted plaintext hop is a supported setup.
            self._channel = grpc.intercept_channel(self._channel, _BearerToken(token))
        self._stub = pb_grpc.Conv1dStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout_s=None):
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        backoff = 0.02
        for attempt in range(1, self.max_attempts + 1):
            left = deadline - time.monotonic()
            try:
                return method(request, timeout=max(left, 0.001))
            except grpc.RpcError as e:
                if e.code() not in _RETRYABLE or attempt == self.max_attempts:
                    raise
                delay = backoff * random.uniform(0.8, 1.2)
                for key, value in (e.trailing_metadata() or ()):
                    if key == "grpc-retry-pushback-ms":
                        try:
                            ms = int(value)
                        except ValueError:
                            ms = -1
                        if ms < 0:
                            raise
                        delay = ms / 1000.0
                if time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                backoff = min(backoff * 2, 2.0)
        raise AssertionError("unreachable")

    @staticmethod
    def _weights(req, weight, bias, weights_name, weight_dtype):
        if weights_name:
            req.weights_name = weights_name
            return
        if weight is None:
            raise ValueError("pass weight (and bias) or weights_name")
        req.inline_weights.weight.CopyFrom(to_tensor(weight, weight_dtype))
        if bias is not None:
            req.inline_weights.bias.CopyFrom(to_tensor(bias, weight_dtype))

    def forward(self, x, weight=None, bias=None, *, weights_name=None,
                activation="silu", layout="cf", initial_states=None,
                return_final_states=False, dtype=None, weight_dtype=None,
                timeout_s=None):
        req = pb.ForwardRequest(layout=_LAYOUTS[layout],
                                activation=_ACTIVATIONS[activation],
                                return_final_states=return_final_states)
        req.x.CopyFrom(to_tensor(x, dtype))
        self._weights(req, weight, bias, weights_name, weight_dtype)
        if initial_states is not None:
            req.initial_states.CopyFrom(to_tensor(initial_states, dtype))
        r = self._call(self._stub.Forward, req, timeout_s)
        return ForwardResult(from_tensor(r.y), from_tensor(r.final_states))

    def backward(self, x, dout, weight=None, bias=None, *, weights_name=None,
                 activation="silu", layout="cf", initial_states=None,
                 dfinal_states=None, return_dinitial_states=False,
                 grad_weight_fp32=False, dtype=None, weight_dtype=None,
                 timeout_s=None):
        req = pb.BackwardRequest(layout=_LAYOUTS[layout],
                                 activation=_ACTIVATIONS[activation],
                                 return_dinitial_states=return_dinitial_states,
                                 grad_weight_fp32=grad_weight_fp32)
        req.x.CopyFrom(to_tensor(x, dtype))
        req.dout.CopyFrom(to_tensor(dout, dtype))
        self._weights(req, weight, bias, weights_name, weight_dtype)
        if initial_states is not None:
            req.initial_states.CopyFrom(to_tensor(initial_states, dtype))
        if dfinal_states is not None:
            req.dfinal_states.CopyFrom(to_tensor(dfinal_states, dtype))
        r = self._call(self._stub.Backward, req, timeout_s)
        return BackwardResult(from_tensor(r.dx), from_tensor(r.dweight),
                              from_tensor(r.dbias), from_tensor(r.dinitial_states))

    def update(self, x, conv_state, weight=None, bias=None, *, weights_name=None,
               activation="silu", layout="cf", dtype=None, weight_dtype=None,
               timeout_s=None):
        req = pb.UpdateRequest(layout=_LAYOUTS[layout],
                               activation=_ACTIVATIONS[activation])
        req.x.CopyFrom(to_tensor(x, dtype))
        req.conv_state.CopyFrom(to_tensor(conv_state, dtype))
        self._weights(req, weight, bias, weights_name, weight_dtype)
        r = self._call(self._stub.Update, req, timeout_s)
        return UpdateResult(from_tensor(r.y), from_tensor(r.conv_state))

    def _open_request(self, weight, bias, weights_name, batch, dtype, weight_dtype,
                      activation, layout, state_len, max_draft_tokens, conv_state,
                      prefill, session_id=""):
        names = {"fp32": pb.FP32, "fp16": pb.FP16, "bf16": pb.BF16}
        if dtype not in names:
            raise ValueError(f"dtype {dtype!r}: want fp32, fp16 or bf16")
        req = pb.OpenSessionRequest(dtype=names[dtype], layout=_LAYOUTS[layout],
                                    activation=_ACTIVATIONS[activation], batch=batch,
                                    state_len=state_len,
                                    max_draft_tokens=max_draft_tokens,
                                    session_id=session_id)
        if not session_id:
            self._weights(req, weight, bias, weights_name, weight_dtype or dtype)
        if conv_state is not None:
            req.conv_state.CopyFrom(to_tensor(conv_state, dtype))
        if prefill is not None:
            req.prefill.CopyFrom(to_tensor(prefill, dtype))
        return req

    def decode(self, weight=None, bias=None, *, weights_name=None, batch=1,
               dtype="fp32", weight_dtype=None, activation="silu", layout="cf",
               state_len=0, max_draft_tokens=0, conv_state=None, prefill=None,
               session_id="", timeout_s=None):
        """Opens a DecodeSession on a Decode stream (session.py). With
        ``session_id``, takes over that (forked or unary) session instead."""
        req = self._open_request(weight, bias, weights_name, batch, dtype, weight_dtype,
                                 activation, layout, state_len, max_draft_tokens,
                                 conv_state, prefill, session_id)
        return DecodeSession(self._stub, req, timeout_s)

    def open_session(self, weight=None, bias=None, *, weights_name=None, batch=1,
                     dtype="fp32", weight_dtype=None, activation="silu", layout="cf",
                     state_len=0, max_draft_tokens=0, conv_state=None, prefill=None,
                     timeout_s=None):
        """Opens a session for unary calls (session_step, ...); it expires
        when idle longer than the server's session_idle_timeout_s."""
        req = self._open_request(weight, bias, weights_name, batch, dtype, weight_dtype,
                                 activation, layout, state_len, max_draft_tokens,
                                 conv_state, prefill)
        r = self._call(self._stub.OpenSession, req, timeout_s)
        return OpenedSession(r.session_id, r.state_len, from_tensor(r.y))

    def session_step(self, session_id, x, *, dtype=None, timeout_s=None):
        """One step of a unary session (Update with session_id): y."""
        req = pb.UpdateRequest(session_id=session_id)
        req.x.CopyFrom(to_tensor(x, dtype))
        return from_tensor(self._call(self._stub.Update, req, timeout_s).y)

    def commit_session(self, session_id, accepted):
        self._call(self._stub.CommitSession,
                   pb.CommitSessionRequest(session_id=session_id, accepted=accepted))

    def fork_session(self, session_id):
        return self._call(self._stub.ForkSession,
                          pb.ForkSessionRequest(session_id=session_id)).session_id

    def export_session(self, session_id):
        r = self._call(self._stub.ExportSession, pb.ExportSessionRequest(session_id=session_id))
        return from_tensor(r.conv_state)

    def close_session(self, session_id):
        self._call(self._stub.CloseSession, pb.CloseSessionRequest(session_id=session_id))

    def register_weights(self, name, weight, bias=None, *, replace=False, dtype=None):
        req = pb.RegisterWeightsRequest(name=name, replace=replace)
        req.weight.CopyFrom(to_tensor(weight, dtype))
        if bias is not None:
            req.bias.CopyFrom(to_tensor(bias, dtype))
        return self._call(self._stub.RegisterWeights, req).info

    def unregister_weights(self, name):
        self._call(self._stub.UnregisterWeights, pb.UnregisterWeightsRequest(name=name))

    def list_weights(self):
        return list(self._call(self._stub.ListWeights, pb.ListWeightsRequest()).weights)

    def server_info(self):
        return self._call(self._stub.ServerInfo, pb.ServerInfoRequest())

    def health(self, service=""):
        """'SERVING', 'NOT_SERVING', ... as reported by grpc.health.v1."""
        r = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)


def reference_forward(x, weight, bias=None, initial_states=None, silu=True):
    """float64 NumPy reference of the forward pass, channel-first [B, D, L].

    Returns (y, final_states) as float64.
    """
    xt, w, z = _pre_activation(x, weight, bias, initial_states)
    width = w.shape[1]
    y = z / (1.0 + np.exp(-z)) if silu else z
    return y, xt[:, :, xt.shape[2] - (width - 1):]


def _pre_activation(x, weight, bias, initial_states):
    """float64 (x̃ = [initial_states, x], weight, z = bias + Σ_k w_k x̃)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    bsz, dim, seqlen = x.shape
    width = w.shape[1]
    if initial_states is None:
        pre = np.zeros((bsz, dim, width - 1))
    else:
        pre = np.asarray(initial_states, dtype=np.float64)
    xt = np.concatenate([pre, x], axis=2)
    z = np.zeros((bsz, dim, seqlen))
    for k in range(width):
        z += w[None, :, k:k + 1] * xt[:, :, k:k + seqlen]
    if bias is not None:
        z += np.asarray(bias, dtype=np.float64)[None, :, None]
    return xt, w, z


def reference_backward(x, weight, dout, bias=None, initial_states=None,
                       dfinal_states=None, silu=True):
    """float64 NumPy reference of the backward pass, channel-first [B, D, L].

    ``dfinal_states`` is the gradient of the forward's final_states (the last
    W-1 columns of [initial_states, x]). Returns (dx, dweight, dbias,
    dinitial_states) as float64; dbias is None without a bias.
    """
    xt, w, z = _pre_activation(x, weight, bias, initial_states)
    g = np.asarray(dout, dtype=np.float64)
    _, dim, seqlen = z.shape
    width = w.shape[1]
    if silu:
        s = 1.0 / (1.0 + np.exp(-z))
        g = g * s * (1.0 + z * (1.0 - s))
    dxt = np.zeros_like(xt)
    dw = np.zeros((dim, width))
    for k in range(width):
        dxt[:, :, k:k + seqlen] += w[None, :, k:k + 1] * g
        dw[:, k] = (g * xt[:, :, k:k + seqlen]).sum(axis=(0, 2))
    if dfinal_states is not None and width > 1:
        dxt[:, :, xt.shape[2] - (width - 1):] += np.asarray(dfinal_states, dtype=np.float64)
    dbias = g.sum(axis=(0, 2)) if bias is not None else None
    return dxt[:, :, width - 1:], dw, dbias, dxt[:, :, :width - 1]
