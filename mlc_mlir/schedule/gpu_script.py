"""Transform-script emission of GPU-bound blocks (``bind`` to ``blockIdx``/``threadIdx``).

A block with a loop bound to a GPU axis is emitted here instead of by the CPU rules of
:mod:`.transform_script`. On a GPU every iteration of a bound loop runs at once, so the order of
bound loops in the nest does not change the result; the nest is emitted in the canonical order
of a CUDA kernel (TVM's lowering of ``thread_binding`` loops does the same):

1. loops bound to ``blockIdx.*`` -> one ``structured.tile_using_forall`` with
   ``mapping = [#gpu.block<...>]`` in any axis order (fused loops: ``#gpu.block<linear_dim_k>``);
   the reduction's init (``linalg.fill``) is fused into it (``fuse_into_containing_op``);
2. serial loops at or above a loop where a ``shared`` cache is computed (``compute_at``), e.g.
   ``k0`` of a shared-memory matmul; the operands staged there are padded with ``nofold``
   (``structured.pad``): a copy that ``structured.gpu.map_copy_to_threads`` spreads over all
   threads of the block (the cooperative fetch) and ``structured.bufferize_to_allocation``
   places in ``#gpu.address_space<workgroup>``;
3. loops bound to ``threadIdx.*`` -> ``tile_using_forall`` with ``#gpu.thread<...>`` (fused
   loops: ``#gpu.thread<linear_dim_k>``), the init tiled likewise (or fused when no staging loop
   sits between); a ``local`` write cache is an allocation (``memref.alloca``) of the thread's
   output tile (``bufferize_to_allocation {bufferize_destination_only}``);
4. the remaining serial loops -> ``tile_using_for`` (``transform.loop.unroll`` where unrolled).

A reduction whose reduction loop is bound to ``threadIdx`` (a block per row) is emitted by
:mod:`.gpu_reduction` instead.

``gpu.map_forall_to_blocks`` / ``gpu.map_nested_forall_to_threads`` (after bufferization, in
:mod:`mlc_mlir.pipeline.cuda`) turn the foralls into a ``gpu.launch`` and insert the barriers
around each thread-level forall.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

from .._mlir import ir, loop_transform_d, structured_transform_d, transform_d
from ..ir.transform_values import any_op, gpu_attr, param_constant
from ..errors import ScheduleError
from ..target import WARP_SIZE
from .gpu_reduction import emit_cross_thread, is_cross_thread
from .loop_nest import Block, Loop, LoopNestModel
from .operand_tiles import spread_threads, tile_shape


def is_gpu_block(model: LoopNestModel, blk: Block) -> bool:
    """Whether ``blk`` (a compute block owning its nest) has a loop bound to a GPU axis."""
    return blk.kind == "compute" and any(lp.kind == "bound" for lp in blk.loops)


def gpu_owned(model: LoopNestModel, blk: Block) -> bool:
    """Whether ``blk`` is emitted by :class:`GpuEmitter`: a bound compute block, or the init,
    a cache or an attached cache of one."""
    if is_gpu_block(model, blk):
        return True
    if blk.parent is not None:
        parent = model.block(blk.parent)
        return parent is not None and is_gpu_block(model, parent)
    return False


#: Bound-axis prefix -> forall level and ``#gpu.<kind>`` mapping (warps are a thread level).
_LEVELS = {"blockIdx": ("block", "block"), "threadIdx": ("thread", "thread"),
           "warpIdx": ("thread", "warp")}


def _axis(lp: Loop) -> Tuple[str, str]:
    """``(level, axis)`` of a bound loop: ``("block" | "thread", "x" | "y" | "z")``."""
    kind, axis = lp.thread.split(".")
    return _LEVELS[kind][0], axis


def _kind(lp: Loop) -> str:
    """The ``#gpu.<kind>`` mapping of a bound loop (``block``, ``thread`` or ``warp``)."""
    return _LEVELS[lp.thread.split(".")[0]][1]


@dataclasses.dataclass
class _Level:
    """Loops of one forall level (blocks or threads), canonical order."""

    loops: List[Loop]


class GpuEmitter:
    """Emit the transform ops of GPU-bound blocks.

    Parameters
    ----------
    host : object
        The CPU emitter of :mod:`.transform_script` (``match``, ``tile_size`` for knobs).
    """

    def __init__(self, host):
        self.host = host
        self.model: LoopNestModel = host.model

    # ---------------------------------------------------------------- canonical order
    def canonical(self, blk: Block) -> Tuple[List[Loop], List[Loop], List[Loop], List[Loop], Dict]:
        """``(block loops, staging serial loops, thread loops, inner serial loops, stage)``:
        ``stage`` maps a cache-read operand to the serial loop id it is staged after (None:
        right after the block loops)."""
        loops = blk.loops
        stage: Dict[int, Optional[int]] = {}
        last = -1
        for c in blk.cache_reads:
            if c.scope != "shared":
                continue
            cache = self.model.cache_block(c.block_id)
            pos = blk.loop_index(cache.compute_at) if cache.compute_at is not None else None
            if pos is None or loops[pos].kind == "bound":
                stage[c.operand] = None
            else:
                stage[c.operand] = loops[pos].id
                last = max(last, pos)
        blocks = [lp for lp in loops if lp.kind == "bound" and _axis(lp)[0] == "block"]
        threads = [lp for lp in loops if lp.kind == "bound" and _axis(lp)[0] == "thread"]
        serial = [(p, lp) for p, lp in enumerate(loops) if lp.kind != "bound"]
        outer = [lp for p, lp in serial if p <= last]
        inner = [lp for p, lp in serial if p > last]
        return blocks, outer, threads, inner, stage

    # ---------------------------------------------------------------- helpers
    def mapping(self, blk: Block, level: List[Loop], kind: str) -> ir.ArrayAttr:
        """Mapping attributes of a forall over ``level`` (one per tiled dim, in dim order);
        a thread level bound to ``warpIdx`` maps to ``#gpu.warp``."""
        real = sorted((lp for lp in level if lp.extent > 1), key=lambda lp: lp.dim)
        if kind == "thread" and real and _kind(real[0]) == "warp":
            kind = "warp"
        fused = {lp.fused_group for lp in level if lp.fused_group is not None}
        if fused:
            # a fused group is one linear axis: the last loop varies fastest (linear_dim_0)
            order = [lp for lp in level if lp.extent > 1]
            rank = {lp.id: len(order) - 1 - k for k, lp in enumerate(order)}
            return ir.ArrayAttr.get([gpu_attr(f"#gpu.{kind}<linear_dim_{rank[lp.id]}>") for lp in real])
        return ir.ArrayAttr.get([gpu_attr(f"#gpu.{kind}<{_axis(lp)[1]}>") for lp in real])

    def check_level(self, blk: Block, level: List[Loop], kind: str) -> None:
        dims = [lp.dim for lp in level if lp.extent > 1]
        if len(set(dims)) != len(dims):
            raise ScheduleError(f"bind: '{blk.name}' binds two loops of dim "
                                f"{blk.dims[dims[0]].name} to {kind} axes; expected one per dim")
        if len({_kind(lp) for lp in level if lp.extent > 1}) > 1:
            raise ScheduleError(f"bind: '{blk.name}' binds loops to both threadIdx and warpIdx "
                                "axes; expected one kind per block")
        if "mlc.mma_sync" in blk.annotations and any(
                lp.extent > 1 and _kind(lp) == "warp" and _axis(lp)[1] == "x" for lp in level):
            # rewrite_matmul_as_mma_sync takes threadIdx.x as the lane id: a second warp along x
            # would read and write another warp's fragments
            raise ScheduleError(f"bind: '{blk.name}' is annotated mlc.mma_sync and binds a loop of "
                                "more than one warp to warpIdx.x; bind warps to warpIdx.y/z "
                                "(nvgpu.mma.sync takes threadIdx.x as the lane id)")
        groups = {lp.fused_group for lp in level}
        if len(groups) > 1 and None in groups:
            raise ScheduleError(f"bind: '{blk.name}' mixes fused and plain loops bound to {kind} "
                                "axes; expected one fused loop or separate axes")

    def sizes(self, view: Block, positions: List[int], ndims: int, dim_map=None) -> list:
        out = [0] * ndims
        for p in positions:
            if view.loops[p].extent == 1:
                continue   # a one-trip loop is no forall dim (its mapping is left out too)
            d = view.loops[p].dim if dim_map is None else dim_map.get(view.loops[p].dim)
            if d is not None:
                out[d] = self.host.tile_size(view, p)
        return out

    def forall(self, op: ir.Value, sizes: list, mapping: ir.ArrayAttr):
        r = structured_transform_d.TileUsingForallOp(op, tile_sizes=sizes, mapping=mapping)
        return r.tiled_op, r.forall_op

    def copy_to_threads(self, blk: Block, pad: ir.Value, terms: tuple, shape: Optional[List[int]],
                        nthreads: int) -> ir.Value:
        """Spread the cooperative copy ``pad`` (a staged panel of ``shape``) over the block's
        ``nthreads`` threads (``terms``: the operand's index terms); returns the forall. Up to 3-D: ``structured.gpu.map_copy_to_threads``
        (16-byte vectors where the minor dim allows); a 4-D panel (a convolution's input window
        or weight slice, which that op refuses) is tiled with ``tile_using_forall`` over
        :func:`~.operand_tiles.spread_threads` threads mapped to ``#gpu.thread<linear_dim_k>``.

        Raises
        ------
        ScheduleError
            If a panel of rank > 3 has an index that is not linear in the loops.
        """
        if len(terms) <= 3:
            return structured_transform_d.MapCopyToThreadsOp(
                any_op(), any_op(), pad, total_num_threads=nthreads, desired_bit_alignment=128).forall_op
        if shape is None:
            raise ScheduleError(f"cache_read: a staged operand of '{blk.name}' has a non-linear "
                                "index; its shared panel's shape is unknown")
        threads = spread_threads(shape, nthreads)
        real = [d for d, t in enumerate(threads) if t > 1]
        mapping = ir.ArrayAttr.get([gpu_attr(f"#gpu.thread<linear_dim_{len(real) - 1 - k}>")
                                    for k in range(len(real))])
        return structured_transform_d.TileUsingForallOp(
            pad, num_threads=[t if t > 1 else 0 for t in threads], mapping=mapping).forall_op

    # ---------------------------------------------------------------- emission
    def emit(self, blk: Block) -> ir.Value:
        """Emit ``blk`` and what belongs to it; returns the handle of the innermost tiled op.

        Raises
        ------
        ScheduleError
            If no loop is bound to a ``blockIdx`` axis, a dim is bound twice at one level, or
            a block is attached in a way the GPU emission does not support.
        """
        if is_cross_thread(blk):
            return emit_cross_thread(self, blk)
        blocks, outer, threads, inner, stage = self.canonical(blk)
        if not any(lp.extent > 1 for lp in blocks):
            raise ScheduleError(f"bind: '{blk.name}' has no loop of extent > 1 bound to a blockIdx "
                                "axis; a GPU kernel needs one (bind the outermost loop to blockIdx.x)")
        self.check_level(blk, blocks, "block")
        self.check_level(blk, threads, "thread")
        for b in self.model.blocks:
            if b.reverse_compute_at is not None and b.kind == "compute" and \
                    blk.loop_index(b.reverse_compute_at) is not None:
                raise ScheduleError(f"reverse_compute_at: '{b.name}' is attached to a GPU-bound loop "
                                    f"of '{blk.name}'; only its cache_write block can be (schedule "
                                    "the epilogue as its own kernel)")
        order = blocks + outer + threads + inner
        view = dataclasses.replace(blk, loops=order)
        ndims = len(blk.dims)
        nb, no, nt = len(blocks), len(outer), len(threads)
        op = self.host.match(blk)
        fill = self.host.match_name(blk.func, blk.info.init) if blk.info.init else None
        dim_map = {d: r for r, d in enumerate(blk.info.out_dims) if d is not None}

        # 1. blocks
        op, bforall = self.forall(op, self.sizes(view, list(range(nb)), ndims),
                                  self.mapping(blk, blocks, "block"))
        if fill is not None:
            fill = structured_transform_d.FuseIntoContainingOp(fill, bforall).fused_op
        # a tensor.pad producer (conv2d's padding) stays outside: fusing it into the forall
        # (fuse_into_containing_op) aborts MLIR 22; the CUDA lowering refuses it by name
        loop_handles: Dict[int, ir.Value] = {}
        pads = []

        def stage_here(after: Optional[int]):
            nonlocal op
            idxs = [i for i, s in stage.items() if s == after]
            if not idxs:
                return
            zeros = self.host.zeros(blk)
            pad = structured_transform_d.PadOp(
                op, padding_values=zeros, padding_dimensions=list(range(ndims)),
                nofold_flags=[1 if i in idxs else 0 for i in range(len(zeros))], copy_back_op="none")
            op = pad.padded
            pos = nb - 1 if after is None else next(p for p, lp in enumerate(order) if lp.id == after)
            inside = [math.prod(lp.extent for lp in order[pos + 1:] if lp.dim == d) for d in range(ndims)]
            pads.extend((transform_d.GetProducerOfOperand(any_op(), op, i).result,
                         blk.info.operand_terms[i], tile_shape(blk.info.operand_terms[i], inside))
                        for i in idxs)

        stage_here(None)
        # 2. staging loops (serial, outside the threads)
        for p in range(nb, nb + no):
            lp = order[p]
            if lp.extent > 1:
                r = structured_transform_d.TileUsingForOp(op, sizes=self.sizes(view, [p], ndims))
                op, loop_handles[lp.id] = r.tiled_linalg_op, r.loops[0]
            stage_here(lp.id)
        # 3. threads
        nthreads = math.prod(lp.extent * (WARP_SIZE if _kind(lp) == "warp" else 1)
                             for lp in threads)
        local = any(c.scope == "local" for c in blk.cache_writes)
        if any(lp.extent > 1 for lp in threads):
            tpos = list(range(nb + no, nb + no + nt))
            op, tforall = self.forall(op, self.sizes(view, tpos, ndims),
                                      self.mapping(blk, threads, "thread"))
            if fill is not None:
                if no == 0:
                    fill = structured_transform_d.FuseIntoContainingOp(fill, tforall).fused_op
                else:
                    fill, _ = self.forall(fill, self.sizes(view, tpos, len(dim_map), dim_map),
                                          self.mapping(blk, threads, "thread"))
        # the local write cache: the thread's output tile in a private allocation
        if local:
            target = fill if (fill is not None and no == 0) else op
            structured_transform_d.BufferizeToAllocationOp(
                target, bufferize_destination_only=True, alloc_op="memref.alloca",
                memcpy_op="linalg.copy")
        # 4. inner serial loops (trailing unit-step loops in dim order stay in the op)
        start = nb + no + nt
        stop = self.model.inner_start(view, start)
        for p in range(start, stop):
            lp = order[p]
            if lp.kind == "vectorized":
                break
            if lp.extent > 1:
                r = structured_transform_d.TileUsingForOp(op, sizes=self.sizes(view, [p], ndims))
                op, loop_handles[lp.id] = r.tiled_linalg_op, r.loops[0]
        # cooperative copies of the shared caches, in workgroup memory
        # (128-bit alignment: each thread copies up to a 16-byte vector, as many lanes as divide
        # the panel's minor dim; a 64-wide f32 panel then needs 16 threads per row, not 64)
        for pad, terms, shape in pads:
            structured_transform_d.BufferizeToAllocationOp(
                self.copy_to_threads(blk, pad, terms, shape, max(nthreads, 1)), memory_space=gpu_attr("#gpu.address_space<workgroup>"),
                bufferize_destination_only=True, alloc_op="memref.alloca", memcpy_op="linalg.copy")
        for lp in reversed(order):
            if lp.unroll is not None and lp.id in loop_handles:
                loop_transform_d.LoopUnrollOp(loop_handles[lp.id], factor=lp.unroll or lp.extent)
        for k, v in blk.annotations.items():   # on the innermost tile (e.g. mlc.mma_sync)
            transform_d.AnnotateOp(op, k, param=param_constant(v))
        return op
