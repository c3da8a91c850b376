#!/usr/bin/env python3
"""Sends forward and backward requests and checks them against the float64
NumPy references; shows a typed error. Exits 1 on a wrong answer.

    pip install ./client/python
    python3 client/python/examples/forward_example.py --target localhost:50051
"""
import argparse
import sys

import numpy as np

from conv1d_client import Client, InvalidArgumentError
from conv1d_client import reference_backward, reference_forward


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
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
    dout = rng.uniform(-1, 1, x.shape).astype(np.float32)
    with Client(args.target, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                tls_key=args.tls_key, token_file=args.token_file) as c:
        print("health:", c.health())
        info = c.server_info()
        print(f"server: {info.backend} backend, version {info.version}")
        y, final = c.forward(x, weight, bias, return_final_states=True)
        dx, dw, db, _ = c.backward(x, dout, weight, bias)
        try:
            c.forward(x, weight[:-1], bias)  # weight of the wrong D
        except InvalidArgumentError as e:
            print(f"bad request refused: {e.code.name}: {e.message}")
    ref, ref_final = reference_forward(x, weight, bias)
    rdx, rdw, rdb, _ = reference_backward(x, weight, dout, bias)
    err = max(float(np.max(np.abs(y - ref))), float(np.max(np.abs(dx - rdx))),
              float(np.max(np.abs(dw - rdw)) / max(1.0, float(np.max(np.abs(rdw))))),
              float(np.max(np.abs(db - rdb)) / max(1.0, float(np.max(np.abs(rdb))))))
    ok = err < 1e-4 and np.array_equal(final, ref_final.astype(np.float32))
    print(f"y {y.shape} {y.dtype}, dx {dx.shape}, dweight {dw.shape}; "
          f"largest error against the float64 reference {err:.3g}: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
