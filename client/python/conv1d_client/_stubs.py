"""Imports the generated modules, with a hint when they are not built."""

try:
    from conv1d.v1 import conv1d_pb2 as pb
    from conv1d.v1 import conv1d_pb2_grpc as pb_grpc
    import health_pb2
    import health_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "conv1d_client: generated stubs not found; build the CMake target "
        "conv1d_python_stubs and put <build>/client/python/gen on PYTHONPATH "
        f"({e})") from e

__all__ = ["pb", "pb_grpc", "health_pb2", "health_pb2_grpc"]
