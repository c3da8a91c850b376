"""Python client of conv1d-serve: causal depthwise conv1d over gRPC.

NumPy arrays in and out. fp32 travels as float32, fp16 as float16, and bf16
(which NumPy lacks) as uint16 arrays holding the raw bf16 bits; use
``float32_to_bf16`` / ``bf16_to_float32`` to convert.

The generated stubs come from the build (target ``conv1d_python_stubs``); put
``<build>/client/python/gen`` and ``client/python`` on ``PYTHONPATH``.
"""

from conv1d_client.tensors import (bf16_to_float32, float32_to_bf16,
                                   from_tensor, to_tensor)
from conv1d_client.client import (Client, ForwardResult, BackwardResult, OpenedSession,
                                  UpdateResult)
from conv1d_client.session import DecodeSession

__all__ = [
    "Client", "DecodeSession", "ForwardResult", "BackwardResult", "OpenedSession",
    "UpdateResult",
    "bf16_to_float32", "float32_to_bf16", "from_tensor", "to_tensor",
]
