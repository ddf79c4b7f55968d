"""Decoder LLMs on the CPU: ``mlc.llm.compile_causal_lm`` vs transformers eager (its KV cache),
models from configs with seeded random weights, one row per (model, threads).

Columns: compile s (import + both steps), prefill ms at 32/128/512 prompt tokens (ours: one
call of the prefill step, symbolic in the prompt length, compiled once for all three), decode tokens/s at context 128 and 1024 over 64 new
tokens, the decode's share of the bandwidth roofline (weight bytes per token / measured read
bandwidth = the fastest a step that reads every weight once can go), peak RSS of the worker.
The read bandwidth is the faster of a numpy sum and a BLAS GEMV over 1 GiB (best of 5). GPT-2
has 1024 positions in all: its "1024" context is 1024 - 64 = 960 tokens.

Each (model, threads) runs in its own subprocess (``OMP_NUM_THREADS``, ``torch.set_num_threads``).
torch.compile is not run (its CPU inductor build of a generate loop takes minutes per shape here).

    python benchmarks/llm_cpu.py [--models tiny-gpt2,gpt2-124m] [--threads 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

#: name -> (transformers model class name, config class name, config kwargs)
MODELS = {
    "tiny-gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)),
    "tiny-llama": ("LlamaForCausalLM", "LlamaConfig", dict(
        num_hidden_layers=2, hidden_size=128, intermediate_size=344, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000)),
    "gpt2-124m": ("GPT2LMHeadModel", "GPT2Config", dict()),
    "llama-110m": ("LlamaForCausalLM", "LlamaConfig", dict(
        num_hidden_layers=12, hidden_size=768, intermediate_size=2048, num_attention_heads=12,
        num_key_value_heads=4, vocab_size=32000)),
}
PREFILL = (32, 128, 512)
CONTEXTS = (128, 1024)
NEW = 64


def read_bandwidth() -> float:
    """Bytes/s reading 1 GiB of float32: the faster of a numpy sum and a BLAS GEMV
    ``(16384, 16384) @ x`` (the decode step's access pattern), best of 5 each."""
    a = np.ones(1 << 28, np.float32)
    x = np.ones(16384, np.float32)
    w = a.reshape(16384, 16384)
    best = min(min(_timed(lambda: a.sum()) for _ in range(5)), min(_timed(lambda: w @ x) for _ in range(5)))
    return a.nbytes / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _model(name):
    import torch
    import transformers
    cls, cfg_cls, kw = MODELS[name]
    torch.manual_seed(0)
    return getattr(transformers, cls)(getattr(transformers, cfg_cls)(**kw)).eval()


def worker(name: str, threads: int) -> dict:
    import torch
    import mlc_mlir as mlc

    torch.set_num_threads(threads)
    model = _model(name)
    vocab = model.config.vocab_size
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    rng = np.random.default_rng(0)
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    max_len = min(max(CONTEXTS) + NEW, positions)
    contexts = [min(c, max_len - NEW) for c in CONTEXTS]   # GPT-2: 1024 positions in all
    lm = mlc.llm.compile_causal_lm(model, max_seq_len=max_len, threads=threads)
    row = {"model": name, "threads": threads, "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
           "weight_MB": round(weight_bytes / 1e6, 1), "compile_s": round(lm.compile_seconds, 1)}
    ids_pf = {n: rng.integers(0, vocab, (1, n)) for n in PREFILL}
    ids_ctx = {c: rng.integers(0, vocab, (1, c)) for c in contexts}
    # ours first, then eager: torch's thread pool must not spin while ours runs
    for n in PREFILL:
        row[f"prefill{n}_ms"] = round(min(_timed(lambda: lm.prefill(ids_pf[n])) for _ in range(3)) * 1e3, 2)
    row["contexts"] = contexts
    for label, ctx in zip(CONTEXTS, contexts):
        lm.generate(ids_ctx[ctx], max_new_tokens=NEW)
        t = lm.last_timings
        row[f"decode{label}_tok_s"] = round((t["new_tokens"] - 1) / t["decode_s"], 1)
    eager = {}
    with torch.no_grad():
        for n in PREFILL:
            t = torch.from_numpy(ids_pf[n])
            eager[f"prefill{n}_ms"] = round(min(_timed(lambda: model(t)) for _ in range(3)) * 1e3, 2)
        for label, ctx in zip(CONTEXTS, contexts):
            tid = torch.from_numpy(ids_ctx[ctx])
            pre = min(_timed(lambda: model(tid, use_cache=True)) for _ in range(2))
            gen = _timed(lambda: model.generate(tid, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                                pad_token_id=0))
            eager[f"decode{label}_tok_s"] = round((NEW - 1) / max(gen - pre, 1e-9), 1)
    row["peak_rss_MB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)
    row["eager"] = eager
    row["weight_bytes"] = weight_bytes
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--json", action="store_true", help="also print each row as JSON (a '# ' line)")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print("ROW " + json.dumps(worker(a.worker[0], int(a.worker[1]))))
        return 0
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    bw = read_bandwidth()
    print(f"# {cpu}; read bandwidth {bw / 1e9:.1f} GB/s (numpy sum or BLAS GEMV over 1 GiB, best of 5)")
    print(f"# prefill: ours in one call of the symbolic step; decode: {NEW} new tokens after a prompt of "
          "the context length; roofline = weight bytes / bandwidth per token")
    hdr = (f"{'model':11s} {'thr':>3s} {'impl':6s} {'compile s':>9s} " +
           " ".join(f"{'pf' + str(n) + ' ms':>9s}" for n in PREFILL) + " " +
           " ".join(f"{'dec' + str(c) + ' t/s':>12s}" for c in CONTEXTS) + " " +
           " ".join(f"{'roof' + str(c):>8s}" for c in CONTEXTS) + f" {'RSS MB':>7s}")
    print(hdr)
    for name in a.models.split(","):
        for threads in [int(t) for t in a.threads.split(",")]:
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            r = subprocess.run([sys.executable, __file__, "--worker", name, str(threads)],
                               env=env, capture_output=True, text=True)
            rows = [json.loads(ln[4:]) for ln in r.stdout.splitlines() if ln.startswith("ROW ")]
            if not rows:
                print(f"{name:11s} {threads:3d} failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            row = rows[0]
            roof = bw / row["weight_bytes"]
            row["roofline_tok_s"] = round(roof, 1)
            if a.json:
                print("# " + json.dumps(row))
            for impl, vals in (("mlc", row), ("eager", row["eager"])):
                shares = " ".join(f"{vals[f'decode{c}_tok_s'] / roof * 100:7.0f}%" for c in CONTEXTS)
                print(f"{name:11s} {threads:3d} {impl:6s} {row['compile_s'] if impl == 'mlc' else 0:9.1f} " +
                      " ".join(f"{vals[f'prefill{n}_ms']:9.2f}" for n in PREFILL) + " " +
                      " ".join(f"{vals[f'decode{c}_tok_s']:12.1f}" for c in CONTEXTS) +
                      f" {shares} {row['peak_rss_MB'] if impl == 'mlc' else 0:7.0f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
