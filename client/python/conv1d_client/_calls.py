"""What the sync and asyncio clients share: channel options, request
building, response conversion and the retry policy. Pure functions; no I/O."""

import collections
import random

import grpc

from conv1d_client._stubs import pb
from conv1d_client.errors import trailer
from conv1d_client.tensors import from_tensor, to_tensor

ForwardResult = collections.namedtuple("ForwardResult", ["y", "final_states"])
ForwardResult.__doc__ = "y, and final_states (None unless asked for)."
BackwardResult = collections.namedtuple(
    "BackwardResult", ["dx", "dweight", "dbias", "dinitial_states"])
BackwardResult.__doc__ = ("dx, dweight, dbias (None without a bias) and "
                          "dinitial_states (None unless asked for).")
UpdateResult = collections.namedtuple("UpdateResult", ["y", "conv_state"])
UpdateResult.__doc__ = "y of the decode step and the advanced conv_state."

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
_LAYOUTS = {"cf": pb.LAYOUT_CHANNEL_FIRST, "cl": pb.LAYOUT_CHANNEL_LAST}
_ACTIVATIONS = {"none": pb.ACTIVATION_NONE, "silu": pb.ACTIVATION_SILU}


def channel_options(max_message_bytes):
    """gRPC channel arguments of both clients."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes)]


def _choice(table, value, what):
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"{what}={value!r}: want one of {', '.join(table)}") from None


def _weights(req, weight, bias, weights_name, weight_dtype):
    if weights_name:
        req.weights_name = weights_name
        return
    if weight is None:
        raise ValueError("weight: pass weight (and bias) or weights_name")
    req.inline_weights.weight.CopyFrom(to_tensor(weight, weight_dtype))
    if bias is not None:
        req.inline_weights.bias.CopyFrom(to_tensor(bias, weight_dtype))


def forward_request(x, weight, bias, weights_name, activation, layout,
                    initial_states, return_final_states, dtype, weight_dtype):
    req = pb.ForwardRequest(layout=_choice(_LAYOUTS, layout, "layout"),
                            activation=_choice(_ACTIVATIONS, activation, "activation"),
                            return_final_states=return_final_states)
    req.x.CopyFrom(to_tensor(x, dtype))
    _weights(req, weight, bias, weights_name, weight_dtype)
    if initial_states is not None:
        req.initial_states.CopyFrom(to_tensor(initial_states, dtype))
    return req


def forward_result(r):
    return ForwardResult(from_tensor(r.y), from_tensor(r.final_states))


def backward_request(x, dout, weight, bias, weights_name, activation, layout,
                     initial_states, dfinal_states, return_dinitial_states,
                     grad_weight_fp32, dtype, weight_dtype):
    req = pb.BackwardRequest(layout=_choice(_LAYOUTS, layout, "layout"),
                             activation=_choice(_ACTIVATIONS, activation, "activation"),
                             return_dinitial_states=return_dinitial_states,
                             grad_weight_fp32=grad_weight_fp32)
    req.x.CopyFrom(to_tensor(x, dtype))
    req.dout.CopyFrom(to_tensor(dout, dtype))
    _weights(req, weight, bias, weights_name, weight_dtype)
    if initial_states is not None:
        req.initial_states.CopyFrom(to_tensor(initial_states, dtype))
    if dfinal_states is not None:
        req.dfinal_states.CopyFrom(to_tensor(dfinal_states, dtype))
    return req


def backward_result(r):
    return BackwardResult(from_tensor(r.dx), from_tensor(r.dweight),
                          from_tensor(r.dbias), from_tensor(r.dinitial_states))


def update_request(x, conv_state, weight, bias, weights_name, activation, layout,
                   dtype, weight_dtype):
    req = pb.UpdateRequest(layout=_choice(_LAYOUTS, layout, "layout"),
                           activation=_choice(_ACTIVATIONS, activation, "activation"))
    req.x.CopyFrom(to_tensor(x, dtype))
    req.conv_state.CopyFrom(to_tensor(conv_state, dtype))
    _weights(req, weight, bias, weights_name, weight_dtype)
    return req


def update_result(r):
    return UpdateResult(from_tensor(r.y), from_tensor(r.conv_state))


def register_request(name, weight, bias, replace, dtype):
    req = pb.RegisterWeightsRequest(name=name, replace=replace)
    req.weight.CopyFrom(to_tensor(weight, dtype))
    if bias is not None:
        req.bias.CopyFrom(to_tensor(bias, dtype))
    return req


class Backoff:
    """Retry policy of one call: UNAVAILABLE and RESOURCE_EXHAUSTED are retried
    up to ``max_attempts`` in all, after 20 ms, 40 ms, ... (up to 2 s, ±20 %
    jitter); a ``grpc-retry-pushback-ms`` trailer replaces the delay, and a
    negative or malformed one stops retrying."""

    def __init__(self, max_attempts):
        self.max_attempts = max_attempts
        self._backoff_s = 0.02

    def delay_s(self, error, attempt):
        """Seconds to wait before the next attempt, or None to give up."""
        if error.code() not in RETRYABLE or attempt >= self.max_attempts:
            return None
        delay = self._backoff_s * random.uniform(0.8, 1.2)
        try:
            metadata = error.trailing_metadata()
        except Exception:
            metadata = None
        pushback = trailer(metadata, "grpc-retry-pushback-ms")
        if pushback is not None:
            try:
                ms = int(pushback)
            except ValueError:
                return None
            if ms < 0:
                return None
            delay = ms / 1000.0
        self._backoff_s = min(self._backoff_s * 2, 2.0)
        return delay
