"""Same-process interleaved A/B of an LLM's decode step (``import_step(model, max_seq_len, 1)``),
with the facts that decide a multi-threaded decode: the step's OpenMP regions (``omp.parallel``
ops in the lowered IR: one fork/join and one barrier each per call), the share of the process's
anonymous memory in transparent huge pages, and the CPU each thread last ran on.

Variants (``--variants``): ``main`` (the default compile), ``nomerge`` (the same step with
:class:`~mlc_mlir.pipeline.layout_passes.MergeProjections` off: one GEMV per projection),
``t1`` (the default compile on one thread); a suffix ``:btN`` runs the variant with libomp's
blocktime set to ``N`` (``kmp_set_blocktime`` before each of its rounds: how long a thread
that waits at a barrier or for the next region spins before it sleeps; libomp's default is 200
ms). ``N`` is in libomp's blocktime unit: ms, or us when the process starts with
``KMP_BLOCKTIME=<n>us`` (libomp >= 18), e.g. ``KMP_BLOCKTIME=200000us`` (the default in us)
with ``--variants main,main:bt0,main:bt100`` compares 200 ms, 0 and 100 us in one process.
A suffix ``:policy`` runs the variant's steps through :class:`mlc_mlir.llm.wait_policy.WaitPolicy`
(as ``CausalLM.decode`` does), one policy per variant kept across its rounds.
Variants with the same compile share one compiled step.
Each round runs ``--tokens`` decode steps of every variant in turn (context 128); tokens/s per
round, the min-max spread and the best per variant are printed. Use on a loaded host: the
ratio of the variants within one process is what it measures, and the spread of one variant
across rounds shows how stable its decode is.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    python benchmarks/llm_decode_threads_ab.py --model gpt2-124m --threads 2 --rounds 8
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from llm_cpu import MODELS  # benchmarks/llm_cpu.py; this folder is on sys.path


def build_model(name: str):
    """The transformers model ``name`` of :data:`llm_cpu.MODELS`, seeded random weights."""
    import torch
    import transformers
    cls, cfg, kw = MODELS[name]
    torch.manual_seed(0)
    return getattr(transformers, cls)(getattr(transformers, cfg)(**kw)).eval()


def compile_step(hf, max_len: int, threads: int, variant: str):
    """``(step, omp.parallel regions per call)`` of one variant; ``nomerge`` makes the
    layout step ``merge-projections`` the identity for its compile (a benchmark-only override
    of the pass class the step calls)."""
    from mlc_mlir.llm.export import import_step
    from mlc_mlir.pipeline import compile as compile_module
    from mlc_mlir.pipeline import layout
    merge = getattr(layout, "MergeProjections", None)
    if variant == "nomerge" and merge is not None:
        layout.MergeProjections = lambda *_, **__: (lambda module: module)
    try:
        exe = compile_module(import_step(hf, max_len, 1), threads=threads)
    finally:
        if merge is not None:
            layout.MergeProjections = merge
    return exe["main"], regions_per_call(exe._keepalive[1], "main")


def regions_per_call(lowered, entry: str):
    """``(regions, by_function)``: the ``omp.parallel`` regions one call of ``entry`` runs in
    the lowered (LLVM dialect) module (each function's own regions plus those of the functions
    it calls, once per call site: the units shared between layers are one function called once
    per layer; the decode step's body has no loop around a call), and ``{function: regions it
    runs itself in one call of entry}``."""
    from collections import Counter
    from mlc_mlir.ir.walk import find_ops
    funcs = {}
    with lowered.context:
        for f in find_ops(lowered, "llvm.func"):
            name = str(f.attributes["sym_name"]).strip('"')
            funcs[name] = (len(find_ops(f, "omp.parallel")),
                           [str(c.attributes["callee"]).lstrip("@") for c in find_ops(f, "llvm.call")
                            if "callee" in c.attributes])
    by_function: Counter = Counter()

    def visit(name):
        own, callees = funcs.get(name, (0, []))
        by_function[name] += own
        for c in callees:
            if c in funcs and c != name:
                visit(c)
    visit(entry)
    by_function = Counter({k: v for k, v in by_function.items() if v})
    return sum(by_function.values()), by_function


def huge_page_share() -> str:
    """AnonHugePages / anonymous RSS of this process (``/proc/self/smaps_rollup``)."""
    vals = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("Anonymous", "AnonHugePages"):
                vals[k] = int(rest.split()[0]) >> 10
    return f"{vals.get('AnonHugePages', 0)} of {vals.get('Anonymous', 0)} MB anonymous in huge pages"


def huge_page_eligible(step) -> str:
    """Of the weights the step links (``link_weights``), the bytes that lie in whole aligned
    huge pages (what ``advise_huge_pages`` can collapse): a buffer's unaligned head and tail
    stay in 4 KiB pages, so a 2.4 MB weight gets 0 or 1 huge page depending on its address."""
    from mlc_mlir.runtime.huge_pages import huge_page_bytes
    page = huge_page_bytes() or (2 << 20)
    ws = getattr(step._invoke, "_weights", [])
    total = sum(w.nbytes for w in ws)
    inside = 0
    for w in ws:
        lo = -(-w.ctypes.data // page) * page
        hi = (w.ctypes.data + w.nbytes) // page * page
        inside += max(0, hi - lo)
    return f"{inside >> 20} of {total >> 20} MB of {len(ws)} linked weights in whole huge pages"


def thread_cpus() -> str:
    """``tid:cpu`` of this process's threads that used CPU (field 39 of ``/proc/.../stat``)."""
    out = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if ticks:
            out.append(f"{tid}:cpu{fields[36]}({ticks}t)")
    return " ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--variants", default="main,nomerge")
    args = ap.parse_args()
    from mlc_mlir.llm.export import cache_shapes
    from mlc_mlir.target import describe, host_target
    hf = build_model(args.model)
    ctx, max_len = 128, 128 + args.tokens + 1
    import ctypes
    from mlc_mlir.pipeline.libraries import libomp_path
    omp = ctypes.CDLL(libomp_path())
    default_bt = omp.kmp_get_blocktime()
    steps, compiled, blocktime = {}, {}, {}
    for name in args.variants.split(","):
        base, _, bt = name.replace(":policy", "").partition(":bt")
        blocktime[name] = int(bt) if bt else default_bt
        if base not in compiled:
            t = time.perf_counter()
            threads = 1 if base == "t1" else args.threads
            compiled[base], (par, by_function) = compile_step(hf, max_len, threads, base)
            print(f"# {base}: compiled in {time.perf_counter() - t:.0f} s for {threads} thread(s); {par} "
                  "omp.parallel regions (fork/join + barrier) per decode step: "
                  + ", ".join(f"{f} x{n}" for f, n in by_function.most_common()), flush=True)
            print(f"# {base}: {huge_page_eligible(compiled[base])}", flush=True)
        steps[name] = compiled[base]
    from mlc_mlir.llm.wait_policy import WaitPolicy
    policies = {n: WaitPolicy(1 if n.startswith("t1") else args.threads) for n in steps if n.endswith(":policy")}
    caches = {n: [np.zeros(s, np.float32) for s in cache_shapes(hf, max_len)] for n in steps}
    out = {n: step(np.array([[1]], np.int64), np.array(0, np.int64), *caches[n]).reshape(-1)
           for n, step in steps.items()}
    ref = next(iter(out.values()))
    for n, o in out.items():
        print(f"# {n}: max |logits - first variant's| {float(np.abs(o - ref).max()):.2e} "
              f"(scale {float(np.abs(ref).max()):.1f})")
    tps = {n: [] for n in steps}
    for r in range(args.rounds):
        for n, step in steps.items():
            omp.kmp_set_blocktime(blocktime[n])
            t = time.perf_counter()
            run = policies[n].run if n in policies else (lambda f, *a: f(*a))
            for i in range(args.tokens):
                run(step, np.array([[i % 1000]], np.int64), np.array(ctx + i, np.int64), *caches[n])
            tps[n].append(args.tokens / (time.perf_counter() - t))
            print(f"round {r} {n:10s} {tps[n][-1]:7.1f} t/s  load {os.getloadavg()[0]:.1f}", flush=True)
    omp.kmp_set_blocktime(default_bt)
    print(f"# {huge_page_share()}; threads {thread_cpus()}; libomp blocktime default {default_bt}")
    print(f"CPU: {describe(host_target())}; threads {args.threads}; {args.model} decode at context {ctx}")
    for n, v in tps.items():
        chosen = f" (policy chose blocktime {policies[n].chosen})" if n in policies else ""
        print(f"{n:10s} best {max(v):7.1f} median {float(np.median(v)):7.1f} spread {min(v):.1f}-{max(v):.1f} t/s{chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
