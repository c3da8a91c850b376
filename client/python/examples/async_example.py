#!/usr/bin/env python3
"""Runs many decode steps concurrently with the asyncio client, on a
registered weight set, and checks each against the float64 reference.
Exits 1 on a wrong answer.

    pip install ./client/python
    python3 client/python/examples/async_example.py --target localhost:50051
"""
import argparse
import asyncio
import sys

import numpy as np

from conv1d_client import NotFoundError, reference_forward
from conv1d_client.aio import AsyncClient


async def run(target, streams, steps):
    rng = np.random.default_rng(1)
    dim, width = 256, 4
    weight = rng.uniform(-0.5, 0.5, (dim, width)).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, dim).astype(np.float32)
    async with AsyncClient(target) as c:
        await c.register_weights("async-example", weight, bias, replace=True)

        async def stream(seed):
            r = np.random.default_rng(seed)
            xs = r.uniform(-1, 1, (1, dim, steps)).astype(np.float32)
            state = np.zeros((1, dim, width - 1), np.float32)
            ys = []
            for t in range(steps):   # one token at a time, state carried over
                y, state = await c.update(xs[:, :, t:t + 1], state,
                                          weights_name="async-example")
                ys.append(y)
            ref, _ = reference_forward(xs, weight, bias)
            return float(np.max(np.abs(np.concatenate(ys, axis=2) - ref)))

        errs = await asyncio.gather(*(stream(s) for s in range(streams)))
        await c.unregister_weights("async-example")
        try:
            await c.unregister_weights("async-example")
        except NotFoundError as e:
            print(f"second unregister: {e.code.name}: {e.message}")
    worst = max(errs)
    ok = worst < 1e-4
    print(f"{streams} streams x {steps} decode steps; largest error against the "
          f"float64 reference {worst:.3g}: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    return asyncio.run(run(args.target, args.streams, args.steps))


if __name__ == "__main__":
    sys.exit(main())
