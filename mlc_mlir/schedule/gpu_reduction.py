"""Transform-script emission of a cross-thread (block-per-row) reduction.

A reduction whose innermost reduction loop is bound to ``threadIdx.*`` (TVM: binding a
reduction loop to a thread axis lowers to a cross-thread ``allreduce``) is emitted as a
cooperative reduction in shared memory, with upstream transform ops only::

    i, k = sch.get_loops(blk)            # O[i] = sum_k X[i, k]
    k0, k1 = sch.split(k, [None, 256])
    sch.bind(i, "blockIdx.x")            # one row per block
    sch.bind(k1, "threadIdx.x")          # 256 threads reduce the row together

1. ``structured.split_reduction {split_factor = T, inner_parallel}``: ``X`` viewed as
   ``(.., K/T, T)``; a partial op ``P[i, t] = sum_k0 X[i, k0*T + t]`` (``t`` parallel: the
   threads read consecutive addresses, coalesced) and a combining op ``O[i] = sum_t P[i, t]``;
   with a vector loop of ``E`` (:data:`VECTOR_LANES`) below the thread loop the factor is
   ``T*E`` and thread ``t`` owns ``P[i, t*E : t*E + E]`` (contiguous reads);
2. the combining op tiled by ``tile_using_forall`` over the block loops (``#gpu.block``), the
   partial op, its fill and the output's init fused into it (``fuse_into_containing_op``);
3. the partial op tiled over ``t`` by a thread forall (``#gpu.thread``), ``P``'s row placed in
   ``#gpu.address_space<workgroup>`` (``structured.bufferize_to_allocation``);
4. the combine across the ``T`` partials, one of two strategies (block annotation
   :data:`WARP_SHUFFLE`, a decision the default rule samples):

   * ``1`` (the default): the last combine is annotated :data:`WARP_SHUFFLE`; after the thread
     mapping :mod:`mlc_mlir.pipeline.cuda_shuffle` keeps each thread's partial in a register
     and combines with ``gpu.shuffle xor`` (PTX ``shfl.sync.bfly``) within each warp, then
     across the ``T / 32`` warp totals through shared memory behind one barrier (the CUDA
     samples' and CUB's ``BlockReduce`` warp-reduction scheme; TVM lowers a thread-bound
     ``allreduce`` the same way);
   * ``0``: a shared-memory tree: for ``T >= 64`` the combine split again over 32 threads
     (``structured.tile_reduction_using_forall``, partials in shared memory), so the last step
     reads 32 values, not ``T``;
5. the last combine (and the output's init) in a one-thread forall.

``gpu.map_nested_forall_to_threads`` (:mod:`mlc_mlir.pipeline.cuda`) puts a barrier after each
thread forall, which orders the shared-memory steps (the shuffle rewrite drops the one its
register partials make needless).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from .._mlir import ir, structured_transform_d, transform_d
from ..ir.transform_values import any_op, gpu_attr, param_constant
from ..errors import ScheduleError
from ..target import WARP_SIZE
from .loop_nest import Block, Loop


#: Extents of the serial loop a cross-thread reduction may keep below its thread loop: each
#: thread reads that many contiguous elements per step (``split(k, [None, T, 4])``: thread t
#: reads ``X[k0*4T + 4t : k0*4T + 4t + 4]``), 8- or 16-byte vector loads of f32 (PTX
#: ``ld.global.v2``/``v4``) where the row is aligned (:mod:`mlc_mlir.pipeline.cuda_shuffle`).
VECTOR_LANES = (2, 4)

#: Block annotation choosing the combine of a cross-thread reduction (module docstring, step
#: 4): ``1`` (also when absent) warp shuffles, ``0`` a shared-memory tree. The last combining op
#: carries it to :mod:`mlc_mlir.pipeline.cuda_shuffle`.
WARP_SHUFFLE = "mlc.warp_shuffle"


def uses_warp_shuffle(blk: Block) -> bool:
    """Whether the cross-thread reduction ``blk`` combines with warp shuffles
    (:data:`WARP_SHUFFLE`, default on)."""
    return bool(blk.annotations.get(WARP_SHUFFLE, 1))


def is_cross_thread(blk: Block) -> bool:
    """Whether a loop of ``blk`` over a reduction dim is bound to a ``threadIdx`` axis."""
    return any(lp.kind == "bound" and lp.thread.startswith("threadIdx")
               and blk.dims[lp.dim].kind == "reduction" for lp in blk.loops)


def _check(blk: Block) -> Tuple[Loop, Optional[Loop]]:
    """The thread-bound reduction loop and the ``threadIdx.y``-bound row loop (None: one row
    per block); raises ScheduleError for what this emission lacks."""
    red = [d.index for d in blk.dims if d.kind == "reduction"]
    where = f"cross-thread reduction of '{blk.name}'"
    if len(red) != 1:
        raise ScheduleError(f"{where}: {len(red)} reduction dims; expected 1")
    if blk.info.init is None:
        raise ScheduleError(f"{where}: the output has no named linalg.fill init")
    if blk.cache_reads or blk.cache_writes or blk.decomposed_at is not None or blk.rfactor:
        raise ScheduleError(f"{where}: cache_read/cache_write/decompose_reduction/rfactor are not "
                            "supported with a thread-bound reduction loop")
    r = red[0]
    rloops = [lp for lp in blk.loops if lp.dim == r]
    if len(rloops) > 1 and rloops[-1].kind == "serial" and rloops[-1].extent in (1,) + VECTOR_LANES \
            and rloops[-1].unroll is None:
        rloops = rloops[:-1]   # each thread's vector
    tl = rloops[-1]
    if not (tl.kind == "bound" and tl.thread.startswith("threadIdx")):
        raise ScheduleError(f"{where}: the thread-bound loop must be the innermost loop of dim "
                            f"{blk.dims[r].name} (split(k, [None, T]) then bind the inner one), or "
                            f"the one outside an innermost serial loop of {VECTOR_LANES} elements")
    for lp in rloops[:-1]:
        if lp.kind == "bound" or lp.unroll is not None:
            raise ScheduleError(f"{where}: outer loops of dim {blk.dims[r].name} must stay serial")
    rows = None
    for lp in blk.loops:
        if blk.dims[lp.dim].kind != "parallel" or lp.extent == 1 or (
                lp.kind == "bound" and lp.thread.startswith("blockIdx")):
            continue
        if lp.kind == "bound" and lp.thread == "threadIdx.y" and tl.thread == "threadIdx.x" and \
                lp.fused_group is None and rows is None and \
                [q for q in blk.loops if q.dim == lp.dim][-1] is lp:
            rows = lp
            continue
        raise ScheduleError(f"{where}: parallel loop over dim {blk.dims[lp.dim].name} "
                            f"(extent {lp.extent}) is {lp.kind} ({lp.thread}); expected every "
                            "parallel loop bound to blockIdx (one output element per block), "
                            "except the inner loop of one dim bound to threadIdx.y (rows of a "
                            "block, the reduction on threadIdx.x)")
    if rows is not None and tl.extent % WARP_SIZE:
        raise ScheduleError(f"{where}: {rows.extent} rows per block (threadIdx.y) with "
                            f"{tl.extent} threads per row; expected a multiple of the warp size "
                            f"({WARP_SIZE}) so that no warp spans two rows")
    outs = [d for d in blk.info.out_dims if d is not None]
    if not outs:
        raise ScheduleError(f"{where}: reduces to a scalar; a full reduction needs blocks to "
                            "combine across (not implemented)")
    if outs != sorted(outs):
        raise ScheduleError(f"{where}: output dims {outs} are permuted; expected iteration order")
    return tl, rows


def emit_cross_thread(gpu, blk: Block) -> ir.Value:
    """Emit ``blk`` as a block-per-row cooperative reduction (module docstring).

    Parameters
    ----------
    gpu : GpuEmitter
        The GPU emitter (``host.match``, ``mapping`` of the block loops).
    blk : Block
        A reduction with one reduction dim, its innermost loop bound to ``threadIdx.*`` and
        every parallel loop of extent > 1 bound to ``blockIdx.*``, except perhaps the inner
        loop of one parallel dim bound to ``threadIdx.y`` (several rows per block, each
        reduced by its own threads along x: a warp per row when there are 32).

    Returns
    -------
    ir.Value
        Handle of the last combining op.

    Raises
    ------
    ScheduleError
        For more than one reduction dim, no named init, parallel loops not bound to blocks,
        caches or rfactor on the block, or a full (scalar) reduction.
    """
    tl, rows = _check(blk)
    host = gpu.host
    t_axis = tl.thread.split(".")[1]
    nthreads = tl.extent
    r = tl.dim
    vec = blk.step(blk.loops.index(tl))   # each thread's contiguous elements per step
    ndims = len(blk.dims)
    outs: List[int] = list(blk.info.out_dims)
    blocks = [lp for lp in blk.loops if lp.kind == "bound" and lp.thread.startswith("blockIdx")]
    gpu.check_level(blk, blocks, "block")
    if not any(lp.extent > 1 for lp in blocks):
        raise ScheduleError(f"bind: '{blk.name}' has no loop of extent > 1 bound to a blockIdx axis")
    thread = ir.ArrayAttr.get([gpu_attr(f"#gpu.thread<{t_axis}>")])
    # rows of a block (threadIdx.y): R output elements per block, one per row of threads
    nrows, rdim = (rows.extent, rows.dim) if rows is not None else (1, None)
    row_thread = ir.ArrayAttr.get([gpu_attr("#gpu.thread<y>")])
    shared = gpu_attr("#gpu.address_space<workgroup>")

    op = host.match(blk)
    init = host.match_name(blk.func, blk.info.init)
    sr = structured_transform_d.SplitReductionOp(
        any_op(), any_op(), any_op(), any_op(), op, split_factor=nthreads * vec,
        insert_split_dimension=len(outs), inner_parallel=True)
    # 2. one output element (or row of threads) per block: the combine's dims are the output's
    comb_sizes = [nrows if d == rdim else int(blk.dims[d].extent > 1) for d in outs] + [0]
    bt = structured_transform_d.TileUsingForallOp(sr.combining_linalg_op, tile_sizes=comb_sizes,
                                                  mapping=gpu.mapping(blk, blocks, "block"))
    comb, bforall = bt.tiled_op, bt.forall_op
    init = structured_transform_d.FuseIntoContainingOp(init, bforall).fused_op
    part = structured_transform_d.FuseIntoContainingOp(sr.split_linalg_op, bforall).fused_op
    pfill = structured_transform_d.FuseIntoContainingOp(sr.fill_op, bforall).fused_op
    # 3. partial sums: thread t reduces X[.., k0*T*E + t*E + e] into shared P[t*E + e] (E: its
    # vector, 1 without one); the partial op's dims are the original ones with r replaced by
    # (r: K/(T*E), r+1: T*E parallel)
    sizes = [0] * (ndims + 1)
    sizes[r + 1] = vec
    pmap = thread
    if rows is not None:
        prow = rdim if rdim < r else rdim + 1
        sizes[prow] = 1
        pmap = ir.ArrayAttr.get([gpu_attr(f"#gpu.thread<{a}>")
                                 for _, a in sorted([(prow, "y"), (r + 1, t_axis)])])
    tt = structured_transform_d.TileUsingForallOp(part, tile_sizes=sizes, mapping=pmap)
    structured_transform_d.FuseIntoContainingOp(pfill, tt.forall_op)
    _to_shared(tt.forall_op, shared)
    # 4. the shared-memory tree: the combine over 32 threads (each reads T/32 partials)
    shuffle = uses_warp_shuffle(blk)
    if not shuffle and nthreads >= 2 * WARP_SIZE and nthreads % WARP_SIZE == 0:
        red = structured_transform_d.TileReductionUsingForallOp(
            [any_op()], any_op(), any_op(), any_op(), comb, num_threads=[0] * len(outs) + [WARP_SIZE],
            mapping=thread)
        structured_transform_d.FuseIntoContainingOp(red.results[0], red.forall_op)
        _to_shared(red.forall_op, shared)
        comb = red.combining_op
    # 5. the last combine by one thread (a one-trip forall; per row: a forall over the rows on
    # threadIdx.y), with the output's init
    if rows is None:
        last = structured_transform_d.TileUsingForallOp(comb, tile_sizes=[1], mapping=thread)
    else:
        last = structured_transform_d.TileUsingForallOp(
            comb, tile_sizes=[int(d == rdim) for d in outs] + [0], mapping=row_thread)
    structured_transform_d.FuseIntoContainingOp(init, last.forall_op)
    if shuffle:
        transform_d.AnnotateOp(last.tiled_op, WARP_SHUFFLE, param=param_constant(nthreads))
    return last.tiled_op


def _to_shared(forall: ir.Value, space: ir.Attribute) -> None:
    """Place the destination of a thread forall in workgroup (shared) memory."""
    structured_transform_d.BufferizeToAllocationOp(
        forall, memory_space=space, bufferize_destination_only=True, alloc_op="memref.alloca",
        memcpy_op="linalg.copy")
