"""AsyncClient: the API of :class:`conv1d_client.Client` for asyncio, over
``grpc.aio``. Every call is a coroutine; arguments, results, retries and
errors are the same as the blocking client's.

    async with AsyncClient("localhost:50051") as c:
        y, _ = await c.forward(x, weight, bias)
        many = await asyncio.gather(*(c.forward(xi, weight) for xi in xs))
"""

import asyncio
import time

import grpc
import grpc.aio

from conv1d_client import _calls
from conv1d_client._stubs import health_pb2, health_pb2_grpc, pb, pb_grpc
from conv1d_client.errors import from_rpc_error

__all__ = ["AsyncClient"]


class AsyncClient:
    """A connection to one conv1d_server for asyncio code.

    Create it inside a running event loop (``grpc.aio`` channels belong to
    one loop). ``channel`` takes a ready ``grpc.aio.Channel`` instead of
    ``target``. See :class:`conv1d_client.Client` for arrays, retries and
    errors.
    """

    def __init__(self, target="localhost:50051", timeout_s=60.0,
                 max_attempts=4, max_message_bytes=1 << 30, channel=None):
        if channel is None:
            channel = grpc.aio.insecure_channel(
                target, options=_calls.channel_options(max_message_bytes))
        self._channel = channel
        self._stub = pb_grpc.Conv1dStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts

    async def close(self):
        """Closes the channel; calls in flight are cancelled."""
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _call(self, name, request, timeout_s=None):
        method = getattr(self._stub, name)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        backoff = _calls.Backoff(self.max_attempts)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await method(request,
                                    timeout=max(deadline - time.monotonic(), 0.001))
            except grpc.aio.AioRpcError as e:
                delay = backoff.delay_s(e, attempt)
                if delay is None or time.monotonic() + delay >= deadline:
                    raise from_rpc_error(e, name) from None
                await asyncio.sleep(delay)

    async def forward(self, x, weight=None, bias=None, *, weights_name=None,
                      activation="silu", layout="cf", initial_states=None,
                      return_final_states=False, dtype=None, weight_dtype=None,
                      timeout_s=None):
        """As :meth:`conv1d_client.Client.forward`; returns ForwardResult."""
        req = _calls.forward_request(x, weight, bias, weights_name, activation,
                                     layout, initial_states, return_final_states,
                                     dtype, weight_dtype)
        return _calls.forward_result(await self._call("Forward", req, timeout_s))

    async def backward(self, x, dout, weight=None, bias=None, *, weights_name=None,
                       activation="silu", layout="cf", initial_states=None,
                       dfinal_states=None, return_dinitial_states=False,
                       grad_weight_fp32=False, dtype=None, weight_dtype=None,
                       timeout_s=None):
        """As :meth:`conv1d_client.Client.backward`; returns BackwardResult."""
        req = _calls.backward_request(x, dout, weight, bias, weights_name,
                                      activation, layout, initial_states,
                                      dfinal_states, return_dinitial_states,
                                      grad_weight_fp32, dtype, weight_dtype)
        return _calls.backward_result(await self._call("Backward", req, timeout_s))

    async def update(self, x, conv_state, weight=None, bias=None, *,
                     weights_name=None, activation="silu", layout="cf",
                     dtype=None, weight_dtype=None, timeout_s=None):
        """As :meth:`conv1d_client.Client.update`; returns UpdateResult."""
        req = _calls.update_request(x, conv_state, weight, bias, weights_name,
                                    activation, layout, dtype, weight_dtype)
        return _calls.update_result(await self._call("Update", req, timeout_s))

    async def register_weights(self, name, weight, bias=None, *, replace=False,
                               dtype=None):
        """As :meth:`conv1d_client.Client.register_weights`."""
        req = _calls.register_request(name, weight, bias, replace, dtype)
        return (await self._call("RegisterWeights", req)).info

    async def unregister_weights(self, name):
        """As :meth:`conv1d_client.Client.unregister_weights`."""
        await self._call("UnregisterWeights", pb.UnregisterWeightsRequest(name=name))

    async def list_weights(self):
        """As :meth:`conv1d_client.Client.list_weights`."""
        return list((await self._call("ListWeights", pb.ListWeightsRequest())).weights)

    async def server_info(self):
        """As :meth:`conv1d_client.Client.server_info`."""
        return await self._call("ServerInfo", pb.ServerInfoRequest())

    async def health(self, service=""):
        """As :meth:`conv1d_client.Client.health`."""
        try:
            r = await self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                         timeout=self.timeout_s)
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e, "Health.Check") from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
