"""Transform scripts: a loop-nest model -> a transform-dialect module, and its application.

The script is built with the MLIR Python builders (``transform.structured.*``,
``transform.loop.*``, ``transform.tune.knob``) as ``transform.named_sequence
@__transform_main`` in a module with ``transform.with_named_sequence``, so that upstream
``mlir-opt --transform-preload-library=transform-library-paths=s.mlir --transform-interpreter``
applies it to the exported payload with the same result as ``sch.mod``.

Emission reads only the public loop-nest model (:class:`~.loop_nest.LoopNestModel`). Per block,
outermost loop first: each materialized loop (:meth:`LoopNestModel.tilings`) is one tiling op
that tiles only its dim, the tile size (step) being the product of the inner loops' extents of
the same dim; :data:`TILING_RULES` maps each loop kind to its tiling op (``serial`` ->
``structured.tile_using_for``, ``parallel`` and ``bound`` -> ``structured.tile_using_forall``).
Loops inside a vectorized loop stay in the op, which ``structured.vectorize`` turns into vector
ops; trailing loops already in the op's dim order are left to ``convert-linalg-to-loops``.
Attached blocks (``compute_at``, ``decompose_reduction``) are fused with
``structured.fuse_into_containing_op`` into each enclosing loop; ``reverse_compute_at`` tiles
the epilogue with the producer's outer loops and fuses the producer into them. Packed operand
tiles (``cache_read``) are emitted by :mod:`~.packed_tiles`.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

from .._mlir import (ir, loop_transform_d, structured_transform_d, tensor_transform_d, transform_d,
                     transform_interpreter, tune_transform_d)
from ..ir.transform_values import any_op, param_constant
from ..errors import ScheduleError
from ..ir import dtypes
from ..ir.llvm_options import printing_assumes_verified
from ..ir.module import Module, OP_NAME_ATTR, diagnostics
from .factors import largest_divisor
from .gpu_script import GpuEmitter, gpu_owned, is_gpu_block
from .loop_nest import Block, LoopNestModel, Tiling
from .packed_tiles import emit_cache_reads, emit_pad
from .partial_tiles import peel_partial
from .split_reduction import emit_split, is_split, op_dim, vectorize_split
from .tileability import check_tileable
from .vector_lowering import (
    AVX2_TRANSPOSE_ATTR, lower_vectors, match_in, vectorize_register_tiles, vectorize_unit_tile,
)


#: Longest vector (in elements) an init or epilogue row is written with. Longer rows are written
#: in chunks: LLVM's instruction selection cannot legalize vectors of 2**16 elements and more
#: (a SelectionDAG node holds at most 65535 operands), and a chunk of a few KiB already streams
#: at the memory's speed.
MAX_ROW_VECTOR = 4096

#: Largest init or epilogue tile (elements) vectorized whole rather than row by row
#: (:func:`~.vector_lowering.vectorize_register_tiles`): an ``MR x NR`` register tile (at most
#: 14 x 32 = 448 on AVX-512), whose vector the k loop produces.
MAX_TILE_VECTOR = 512


def _row_extent(blk: Block, pos: int) -> Optional[int]:
    """Extent, inside loop ``pos`` of ``blk``, of the dim indexing the last dim of its output
    (the row an init or epilogue tile writes); None when a loop of it is dynamic."""
    d = blk.info.out_dims[-1] if blk.info.out_dims else None
    if d is None:
        return 1
    extents = [q.extent for q in blk.loops[pos:] if q.dim == d]
    return None if None in extents else math.prod(extents)


def _tile_elements(blk: Block, pos: int) -> Optional[int]:
    """Elements of ``blk``'s output tile inside loop ``pos`` (the tile an init or epilogue
    attached there writes); None when a loop of it is dynamic."""
    dims = {d for d in blk.info.out_dims if d is not None}
    extents = [q.extent for q in blk.loops[pos:] if q.dim in dims]
    return None if None in extents else math.prod(extents)


class TransformScript:
    """A transform module (``transform.named_sequence @__transform_main``).

    ``str(script)`` is MLIR text for ``mlir-opt``; ``script.module`` the ``ir.Module``.
    """

    def __init__(self, module: ir.Module, context: ir.Context):
        self.module = module
        self.context = context

    @property
    def entry(self):
        """The ``@__transform_main`` named sequence op."""
        for op in self.module.body.operations:
            if op.operation.name == "transform.named_sequence":
                return op
        raise ScheduleError("transform script has no named sequence")

    def __str__(self) -> str:
        return str(self.module)

    def save(self, path: str) -> None:
        """Write the script's MLIR text to ``path``."""
        with open(path, "w") as f:
            f.write(str(self))


def _param_type():
    return transform_d.ParamType.get(ir.IntegerType.get_signless(64))


def _tile_for(op: ir.Value, sizes: list, blk: Block, t: Tiling):
    """``serial`` loops: ``structured.tile_using_for`` (one ``scf.for`` per tiled dim)."""
    r = structured_transform_d.TileUsingForOp(op, sizes=sizes)
    return r.tiled_linalg_op, list(r.loops)


def _tile_forall(op: ir.Value, sizes: list, blk: Block, t: Tiling):
    """``parallel`` loops: ``structured.tile_using_forall`` (one multi-dim ``scf.forall``)."""
    r = structured_transform_d.TileUsingForallOp(op, tile_sizes=sizes)
    return r.tiled_op, [r.forall_op]


def _tile_bound(op: ir.Value, sizes: list, blk: Block, t: Tiling):
    """``bound`` loops reach the GPU emitter (:mod:`~mlc_mlir.schedule.gpu_script`), which maps
    them with ``#gpu.block`` / ``#gpu.thread``; a bound loop of any other block is an error."""
    raise ScheduleError(f"bind: block '{blk.name}' ({blk.kind}) has loops bound to GPU axes but is "
                        "not a compute block the GPU emitter maps; bind the loops of its "
                        "compute block instead")


#: Loop kind -> tiling rule ``(op, sizes, block, tiling) -> (tiled op, loop handles)``.
#: ``vectorized`` loops never get one: they stay in the op that ``structured.vectorize`` turns
#: into vector ops.
TILING_RULES = {"serial": _tile_for, "parallel": _tile_forall, "bound": _tile_bound}


class _Emitter:
    def __init__(self, model: LoopNestModel, root: ir.Value, design_space: bool = False):
        self.model = model
        self.design_space = design_space
        self.root = root
        self.funcs: Dict[str, ir.Value] = {}
        self.loop_handles: Dict[int, ir.Value] = {}      # model loop id -> handle
        self.op_handles: Dict[int, ir.Value] = {}        # block id -> current op handle
        self.vectorized_funcs = set()
        self.masked_funcs = set()                          # funcs with masked (partial) tiles
        self.unit_reduction_loops: Dict[str, list] = {}   # func -> loops around mmt4d tiles
        self.funcs_gpu = set()
        self.coalesce = []                                 # (block, positions, outer loop handle)
        self.pads = []   # (func, pad handle, loops to hoist, tile, ..., hoisted by licm)
        self.input_pads: Dict[int, list] = {}              # block id -> [(dims, pad_einsum's tensor.pad)]
        self.merges: Dict[str, list] = {}                  # func -> rfactor combining ops
        self.splits: Dict[str, list] = {}                  # func -> split_reduction's ops

    # ---------------------------------------------------------------- matching
    def func(self, name: str) -> ir.Value:
        if name not in self.funcs:
            self.funcs[name] = structured_transform_d.MatchOp(
                any_op(), self.root, ops=ir.ArrayAttr.get([ir.StringAttr.get("func.func")]),
                op_attrs=ir.DictAttr.get({"sym_name": ir.StringAttr.get(name)})).result
        return self.funcs[name]

    def match(self, blk: Block) -> ir.Value:
        return self.match_name(blk.func, blk.name)

    def match_name(self, func: str, name: str) -> ir.Value:
        return structured_transform_d.MatchOp(
            any_op(), self.func(func),
            op_attrs=ir.DictAttr.get({OP_NAME_ATTR: ir.StringAttr.get(name)})).result

    # ---------------------------------------------------------------- sizes and knobs
    def tile_size(self, blk: Block, pos: int):
        """Static step of loops[pos], or a knob param when a sampled factor determines it; the
        knob's options are the steps the sampled factors' options allow."""
        step = blk.step(pos)
        lp = blk.loops[pos]
        inner = [q for q in blk.loops[pos + 1:] if q.dim == lp.dim]
        if not any(q.sampled for q in inner + [lp]):
            return step
        level = sum(1 for q in blk.loops[:pos] if q.dim == lp.dim) + 1
        extent = blk.dims[lp.dim].extent
        options = {1}
        for q in inner:   # a dynamic extent (None) takes any step: its last tile is partial
            steps = [o for o in (q.options or (q.extent,)) if o is not None]
            options = {a * b for a in options for b in steps if extent is None or extent % (a * b) == 0}
        options.add(step)
        name = f"{blk.name}.{blk.dims[lp.dim].name}.tile{level}"
        selected = None if self.design_space else ir.IntegerAttr.get(ir.IntegerType.get_signless(64), step)
        return tune_transform_d.KnobOp(_param_type(), name, sorted(options), selected=selected).result

    def sizes(self, blk: Block, positions, ndims: int, dim_map=None):
        sizes = [0] * ndims
        split = dim_map is None and is_split(blk)
        for p in positions:
            if split and blk.loops[p].id == blk.rfactor.outer:
                sizes[0] = 1            # one partial result per iteration
                continue
            d = blk.loops[p].dim
            sizes[op_dim(blk, p) if split else d if dim_map is None else dim_map[d]] = self.tile_size(blk, p)
        return sizes

    # ---------------------------------------------------------------- tiling
    def tile(self, op: ir.Value, blk: Block, t: Tiling, ndims: int, dim_map=None,
             fuse_producers: bool = False):
        lp = blk.loops[t.positions[0]]
        sizes = self.sizes(blk, t.positions, ndims, dim_map)
        if blk.rfactor is not None and lp.id == blk.rfactor.outer and dim_map is None and not blk.rfactor.split:
            # tile_reduction_using_for takes static sizes only: a sampled factor enters as its
            # decision (the knob is not threaded through this op)
            static = [0] * ndims
            for p in t.positions:
                static[blk.loops[p].dim] = blk.step(p)
            r = structured_transform_d.TileReductionUsingForOp(
                [any_op()], any_op(), any_op(), any_op(), op, tile_sizes=static)
            op, loops = r.split_op, [r.for_op]
            self.merges.setdefault(blk.func, []).append(r.combining_op)
        elif fuse_producers:
            # tile and fuse the init (linalg.fill) through the loop's destination
            r = structured_transform_d.FuseOp(op, tile_sizes=sizes, use_forall=lp.kind == "parallel")
            op, loops = r.transformed, list(r.loops)
        else:
            rule = TILING_RULES.get(lp.kind)
            if rule is None:
                raise NotImplementedError(f"transform script: no tiling rule for loop kind {lp.kind!r} "
                                          f"(loop {blk.label(t.positions[0])} of '{blk.name}')")
            op, loops = rule(op, sizes, blk, t)
        for p in blk.group(t.positions[0]):
            self.loop_handles[blk.loops[p].id] = loops[0]
        if len(loops) > 1 and t.kind == "for":
            # a fused serial group: coalesced at the end (coalescing invalidates nested handles)
            self.coalesce.append((blk, t.positions, loops[0]))
        return op

    def emit_loops(self, blk: Block, op: ir.Value, start: int = 0) -> ir.Value:
        ndims = len(blk.dims) + is_split(blk)    # split_reduction's leading dim
        init_pos = blk.loop_index(blk.decomposed_at) if blk.decomposed_at is not None else 0
        if start == 0:
            op = self.maybe_pad(blk, op, -1)
        init = self.model.init_of(blk) if init_pos > start else None
        init_op = self.match(init) if init is not None else None
        for t in self.model.tilings(blk, start):
            fuse = t.positions[0] < init_pos
            if fuse and blk.loops[t.positions[0]].kind == "parallel" and self.model.padding_of(blk) is None:
                # only the init enters an scf.forall (fuse_into_containing_op through its shared
                # output): structured.fuse would also recompute the producers of the inputs (a
                # padded op's init reaches it through tensor.pad: structured.fuse it is)
                op = self.tile(op, blk, t, ndims)
                init_op = self.fuse_into(init_op, [self.loop_handles[blk.loops[t.positions[0]].id]])
            elif blk.loops[t.positions[0]].kind == "parallel" and self.input_pads.get(blk.id):
                op = self.tile(op, blk, t, ndims)
                self.fuse_input_pads(blk, t)
            else:
                op = self.tile(op, blk, t, ndims, fuse_producers=fuse)
            for q in t.positions:
                op = self.maybe_pad(blk, op, q)
        return op

    def maybe_pad(self, blk: Block, op: ir.Value, pos: int) -> ir.Value:
        for c in blk.cache_reads:
            if self.model.cache_position(blk, c.operand) == pos:
                op = emit_pad(self, blk, op, c.operand, c.block_id, pos)
        for c in blk.cache_writes:
            if self.model.cache_position(blk, c.operand) == pos:
                op = structured_transform_d.PadOp(
                    op, padding_values=self.zeros(blk), padding_dimensions=list(range(len(blk.dims))),
                    nofold_flags=[1 if i == c.operand else 0 for i in range(len(blk.info.operand_shapes))],
                    copy_back_op="linalg.copy").padded
        return op

    def fuse_input_pads(self, blk: Block, t: Tiling) -> None:
        """Move the ``tensor.pad`` copies that ``pad_einsum`` made of the inputs indexed by the
        threads' ``dims`` into the block's ``scf.forall`` (each thread pads its own slice),
        instead of one serial copy of the whole input before the threads fork. An input the
        threads do not slice (an mmt4d's A when they split N) keeps its pad outside: each
        thread would copy all of it."""
        forall = self.loop_handles[blk.loops[t.positions[0]].id]
        dims = {blk.loops[p].dim for p in t.positions}
        for operand_dims, pad in self.input_pads.pop(blk.id):
            if dims & set(operand_dims):
                self.fuse_into(pad, [forall])

    def zeros(self, blk: Block) -> list:
        out = []
        for dt in blk.info.dtypes:
            t = dtypes.to_ir_type(dt)
            out.append(ir.FloatAttr.get(t, 0.0) if dtypes.is_float(dt) else ir.IntegerAttr.get(t, 0))
        return out

    # ---------------------------------------------------------------- attachment
    def enclosing_handles(self, blk: Block, upto_loop_id: int) -> List[ir.Value]:
        pos = blk.loop_index(upto_loop_id)
        hs = []
        for q in blk.loops[:pos + 1]:
            h = self.loop_handles.get(q.id)
            if h is not None and (not hs or hs[-1] is not h):
                hs.append(h)
        return hs

    def fuse_into(self, producer: ir.Value, loops: List[ir.Value]) -> ir.Value:
        for h in loops:
            producer = structured_transform_d.FuseIntoContainingOp(producer, h).fused_op
        return producer

    # ---------------------------------------------------------------- blocks
    def pad_einsum(self, blk: Block, op: ir.Value) -> ir.Value:
        """``pad_einsum``: ``structured.pad`` of every dim to its multiple (zeros; the result
        is the leading ``extract_slice`` of the padded op's result, ``copy_back_op = "none"``)."""
        padding = self.model.padding_of(blk)
        if padding is None:
            return op
        padded = structured_transform_d.PadOp(
            op, pad_to_multiple_of=list(padding), padding_values=self.zeros(blk),
            padding_dimensions=list(range(len(blk.dims))), copy_back_op="none").padded
        orig = self.model.ops[(blk.func, blk.name)]
        grown = {d for d, (a, b) in enumerate(zip(orig.dims, blk.dims)) if a.extent != b.extent}
        self.input_pads[blk.id] = [
            (dims, transform_d.GetProducerOfOperand(any_op(), padded, i).result)
            for i, dims in enumerate(blk.info.operand_dims[:blk.info.num_inputs]) if grown & set(dims)]
        return padded

    def emit_block(self, blk: Block) -> None:
        consumers = self.model.epilogues(blk)
        op = self.pad_einsum(blk, self.match(blk))
        if is_split(blk):
            op = emit_split(self, blk, op)
        if not consumers:
            self.op_handles[blk.id] = self.emit_loops(blk, op)
            return
        pos = blk.loop_index(consumers[0].reverse_compute_at)
        root = consumers[-1]
        dim_map = {d: r for r, d in enumerate(blk.info.out_dims)}
        rop = self.match(root)
        for t in self.model.tilings(blk, 0, pos + 1):
            rop = self.tile(rop, blk, t, len(root.dims), dim_map)
        handles = self.enclosing_handles(blk, blk.loops[pos].id)
        for c in reversed(consumers[:-1]):
            self.op_handles[c.id] = self.fuse_into(self.match(c), handles)
        op = self.fuse_into(op, handles)
        for c in blk.cache_reads:
            # a cache packed at one of the epilogue's loops (a conv's filter panel per
            # output-channel block): packed in the fused op, moved out to its compute_at loop
            # (a compute_at below the epilogue's loops, c0 of a channel-blocked conv: packed
            # where the epilogue is fused, the whole block's panel, as an unfused op's is)
            if 0 <= self.model.cache_position(blk, c.operand) <= pos:
                op = emit_pad(self, blk, op, c.operand, c.block_id, pos, licm=True)
        if len(consumers) > 1:
            # an epilogue feeding the next one writes into a tensor.empty of its tile, not into a
            # slice of a whole-output buffer (the stem's batch norm before its relu: 3.2 MB)
            self.fold_empty_slices(blk.func)
        init = self.model.init_of(blk)
        ipos = blk.loop_index(blk.decomposed_at) if init is not None else 0
        if ipos > 0:
            # the init sits inside the epilogue's loops: fuse it there too (loops between
            # those and the init fuse it with structured.fuse in emit_loops)
            self.fuse_into(self.match(init),
                           self.enclosing_handles(blk, blk.loops[min(ipos - 1, pos)].id))
        self.op_handles[root.id] = rop
        self.op_handles[blk.id] = self.emit_loops(blk, op, pos + 1)
        if ipos > 0:
            # the init fused into the tile writes into a tensor.empty of the tile, not into a
            # slice of a whole-output one: a register tile's buffer (1.5 KiB) instead of a
            # second output-sized one (0.8 MiB per output-channel block of ResNet-50's 1x1s)
            self.fold_empty_slices(blk.func)

    def emit_attached(self, blk: Block) -> None:
        """Fuse ``blk`` into the loops of its ``compute_at`` target (after CSE: the equal slices
        its consumers read become one, fused once), then tile what it keeps of its own loops; an
        all-parallel ``blk`` writes into a ``tensor.empty`` of its tile (a row's buffer)."""
        handles = self.enclosing_handles(self.model.owner_of_loop(blk.compute_at), blk.compute_at)
        transform_d.ApplyCommonSubexpressionEliminationOp(self.func(blk.func))
        op = self.fuse_into(self.match(blk), handles)
        if all(d.kind == "parallel" for d in blk.dims):
            self.fold_empty_slices(blk.func)
        self.op_handles[blk.id] = self.emit_loops(blk, op) if len(blk.loops) > len(blk.dims) else op

    def peel_partial(self, b: Block, h: ir.Value):
        """See :func:`~.partial_tiles.peel_partial`."""
        return peel_partial(self, b, h)

    def vectorize_tiles(self, b: Block, scope: Optional[ir.Value], last: Optional[int],
                        each: bool = False) -> None:
        """Vectorize the init and the epilogues of ``b``: whole where a tile holds at most
        :data:`MAX_TILE_VECTOR` elements (a register tile,
        :func:`~.vector_lowering.vectorize_register_tiles`; an mmt4d's, whose tile loop is
        ``scope``, only inside that loop; ``each``: ``scope`` holds the loops of a peeled tile's
        copies), else row by row (:meth:`vectorize_rows`)."""
        init = self.model.init_of(b)
        tiles = [(init, b.loop_index(b.decomposed_at) or 0)] if init is not None else []
        tiles += [(a, b.loop_index(a.reverse_compute_at) + 1) for a in self.model.epilogues(b)]
        # the register tile's k loop: a tile attached right above it sits in the loop `scope`
        k_pos = max((p for p, lp in enumerate(b.loops) if lp.kind != "vectorized"
                     and b.dims[lp.dim].kind != "parallel"), default=None)
        whole = []
        for t, pos in tiles:
            size = _tile_elements(b, pos)
            h = self.op_handles[t.id] if t is not init else None
            if last is None and size is not None and size <= MAX_TILE_VECTOR \
                    and (scope is None or pos == k_pos):
                whole.append(h if h is not None else
                             self.match(t) if scope is None else
                             match_in(scope, each=each, op_attrs=ir.DictAttr.get(
                                 {OP_NAME_ATTR: ir.StringAttr.get(t.name)})))
            else:
                self.vectorize_rows(h if h is not None else self.match(t), len(t.dims),
                                    _row_extent(b, pos), last)
        if whole:
            vectorize_register_tiles(whole, scope, each)

    def vectorize_rows(self, op: ir.Value, ndims: int, row: Optional[int] = None,
                       last: Optional[int] = None) -> None:
        """Vectorize an init or epilogue tile one row at a time (tile all but the last dim by 1):
        vectorizing a whole tile at once makes ``vector<RxC>`` values that unroll into huge code.
        A static row of ``row`` elements longer than :data:`MAX_ROW_VECTOR` is written in chunks
        (the largest divisor of ``row`` within the bound); ``last``: the row's static size in a
        partial tile (masked vectorization); a row that may be longer (dynamic, or a thread's
        chunk of columns whose last one is shorter) is written in chunks of ``last``, the last
        chunk masked."""
        chunk = row
        if last is None and row is not None and row > MAX_ROW_VECTOR:
            chunk = largest_divisor(row, MAX_ROW_VECTOR)
        elif last is not None and (row is None or row > last):
            chunk = last
        if ndims > 1 or chunk != row:
            sizes = [1] * (ndims - 1) + [0 if chunk == row else chunk]
            op = structured_transform_d.TileUsingForOp(op, sizes=sizes).tiled_linalg_op
        structured_transform_d.VectorizeOp(op, None if last is None else [1] * (ndims - 1) + [last])

    def fold_empty_slices(self, func: str) -> None:
        """A slice of a ``tensor.empty`` in ``func`` becomes a ``tensor.empty`` of the slice's
        shape (``transform.apply_patterns.tensor.fold_tensor_empty``): a tile's own buffer."""
        with ir.InsertionPoint(transform_d.ApplyPatternsOp(self.func(func)).patterns):
            tensor_transform_d.ApplyFoldTensorEmptyPatternsOp()

    def cleanup(self, func: ir.Value, merge_slices: bool = True) -> None:
        """Canonicalize and CSE ``func``; with ``merge_slices``, also merge consecutive
        ``tensor.extract_slice`` / ``insert_slice`` pairs (``peel_partial`` passes False: see
        there)."""
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            if merge_slices:
                tensor_transform_d.ApplyMergeConsecutiveInsertExtractSlicePatternsOp()
            transform_d.ApplyCanonicalizationPatternsOp()
        transform_d.ApplyCommonSubexpressionEliminationOp(func)

    def run(self) -> None:
        for b in self.model.blocks:
            check_tileable(self.model, b)
        # GPU-bound blocks (and their inits and caches) are emitted by gpu_script
        blocks = [b for b in self.model.blocks if not gpu_owned(self.model, b)]
        gpu = GpuEmitter(self)
        for b in self.model.primary_blocks():
            if is_gpu_block(self.model, b):
                self.op_handles[b.id] = gpu.emit(b)
                self.funcs_gpu.add(b.func)
            else:
                self.emit_block(b)
        # consumers first: a producer of an attached block is fused after it, into its tiles
        for b in sorted((b for b in blocks if b.compute_at is not None and b.kind == "compute"),
                        key=lambda b: b.attach_order):
            self.emit_attached(b)
        emit_cache_reads(self)
        for b in blocks:
            if b.kind == "compute" and any(lp.kind == "vectorized" for lp in b.loops):
                h = self.op_handles[b.id]
                if "conv" in b.op_name or "pooling" in b.op_name:
                    # 2-D windows vectorize as 1-D ones: decompose the unit-size tile first
                    h = structured_transform_d.DecomposeOp(h).transformed
                # a partial tile (imperfect split, dynamic extent) has a dynamic shape: the loop
                # around it is peeled (full tiles, static) where it can be, else the tile is
                # vectorized with masks at the full tile's sizes
                sizes, last = None, None
                if b.partial_dims():
                    h, sizes = self.peel_partial(b, h)
                    if b.cache_reads:   # a packed partial tile is read with masks
                        self.masked_funcs.add(b.func)
                    if sizes is not None:
                        self.masked_funcs.add(b.func)
                        last = sizes[b.info.out_dims[-1]] if b.info.out_dims and \
                            b.info.out_dims[-1] is not None else None
                # peeled: the op's copies (main tiles, edge) each sit in a loop of their own
                each = bool(b.partial_dims()) and sizes is None
                scope = None      # an mmt4d's register tile: the loop around its k loop
                if b.op_name == "linalg.mmt4d":
                    self.unit_reduction_loops.setdefault(b.func, []).append(
                        transform_d.GetParentOp(any_op(), h, deduplicate=each).result)
                if b.op_name == "linalg.mmt4d" and sizes is None:
                    scope = transform_d.GetParentOp(any_op(), transform_d.GetParentOp(
                        any_op(), h, deduplicate=each).result, deduplicate=each).result
                    vectorize_unit_tile(h, each)
                else:
                    # nd_extract: a gather's tensor.extract (ops.take) becomes contiguous
                    # transfer reads or vector.gather; ops without one are unaffected
                    v = structured_transform_d.VectorizeOp(h, sizes, vectorize_nd_extract=True)
                    v.operation.attributes["create_named_contraction"] = ir.UnitAttr.get()
                self.vectorize_tiles(b, scope, last, each)
                self.vectorized_funcs.add(b.func)
        fused_ids = {blk.loops[p].id for blk, pos, _ in self.coalesce for p in pos}
        for b in blocks:
            for k, v in b.annotations.items():
                # AVX2_TRANSPOSE_ATTR directs the vector lowering below: no op attribute
                if b.id in self.op_handles and k != AVX2_TRANSPOSE_ATTR:
                    transform_d.AnnotateOp(self.op_handles[b.id], k, param=param_constant(v))
            self.annotate_loops(b, lambda lp: lp.id not in fused_ids)
        avx2_funcs = {b.func for b in blocks if b.annotations.get(AVX2_TRANSPOSE_ATTR)}
        for fname in sorted(self.vectorized_funcs):
            merges = self.merges.get(fname, ())
            for m in merges:
                # the V partial results of an rfactor, summed as a tree (lower_vectors)
                structured_transform_d.VectorizeOp(m)
            vectorize_split(self, fname)
            lower_vectors(self.func(fname), self.unit_reduction_loops.get(fname, ()),
                          fname in self.masked_funcs, tree_reductions=bool(merges),
                          avx2_transposes=fname in avx2_funcs)
        for fname in sorted(set(self.funcs) - self.vectorized_funcs):
            self.cleanup(self.funcs[fname])
        for b in blocks:
            # innermost first: unrolling a loop consumes the handles of the loops nested in it
            for lp in reversed(b.loops):
                if lp.unroll is None or lp.extent == 1:
                    continue   # an extent-1 loop produces no loop op: nothing to unroll
                h = self.loop_handles.get(lp.id)
                if h is None:
                    raise ScheduleError(f"unroll: loop of '{b.name}' was not materialized")
                loop_transform_d.LoopUnrollOp(h, factor=lp.unroll or lp.extent)
        for blk, positions, outer in self.coalesce:
            fused = loop_transform_d.LoopCoalesceOp(any_op(), outer).transformed
            for p in blk.group(positions[0]):
                self.loop_handles[blk.loops[p].id] = fused
        for b in blocks:
            self.annotate_loops(b, lambda lp: lp.id in fused_ids)

    def annotate_loops(self, b: Block, which) -> None:
        done = set()
        for lp in b.loops:
            h = self.loop_handles.get(lp.id)
            if h is None or not which(lp) or id(h) in done:
                continue
            done.add(id(h))
            for k, v in lp.annotations.items():
                transform_d.AnnotateOp(h, k, param=param_constant(v))


def emit_transform_script(model: LoopNestModel, context: ir.Context,
                          design_space: bool = False) -> TransformScript:
    """Build the transform module realizing ``model`` in the payload's ``context``.

    Parameters
    ----------
    model : LoopNestModel
        A schedule's loop-nest model (``sch.model``); read only.
    context : ir.Context
        The payload's context.
    design_space : bool
        Sampled tile sizes become knobs without a decision.

    Returns
    -------
    TransformScript
        With ``design_space``, sampled tile sizes are ``transform.tune.knob`` ops without
        ``selected``: the stochastic schedule's design space (the interpreter refuses to run it
        until every knob has a decision).

    Raises
    ------
    ScheduleError
        If the script does not verify (with the diagnostics and the script).
    """
    ctx = context
    with ctx, ir.Location.unknown():
        mod = ir.Module.create()
        mod.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        with ir.InsertionPoint(mod.body):
            seq = transform_d.NamedSequenceOp(
                "__transform_main", [any_op()], [],
                arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
            with ir.InsertionPoint(seq.body):
                _Emitter(model, seq.bodyTarget, design_space).run()
                transform_d.YieldOp([])
        try:
            mod.operation.verify()
        except ir.MLIRError as e:
            raise ScheduleError(f"emit: the transform script does not verify:\n{diagnostics(e)}\n{mod}") from None
    return TransformScript(mod, ctx)


def apply_transform_script(payload: Module, script: TransformScript) -> Module:
    """Apply ``script`` to a copy of ``payload`` with the transform interpreter.

    Raises
    ------
    ScheduleError
        With the interpreter's diagnostics (e.g. a fusion or vectorization that failed).
    """
    out = payload.clone()
    # the interpreter's fusions print their containing loop into a remark before each fusion:
    # printing without verifying first is a third of the schedule stage (ir.llvm_options)
    with out.context, ir.Location.unknown(), printing_assumes_verified():
        try:
            transform_interpreter.apply_named_sequence(out.operation, script.entry, script.module)
        except ir.MLIRError as e:
            raise ScheduleError(f"applying the schedule failed:\n{diagnostics(e)}") from None
        except ValueError as e:
            raise ScheduleError(f"applying the schedule failed:\n{e}") from None
    return out.verify()
