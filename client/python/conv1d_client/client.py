"""Client: the blocking API of conv1d.v1, with deadlines, retries and typed
errors. :class:`conv1d_client.aio.AsyncClient` is the same API for asyncio."""

import time

import grpc

from conv1d_client import _calls
from conv1d_client._calls import BackwardResult, ForwardResult, UpdateResult
from conv1d_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from conv1d_client.errors import from_rpc_error
from conv1d_client.reference import reference_backward, reference_forward

__all__ = ["Client", "ForwardResult", "BackwardResult", "UpdateResult",
           "reference_forward", "reference_backward"]


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

    Thread-safe, as gRPC channels are. ``channel`` takes a ready
    ``grpc.Channel`` (e.g. a secure one) instead of ``target``.
    """

    def __init__(self, target="localhost:50051", timeout_s=60.0,
                 max_attempts=4, max_message_bytes=1 << 30, channel=None):
        if channel is None:
            channel = grpc.insecure_channel(
                target, options=_calls.channel_options(max_message_bytes))
        self._channel = channel
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
