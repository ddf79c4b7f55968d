"""Same-process A/B of a Mistral decode step (``import_step(model, max_seq_len, 1)``) with a
sliding window of ``--window`` keys against the same weights with full attention (window =
``max_seq_len``), at a position near the end of the cache, timed interleaved: each round runs
``--steps`` decode calls of one variant then the other, best seconds per call per variant.
The fused attention kernel skips a key block whose bias is ``-inf`` everywhere after reading
the bias, so the windowed step reads K/V rows of ``window`` keys, the full one of ``position``
keys. Use when the host is loaded: the ratio is what it measures.

    python benchmarks/llm_sliding_window_ab.py --max-seq-len 2048 --window 16 --threads 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def build(window: int, args):
    """A seeded random Mistral (float32) with sliding window ``window``."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(num_hidden_layers=args.layers, hidden_size=args.hidden,
                                     intermediate_size=args.hidden * 3, num_attention_heads=args.hidden // 32,
                                     num_key_value_heads=args.kv_heads, vocab_size=1000, sliding_window=window)
    return transformers.MistralForCausalLM(cfg).eval()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-seq-len", type=int, default=2048)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()
    from mlc_mlir.llm.export import cache_shapes, import_step
    from mlc_mlir.pipeline import compile as compile_module

    steps = {}
    for name, window in (("window", args.window), ("full", args.max_seq_len)):
        hf = build(window, args)
        steps[name] = compile_module(import_step(hf, args.max_seq_len, 1), threads=args.threads)["main"]
    shapes = cache_shapes(hf, args.max_seq_len)
    rng = np.random.default_rng(0)
    caches = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    pos = np.array(args.max_seq_len - args.steps - 1, np.int64)
    best = {k: float("inf") for k in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            t = time.perf_counter()
            for i in range(args.steps):
                step(np.array([[i % 1000]], np.int64), np.array(pos + i, np.int64), *caches)
            best[name] = min(best[name], (time.perf_counter() - t) / args.steps)
    print(f"max_seq_len {args.max_seq_len}, position {int(pos)}..{int(pos) + args.steps - 1}, "
          f"{args.layers} layers, hidden {args.hidden}, kv heads {args.kv_heads}, threads {args.threads}")
    for name in steps:
        print(f"{name:>6}: {best[name] * 1e3:.3f} ms/step")
    print(f"full / window: {best['full'] / best['window']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
