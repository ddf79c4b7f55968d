"""The cooperative fetches of ``shared`` caches: a staged tile in workgroup memory, copied by
all the threads of a block (TVM ``cache_read(..., "shared")`` + ``compute_at``, the fetch loop
bound to ``threadIdx``).

The schedule stages every read of a cached buffer as a ``nofold`` ``tensor.pad`` of the read's
tile, annotated with the cache's name, the block's thread count and the bits a thread copies
at once (:meth:`mlc_mlir.schedule.gpu_script.GpuEmitter.mark_fetch`). This stage, on tensors
before bufferization:

1. merges the staged reads of one buffer at one place (``A[i]``, ``A[i + 1]``, ``A[i + 2]``:
   tiles of sizes ``T``, ``T + 1``, ``T + 2`` at one offset) into one copy of their union (the
   ``T + 2`` elements of the block, halo included), every read becoming a slice of it, as TVM's
   region analysis stages the union of a block's accesses; upstream fusion and padding stage
   each read separately (``fuse_into_containing_op`` tiles a producer once per use);
2. spreads each copy over the threads (``structured.gpu.map_copy_to_threads`` with the thread
   count and vector bits it carries, :func:`_mapping`) and places it in ``#gpu.address_space<workgroup>``
   (``structured.bufferize_to_allocation``).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Tuple

from .._mlir import ir, linalg_d, structured_transform_d, tensor_d, transform_d
from ..ir.emitters import i64_attr
from ..ir.module import Module
from ..ir.transform_values import any_op, gpu_attr
from ..ir.walk import find_ops
from ..schedule.gpu_script import FETCH, FETCH_BITS, FETCH_THREADS
from ..schedule.operand_tiles import spread_threads

#: Numbers each fetch for the transform script that distributes it.
_FETCH_ID = "mlc.fetch_id"


def _most_threads(sizes: List[int], limit: int) -> int:
    """The most threads, at most ``limit``, that split ``sizes`` evenly (one divisor per dim)."""
    if not sizes:
        return 1
    return max(f * _most_threads(sizes[1:], limit // f)
               for f in range(1, min(sizes[0], limit) + 1) if sizes[0] % f == 0)


def _mapping(op: ir.Operation) -> Tuple[int, int]:
    """``(threads, bits)`` for ``map_copy_to_threads`` of a fetch: each thread copies
    :data:`FETCH_BITS` at once, halved until the lanes divide the copy's minor dim (130
    elements of ``f32`` go as 65 ``v2`` copies), over as many of the block's
    :data:`FETCH_THREADS` as split the tile evenly. Upstream retries with smaller vectors
    when the threads do not all get work and fails on the last try, so it is given exactly
    the threads the tile splits over."""
    t = ir.RankedTensorType(op.results[0].type)
    shape, ebits = list(t.shape), t.element_type.width
    total = ir.IntegerAttr(op.attributes[FETCH_THREADS]).value
    lanes = max(ir.IntegerAttr(op.attributes[FETCH_BITS]).value // ebits, 1)
    while lanes > 1 and shape[-1] % lanes:
        lanes //= 2
    shape[-1] //= lanes
    return _most_threads(shape, total), lanes * ebits


def _slice_of(pad: ir.Operation):
    """The ``tensor.extract_slice`` (static sizes, unit strides) a staged pad copies, or None."""
    src = pad.operands[0]
    if isinstance(src.owner, ir.Block) or src.owner.name != "tensor.extract_slice":
        return None
    s = src.owner.opview
    if len(s.sizes) or len(s.strides) or any(x != 1 for x in s.static_strides):
        return None
    return s


def _same_place(a, b) -> bool:
    """Two slices of one value at the same offsets (equal SSA values and static offsets)."""
    return a.source == b.source and list(a.static_offsets) == list(b.static_offsets) and \
        len(a.offsets) == len(b.offsets) and all(x == y for x, y in zip(a.offsets, b.offsets))


def _groups(module: Module) -> List[List[ir.Operation]]:
    """The staged pads of ``module``, grouped by cache, block and place, in program order."""
    groups: List[List[ir.Operation]] = []
    for pad in find_ops(module, "tensor.pad"):
        if FETCH not in pad.attributes:
            continue
        s = _slice_of(pad)
        for g in groups:
            h = g[0]
            if s is not None and h.attributes[FETCH] == pad.attributes[FETCH] and \
                    h.block == pad.block and _slice_of(h) is not None and _same_place(_slice_of(h), s):
                g.append(pad)
                break
        else:
            groups.append([pad])
    return groups


def _merge(group: List[ir.Operation]) -> ir.Operation:
    """Replace the staged pads of ``group`` by one copy of the union of their tiles (placed
    before the first of them); each pad's result becomes a slice of it. Returns the copy."""
    first = group[0]
    slices = [_slice_of(p) for p in group]
    union = [max(sz) for sz in zip(*(list(s.static_sizes) for s in slices))]
    cover = next((p for p, s in zip(group, slices) if list(s.static_sizes) == union), None)
    with ir.Location.unknown(), ir.InsertionPoint(first):
        if cover is not None:
            slices[group.index(cover)].operation.move_before(first)
            cover.move_before(first)
            stage = cover
        else:
            s0 = slices[0]
            t = ir.RankedTensorType.get(union, s0.result.type.element_type)
            src = tensor_d.ExtractSliceOp(t, s0.source, list(s0.offsets), [], [],
                                          list(s0.static_offsets), union, [1] * len(union)).result
            empty = tensor_d.EmptyOp(union, t.element_type).result
            stage = linalg_d.copy(src, outs=[empty]).owner
            for name in (FETCH, FETCH_THREADS, FETCH_BITS):
                stage.attributes[name] = first.attributes[name]
        rest = [(p, s) for p, s in zip(group, slices) if p != stage]
        for p, s in rest:
            sizes = list(s.static_sizes)
            part = tensor_d.ExtractSliceOp(p.results[0].type, stage.results[0], [], [], [],
                                           [0] * len(sizes), sizes, [1] * len(sizes)).result
            p.results[0].replace_all_uses_with(part)
    for p, s in rest:
        p.erase()
        if not list(s.result.uses):
            s.operation.erase()
    return stage


def _distribute(op: ir.Operation, h: ir.Value, threads: int, bits: int) -> ir.Value:
    """Spread the staged copy ``op`` (transform handle ``h``) over ``threads`` threads; returns
    the forall's handle. Up to 3-D: ``structured.gpu.map_copy_to_threads`` with ``bits``-wide
    vectors; a 4-D tile (a convolution's input window or weight slice, which that op refuses)
    is tiled with ``tile_using_forall`` over :func:`~mlc_mlir.schedule.operand_tiles.spread_threads`
    threads mapped to ``#gpu.thread<linear_dim_k>`` (the contiguous dim fastest)."""
    shape = list(ir.ShapedType(op.results[0].type).shape)
    if len(shape) <= 3:
        return structured_transform_d.MapCopyToThreadsOp(
            any_op(), any_op(), h, total_num_threads=threads, desired_bit_alignment=bits).forall_op
    spread = spread_threads(shape, threads)
    real = [d for d, t in enumerate(spread) if t > 1]
    mapping = ir.ArrayAttr.get([gpu_attr(f"#gpu.thread<linear_dim_{len(real) - 1 - k}>")
                                for k in range(len(real))])
    return structured_transform_d.TileUsingForallOp(
        h, num_threads=[t if t > 1 else 0 for t in spread], mapping=mapping).forall_op


def stage_fetches(module: Module, apply: Callable) -> Module:
    """Merge the staged reads of each ``shared`` cache into one copy of their union and spread
    every copy over its block's threads in workgroup memory (module docstring). ``apply(module,
    build, stage)`` runs a transform script built by ``build(root)``
    (:func:`mlc_mlir.pipeline.cuda._apply`). Returns ``module`` itself when nothing is staged.

    Raises
    ------
    PipelineError
        If a transform op fails (from ``apply``).
    """
    out = module.clone()
    with out.context:
        fetches: Dict[int, ir.Operation] = {}
        for g in _groups(out):
            stage = _merge(g) if len(g) > 1 and all(_slice_of(p) is not None for p in g) else None
            for op in ([stage] if stage is not None else g):
                op.attributes[_FETCH_ID] = i64_attr(len(fetches))
                fetches[len(fetches)] = op
    if not fetches:
        return module

    def build(root):
        for i, op in fetches.items():
            h = structured_transform_d.MatchOp(
                any_op(), root, op_attrs=ir.DictAttr.get({_FETCH_ID: i64_attr(i)})).result
            threads, bits = _mapping(op)
            structured_transform_d.BufferizeToAllocationOp(
                _distribute(op, h, threads, bits), memory_space=gpu_attr("#gpu.address_space<workgroup>"),
                bufferize_destination_only=True, alloc_op="memref.alloca", memcpy_op="linalg.copy")
        funcs = structured_transform_d.MatchOp(
            any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get("func.func")])).result
        p = transform_d.ApplyPatternsOp(funcs)
        with ir.InsertionPoint(p.patterns):
            transform_d.ApplyCanonicalizationPatternsOp()
        transform_d.ApplyCommonSubexpressionEliminationOp(funcs)

    return apply(out.verify(), build, "fetch")
