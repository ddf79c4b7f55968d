"""Emission: a Schedule's loop-nest model -> a transform-dialect script, and its application.

The script is built with the MLIR Python builders (``transform.structured.*``,
``transform.loop.*``, ``transform.tune.knob``) as ``transform.named_sequence
@__transform_main`` in a module with ``transform.with_named_sequence``, so that upstream
``mlir-opt --transform-preload-library=transform-library-paths=s.mlir --transform-interpreter``
applies it to the exported payload with the same result as ``sch.mod``.

Per block, outermost loop first: each materialized loop is one tiling op that tiles only its
dim, with the tile size (step) being the product of the inner loops' extents of the same dim:
``parallel``/``bind`` -> ``structured.tile_using_forall``, serial -> ``structured.tile_using_for``.
Loops inside a vectorized loop stay in the op, which ``structured.vectorize`` turns into vector
ops; trailing loops already in the op's dim order are left to ``convert-linalg-to-loops``.
Attached blocks (``compute_at``, ``decompose_reduction``) are fused with
``structured.fuse_into_containing_op`` into each enclosing loop; ``reverse_compute_at`` tiles
the epilogue with the producer's outer loops and fuses the producer into them.
"""

from __future__ import annotations

from typing import Dict, List

from .._mlir import (ir, loop_transform_d, structured_transform_d, tensor_transform_d, transform_d,
                     transform_interpreter, tune_transform_d, vector_transform_d)
from ..errors import ScheduleError
from ..ir import dtypes
from ..ir.module import Module, OP_NAME_ATTR, diagnostics
from .loop_nest import Block

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


def _any():
    return transform_d.AnyOpType.get()


def _param_type():
    return transform_d.ParamType.get(ir.IntegerType.get_signless(64))


class _Emitter:
    def __init__(self, sch, root: ir.Value, design_space: bool = False):
        self.sch = sch
        self.design_space = design_space
        self.root = root
        self.funcs: Dict[str, ir.Value] = {}
        self.loop_handles: Dict[int, ir.Value] = {}      # model loop id -> handle
        self.loop_kinds: Dict[int, str] = {}
        self.op_handles: Dict[int, ir.Value] = {}        # block id -> current op handle
        self.vectorized_funcs = set()
        self.coalesce = []                                 # (block, positions, outer loop handle)
        self.pads = []                                     # (func, pad handle, loops to hoist)

    # ---------------------------------------------------------------- matching
    def func(self, name: str) -> ir.Value:
        if name not in self.funcs:
            self.funcs[name] = structured_transform_d.MatchOp(
                _any(), self.root, ops=ir.ArrayAttr.get([ir.StringAttr.get("func.func")]),
                op_attrs=ir.DictAttr.get({"sym_name": ir.StringAttr.get(name)})).result
        return self.funcs[name]

    def match(self, blk: Block) -> ir.Value:
        return structured_transform_d.MatchOp(
            _any(), self.func(blk.func),
            op_attrs=ir.DictAttr.get({OP_NAME_ATTR: ir.StringAttr.get(blk.name)})).result

    # ---------------------------------------------------------------- sizes and knobs
    def tile_size(self, blk: Block, pos: int):
        """Static step of loops[pos], or a knob param when a sampled factor determines it."""
        step = blk.step(pos)
        lp = blk.loops[pos]
        inner = [q for q in blk.loops[pos + 1:] if q.dim == lp.dim]
        if not any(q.annotations.get("sampled") for q in inner + [lp]):
            return step
        level = sum(1 for q in blk.loops[:pos] if q.dim == lp.dim) + 1
        extent = blk.dims[lp.dim].extent
        options = [d for d in range(1, extent + 1) if extent % d == 0]
        name = f"{blk.name}.{blk.dims[lp.dim].name}.tile{level}"
        selected = None if self.design_space else ir.IntegerAttr.get(ir.IntegerType.get_signless(64), step)
        return tune_transform_d.KnobOp(_param_type(), name, options, selected=selected).result

    def sizes(self, blk: Block, positions: List[int], ndims: int, dim_map=None):
        sizes = [0] * ndims
        for p in positions:
            d = blk.loops[p].dim if dim_map is None else dim_map[blk.loops[p].dim]
            sizes[d] = self.tile_size(blk, p)
        return sizes

    # ---------------------------------------------------------------- tiling
    def tile(self, op: ir.Value, blk: Block, positions: List[int], ndims: int, dim_map=None,
             fuse_producers: bool = False):
        lp = blk.loops[positions[0]]
        sizes = self.sizes(blk, positions, ndims, dim_map)
        if blk.rfactor is not None and blk.loops[positions[0]].id == blk.rfactor[0]:
            t = structured_transform_d.TileReductionUsingForOp(
                [_any()], _any(), _any(), _any(), op, tile_sizes=sizes)
            op, loops = t.split_op, [t.for_op]
        elif fuse_producers:
            # tile and fuse the init (linalg.fill) through the loop's destination
            t = structured_transform_d.FuseOp(op, tile_sizes=sizes,
                                              use_forall=lp.kind == "parallel")
            op, loops = t.transformed, list(t.loops)
        elif lp.kind in ("parallel", "bound"):
            t = structured_transform_d.TileUsingForallOp(op, tile_sizes=sizes)
            op, loops = t.tiled_op, [t.forall_op]
            if lp.kind == "bound":
                # GPU axes, x first, in dim order (mapped by gpu-map-parallel-loops in the CUDA
                # pipeline; upstream's convert-parallel-loops-to-gpu reads only its own mapping)
                axes = ",".join(blk.loops[p].thread for p in sorted(positions, key=lambda q: blk.loops[q].dim))
                transform_d.AnnotateOp(loops[0], "mlc.bind", param=_param(axes))
        else:
            t = structured_transform_d.TileUsingForOp(op, sizes=sizes)
            op, loops = t.tiled_linalg_op, list(t.loops)
        for p in positions:
            self.loop_handles[blk.loops[p].id] = loops[0]
            self.loop_kinds[blk.loops[p].id] = "forall" if lp.kind in ("parallel", "bound") else "for"
        if len(loops) > 1 and lp.kind not in ("parallel", "bound"):
            # a fused serial group: coalesced at the end (coalescing invalidates nested handles)
            self.coalesce.append((blk, positions, loops[0]))
        return op

    def materialized_prefix(self, blk: Block, start: int) -> int:
        """Index where the loops left inside the op begin (vectorized or trailing plain loops)."""
        n = len(blk.loops)
        for p in range(start, n):
            if blk.loops[p].kind == "vectorized":
                return p
        pinned = self.pinned_loops()
        s, last_dim = n, None
        for p in range(n - 1, start - 1, -1):
            lp = blk.loops[p]
            plain = (lp.kind == "serial" and lp.unroll is None and not (set(lp.annotations) - {"sampled"})
                     and lp.id not in pinned and blk.step(p) == 1
                     and not (blk.rfactor and lp.id in blk.rfactor))
            if not plain or (last_dim is not None and lp.dim >= last_dim):
                break
            s, last_dim = p, lp.dim
        return s

    def bound_group(self, blk: Block, p: int, stop: int) -> List[int]:
        """Consecutive loops bound to the same kind of GPU axis (blocks or threads) over distinct
        dims: one multi-dim ``scf.forall`` (the grid or the thread block)."""
        kind = blk.loops[p].thread.split(".")[0]
        group, dims = [p], {blk.loops[p].dim}
        q = p + 1
        while q < stop and blk.loops[q].kind == "bound" and blk.loops[q].thread.split(".")[0] == kind \
                and blk.loops[q].dim not in dims:
            group.append(q)
            dims.add(blk.loops[q].dim)
            q += 1
        return group

    def pinned_loops(self):
        out = set()
        for b in self.sch._blocks.values():
            out.update(x for x in (b.compute_at, b.reverse_compute_at) if x is not None)
        return out

    def emit_loops(self, blk: Block, op: ir.Value, start: int = 0) -> ir.Value:
        ndims = len(blk.dims)
        stop = self.materialized_prefix(blk, start)
        init_pos = blk.loop_index(blk.decomposed_at) if blk.decomposed_at is not None else 0
        if start == 0:
            op = self.maybe_pad(blk, op, -1)
        p = start
        while p < stop:
            lp = blk.loops[p]
            group = self.sch._group(blk, p)
            if lp.kind == "bound":
                group = self.bound_group(blk, p, stop)
            if lp.extent == 1 and len(group) == 1:
                p += 1
                continue
            op = self.tile(op, blk, group, ndims, fuse_producers=p < init_pos)
            for q in group:
                op = self.maybe_pad(blk, op, q)
            p = group[-1] + 1
        return op

    def pad_position(self, blk: Block, operand: int) -> int:
        """Where a cache_read of ``operand`` packs: right inside the innermost materialized loop
        over a parallel dim that indexes the operand (its innermost tile, e.g. a 32-wide panel of
        B in a matmul); -1 when no such loop is materialized (pad the whole op)."""
        dims = set(self.sch._info[(blk.func, blk.name)]["operand_dims"][operand])
        stop = self.materialized_prefix(blk, 0)
        best = -1
        for p in range(stop):
            lp = blk.loops[p]
            if lp.dim in dims and blk.dims[lp.dim].kind == "parallel" and lp.extent > 1:
                best = p
        return best

    def maybe_pad(self, blk: Block, op: ir.Value, pos: int) -> ir.Value:
        for idx, _, cid in blk.cache_reads:
            if self.pad_position(blk, idx) == pos:
                op = self.pad(blk, op, idx, cid, pos)
        for idx, _ in blk.cache_writes:
            if self.pad_position(blk, idx) == pos:
                op = structured_transform_d.PadOp(
                    op, padding_values=self.zeros(blk), padding_dimensions=list(range(len(blk.dims))),
                    nofold_flags=[1 if i == idx else 0 for i in range(len(blk.operand_shapes))],
                    copy_back_op="linalg.copy").padded
        return op

    def zeros(self, blk: Block) -> list:
        out = []
        for dt in self.sch._info[(blk.func, blk.name)]["dtypes"]:
            t = dtypes.to_ir_type(dt)
            out.append(ir.FloatAttr.get(t, 0.0) if dtypes.is_float(dt) else ir.IntegerAttr.get(t, 0))
        return out

    def pad(self, blk: Block, op: ir.Value, idx: int, cid: int, pos: int) -> ir.Value:
        """``structured.pad`` with ``nofold`` on operand ``idx`` (a packed copy of its tile)."""
        zeros = self.zeros(blk)
        nofold = [1 if i == idx else 0 for i in range(len(zeros))]
        pad = structured_transform_d.PadOp(
            op, padding_values=zeros, padding_dimensions=list(range(len(blk.dims))),
            nofold_flags=nofold, copy_back_op="none")
        cache = self.sch._blocks[cid]
        n = 0
        if cache.compute_at is not None:
            ca = blk.loop_index(cache.compute_at)
            n = sum(1 for q in blk.loops[ca + 1:pos + 1] if q.id in self.loop_handles)
        operand_pad = transform_d.GetProducerOfOperand(_any(), pad.padded, idx).result
        # the packed tile: the operand's extent along each of its dims inside loop `pos`
        tile = [_prod(q.extent for q in blk.loops[pos + 1:] if q.dim == d)
                for d in self.sch._info[(blk.func, blk.name)]["operand_dims"][idx]]
        self.pads.append((blk.func, operand_pad, n, tile))
        return pad.padded

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
            f = structured_transform_d.FuseIntoContainingOp(producer, h)
            producer = f.fused_op
        return producer

    def owner_of_loop(self, loop_id: int) -> Block:
        for b in self.sch._blocks.values():
            if any(lp.id == loop_id for lp in b.loops):
                return b
        raise ScheduleError(f"emit: loop {loop_id} has no block")

    # ---------------------------------------------------------------- blocks
    def emit_block(self, blk: Block) -> None:
        consumers = sorted((b for b in self.sch._blocks.values()
                            if b.reverse_compute_at is not None
                            and self.owner_of_loop(b.reverse_compute_at) is blk),
                           key=lambda b: b.annotations["_attach_order"])
        op = self.match(blk)
        if not consumers:
            self.op_handles[blk.id] = self.emit_loops(blk, op)
            return
        target = {b.reverse_compute_at for b in consumers}
        if len(target) != 1:
            raise ScheduleError(f"reverse_compute_at: consumers of '{blk.name}' are attached to "
                                "different loops; attach them to the same loop")
        pos = blk.loop_index(target.pop())
        root = consumers[-1]
        out_dims = self.sch._info[(blk.func, blk.name)]["out_dims"]
        dim_map = {d: r for r, d in enumerate(out_dims)}
        rop = self.match(root)
        ndims = len(root.dims)
        p = 0
        while p <= pos:
            group = self.sch._group(blk, p)
            if blk.loops[p].extent > 1 or len(group) > 1:
                rop = self.tile(rop, blk, group, ndims, dim_map)
            p = group[-1] + 1
        handles = self.enclosing_handles(blk, blk.loops[pos].id)
        for c in reversed(consumers[:-1]):
            self.op_handles[c.id] = self.fuse_into(self.match(c), handles)
        op = self.fuse_into(op, handles)
        self.op_handles[root.id] = rop
        self.op_handles[blk.id] = self.emit_loops(blk, op, pos + 1)

    def emit_attached(self, blk: Block) -> None:
        owner = self.owner_of_loop(blk.compute_at)
        handles = self.enclosing_handles(owner, blk.compute_at)
        self.op_handles[blk.id] = self.fuse_into(self.match(blk), handles)

    def emit_cache_reads(self) -> None:
        """Hoist each packing out of the loops inside its compute_at loop (``hoist_pad``, after
        merging slices and canonicalizing as it requires) and vectorize the packing copy."""
        for func in sorted({p[0] for p in self.pads}):
            self.cleanup(self.func(func))
        for func, pad, n, tile in self.pads:
            if n:
                pad = structured_transform_d.HoistPadOp(_any(), pad, n).transformed
            structured_transform_d.VectorizeOp(pad, tile)

    def vectorize_rows(self, op: ir.Value, ndims: int) -> None:
        """Vectorize an init or epilogue tile one row at a time (tile all but the last dim by 1):
        vectorizing a whole tile at once makes ``vector<RxC>`` values that unroll into huge code."""
        if ndims > 1:
            op = structured_transform_d.TileUsingForOp(op, sizes=[1] * (ndims - 1) + [0]).tiled_linalg_op
        structured_transform_d.VectorizeOp(op)

    def cleanup(self, func: ir.Value) -> None:
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            tensor_transform_d.ApplyMergeConsecutiveInsertExtractSlicePatternsOp()
            transform_d.ApplyCanonicalizationPatternsOp()
        transform_d.ApplyCommonSubexpressionEliminationOp(func)

    def run(self) -> None:
        blocks = list(self.sch._blocks.values())
        primary = [b for b in blocks if b.kind == "compute" and b.compute_at is None
                   and b.reverse_compute_at is None]
        for b in primary:
            self.emit_block(b)
        for b in blocks:
            if b.compute_at is not None and b.kind == "compute":
                self.emit_attached(b)
        self.emit_cache_reads()
        for b in blocks:
            if b.kind == "compute" and any(lp.kind == "vectorized" for lp in b.loops):
                h = self.op_handles[b.id]
                if "conv" in b.op_name or "pooling" in b.op_name:
                    # 2-D windows vectorize as 1-D ones: decompose the unit-size tile first
                    h = structured_transform_d.DecomposeOp(h).transformed
                v = structured_transform_d.VectorizeOp(h)
                v.operation.attributes["create_named_contraction"] = ir.UnitAttr.get()
                for a in blocks:
                    if a.kind == "init" and a.parent == b.id and b.decomposed_at is not None:
                        self.vectorize_rows(self.match(a), len(self.sch._info[(a.func, a.name)]["dims"]))
                    if a.reverse_compute_at is not None and self.owner_of_loop(a.reverse_compute_at) is b:
                        self.vectorize_rows(self.op_handles[a.id], len(a.dims))
                self.vectorized_funcs.add(b.func)
        fused_ids = {blk.loops[p].id for blk, pos, _ in self.coalesce for p in pos}
        for b in blocks:
            for k, v in b.annotations.items():
                if b.id in self.op_handles and not k.startswith("_"):
                    transform_d.AnnotateOp(self.op_handles[b.id], k, param=_param(v))
            self.annotate_loops(b, lambda lp: lp.id not in fused_ids)
        for fname in sorted(self.vectorized_funcs):
            self.lower_vectors(self.func(fname))
        for fname in sorted(set(self.funcs) - self.vectorized_funcs):
            self.cleanup(self.funcs[fname])
        for b in blocks:
            for lp in b.loops:
                if lp.unroll is None:
                    continue
                h = self.loop_handles.get(lp.id)
                if h is None:
                    raise ScheduleError(f"unroll: loop of '{b.name}' was not materialized")
                loop_transform_d.LoopUnrollOp(h, factor=lp.unroll or lp.extent)
        for blk, positions, outer in self.coalesce:
            fused = loop_transform_d.LoopCoalesceOp(_any(), outer).transformed
            for p in positions:
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
                if k not in ("fused_group", "sampled"):
                    transform_d.AnnotateOp(h, k, param=_param(v))

    def lower_vectors(self, func: ir.Value) -> None:
        """Fold tensor slices into vector transfers, hoist loop-invariant subsets (the C tile
        becomes a vector iter_arg of the reduction loop, kept in registers), then lower
        contractions to outer products (FMAs). No canonicalization after the lowering: MLIR 22's
        canonicalizer scalarizes the rows of the accumulator (benchmarks/recipe/NOTES.md)."""
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            tensor_transform_d.ApplyFoldTensorSubsetOpsIntoVectorTransfersPatternsOp()
            transform_d.ApplyCanonicalizationPatternsOp()
        transform_d.ApplyCommonSubexpressionEliminationOp(func)
        loops = structured_transform_d.MatchOp(
            _any(), func, ops=ir.ArrayAttr.get([ir.StringAttr.get("scf.for")])).result
        loop_transform_d.HoistLoopInvariantSubsetsOp(loops)
        p = transform_d.ApplyPatternsOp(func)
        with ir.InsertionPoint(p.patterns):
            vector_transform_d.ApplyLowerContractionPatternsOp(
                lowering_strategy=vector_transform_d.VectorContractLowering.OuterProduct)
            vector_transform_d.ApplyLowerMultiReductionPatternsOp(
                lowering_strategy=vector_transform_d.VectorMultiReductionLowering.InnerParallel)
            vector_transform_d.ApplyTransferPermutationPatternsOp()
            vector_transform_d.ApplyLowerOuterProductPatternsOp()


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _param(v) -> ir.Value:
    if isinstance(v, bool):
        attr = ir.BoolAttr.get(v)
    elif isinstance(v, int):
        attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    elif isinstance(v, float):
        attr = ir.FloatAttr.get(ir.F64Type.get(), v)
    else:
        attr = ir.StringAttr.get(v)
    return transform_d.ParamConstantOp(transform_d.AnyParamType.get(), attr).result


def emit_transform_script(sch, design_space: bool = False) -> TransformScript:
    """Build the transform module of Schedule ``sch`` in its payload's context.

    With ``design_space``, sampled tile sizes become ``transform.tune.knob`` ops without
    ``selected``: the stochastic schedule's design space (the interpreter refuses to run it until
    every knob has a decision)."""
    ctx = sch._orig.context
    with ctx, ir.Location.unknown():
        mod = ir.Module.create()
        mod.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        with ir.InsertionPoint(mod.body):
            seq = transform_d.NamedSequenceOp(
                "__transform_main", [_any()], [],
                arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}])
            with ir.InsertionPoint(seq.body):
                _Emitter(sch, seq.bodyTarget, design_space).run()
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
    with out.context, ir.Location.unknown():
        try:
            transform_interpreter.apply_named_sequence(out.operation, script.entry, script.module)
        except ir.MLIRError as e:
            raise ScheduleError(f"applying the schedule failed:\n{diagnostics(e)}") from None
        except ValueError as e:
            raise ScheduleError(f"applying the schedule failed:\n{e}") from None
    return out.verify()
