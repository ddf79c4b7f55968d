"""Apply matmul_recipe.mlir to an mlc_mlir matmul, JIT it, and compare with numpy (OpenBLAS).

    python benchmarks/recipe/run_recipe.py                  # table: 512/1024/2048 x 1/2 threads
    python benchmarks/recipe/run_recipe.py --sizes 1024 --threads 2
    python benchmarks/recipe/run_recipe.py --emit 1024      # the concrete transform script
    python benchmarks/recipe/run_recipe.py --dense          # dense+bias+relu (dense_epilogue.mlir)

Each (phase, threads) runs in its own subprocess, so libomp reads OMP_NUM_THREADS at start and the
OpenBLAS and OpenMP thread pools never coexist: numpy phase (threadpoolctl limits, and
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset in that subprocess only), then our phase.
Ours: the transform script bufferizes (function boundaries, identity layouts), then
RECIPE_PIPELINE lowers to LLVM (via ``mlc_mlir.compile(..., pipeline=RECIPE_PIPELINE)``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

#: Lowering after the transform script (which already bufferized and lowered vectors to 1-D).
RECIPE_PIPELINE = ("builtin.module("
                   "buffer-results-to-out-params{hoist-static-allocs modify-public-functions},"
                   "func.func(buffer-loop-hoisting),"
                   "buffer-deallocation-pipeline,"
                   "convert-bufferization-to-memref,"
                   "func.func(convert-linalg-to-loops),"
                   "convert-vector-to-scf,"
                   "expand-strided-metadata,"
                   "lower-affine,"
                   "scf-forall-to-parallel,"
                   "convert-scf-to-openmp,"
                   "convert-vector-to-llvm,"
                   "finalize-memref-to-llvm,"
                   "convert-scf-to-cf,"
                   "convert-openmp-to-llvm,"
                   "convert-math-to-llvm,"
                   "convert-math-to-libm,"
                   "convert-to-llvm,"
                   "reconcile-unrealized-casts)")

DEFAULTS = dict(THREADS=2, MC=32, NC=256, KC=512, NR=32, MR=8, UNROLL=4)


def recipe_text(path: str = os.path.join(HERE, "matmul_recipe.mlir"), **sizes) -> str:
    """The transform script with its ``%NAME = transform.param.constant V`` lines rewritten."""
    text = open(path).read()
    for name, value in sizes.items():
        if name == "UNROLL":
            text = re.sub(r"(transform\.loop\.unroll %lr#1 \{factor = )\d+", rf"\g<1>{value}", text)
            continue
        text, n = re.subn(rf"(%{name} = transform\.param\.constant )\d+", rf"\g<1>{value}", text)
        if n != 1 and name in ("THREADS", "MC", "NC", "KC", "NR", "MR"):
            raise ValueError(f"{path}: no param {name}")
    return text


def check_divisibility(M, N, K, s):
    bad = []
    if M % (s["THREADS"] * s["MC"]): bad.append(f"M={M} % (THREADS*MC={s['THREADS'] * s['MC']})")
    if s["MC"] % s["MR"]: bad.append("MC % MR")
    if N % s["NC"]: bad.append(f"N={N} % NC={s['NC']}")
    if s["NC"] % s["NR"]: bad.append("NC % NR")
    if K % s["KC"]: bad.append(f"K={K} % KC={s['KC']}")
    if s["KC"] % s["UNROLL"]: bad.append("KC % UNROLL")
    if bad:
        raise ValueError("sizes do not divide: " + ", ".join(bad))


def apply_transform(mod, script: str):
    """Apply ``@__transform_main`` of ``script`` to the mlc Module ``mod`` in place."""
    from mlir import ir
    from mlir.dialects.transform import interpreter
    with mod.context, ir.Location.unknown():
        tmod = ir.Module.parse(script)
        seq = None
        for op in tmod.body.operations:
            if op.operation.name == "transform.named_sequence" and \
                    ir.StringAttr(op.operation.attributes["sym_name"]).value == "__transform_main":
                seq = op
        interpreter.apply_named_sequence(mod.operation, seq, tmod)
    return mod


def build_matmul(M, N, K):
    import mlc_mlir as mlc
    from mlc_mlir import ops
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", shape=(M, K))
        b = f.arg("b", shape=(K, N))
        f.output(ops.matmul(a, b))
    return bb.finish()


def compile_matmul(M, N, K, sizes, dump_ir=None):
    import mlc_mlir as mlc
    check_divisibility(M, N, K, sizes)
    mod = build_matmul(M, N, K)
    t0 = time.perf_counter()
    apply_transform(mod, recipe_text(**sizes))
    t1 = time.perf_counter()
    exe = mlc.compile(mod, pipeline=RECIPE_PIPELINE, dump_ir=dump_ir)
    t2 = time.perf_counter()
    return exe, (t1 - t0, t2 - t1)


def _time(fn, flops, min_repeat_s=0.15, repeat=10):
    fn()
    t0 = time.perf_counter(); fn(); one = time.perf_counter() - t0
    number = max(1, int(min_repeat_s / max(one, 1e-7)))
    per = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        per.append((time.perf_counter() - t0) / number)
    per.sort()
    return dict(min_s=per[0], med_s=per[len(per) // 2], gflops=flops / per[0] / 1e9,
                gflops_med=flops / per[len(per) // 2] / 1e9)


def _inputs(M, N, K):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((M, K), dtype=np.float32),
            rng.standard_normal((K, N), dtype=np.float32))


# ----------------------------------------------------------------------------- phases (subprocess)
def phase_numpy(sizes, threads):
    from threadpoolctl import threadpool_limits
    out = {}
    with threadpool_limits(limits=threads):
        for S in sizes:
            a, b = _inputs(S, S, S)
            c = np.empty((S, S), np.float32)
            out[S] = _time(lambda: np.matmul(a, b, out=c), 2.0 * S ** 3)
    return out


def phase_ours(sizes, threads, extra):
    out = {}
    for S in sizes:
        s = dict(DEFAULTS, THREADS=threads, **extra)
        exe, (t_tr, t_comp) = compile_matmul(S, S, S, s)
        a, b = _inputs(S, S, S)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        c = exe(a, b)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
        fn = exe["main"]
        cbuf = np.empty((S, S), np.float32)
        r = _time(lambda: fn(a, b, out=[cbuf]), 2.0 * S ** 3)
        r.update(rel_err=err, transform_s=t_tr, compile_s=t_comp)
        out[S] = r
    return out


DENSE_PAYLOAD = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#bc = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<{M}x{K}xf32>, %w: tensor<{K}x{N}xf32>, %b: tensor<{N}xf32>)
    -> tensor<{M}x{N}xf32> {{
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<{M}x{N}xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>)
      outs(%f : tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %e2 = tensor.empty() : tensor<{M}x{N}xf32>
  %r = linalg.generic {{indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%mm, %b : tensor<{M}x{N}xf32>, tensor<{N}xf32>) outs(%e2 : tensor<{M}x{N}xf32>) {{
  ^bb0(%m: f32, %bb: f32, %o: f32):
    %s = arith.addf %m, %bb : f32
    %z = arith.maximumf %s, %cst : f32
    linalg.yield %z : f32
  }} -> tensor<{M}x{N}xf32>
  return %r : tensor<{M}x{N}xf32>
}}
"""
DENSE_SHAPE = (128, 784, 128)  # M, K, N
DENSE_DEFAULTS = dict(THREADS=2, MC=32, NC=128, KC=784, NR=32, MR=8, UNROLL=4)


def compile_dense(sizes, dump_ir=None):
    """relu(x @ W + b) with dense_epilogue.mlir (K is not tiled: KC must equal K)."""
    import mlc_mlir as mlc
    M, K, N = DENSE_SHAPE
    s = dict(sizes)
    assert s["KC"] == K, "dense_epilogue.mlir packs K x NR panels: KC must be K"
    check_divisibility(M, N, K, s)
    mod = mlc.Module.parse(DENSE_PAYLOAD.format(M=M, K=K, N=N))
    apply_transform(mod, recipe_text(os.path.join(HERE, "dense_epilogue.mlir"), **s))
    return mlc.compile(mod, pipeline=RECIPE_PIPELINE, dump_ir=dump_ir)


def _dense_inputs():
    M, K, N = DENSE_SHAPE
    rng = np.random.default_rng(0)
    return (rng.standard_normal((M, K), dtype=np.float32),
            rng.standard_normal((K, N), dtype=np.float32) / np.float32(28),
            rng.standard_normal((N,), dtype=np.float32))


def phase_dense(threads, which, extra):
    M, K, N = DENSE_SHAPE
    x, w, b = _dense_inputs()
    flops = 2.0 * M * N * K
    out = np.empty((M, N), np.float32)
    if which == "numpy":
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=threads):
            def f():
                np.matmul(x, w, out=out)
                np.add(out, b, out=out)
                np.maximum(out, 0, out=out)
            r = _time(f, flops, repeat=20)
    else:
        exe = compile_dense(dict(DENSE_DEFAULTS, THREADS=threads, **extra))
        ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0)
        r_err = float(np.abs(exe(x, w, b) - ref).max() / np.abs(ref).max())
        fn = exe["main"]
        r = _time(lambda: fn(x, w, b, out=[out]), flops, repeat=20)
        r["rel_err"] = r_err
    return {"dense": r}


def _sub(args, env_update=None, unset=()):
    env = dict(os.environ)
    env.update(env_update or {})
    for k in unset:
        env.pop(k, None)
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"subprocess {args} failed ({p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[512, 1024, 2048])
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--set", nargs="*", default=[], help="override sizes: MC=64 NC=512 ...")
    ap.add_argument("--emit", type=int, help="print the concrete script for M=N=K=EMIT")
    ap.add_argument("--dump-ir", help="dump the stages of one compile (first size) here")
    ap.add_argument("--phase", choices=["numpy", "ours", "dense-numpy", "dense-ours"])
    ap.add_argument("--dense", action="store_true", help="dense+bias+relu 128x784 @ 784x128")
    args = ap.parse_args()
    extra = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.set}
    if args.emit:
        s = dict(DEFAULTS, **extra)
        check_divisibility(args.emit, args.emit, args.emit, s)
        print(recipe_text(**s))
        return
    if args.dump_ir:
        S = args.sizes[0]
        compile_matmul(S, S, S, dict(DEFAULTS, **extra), dump_ir=args.dump_ir)
        print("dumped to", args.dump_ir)
        return
    if args.phase and args.phase.startswith("dense"):
        res = phase_dense(args.threads[0], args.phase[6:], extra)
        print(json.dumps(res))
        return
    if args.dense:
        print(f"dense+bias+relu {DENSE_SHAPE[0]}x{DENSE_SHAPE[1]} @ {DENSE_SHAPE[1]}x"
              f"{DENSE_SHAPE[2]}: min (median) us per call")
        for t in args.threads:
            n = _sub(["--phase", "dense-numpy", "--threads", str(t)], {"OMP_NUM_THREADS": str(t)},
                     unset=("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))["dense"]
            o = _sub(["--phase", "dense-ours", "--threads", str(t), "--set", *args.set],
                     {"OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1"})["dense"]
            print(f"  threads {t}: ours {o['min_s'] * 1e6:7.1f} ({o['med_s'] * 1e6:7.1f}) us "
                  f"{o['gflops']:6.1f} GF/s | numpy {n['min_s'] * 1e6:7.1f} ({n['med_s'] * 1e6:7.1f}) us "
                  f"{n['gflops']:6.1f} GF/s | numpy/ours time {n['min_s'] / o['min_s']:.2f} "
                  f"| rel err {o['rel_err']:.1e}")
        return
    if args.phase:
        t = args.threads[0]
        res = phase_numpy(args.sizes, t) if args.phase == "numpy" else phase_ours(args.sizes, t, extra)
        print(json.dumps({str(k): v for k, v in res.items()}))
        return
    sz = [str(s) for s in args.sizes]
    rows = []
    for t in args.threads:
        npres = _sub(["--phase", "numpy", "--threads", str(t), "--sizes", *sz],
                     {"OMP_NUM_THREADS": str(t)}, unset=("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"))
        ours = _sub(["--phase", "ours", "--threads", str(t), "--sizes", *sz, "--set", *args.set],
                    {"OMP_NUM_THREADS": str(t), "OPENBLAS_NUM_THREADS": "1"})
        for s in sz:
            rows.append((s, t, ours[s], npres[s]))
    print(f"{'size':>5} {'thr':>3} {'ours GF/s':>10} {'(median)':>9} {'numpy GF/s':>11} {'(median)':>9}"
          f" {'ratio':>6} {'rel err':>8} {'compile s':>9}")
    for s, t, o, n in rows:
        print(f"{s:>5} {t:>3} {o['gflops']:>10.1f} {o['gflops_med']:>9.1f} {n['gflops']:>11.1f} "
              f"{n['gflops_med']:>9.1f} {o['gflops'] / n['gflops']:>6.2f} {o['rel_err']:>8.1e} "
              f"{o['transform_s'] + o['compile_s']:>9.2f}")


if __name__ == "__main__":
    main()
