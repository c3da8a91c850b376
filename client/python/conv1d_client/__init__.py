"""Python client of conv1d-serve: causal depthwise conv1d over gRPC.

NumPy arrays in and out. fp32 travels as float32, fp16 as float16, and bf16
(which NumPy lacks) as uint16 arrays holding the raw bf16 bits; use
``float32_to_bf16`` / ``bf16_to_float32`` to convert.

- :class:`Client`: blocking calls (thread-safe).
- :class:`conv1d_client.aio.AsyncClient`: the same calls as coroutines.
- :class:`Conv1dError` and its subclasses: failed calls, with the gRPC code
  and the server's message.
"""

__version__ = "0.1.0"

from conv1d_client.tensors import (bf16_to_float32, float32_to_bf16,
                                   from_tensor, to_float32, to_tensor)
from conv1d_client.errors import (AlreadyExistsError, CallCancelledError,
                                  Conv1dError, DeadlineExceededError,
                                  InvalidArgumentError, NotFoundError,
                                  PermissionDeniedError, ResourceExhaustedError,
                                  UnauthenticatedError, UnavailableError)
from conv1d_client.client import (BackwardResult, Client, ForwardResult,
                                  OpenedSession, UpdateResult)
from conv1d_client.aio import AsyncClient
from conv1d_client.reference import reference_backward, reference_forward
from conv1d_client.session import DecodeSession

__all__ = [
    "__version__", "Client", "AsyncClient", "DecodeSession", "OpenedSession",
    "ForwardResult", "BackwardResult", "UpdateResult",
    "Conv1dError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "ResourceExhaustedError", "UnavailableError", "DeadlineExceededError",
    "PermissionDeniedError", "UnauthenticatedError", "CallCancelledError",
    "bf16_to_float32", "float32_to_bf16", "from_tensor", "to_tensor", "to_float32",
    "reference_forward", "reference_backward",
]
