"""Padding primitive (TVM ``pad_einsum``): grow a contraction's iteration space to multiples of
given sizes so that every later split is perfect (static tiles that vectorize), with zeros in the
padded region of the inputs and the padded rows/columns of the output dropped afterwards.
Realization: ``transform.structured.pad`` with ``pad_to_multiple_of`` on every dim
(:mod:`mlc_mlir.schedule.transform_script`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ..errors import ScheduleError
from .loop_nest import Dim
from .state import BlockRV, ScheduleState, as_int

#: Ops whose reduction dims may be padded with zeros: their combiner is ``+`` and their body a
#: product, so a zero row/column of an input adds nothing (a max-pooling would not be exact).
ZERO_PADDABLE_REDUCTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec",
                            "linalg.vecmat", "linalg.batch_matvec", "linalg.dot")


class PaddingPrimitives(ScheduleState):
    """Primitives that change the iteration space of a block."""

    def pad_einsum(self, block: BlockRV, padding: Sequence[int]) -> None:
        """Pad every iteration dim of ``block`` up to a multiple of ``padding`` (TVM
        ``pad_einsum``): dim ``d`` of extent ``E`` becomes ``ceil(E / padding[d]) * padding[d]``.
        The inputs are padded with zeros, the op computes the padded output, and the original
        output is its leading slice (``tensor.extract_slice``), so the result is unchanged.
        Later primitives see the padded extents (``split`` of a 1023-wide ``j`` padded by 16
        into ``[64, 16]``).

        Emits ``transform.structured.pad {padding_dimensions = [0, .., n-1],
        pad_to_multiple_of = padding, copy_back_op = "none"}`` on the op before it is tiled.

        Before / after, ``C (97, 61) = A (97, 53) @ B (53, 61)`` with ``padding = [8, 16, 4]``::

            linalg.matmul ins(%A, %B : tensor<97x53xf32>, tensor<53x61xf32>) outs(%C ...)
            # ->
            %Ap = tensor.pad %A low[0, 0] high[7, 3]    // 104 x 56, zeros
            %Bp = tensor.pad %B low[0, 0] high[3, 3]    // 56 x 64
            %Cp = tensor.pad %C low[0, 0] high[7, 3]    // 104 x 64
            %R = linalg.matmul ins(%Ap, %Bp) outs(%Cp) -> tensor<104x64xf32>
            tensor.extract_slice %R[0, 0] [97, 61] [1, 1]

        Parameters
        ----------
        block : BlockRV
            An untouched block (no split, reorder, cache or attachment yet) whose operands are
            indexed by plain dims (projected permutations: ``linalg.matmul``, ``dense``'s
            transposed-B matmul, ``linalg.batch_matmul``, elementwise generics). A reduction dim
            may be padded (by more than 1) only for the ops of
            :data:`ZERO_PADDABLE_REDUCTIONS`.
        padding : sequence of int
            One positive multiple per iteration dim (``1``: leave the dim as it is).

        Raises
        ------
        ScheduleError
            If the block already has loop transformations, caches, epilogues or attachments, is
            already padded, ``padding`` has the wrong length or a non-positive entry, an operand
            is indexed by an expression of dims (a convolution window), or a reduction dim of
            another op would be padded.
        """
        blk = self._block("pad_einsum", block)
        if not isinstance(padding, (list, tuple)) or len(padding) != len(blk.dims):
            raise ScheduleError(f"pad_einsum: argument 'padding' is {padding!r}; expected a list of "
                                f"{len(blk.dims)} ints (one per dim of '{blk.name}')")
        pads = [as_int("pad_einsum", "padding", p, 1) for p in padding]
        if blk.kind != "compute":
            raise ScheduleError(f"pad_einsum: block '{blk.name}' is a {blk.kind} block; expected a "
                                "compute block")
        self._check_untouched("pad_einsum", blk)
        if blk.padding is not None:
            raise ScheduleError(f"pad_einsum: block '{blk.name}' is already padded")
        if any(lp.kind != "serial" or lp.unroll is not None or lp.annotations or lp.fused_group is not None
               for lp in blk.loops) or len(blk.loops) != len(blk.dims) or blk.cache_reads or \
                blk.cache_writes or blk.rfactor is not None or blk.decomposed_at is not None:
            raise ScheduleError(f"pad_einsum: block '{blk.name}' already has loop transformations; "
                                "expected pad_einsum before split, reorder, caches and placement")
        if self._model.attached(blk) or self._model.epilogues(blk):
            raise ScheduleError(f"pad_einsum: other blocks are attached to loops of '{blk.name}'; "
                                "expected pad_einsum first")
        info = blk.info
        for shape, dims in zip(info.operand_shapes, info.operand_dims):
            if len(dims) != len(shape):
                raise ScheduleError(f"pad_einsum: an operand of '{blk.name}' ({info.op_name}) is "
                                    "indexed by an expression of several dims; expected every "
                                    "operand dim to be one iteration dim")
        for d, p in zip(blk.dims, pads):
            if d.kind == "reduction" and p > 1 and d.extent % p and \
                    info.op_name not in ZERO_PADDABLE_REDUCTIONS:
                raise ScheduleError(f"pad_einsum: reduction dim {d.name} of '{blk.name}' "
                                    f"({info.op_name}) cannot be padded with zeros; expected one "
                                    f"of {list(ZERO_PADDABLE_REDUCTIONS)}")
        padded = [-(-d.extent // p) * p for d, p in zip(blk.dims, pads)]
        shapes = tuple(tuple(padded[d] for d in dims) if len(shape) else shape
                       for shape, dims in zip(info.operand_shapes, info.operand_dims))
        blk.info = dataclasses.replace(
            info, dims=tuple(Dim(d.index, e, d.kind) for d, e in zip(info.dims, padded)),
            operand_shapes=shapes)
        blk.padding = tuple(pads)
        for lp in blk.loops:
            lp.extent = padded[lp.dim]
        self._record("pad_einsum", [block, pads], {}, [])
