"""Same-process A/B of GPT-2 124M's decode step (``import_step(model, max_seq_len, 1)``) with the
GEMV rule's thread split at its default (K split for the projections on 2 threads) and forced to
the N split, timed interleaved: each round runs 64 decode steps of one variant then the other
(context 128), tokens/s best per variant. The N split is forced by wrapping the rule's
``categorical`` for its only ``[0, 1]`` decision at M = 1 (the split), a benchmark-only
override; both steps are compiled in this process with the same options. Use when the host is
loaded: the ratio of the two is what it measures.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    python benchmarks/llm_decode_split_ab.py --threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def compile_decode(hf, max_seq_len: int, threads: int, nsplit: bool):
    """The compiled decode step; ``nsplit`` forces the GEMVs' N split."""
    from mlc_mlir.llm.export import import_step
    from mlc_mlir.pipeline import compile as compile_module
    from mlc_mlir.schedule.rules import matmul as rule
    orig = rule.categorical

    def forced(sch, candidates, default):
        return orig(sch, candidates, 0 if list(candidates) == [0, 1] else default)

    rule.categorical = forced if nsplit else orig
    try:
        return compile_module(import_step(hf, max_seq_len, 1), threads=threads)["main"]
    finally:
        rule.categorical = orig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    import torch
    import transformers
    from mlc_mlir.llm.export import cache_shapes
    from mlc_mlir.target import describe, host_target
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    ctx, max_len = 128, 128 + args.tokens + 1
    steps = {}
    for name, nsplit in (("ksplit-default", False), ("nsplit", True)):
        t = time.perf_counter()
        steps[name] = compile_decode(hf, max_len, args.threads, nsplit)
        print(f"# compiled {name} in {time.perf_counter() - t:.0f} s", flush=True)
    caches = {n: [np.zeros(s, np.float32) for s in cache_shapes(hf, max_len)] for n in steps}
    out = {}
    for n, step in steps.items():   # same tokens through both: the logits must agree
        out[n] = step(np.array([[1]], np.int64), np.array(0, np.int64), *caches[n]).reshape(-1)
    a, b = out.values()
    print(f"# max |logits difference| {float(np.abs(a - b).max()):.2e} (scale {float(np.abs(a).max()):.1f})")
    best = {n: 0.0 for n in steps}
    for r in range(args.rounds):
        for n, step in steps.items():
            t = time.perf_counter()
            for i in range(args.tokens):
                step(np.array([[i % 50257]], np.int64), np.array(ctx + i, np.int64), *caches[n])
            tps = args.tokens / (time.perf_counter() - t)
            best[n] = max(best[n], tps)
            print(f"round {r} {n:15s} {tps:7.1f} t/s", flush=True)
    print(f"CPU: {describe(host_target())}; threads {args.threads}; decode at context {ctx}")
    print("best t/s: " + ", ".join(f"{n} {v:.1f}" for n, v in best.items())
          + f"; K/N ratio {best['ksplit-default'] / best['nsplit']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
