#!/usr/bin/env python3
"""Sends one forward request and checks it against a NumPy reference.

    PYTHONPATH=build/client/python/gen:client/python \
        python3 client/python/examples/forward_example.py --target localhost:50051
"""
import argparse

import numpy as np

from conv1d_client import Client
from conv1d_client.client import reference_forward


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--shape", default="2x64x100", help="BxDxL")
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--tls_ca", help="PEM CA of the server's certificate (TLS)")
    ap.add_argument("--tls_cert", help="PEM client certificate (mutual TLS)")
    ap.add_argument("--tls_key", help="PEM key of --tls_cert")
    ap.add_argument("--token_file", help="file whose first line is the bearer token")
    args = ap.parse_args()
    bsz, dim, seqlen = (int(v) for v in args.shape.split("x"))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (bsz, dim, seqlen)).astype(np.float32)
    weight = rng.uniform(-0.5, 0.5, (dim, args.width)).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, dim).astype(np.float32)
    with Client(args.target, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                tls_key=args.tls_key, token_file=args.token_file) as c:
        print("health:", c.health())
        info = c.server_info()
        print(f"server: {info.backend} backend, version {info.version}")
        y, final = c.forward(x, weight, bias, return_final_states=True)
    ref, ref_final = reference_forward(x, weight, bias)
    err = np.max(np.abs(y - ref))
    print(f"y {y.shape} {y.dtype}; max |y - reference| = {err:.3g}")
    print(f"final_states {final.shape}; equal to the last inputs: "
          f"{np.array_equal(final, ref_final.astype(np.float32))}")


if __name__ == "__main__":
    main()
