"""The generated message and stub modules (shipped in ``_gen``; regenerate
them with ``client/python/generate_stubs.sh``)."""

from conv1d_client._gen import conv1d_pb2 as pb
from conv1d_client._gen import conv1d_pb2_grpc as pb_grpc
from conv1d_client._gen import health_pb2, health_pb2_grpc

__all__ = ["pb", "pb_grpc", "health_pb2", "health_pb2_grpc"]
