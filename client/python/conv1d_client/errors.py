"""Typed errors of the conv1d_client package.

Every failed call raises a subclass of :class:`Conv1dError` that carries the
gRPC status code, the server's message (which names the bad field, e.g.
``x.data has 100 bytes, expected 4096 (shape [1,8,128] fp32)``), the RPC's
name and the request id the server answered with (trailer ``x-request-id``),
so a failure can be found in the server's log.
"""

import grpc


class Conv1dError(Exception):
    """A call answered with a non-OK gRPC status.

    Attributes:
        code: the ``grpc.StatusCode``.
        message: the server's status message (``details()`` of the call).
        method: the RPC, e.g. ``"Forward"``.
        request_id: the ``x-request-id`` trailer, or None when absent.
    """

    def __init__(self, code, message, method=None, request_id=None):
        self.code = code
        self.message = message or ""
        self.method = method
        self.request_id = request_id
        where = f"{method}: " if method else ""
        rid = f" [request id {request_id}]" if request_id else ""
        super().__init__(f"{where}{code.name}: {self.message}{rid}")


class InvalidArgumentError(Conv1dError):
    """INVALID_ARGUMENT: the request was refused before anything ran; the
    message names the field."""


class NotFoundError(Conv1dError):
    """NOT_FOUND: e.g. an unknown ``weights_name``."""


class AlreadyExistsError(Conv1dError):
    """ALREADY_EXISTS: registering a taken name without ``replace``."""


class ResourceExhaustedError(Conv1dError):
    """RESOURCE_EXHAUSTED: the server's queue is full (retried first)."""


class UnavailableError(Conv1dError):
    """UNAVAILABLE: no connection, or the server is draining (retried first)."""


class DeadlineExceededError(Conv1dError):
    """DEADLINE_EXCEEDED: the call's ``timeout_s`` passed first."""


class PermissionDeniedError(Conv1dError):
    """PERMISSION_DENIED: the caller may not do this."""


class UnauthenticatedError(Conv1dError):
    """UNAUTHENTICATED: missing or rejected credentials."""


class CallCancelledError(Conv1dError):
    """CANCELLED: the call was cancelled."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.CANCELLED: CallCancelledError,
}


def trailer(metadata, key):
    """The first value of ``key`` in trailing metadata (any iterable of
    (key, value) pairs), or None."""
    for k, v in (metadata or ()):
        if k == key:
            return v.decode() if isinstance(v, bytes) else v
    return None


def from_rpc_error(error, method=None):
    """The typed error for a ``grpc.RpcError`` (sync) or ``grpc.aio.AioRpcError``."""
    code = error.code()
    try:
        metadata = error.trailing_metadata()
    except Exception:  # a call that never reached the server has none
        metadata = None
    cls = _BY_CODE.get(code, Conv1dError)
    return cls(code, error.details(), method, trailer(metadata, "x-request-id"))
