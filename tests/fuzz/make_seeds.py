#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/): a few valid
requests of every kind and some near misses, encoded by hand in protobuf's
wire format. Each file is one input: a head byte (request kind, detach
threshold and slice cut; see fuzz_input.h) and then the message."""
import os
import struct
import sys


def varint(v, width=0):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        more = v != 0 or len(out) + 1 < width
        out.append(b | (0x80 if more else 0))
        if not more:
            return bytes(out)


def field(number, wire, payload, tag_width=0):
    tag = varint((number << 3) | wire, tag_width)
    if wire == 0:
        return tag + varint(payload)
    return tag + varint(len(payload)) + payload


def tensor(dtype, shape, data=None, data_tag_width=0):
    elem = {1: 4, 2: 2, 3: 2}[dtype]
    n = elem
    for d in shape:
        n *= d
    if data is None:
        data = bytes((i * 37 + 11) % 251 + 1 for i in range(n))
    packed = b"".join(varint(d) for d in shape)
    return field(1, 0, dtype) + field(2, 2, packed) + field(3, 2, data, data_tag_width)


def f32(values):
    return b"".join(struct.pack("<f", v) for v in values)


FORWARD, BACKWARD, UPDATE, REGISTER = 0, 1, 2, 3


def head(kind, threshold=0, cut=0):
    return bytes([kind | (threshold << 2) | (cut << 4)])


def seeds():
    w84 = tensor(1, [8, 4])
    b8 = tensor(1, [8])
    inline = field(1, 2, w84) + field(2, 2, b8)
    x = tensor(1, [1, 8, 16])
    yield "forward_inline", head(FORWARD, 1), field(1, 2, x) + field(5, 2, inline)
    yield "forward_silu_states", head(FORWARD, 2, 3), (
        field(1, 2, tensor(1, [2, 8, 40])) + field(3, 0, 1) + field(5, 2, inline)
        + field(6, 2, tensor(1, [2, 8, 3])) + field(7, 0, 1))
    yield "forward_named", head(FORWARD, 3), field(1, 2, tensor(1, [1, 8, 20])) + field(4, 2, b"w")
    yield "forward_bf16_channel_last", head(FORWARD, 1, 5), (
        field(1, 2, tensor(3, [2, 5, 8])) + field(2, 0, 1)
        + field(5, 2, field(1, 2, tensor(3, [8, 3]))))
    yield "backward", head(BACKWARD, 1), (
        field(1, 2, x) + field(2, 2, tensor(1, [1, 8, 16])) + field(4, 0, 1)
        + field(6, 2, inline) + field(7, 2, tensor(1, [1, 8, 3]))
        + field(8, 2, tensor(1, [1, 8, 3])) + field(9, 0, 1) + field(10, 0, 1))
    yield "update_named", head(UPDATE, 2), (
        field(1, 2, tensor(1, [2, 8, 1])) + field(2, 2, tensor(1, [2, 8, 3]))
        + field(5, 2, b"w"))
    yield "update_fp16", head(UPDATE, 1, 2), (
        field(1, 2, tensor(2, [1, 4, 2])) + field(2, 2, tensor(2, [1, 4, 5]))
        + field(6, 2, field(1, 2, tensor(2, [4, 2]))))
    yield "register", head(REGISTER), (
        field(1, 2, b"layer/0.conv") + field(2, 2, tensor(2, [4, 2]))
        + field(3, 2, tensor(2, [4])) + field(4, 0, 1))
    yield "rank_9", head(FORWARD, 1), field(1, 2, tensor(1, [1] * 9)) + field(5, 2, inline)
    yield "overlong_data_tag", head(FORWARD, 1), (
        field(1, 2, tensor(1, [1, 8, 16], data_tag_width=6)) + field(5, 2, inline))
    yield "tensor_twice", head(FORWARD, 1, 1), (
        field(1, 2, field(1, 0, 1) + field(2, 2, varint(1) + varint(8)))
        + field(1, 2, field(2, 2, varint(16)) + field(3, 2, bytes(512)))
        + field(5, 2, inline))
    yield "oneof_replaced", head(FORWARD, 1), (
        field(1, 2, x) + field(5, 2, field(1, 2, tensor(1, [1] * 12))) + field(4, 2, b"w"))


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    if len(sys.argv) > 1:
        out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, h, message in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(h + message)


if __name__ == "__main__":
    main()
