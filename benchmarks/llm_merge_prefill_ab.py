"""Same-process A/B of the prefill step's merged projections: Llama-110M (the config of
``benchmarks/llm_cpu.py``) compiled twice by ``mlc.llm.compile_causal_lm``, with the layout step
``merge-projections`` restricted to static M ("static-only": the decode step merges q/k/v and
gate/up, the symbolic prefill step keeps one matmul and one weight per projection) and with its
default ("all-M": both steps merge and read the same concatenated arrays).

Per variant: the distinct bytes of the weights the two compiled steps link (by address: one
copy of each weight when they equal the model's parameter bytes), greedy tokens vs transformers
(64 new tokens), then ``--reps`` rounds, the variants' order alternating, of one prefill call at
32/128/512 tokens and 64 decode steps after a 128-token prompt. Printed: the min and median of
each. The host's load average is printed with them: compare the variants only within one run.

    python benchmarks/llm_merge_prefill_ab.py [--reps 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

CONFIG = dict(num_hidden_layers=12, hidden_size=768, intermediate_size=2048, num_attention_heads=12,
              num_key_value_heads=4, vocab_size=32000)


def compile_variants(hf, threads: int) -> dict:
    """``{variant: CausalLM}``; the static-only one through a benchmark-only override of the
    layout stage's ``MergeProjections`` (its ``select`` declining dynamic M)."""
    import mlc_mlir as mlc
    from mlc_mlir.pipeline import layout

    merge = layout.MergeProjections
    lms = {}
    try:
        for name, select in (("static-only", lambda m, k, ns, dtype: m >= 0), ("all-M", None)):
            layout.MergeProjections = lambda functions=None, _s=select: merge(_s, functions)
            t = time.perf_counter()
            lms[name] = mlc.llm.compile_causal_lm(hf, max_seq_len=1024, threads=threads)
            print(f"{name}: compile {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        layout.MergeProjections = merge
    return lms


def linked_bytes(lm) -> int:
    """Distinct bytes (by buffer address) of the weights the prefill and decode steps link."""
    seen = {}
    for step in (lm.prefill_step, lm.decode_step):
        seen.update({w.ctypes.data: w.nbytes for w in step._invoke._weights})
    return sum(seen.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    import torch
    import transformers

    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    lms = compile_variants(hf, a.threads)
    params = sum(q.numel() * q.element_size() for q in hf.parameters())
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 32), generator=torch.Generator().manual_seed(1))
    want = hf.generate(ids, max_new_tokens=64, do_sample=False, pad_token_id=0).numpy()
    for name, lm in lms.items():
        same = np.array_equal(lm.generate(ids.numpy(), max_new_tokens=64), want)
        print(f"{name}: linked weights {linked_bytes(lm) / 2**20:.1f} MiB (model parameters "
              f"{params / 2**20:.1f} MiB); 64 greedy tokens == transformers: {same}", flush=True)
    rng = np.random.default_rng(0)
    res = {n: {} for n in lms}
    for rep in range(a.reps):
        order = list(lms.items()) if rep % 2 == 0 else list(reversed(lms.items()))
        for n in (32, 128, 512):
            x = rng.integers(0, CONFIG["vocab_size"], (1, n))
            for name, lm in order:
                t = time.perf_counter()
                lm.prefill(x)
                res[name].setdefault(f"prefill{n} ms", []).append((time.perf_counter() - t) * 1e3)
        x = rng.integers(0, CONFIG["vocab_size"], (1, 128))
        for name, lm in order:
            lm.prefill(x)
            t = time.perf_counter()
            for i in range(64):
                lm.decode(1, 128 + i)
            res[name].setdefault("decode tok/s", []).append(64 / (time.perf_counter() - t))
    print(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}; {a.threads} threads; "
          f"{os.cpu_count()} CPUs")
    for name, r in res.items():
        print(f"{name:12s} " + "  ".join(f"{k} min {min(v):.1f} med {np.median(v):.1f}" if "ms" in k else
                                         f"{k} max {max(v):.1f} med {np.median(v):.1f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
