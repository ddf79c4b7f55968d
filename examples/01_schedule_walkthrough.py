"""The MLC course's "Automatic Program Optimization" walk-through, on MLIR.

A 128x128x128 matmul built with the graph builder; a TVM-style schedule (split j by 4, reorder,
decompose_reduction) recorded as a trace and emitted as a transform-dialect script; then a
stochastic schedule (sample_perfect_tile), a random search over its decisions, best of N, and
the same search by the tuner (the course's ``ms.tune_tir``: ``mlc.tune`` with the stochastic
schedule as its space, ``db.best()``, ``mlc.compile(mod, database=db)``). The schedule functions
are the course's, call for call.

Run: python examples/01_schedule_walkthrough.py [--trials 8]
"""

import argparse
import tempfile

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def build_matmul(n=128):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("A", shape=(n, n), dtype="float32")
        b = f.arg("B", shape=(n, n), dtype="float32")
        f.output(ops.matmul(a, b, name="C"))
    return bb.finish()


def schedule_mm(sch: mlc.Schedule, jfactor=4):
    block_C = sch.get_block("C", "main")
    i, j, k = sch.get_loops(block=block_C)
    j_0, j_1 = sch.split(loop=j, factors=[None, jfactor])
    sch.reorder(i, j_0, k, j_1)
    sch.decompose_reduction(block_C, k)
    return sch


def stochastic_schedule_mm(sch: mlc.Schedule):
    block_C = sch.get_block("C", "main")
    i, j, k = sch.get_loops(block=block_C)
    j_factors = sch.sample_perfect_tile(loop=j, n=2)
    j_0, j_1 = sch.split(loop=j, factors=j_factors)
    sch.reorder(i, j_0, k, j_1)
    sch.decompose_reduction(block_C, k)
    return sch


def time_ms(mod, a, b, c_ref):
    exe = mlc.compile(mod, target="cpu")
    np.testing.assert_allclose(exe(a, b), c_ref, rtol=1e-4, atol=1e-3)
    return exe.benchmark(a, b, number=20, repeat=3).min_ms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    args = p.parse_args()
    mod = build_matmul()
    rng = np.random.default_rng(0)
    a = rng.random((128, 128), dtype=np.float32)
    b = rng.random((128, 128), dtype=np.float32)
    c_ref = a @ b
    print(f"Time cost of MyModule: {time_ms(mod, a, b, c_ref):.3f} ms")

    sch = schedule_mm(mlc.Schedule(mod))
    print(f"Time cost of MyModule=>schedule_mm: {time_ms(sch.mod, a, b, c_ref):.3f} ms\n")
    print("-- sch.show() --")
    sch.show()
    print("\n-- sch.trace --")
    print(sch.trace)
    print("\n-- sch.trace.as_transform_script() (feed it to mlir-opt --transform-interpreter) --")
    print(sch.trace.as_transform_script())

    print(f"-- random search over sample_perfect_tile, {args.trials} trials --")
    best = None
    for trial in range(args.trials):
        s = stochastic_schedule_mm(mlc.Schedule(mod, seed=trial))
        ms = time_ms(s.mod, a, b, c_ref)
        decision = next(iter(s.trace.decisions.values()))
        print(f"trial {trial}: decision {decision} -> {ms:.3f} ms")
        if best is None or ms < best[0]:
            best = (ms, s.trace)
    print(f"\nbest {best[0]:.3f} ms, trace:\n{best[1]}")
    # the best trace replays on a fresh module with the same result
    replayed = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(best[1].as_json())).mod
    print(f"replayed best: {time_ms(replayed, a, b, c_ref):.3f} ms")

    print(f"\n-- mlc.tune over stochastic_schedule_mm, {args.trials} trials (ms.tune_tir) --")
    with tempfile.TemporaryDirectory() as work_dir:
        db = mlc.tune(mod, target="cpu", trials=args.trials, space=stochastic_schedule_mm,
                      work_dir=work_dir)
        sch_tuned = mlc.Schedule.from_trace(mod, mlc.Trace.from_json(db.best().trace))
        print(sch_tuned.trace)
        exe = mlc.compile(mod, database=db)
        np.testing.assert_allclose(exe(a, b), c_ref, rtol=1e-4, atol=1e-3)
        print(f"tuned: {exe.benchmark(a, b, number=20, repeat=3).min_ms:.3f} ms (the default kept "
              "unless a candidate beats it by more than 2% when measured again)")


if __name__ == "__main__":
    main()
