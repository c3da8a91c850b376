"""Client: the blocking API of conv1d.v1, with deadlines, retries and typed
errors. :class:`conv1d_client.aio.AsyncClient` is the same API for asyncio."""

import collections
import time

import grpc

from conv1d_client import _calls
from conv1d_client._calls import BackwardResult, ForwardResult, UpdateResult
from conv1d_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from conv1d_client.errors import from_rpc_error
from conv1d_client.reference import reference_backward, reference_forward
from conv1d_client.session import DecodeSession
from conv1d_client.tensors import from_tensor, to_tensor

OpenedSession = collections.namedtuple("OpenedSession", ["session_id", "state_len", "y"])

__all__ = ["Client", "ForwardResult", "BackwardResult", "UpdateResult", "OpenedSession",
           "reference_forward", "reference_backward"]


class _BearerToken(grpc.UnaryUnaryClientInterceptor,
                   grpc.StreamStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary call and every
    Decode stream."""

    def __init__(self, token):
        self._metadata = ("authorization", f"Bearer {token}")

    def _details(self, details):
        metadata = list(details.metadata or ())
        metadata.append(self._metadata)
        return _CallDetails(details.method, details.timeout, metadata,
                            details.credentials, details.wait_for_ready,
                            details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _CallDetails(
        collections.namedtuple(
            "_CallDetails",
            ("method", "timeout", "metadata", "credentials", "wait_for_ready",
             "compression")),
        grpc.ClientCallDetails):
    pass


class Client:
    """A connection to one conv1d_server.

    Arrays are NumPy arrays: x is [B, D, L] (``layout="cf"``) or [B, L, D]
    (``layout="cl"``); weight [D, W]; bias [D]; initial_states [B, D, W-1];
    conv_state [B, D, K] with K >= W-1. float32 travels as fp32, float16 as
    fp16, uint16 as raw bf16 bits (``dtype="bf16"`` rounds float arrays to
    bf16); answers come back in the request's dtype. Weights are sent inline
    unless ``weights_name`` names a set registered with :meth:`register_weights`.

    Each call has one deadline of ``timeout_s`` covering its retries:
    UNAVAILABLE and RESOURCE_EXHAUSTED are retried up to ``max_attempts`` in
    all with exponential backoff (the server's ``grpc-retry-pushback-ms``
    trailer wins). A failed call raises a :class:`conv1d_client.Conv1dError`
    subclass carrying the gRPC code and the server's message; a bad local
    argument raises ``ValueError`` before anything is sent.

    Security (docs/security.md): ``tls_ca`` (PEM file of the CA that signed
    the server's certificate) switches to TLS; ``tls_cert`` and ``tls_key``
    add a client certificate for mutual TLS. ``token`` (or ``token_file``,
    whose first line is the token) is sent as ``authorization: Bearer`` on
    every call, over TLS or plaintext.

    Thread-safe, as gRPC channels are. ``channel`` takes a ready
    ``grpc.Channel`` instead of ``target`` (the TLS options then do not apply;
    a token still does).
    """

    def __init__(self, target="localhost:50051", timeout_s=60.0,
                 max_attempts=4, max_message_bytes=1 << 30, channel=None, *, tls_ca=None,
                 tls_cert=None, tls_key=None, token=None, token_file=None):
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together")
        if tls_cert and not tls_ca:
            raise ValueError("tls_cert needs tls_ca")
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        if channel is not None and tls_ca:
            raise ValueError("give channel or tls_ca, not both")
        if channel is None:
            opts = _calls.channel_options(max_message_bytes)
            if tls_ca:
                def read(path):
                    with open(path, "rb") as f:
                        return f.read()
                creds = grpc.ssl_channel_credentials(
                    root_certificates=read(tls_ca),
                    private_key=read(tls_key) if tls_key else None,
                    certificate_chain=read(tls_cert) if tls_cert else None)
                channel = grpc.secure_channel(target, creds, options=opts)
            else:
                channel = grpc.insecure_channel(target, options=opts)
        self._channel = channel
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
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, name, request, timeout_s=None):
        method = getattr(self._stub, name)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        backoff = _calls.Backoff(self.max_attempts)
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(request, timeout=max(deadline - time.monotonic(), 0.001))
            except grpc.RpcError as e:
                delay = backoff.delay_s(e, attempt)
                if delay is None or time.monotonic() + delay >= deadline:
                    raise from_rpc_error(e, name) from None
                time.sleep(delay)

    def forward(self, x, weight=None, bias=None, *, weights_name=None,
                activation="silu", layout="cf", initial_states=None,
                return_final_states=False, dtype=None, weight_dtype=None,
                timeout_s=None):
        """y = act(bias + causal depthwise conv1d of x with weight).

        Args:
            x: [B, D, L] (or [B, L, D] with ``layout="cl"``).
            weight, bias: [D, W] and [D], or None with ``weights_name``.
            activation: ``"silu"`` or ``"none"``.
            initial_states: [B, D, W-1] inputs before x (zeros when None).
            return_final_states: also return the last W-1 inputs.
            dtype, weight_dtype: wire dtype (``fp32``, ``fp16``, ``bf16``);
                None takes it from the array.
            timeout_s: this call's deadline (default: the client's).

        Returns:
            ForwardResult(y, final_states).
        """
        req = _calls.forward_request(x, weight, bias, weights_name, activation,
                                     layout, initial_states, return_final_states,
                                     dtype, weight_dtype)
        return _calls.forward_result(self._call("Forward", req, timeout_s))

    def backward(self, x, dout, weight=None, bias=None, *, weights_name=None,
                 activation="silu", layout="cf", initial_states=None,
                 dfinal_states=None, return_dinitial_states=False,
                 grad_weight_fp32=False, dtype=None, weight_dtype=None,
                 timeout_s=None):
        """Gradients of :meth:`forward` given ``dout`` (shaped like x).

        ``dfinal_states`` is the gradient of the forward's final_states;
        ``grad_weight_fp32`` returns dweight/dbias as fp32 whatever the
        weights' dtype. Returns BackwardResult(dx, dweight, dbias,
        dinitial_states); dbias is None without a bias, dinitial_states None
        unless ``return_dinitial_states``.
        """
        req = _calls.backward_request(x, dout, weight, bias, weights_name,
                                      activation, layout, initial_states,
                                      dfinal_states, return_dinitial_states,
                                      grad_weight_fp32, dtype, weight_dtype)
        return _calls.backward_result(self._call("Backward", req, timeout_s))

    def update(self, x, conv_state, weight=None, bias=None, *, weights_name=None,
               activation="silu", layout="cf", dtype=None, weight_dtype=None,
               timeout_s=None):
        """One decode step: x [B, D, S] with conv_state [B, D, K].

        Returns UpdateResult(y, conv_state) with the advanced state.
        """
        req = _calls.update_request(x, conv_state, weight, bias, weights_name,
                                    activation, layout, dtype, weight_dtype)
        return _calls.update_result(self._call("Update", req, timeout_s))

    def _open_request(self, weight, bias, weights_name, batch, dtype, weight_dtype,
                      activation, layout, state_len, max_draft_tokens, conv_state,
                      prefill, session_id=""):
        names = {"fp32": pb.FP32, "fp16": pb.FP16, "bf16": pb.BF16}
        if dtype not in names:
            raise ValueError(f"dtype {dtype!r}: want fp32, fp16 or bf16")
        req = pb.OpenSessionRequest(dtype=names[dtype],
                                    layout=_calls._choice(_calls._LAYOUTS, layout, "layout"),
                                    activation=_calls._choice(_calls._ACTIVATIONS, activation,
                                                              "activation"),
                                    batch=batch,
                                    state_len=state_len,
                                    max_draft_tokens=max_draft_tokens,
                                    session_id=session_id)
        if not session_id:
            _calls._weights(req, weight, bias, weights_name, weight_dtype or dtype)
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
        r = self._call("OpenSession", req, timeout_s)
        return OpenedSession(r.session_id, r.state_len, from_tensor(r.y))

    def session_step(self, session_id, x, *, dtype=None, timeout_s=None):
        """One step of a unary session (Update with session_id): y."""
        req = pb.UpdateRequest(session_id=session_id)
        req.x.CopyFrom(to_tensor(x, dtype))
        return from_tensor(self._call("Update", req, timeout_s).y)

    def commit_session(self, session_id, accepted):
        self._call("CommitSession",
                   pb.CommitSessionRequest(session_id=session_id, accepted=accepted))

    def fork_session(self, session_id):
        return self._call("ForkSession",
                          pb.ForkSessionRequest(session_id=session_id)).session_id

    def export_session(self, session_id):
        r = self._call("ExportSession", pb.ExportSessionRequest(session_id=session_id))
        return from_tensor(r.conv_state)

    def close_session(self, session_id):
        self._call("CloseSession", pb.CloseSessionRequest(session_id=session_id))

    def register_weights(self, name, weight, bias=None, *, replace=False, dtype=None):
        """Keeps a weight set on the server under ``name``; returns its
        ``WeightInfo``. A taken name raises AlreadyExistsError unless ``replace``."""
        req = _calls.register_request(name, weight, bias, replace, dtype)
        return self._call("RegisterWeights", req).info

    def unregister_weights(self, name):
        """Drops a registered set (NotFoundError when there is none)."""
        self._call("UnregisterWeights", pb.UnregisterWeightsRequest(name=name))

    def list_weights(self):
        """The registered sets, as a list of ``WeightInfo`` messages."""
        return list(self._call("ListWeights", pb.ListWeightsRequest()).weights)

    def server_info(self):
        """The ``ServerInfoResponse``: version, backend, devices, limits."""
        return self._call("ServerInfo", pb.ServerInfoRequest())

    def health(self, service=""):
        """``"SERVING"``, ``"NOT_SERVING"``, ... as reported by grpc.health.v1."""
        method = self._health.Check
        try:
            r = method(health_pb2.HealthCheckRequest(service=service),
                       timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Health.Check") from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
