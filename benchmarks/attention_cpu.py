"""Fused attention vs the unfused path and PyTorch eager on 1 thread: best of N calls (a
loaded host disturbs medians; the minimum is the least disturbed), for prefill-like and decode
shapes of ``F.scaled_dot_product_attention``. Run it from two checkouts (PYTHONPATH) to compare
them. Not a test."""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

import mlc_mlir as mlc


class SDPA(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def best(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"{'q (B,H,Sq,D)':18} {'kv len':>6} {'mlc ms':>8} {'eager ms':>9} {'x eager':>8} {'err':>8}")
    for q_shape, kv in [((2, 4, 256, 64), 256), ((1, 12, 128, 64), 128), ((1, 12, 1, 64), 128),
                        ((1, 12, 1, 64), 1024)]:
        q = torch.randn(q_shape)
        k, v = torch.randn(q_shape[:2] + (kv, 64)), torch.randn(q_shape[:2] + (kv, 64))
        exe = mlc.compile(mlc.from_torch(SDPA(), (q, k, v)), threads=1)
        a = [x.numpy() for x in (q, k, v)]
        err = float(np.abs(exe(*a) - SDPA()(q, k, v).numpy()).max())
        ms = best(lambda: exe(*a), args.reps)
        with torch.no_grad():
            me = best(lambda: SDPA()(q, k, v), args.reps)
        print(f"{'x'.join(map(str, q_shape)):18} {kv:>6} {ms:8.3f} {me:9.3f} {me / ms:8.2f} {err:8.1e}")


if __name__ == "__main__":
    main()
