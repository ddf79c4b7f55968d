"""PTX facts of ResNet-18's conv layers on ``target="cuda"`` without a GPU: per layer the
kernels (pad + conv), ``ptxas -arch=sm_90 -v`` registers/spills/shared memory of the conv
kernel, and the FMAs and loads of its innermost PTX loop holding FMAs (loads per FMA).

    python benchmarks/gpu/conv_ptx_facts.py            # the default GPU schedule (tiled conv)
    python benchmarks/gpu/conv_ptx_facts.py reduction  # the conv rule's other decision
"""

from __future__ import annotations

import sys

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir.pipeline.cuda import compile_to_ptx
from mlc_mlir.pipeline.ptx_facts import fma_loop, ptxas_usage
from mlc_mlir.schedule.default_rules import default_schedule
from mlc_mlir.schedule.rules import gpu_rules
from mlc_mlir.target import Target

#: (c, f, h, k, stride): ResNet-18's conv layers at batch 1, padding k // 2
LAYERS = [(3, 64, 224, 7, 2), (64, 64, 56, 3, 1), (64, 128, 56, 1, 2), (128, 128, 28, 3, 1),
          (256, 256, 14, 3, 1), (512, 512, 7, 3, 1)]


def conv(c, f, h, k, s):
    bb = mlc.GraphBuilder()
    with bb.function("main") as fn:
        x, w = fn.arg("x", shape=(1, c, h, h)), fn.arg("w", shape=(f, c, k, k))
        fn.output(ops.conv2d(x, w, strides=(s, s), padding=(k // 2, k // 2)))
    return bb.finish()


def main(argv) -> int:
    if argv[:1] == ["reduction"]:
        gpu_rules.GPU_RULES["conv2d"] = gpu_rules.schedule_reduction
    for layer in LAYERS:
        ptx = compile_to_ptx(default_schedule(conv(*layer), Target.cuda()))
        (text,) = [t for t in ptx.values() if "fma.rn.f32" in t]
        use, loop = ptxas_usage(text), fma_loop(text)
        inner = "no FMA loop (unrolled)" if loop is None else \
            (f"FMA loop: {loop.fma} fma, {loop.shared_loads} ld.shared, {loop.global_loads} ld.global, "
             f"loads/FMA {loop.loads_per_fma():.2f}")
        print("c{} f{} {}x{} k{} s{}: ".format(*layer[:3], *layer[2:]) +
              f"kernels {len(ptx)}, regs {use.registers}, spills {use.spill_stores} B, "
              f"smem {use.shared_bytes} B, {inner}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
