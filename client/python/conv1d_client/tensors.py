"""Conversions between NumPy arrays and conv1d.v1.Tensor messages."""

import numpy as np

from conv1d_client._stubs import pb

_NAMES = {"fp32": pb.FP32, "fp16": pb.FP16, "bf16": pb.BF16}


def float32_to_bf16(a):
    """Rounds float values to bf16 (nearest even); returns uint16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = np.where(nan, (u >> 16) | 0x40, rounded)
    return out.astype(np.uint16)


def bf16_to_float32(bits):
    """Widens uint16 bf16 bits to float32 exactly."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def _wire_dtype(arr, dtype):
    if dtype is not None:
        if dtype not in _NAMES:
            raise ValueError(f"dtype {dtype!r}: want fp32, fp16 or bf16")
        return dtype
    if arr.dtype == np.float32:
        return "fp32"
    if arr.dtype == np.float16:
        return "fp16"
    if arr.dtype == np.uint16:
        return "bf16"
    raise ValueError(
        f"array dtype {arr.dtype}: pass float32, float16, uint16 (bf16 bits) or dtype=")


def to_tensor(arr, dtype=None):
    """NumPy array -> conv1d.v1.Tensor. dtype: None (from the array), fp32,
    fp16 or bf16 (float arrays are rounded; uint16 arrays are taken as bits)."""
    arr = np.asarray(arr)
    name = _wire_dtype(arr, dtype)
    if name == "fp32":
        data = np.ascontiguousarray(arr, dtype="<f4")
    elif name == "fp16":
        data = np.ascontiguousarray(arr, dtype="<f2")
    elif arr.dtype == np.uint16:
        data = np.ascontiguousarray(arr, dtype="<u2")
    else:
        data = float32_to_bf16(arr).astype("<u2")
    return pb.Tensor(dtype=_NAMES[name], shape=list(arr.shape), data=data.tobytes())


def from_tensor(t):
    """conv1d.v1.Tensor -> NumPy array (bf16 as uint16 bits); None if absent."""
    if not t.data and not t.shape:
        return None
    np_dtype = {pb.FP32: "<f4", pb.FP16: "<f2", pb.BF16: "<u2"}.get(t.dtype)
    if np_dtype is None:
        raise ValueError(f"unknown wire dtype {t.dtype}")
    arr = np.frombuffer(t.data, dtype=np_dtype)
    return arr.reshape(tuple(t.shape)).copy()


def to_float32(arr):
    """Any array this module returns, as float32 (bf16 bits widened)."""
    if arr is None:
        return None
    if arr.dtype == np.uint16:
        return bf16_to_float32(arr)
    return arr.astype(np.float32)
