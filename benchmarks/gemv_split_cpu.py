"""Same-process A/B of the two thread splits of a decode GEMV ``x (1, K) @ W (K, N)`` (+ bias): the
threads take slices of N (each reads a run of ``N / T`` columns of every row) or ranges of K (each
streams whole contiguous rows into its own partial result, summed after:
``schedule_gemv``'s ``split`` decision). Both are compiled from the default schedule with only that
decision forced, and timed interleaved (rounds alternate the two, best per variant), cold-cache as
``gemv_cpu.py`` (copies of W exceeding the last-level cache), with numpy's ``sgemv`` in the same
rounds. Shapes: GPT-2 124M's QKV, attention projection, MLP up/down and LM head.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    OMP_NUM_THREADS=2 python benchmarks/gemv_split_cpu.py --threads 1,2
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gemv_cpu import build

#: (K, N, bias) of the rows.
SHAPES = ((768, 2304, True), (768, 768, True), (768, 3072, True), (3072, 768, True), (768, 50257, False))


def compile_split(mod, threads: int, split):
    """``mod`` compiled with the default schedule, the GEMV's thread split forced to ``split``
    (0: slices of N, 1: ranges of K; None: the default). Returns the executable and the split
    the schedule took (None when the rule offered no choice)."""
    import mlc_mlir as mlc
    from mlc_mlir.schedule.default_rules import apply_default_schedule
    from mlc_mlir.schedule.schedule import Schedule
    from mlc_mlir.target import host_target

    class Forced(Schedule):
        taken = None

        def sample_categorical(self, candidates, probs, decision=None, default=None):
            # the split is the GEMV rule's only [0, 1] decision
            if list(candidates) == [0, 1] and Forced.taken is None:
                if split is not None:
                    decision = split
                Forced.taken = split if split is not None else default
            return super().sample_categorical(candidates, probs, decision, default)

    sch = Forced(mod, 0, defaults=True)
    apply_default_schedule(sch, host_target(), threads)
    return mlc.compile(sch.mod, threads=threads), Forced.taken


def measure(k: int, n: int, bias: bool, threads: int, rounds: int) -> dict:
    """Best seconds per call of the N split, the K split and numpy, interleaved round by round."""
    mod = build(k, n, bias)
    exes = {}
    for name, split in (("nsplit", 0), ("ksplit", 1)):
        exe, taken = compile_split(mod, threads, split)
        if taken is not None or name == "nsplit":   # no choice: the N split only
            exes[name] = exe
    default = compile_split(mod, threads, None)[1]
    rng = np.random.default_rng(0)
    copies = max(2, (512 << 20) // (k * n * 4))
    ws = [rng.standard_normal((k, n), dtype=np.float32) for _ in range(copies)]
    x = rng.standard_normal((1, k), dtype=np.float32)
    b = rng.standard_normal((1, n), dtype=np.float32)
    fns = {name: ((lambda w, e=e: e(x, w, b)) if bias else (lambda w, e=e: e(x, w))) for name, e in exes.items()}
    fns["numpy"] = (lambda w: x @ w + b) if bias else (lambda w: x @ w)
    ref = fns["numpy"](ws[0]).astype(np.float64)
    err = {name: float(np.abs(fns[name](ws[0]) - ref).max() / np.abs(ref).max()) for name in exes}
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for w in ws:
                fn(w)
            best[name] = min(best[name], (time.perf_counter() - t) / copies)
    return {"best": best, "err": err, "default": default}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from mlc_mlir.target import describe, host_target
    print(f"CPU: {describe(host_target())}")
    print(f"{'K':>5} {'N':>6} {'thr':>3} {'Nsplit GB/s':>11} {'Ksplit GB/s':>11} {'numpy GB/s':>10} "
          f"{'K/N':>5} {'default':>7} {'max rel err':>11}")
    for threads in [int(t) for t in args.threads.split(",")]:
        for k, n, bias in SHAPES:
            r = measure(k, n, bias, threads, args.rounds)
            gb = k * n * 4 / 1e9
            bw = {name: gb / s for name, s in r["best"].items()}
            ks = bw.get("ksplit")
            ratio = f"{ks / bw['nsplit']:5.2f}" if ks else "    -"
            dflt = {None: "-", 0: "N", 1: "K"}[r["default"]]
            print(f"{k:5d} {n:6d} {threads:3d} {bw['nsplit']:11.1f} {ks or 0:11.1f} {bw['numpy']:10.1f} "
                  f"{ratio} {dflt:>7} {max(r['err'].values()):11.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
