"""The GPU matmul kernel as ptxas sees it, without a GPU: for the default f32 schedule (and
given tiles) of an ``n``-cube matmul, registers and spills (``ptxas -arch=sm_90 -v``) and the
instructions of one k panel (the main loop's body, inner loops counted per trip):

    python benchmarks/gpu/matmul_ptx.py [--sizes 1024,4096] [--tiles 16,16,4,4,8,0 ...]

Columns: ld.global (of which .v4), st.shared (.v4), ld.shared (.v4), fma, bar.sync per panel
of ``kt`` steps, and the FMAs per shared-memory load instruction.
"""

from __future__ import annotations

import argparse
import re
import sys

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import ptx_loops, ptxas_usage
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.schedule.rules.gpu_rules import matmul_tile_defaults
from mlc_mlir.target import Target

CUDA = Target("cuda", cpu="generic", arch="sm_90")


def _module(n: int):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(n, n)), f.arg("b", shape=(n, n))))
    return bb.finish()


def panel_counts(ptx: str, kt: int, tile: int):
    """Instruction counts of one trip of the outermost loop (a panel of ``kt`` steps of a
    ``tile``-element register tile), an inner loop's body counted once per trip (its trip
    count: the panel's ``kt * tile`` FMAs over those it holds)."""
    lines, spans = ptx.splitlines(), ptx_loops(ptx)
    outer = max(spans, key=lambda s: s[1] - s[0])
    inner = [s for s in spans if s != outer and outer[0] <= s[0] and s[1] <= outer[1]]
    pats = {"ld.global": r"ld\.global", "ld.global.v4": r"ld\.global\.v4", "st.shared": r"st\.shared",
            "st.shared.v4": r"st\.shared\.v4", "ld.shared": r"ld\.shared", "ld.shared.v4": r"ld\.shared\.v4",
            "fma": r"\bfma\.rn", "bar.sync": r"bar\.sync"}
    count = {k: 0 for k in pats}
    body = lines[outer[0]:outer[1] + 1]
    for k, p in pats.items():
        count[k] = sum(len(re.findall(p, line)) for line in body)
    for s in inner:
        text = "\n".join(lines[s[0]:s[1] + 1])
        fma = len(re.findall(pats["fma"], text))
        trips = max(1, kt * tile // fma) if fma else 1
        for k, p in pats.items():
            count[k] += (trips - 1) * len(re.findall(p, text))
    return count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--tiles", nargs="*", default=[], help="ty,tx,ly,lx,kt[,prefetch]")
    opts = ap.parse_args(argv)
    from mlc_mlir.tune.gpu_space import MatmulTiles, sample_gpu_matmul
    print(f"{'n':>5} {'tiles':>22} {'regs':>4} {'spill':>5} {'ldg':>4} {'.v4':>3} {'sts':>3} {'.v4':>3} "
          f"{'lds':>4} {'.v4':>4} {'fma':>5} {'bar':>3} {'fma/lds':>7}")
    for n in (int(s) for s in opts.sizes.split(",")):
        d = matmul_tile_defaults(n, n, n, CUDA.cuda_arch)
        runs = [("default", default_schedule(_module(n), CUDA), d["kt"], d["ly"] * d["lx"])]
        for spec in opts.tiles:
            t = MatmulTiles(*(int(x) for x in spec.split(",")))
            sch = mlc.Schedule(_module(n))
            sample_gpu_matmul(sch, sch.get_block("matmul"), t, CUDA.cuda_arch)
            runs.append((spec, sch.mod, t.kt, t.ly * t.lx))
        for name, mod, kt, tile in runs:
            (ptx,) = compile_to_ptx(mod).values()
            use = ptxas_usage(ptx)
            regs, spill = use.registers, use.spill_stores
            c = panel_counts(ptx, kt, tile)
            print(f"{n:>5} {name:>22} {regs:>4} {spill:>5} {c['ld.global']:>4} {c['ld.global.v4']:>3} "
                  f"{c['st.shared']:>3} {c['st.shared.v4']:>3} {c['ld.shared']:>4} {c['ld.shared.v4']:>4} "
                  f"{c['fma']:>5} {c['bar.sync']:>3} {c['fma'] / max(c['ld.shared'], 1):>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
