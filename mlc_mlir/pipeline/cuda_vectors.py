"""Vector memory access in CUDA kernels: what turns a vectorized thread tile (``sch.vectorize``
inside a bound loop: ``vector.transfer_read``/``transfer_write`` after bufferization) into
128-bit ``ld.global.v4.f32`` / ``st.global.v4.f32``.

1. :func:`lower_transfers` -- unit dims of the vectors go (a thread's ``1 x V`` tile of a 2-D
   op becomes a ``V`` vector), transfers of a higher rank are unrolled to 1-D ones, transfers
   with a broadcast or permutation map become minor-identity transfers and a
   ``vector.broadcast`` / ``vector.transpose``; in-bounds 1-D transfers become ``vector.load`` /
   ``vector.store``, out-of-bounds ones masked loads and stores (NVVM lowers no transfer op).
2. NVPTX emits a vector access only where it can prove the address a multiple of the vector's
   size (a misaligned ``ld.v4`` traps); otherwise it splits the access into scalar ones.
   ``vector.load`` carries only the element's alignment; the kernels' buffer arguments are
   declared :data:`~mlc_mlir.runtime.cuda.DEVICE_ALIGNMENT`-byte aligned (``llvm.align``,
   :func:`mlc_mlir.pipeline.cuda_panels.annotate_kernels`) and LLVM's alignment inference
   (``InferAlignment`` in the O2 pipeline ``gpu-module-to-binary`` runs) derives each access's
   alignment from the index arithmetic: where the offset of a thread's vector is a multiple of
   its lanes, the access is a single 128-bit one; where it is not (an odd row length, a slice
   at an odd offset) it stays correct, as scalar accesses.

Source: MLIR ``transform.apply_patterns.vector.lower_transfer`` /
``transfer_permutation_patterns``; the vectorized global loads of
TVM's CUDA codegen (``float4``) and of Triton (``ld.global.v4.b32``).
"""

from __future__ import annotations

from .._mlir import ir, transform_d, vector_transform_d
from ..ir.module import Module
from ..ir.walk import find_ops


def _drop_unit_dims() -> None:
    # a thread's tile of a 2-D op is a vector<1xV>: its unit dims go first
    vector_transform_d.ApplyCastAwayVectorLeadingOneDimPatternsOp()
    vector_transform_d.ApplyDropUnitDimWithShapeCastPatternsOp()
    vector_transform_d.ApplyTransferPermutationPatternsOp()


def _unroll_to_rank_1() -> None:
    # what is left of rank > 1 (a vectorized 2-D tile) becomes 1-D transfers
    vector_transform_d.ApplyTransferToScfPatternsOp(max_transfer_rank=1, full_unroll=True)


def _to_loads_and_stores() -> None:
    vector_transform_d.ApplyTransferPermutationPatternsOp()
    vector_transform_d.ApplyLowerTransferPatternsOp(max_transfer_rank=1)
    vector_transform_d.ApplyLowerShapeCastPatternsOp()
    vector_transform_d.ApplyLowerBroadcastPatternsOp()   # a vector<1xT> splat over the lanes


def lower_transfers(module: Module, apply) -> Module:
    """Rewrite 1 of the module docstring on every function of ``module``; ``apply(module,
    build, stage)`` applies a transform script (:func:`mlc_mlir.pipeline.cuda._apply`).
    Returns ``module`` when it has no transfer."""
    if not find_ops(module, "vector.transfer_read") and not find_ops(module, "vector.transfer_write"):
        return module

    def build(root):
        for stage in (_drop_unit_dims, _unroll_to_rank_1, _to_loads_and_stores):
            p = transform_d.ApplyPatternsOp(root)
            with ir.InsertionPoint(p.patterns):
                stage()
                transform_d.ApplyCanonicalizationPatternsOp()

    return apply(module, build, "vector transfers")
