"""Tensor cores in the CUDA lowering: each ``linalg.matmul`` annotated :data:`MMA_SYNC` (the
GPU rules' :func:`~mlc_mlir.schedule.rules.gpu_mma.schedule_matmul_mma`; computed by a
whole warp, its loops bound to ``warpIdx``) becomes ``nvgpu.mma.sync`` (``m16n8k16``), at
memref level after the thread mapping, in one of two ways chosen by its tile:

* one ``mma.sync`` tile (``16x16 * 16x8``): ``transform.nvgpu.rewrite_matmul_as_mma_sync``,
  which loads each lane's fragment elements and stores ``C`` after every step;
* a warp tile of several (``16a x 16c * 16c x 8b``): the vector path of MLIR's tensor-core
  pipeline (IREE's LLVMGPU ``MmaSync`` pipeline; upstream
  ``mlir/test/Conversion/VectorToGPU/vector-to-mma-ops-mma-sync.mlir``):

  1. ``transform.structured.vectorize`` of the kernel's matmul (as a ``vector.contract``),
     fill and copies (the staging copies into shared memory become 16-byte vector transfers);
  2. ``transform.apply_patterns.gpu.unroll_vectors_subgroup_mma`` to ``16 x 8 x 16``;
  3. the ``fold_memref_alias_ops`` patterns then
     ``transform.structured.hoist_redundant_vector_transfers``: the ``C`` fragments become
     ``iter_args`` of the ``k`` loop, in registers, stored once after it; the zero fill is
     forwarded into them (:func:`forward_constant_fills`);
  4. ``convert-vector-to-gpu{use-nvgpu=true}`` (on each warp kernel alone, outlined with
     ``transform.loop.outline`` and inlined back: the pass fails on any scalar float op in
     its scope): a fragment read from shared memory becomes ``nvgpu.ldmatrix``
     (``ldmatrix.sync.aligned.m8n8.x4``; ``B``'s transposed), the contraction
     ``nvgpu.mma.sync``;
  5. ``transform.nvgpu.create_async_groups``: each 16-byte copy from global into shared memory
     becomes ``nvgpu.device_async_copy`` (``cp.async.cg.shared.global``), the copies of a k
     step one group waited before the barrier that publishes it;
  6. with ``stages > 1`` (the annotation's value): ``transform.memref.multibuffer`` of the
     panels (``stages`` buffers each) before vectorizing, and
     ``transform.nvgpu.pipeline_shared_memory_copies`` (``depth = stages``, epilogue peeled)
     of the ``k`` loop after step 5, whose ``cp.async.wait_group`` then leaves the newest
     ``stages - 1`` groups in flight: the panels of the next k steps load while the warps
     compute; both panels' copies of a step are one group (:func:`drop_copy_barriers`); a
     loop the pipeliner cannot take stays as it is (:func:`_pipelinable`);
  7. ``nvgpu-optimize-shared-memory``: the panels' 16-byte columns are XOR-swizzled by row
     (writes and ``ldmatrix`` reads alike), so the eight rows an ``ldmatrix`` reads fall in
     different banks (unswizzled, a 32 x 128 f16 ``B`` panel's rows are 256 bytes apart: all
     in the same four banks). It takes ``memref.alloc``: the panels' allocations are hoisted
     out of the ``k`` loop as such first (:func:`_hoist_shared_buffers`).
"""

from __future__ import annotations

from typing import Callable, List

from .._mlir import (gpu_transform_d, ir, loop_transform_d, memref_d, memref_transform_d,
                     nvgpu_transform_d, structured_transform_d, transform_d, vector_transform_d)
from ..errors import PipelineError
from ..ir.emitters import i64_attr
from ..ir.module import Module
from ..ir.pass_pipeline import run_pass_pipeline
from ..ir.transform_values import any_op, param_constant
from ..ir.walk import find_ops
from .cuda_buffers import in_workgroup

#: Annotation asking for tensor cores: ``sch.annotate(block, MMA_SYNC, stages)`` (an int: the
#: depth of the copy pipeline of a warp tile, :func:`_stages`; ``True``: 1).
MMA_SYNC = "mlc.mma_sync"

#: One ``mma.sync`` instruction's ``(m, n, k)`` and its element type (PTX
#: ``mma.sync.aligned.m16n8k16`` with f16 operands and accumulators).
MMA_SHAPE = (16, 8, 16)
MMA_ELEMENT = "f16"


def _match(root: ir.Value, names: List[str], attrs=None) -> ir.Value:
    return structured_transform_d.MatchOp(
        any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names]),
        op_attrs=attrs).result


def _tile(op: ir.Operation):
    """``(m, n, k)`` of an annotated matmul's memref operands, checked against
    :data:`MMA_SHAPE` and :data:`MMA_ELEMENT`.

    Raises
    ------
    PipelineError
        If the operands are not f16 or the tile is not a multiple of the ``mma.sync`` shape.
    """
    ts = [ir.MemRefType(v.type) for v in op.operands]
    (m, k), (k2, n), (m2, n2) = (tuple(t.shape) for t in ts)
    tm, tn, tk = MMA_SHAPE
    if {str(t.element_type) for t in ts} != {MMA_ELEMENT} or (m, n, k) != (m2, n2, k2) or \
            m % tm or n % tn or k % tk:
        raise PipelineError(f"cuda mma.sync: a matmul annotated {MMA_SYNC} has operands "
                            f"{[str(t) for t in ts]}; expected {MMA_ELEMENT} warp tiles whose "
                            f"(m, n, k) are multiples of {MMA_SHAPE} (bind warp tiles to "
                            "warpIdx, split k by a multiple of 16)")
    return m, n, k


def _splat(v: ir.Value) -> bool:
    op = v.owner
    return isinstance(op, ir.OpView) and op.operation.name == "arith.constant" and \
        isinstance(op.operation.attributes["value"], ir.DenseElementsAttr) and \
        ir.DenseElementsAttr(op.operation.attributes["value"]).is_splat


def _key(op: ir.Operation, base: int, count: int):
    """``(buffer, indices, vector type)`` of a vector transfer: operands ``base`` (the buffer)
    and the ``count`` indices after it."""
    vals = list(op.operands)
    vec = op.results[0].type if op.name == "vector.transfer_read" else vals[0].type
    return (vals[base],) + tuple(vals[base + 1:base + 1 + count]) + (str(vec),)


def forward_constant_fills(module: Module) -> Module:
    """Store-to-load forwarding of a kernel's constant fill into its accumulators: in each
    ``gpu.launch`` body, a ``vector.transfer_read`` of a tile that a ``vector.transfer_write``
    of a splat constant wrote earlier in the same block (same buffer, indices and vector type;
    no other write to the buffer between them but such constant tiles; barriers between them
    order other threads only) takes the constant; a constant write whose tile the block
    writes again later becomes dead once nothing in the kernel reads the buffer, and goes.
    The warp's ``C`` fragments then start as zeros in registers, instead of every lane of the
    warp storing the whole zero tile to global memory (``linalg.fill`` vectorized per warp)
    and loading it back. Upstream ``vector::transferOpflowOpt`` does the same within a block
    but stops at barriers and has no transform op or pass."""
    with module.context:
        for launch in find_ops(module, "gpu.launch"):
            body = [op.operation for op in launch.regions[0].blocks[0].operations]
            fills, forwarded = {}, []
            for op in body:
                if op.name == "vector.transfer_write":
                    n = ir.MemRefType(op.operands[1].type).rank
                    key = _key(op, 1, n)
                    if _splat(op.operands[0]):
                        fills[key] = op
                    else:   # another write to the buffer: forget its fills
                        fills = {k: v for k, v in fills.items() if k[0] != key[0]}
                elif op.name == "vector.transfer_read" and len(op.operands) == 2 + \
                        ir.MemRefType(op.operands[0].type).rank:
                    key = _key(op, 0, ir.MemRefType(op.operands[0].type).rank)
                    if key in fills:
                        op.results[0].replace_all_uses_with(fills[key].operands[0])
                        forwarded.append(fills[key])
                        op.erase()
            for w in forwarded:
                buf = w.operands[1]
                users = [u.owner.operation for u in buf.uses]
                rank = ir.MemRefType(buf.type).rank
                later = [u for u in users if u.name == "vector.transfer_write" and u != w and
                         _key(u, 1, rank) == _key(w, 1, rank)]
                if later and all(u.name == "vector.transfer_write" for u in users):
                    w.erase()
    return module


#: Marks the kernel of the i-th warp-tile matmul (``mlc.mma_warp = i``).
_WARP = "mlc.mma_warp"
#: Name of the private functions the warp kernels are outlined into for ``convert-vector-to-gpu``.
_OUTLINED = "__mlc_mma_kernel"


def _stages(attr: ir.Attribute) -> int:
    """The pipeline depth an :data:`MMA_SYNC` annotation asks for: its value when an integer
    (``sch.annotate(block, MMA_SYNC, 2)``), else 1."""
    if isinstance(attr, ir.IntegerAttr) and ir.IntegerType(attr.type).width > 1:
        return max(1, ir.IntegerAttr(attr).value)
    return 1


def _hoist_shared_buffers(launch: ir.Operation, index: int) -> None:
    """Each ``memref.alloca`` in workgroup memory in ``launch`` (a staging panel, allocated in
    the ``k`` loop's body by bufferization) becomes one ``memref.alloc`` at the top of the
    kernel: the form ``transform.memref.multibuffer`` and ``nvgpu-optimize-shared-memory``
    rewrite (the workgroup attributions are made from it afterwards). The launch is marked
    :data:`_WARP` ``= index``."""
    launch.attributes[_WARP] = i64_attr(index)
    body = launch.regions[0].blocks[0]
    for op in [op for op in find_ops(launch, "memref.alloca") if in_workgroup(op.results[0])]:
        with ir.InsertionPoint.at_block_begin(body), op.location:
            new = memref_d.AllocOp(op.results[0].type, [], [])
        op.results[0].replace_all_uses_with(new.result)
        op.erase()


#: Ops a copy section (:func:`drop_copy_barriers`) may hold besides its transfers: no memory
#: effects, no regions.
_PURE = ("arith.", "affine.apply", "ub.poison", "vector.extract", "vector.insert",
         "vector.broadcast", "vector.shape_cast", "gpu.thread_id", "gpu.lane_id")


def _copy_section(ops: List[ir.Operation]):
    """The workgroup buffers ``ops`` write, when ``ops`` only copy global memory into
    workgroup memory (``vector.transfer_read`` of a global buffer, ``vector.transfer_write``
    into a workgroup buffer, :data:`_PURE` ops); None otherwise."""
    written = set()
    for op in ops:
        if op.name == "vector.transfer_read" and not in_workgroup(op.operands[0]):
            continue
        if op.name == "vector.transfer_write" and in_workgroup(op.operands[1]):
            written.add(op.operands[1])
            continue
        if not op.name.startswith(_PURE) or len(op.regions):
            return None
    return written


def _entered_after_barrier(block: ir.Block, ops: List[ir.Operation], cuts: List[int]) -> bool:
    """Whether every path into ``block``'s first op comes from a ``gpu.barrier`` with only
    :data:`_PURE` ops since: the kernel's body, or an ``scf.for`` body that ends with a barrier
    (the previous iteration) and whose loop follows one (the first iteration)."""
    parent = block.owner.operation
    if parent.name == "gpu.launch":
        return True
    if parent.name != "scf.for" or not cuts or cuts[-1] != len(ops) - 2:
        return False
    outer = [op.operation for op in parent.block.operations]
    for op in reversed(outer[:outer.index(parent)]):
        if op.name == "gpu.barrier":
            return True
        if not op.name.startswith(_PURE) or len(op.regions):
            return False
    return False


def drop_copy_barriers(module: Module) -> int:
    """Erase each ``gpu.barrier`` between two copy sections (:func:`_copy_section`) that write
    different workgroup buffers: no thread reads workgroup memory on either side, so the
    barrier orders nothing (``gpu.map_nested_forall_to_threads`` puts one after every
    thread-level forall, here after the ``A`` panel's copy). A section runs from the previous
    barrier of the block to the next one; the first barrier of a block qualifies only where
    every path into the block passes a barrier with no other op since
    (:func:`_entered_after_barrier`). The two panels' copies then make one ``cp.async`` group
    per ``k`` step. Upstream's ``transform.apply_patterns.gpu.eliminate_barriers`` keeps this
    barrier (global reads against the workgroup writes). Returns how many were erased."""
    erased = 0
    with module.context:
        for launch in find_ops(module, "gpu.launch"):
            blocks = [op.block for op in find_ops(launch, "gpu.barrier")]
            for block in {id(b): b for b in blocks}.values():
                ops = [op.operation for op in block.operations]
                cuts = [i for i, op in enumerate(ops) if op.name == "gpu.barrier"]
                for n, i in enumerate(cuts[:-1]):   # the next barrier bounds the section after
                    if n == 0 and not _entered_after_barrier(block, ops, cuts):
                        continue
                    lo = cuts[n - 1] + 1 if n else 0
                    before = _copy_section(ops[lo:i])
                    after = _copy_section(ops[i + 1:cuts[n + 1]])
                    if before and after and not before & after:
                        ops[i].erase()
                        erased += 1
                        break   # one per block and pass: the sections changed
    return erased


def _inline_outlined(module: Module) -> Module:
    """Undo ``transform.loop.outline`` of the warp kernels (:data:`_OUTLINED` ``i`` functions, each
    called once from an ``scf.execute_region``): the callee's body moves to the call site, its
    arguments replaced by the call's operands; the region and the function go. (The inliner
    refuses a body with a ``gpu.launch``.)"""
    with module.context:
        funcs = {}
        for f in find_ops(module, "func.func"):
            name = ir.StringAttr(f.attributes["sym_name"]).value
            if name.startswith(_OUTLINED):
                funcs[name] = f
        for call in find_ops(module, "func.call"):
            f = funcs.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
            if f is None:
                continue
            anchor = call.parent if call.parent.name == "scf.execute_region" else call
            body = f.regions[0].blocks[0]
            for arg, v in zip(body.arguments, call.operands):
                arg.replace_all_uses_with(v)
            for op in [op.operation for op in body.operations][:-1]:   # all but func.return
                op.move_before(anchor)
            anchor.erase()
        for f in funcs.values():
            f.erase()
    return module


def _trip_count(loop: ir.Operation) -> int:
    """Iterations of an ``scf.for`` with constant bounds (0 when a bound is not constant)."""
    vals = []
    for v in list(loop.operands)[:3]:
        op = v.owner
        if not isinstance(op, ir.OpView) or op.operation.name != "arith.constant":
            return 0
        vals.append(ir.IntegerAttr(op.operation.attributes["value"]).value)
    lb, ub, step = vals
    return max(0, -(-(ub - lb) // step))


def _pipelinable(module: Module, i: int, depth: int) -> bool:
    """Whether the ``i``-th warp kernel has one ``scf.for`` of constant bounds and at least
    ``depth`` iterations whose body issues all its ``cp.async`` copies and groups before its
    first barrier, with no nested region: ``transform.nvgpu.pipeline_shared_memory_copies``
    asserts (aborts the process) on a barrier before a copy in MLIR 22, and fails on the rest
    whatever its failure mode."""
    with module.context:
        attr = i64_attr(i)
        loops = [op for launch in find_ops(module, "gpu.launch")
                 if _WARP in launch.attributes and launch.attributes[_WARP] == attr
                 for op in find_ops(launch, "scf.for")]
        if len(loops) != 1 or _trip_count(loops[0]) < depth:
            return False
        ops = [op.operation for op in loops[0].regions[0].blocks[0].operations]
        if any(len(op.regions) for op in ops):
            return False
        names = [op.name for op in ops]
        copies = [j for j, n in enumerate(names) if n.startswith("nvgpu.device_async_c")]
        barriers = [j for j, n in enumerate(names) if n == "gpu.barrier"]
        return bool(copies) and (not barriers or max(copies) < min(barriers))


def _launch(root: ir.Value, i: int) -> ir.Value:
    """The ``gpu.launch`` of the ``i``-th warp-tile matmul (:func:`_hoist_shared_buffers`)."""
    return _match(root, ["gpu.launch"], ir.DictAttr.get({_WARP: i64_attr(i)}))


def _patterns(target: ir.Value, add: Callable) -> None:
    """``transform.apply_patterns`` to ``target`` with the pattern op ``add()`` makes and the
    canonicalization patterns, then CSE."""
    p = transform_d.ApplyPatternsOp(target)
    with ir.InsertionPoint(p.patterns):
        add()
        transform_d.ApplyCanonicalizationPatternsOp()
    transform_d.ApplyCommonSubexpressionEliminationOp(target)


def lower_mma_sync(module: Module, apply: Callable) -> Module:
    """Rewrite the annotated matmuls of ``module`` (module docstring); ``apply(module, build,
    stage)`` runs a transform script built by ``build(root)``
    (:func:`mlc_mlir.pipeline.cuda._apply`). Returns ``module`` when nothing is annotated.

    Raises
    ------
    PipelineError
        If an annotated matmul's tile is not made of ``mma.sync`` tiles (:func:`_tile`), or a
        transform or pass fails.
    """
    found = [op for op in find_ops(module, "linalg.matmul") if MMA_SYNC in op.attributes]
    if not found:
        return module
    with module.context:
        single = [_tile(op) == MMA_SHAPE for op in found]
        for op, one in zip(found, single):   # tell the two forms apart in the script
            op.attributes[MMA_SYNC] = ir.StringAttr.get("tile") if one else \
                i64_attr(_stages(op.attributes[MMA_SYNC]))

    if any(single):
        module = apply(module, lambda root: nvgpu_transform_d.RewriteMatmulAsMmaSyncOp(_match(
            root, ["linalg.matmul"], ir.DictAttr.get({MMA_SYNC: ir.StringAttr.get("tile")}))),
            "mma.sync")
    if all(single):
        return module
    with module.context:
        launches = []   # one per warp kernel, with its pipeline depth
        for op in find_ops(module, "linalg.matmul"):   # the warp tiles (in a new module)
            if MMA_SYNC in op.attributes and isinstance(op.attributes[MMA_SYNC], ir.IntegerAttr):
                launch = op.parent
                while launch.name != "gpu.launch":
                    launch = launch.parent
                _hoist_shared_buffers(launch, len(launches))
                launches.append(ir.IntegerAttr(op.attributes[MMA_SYNC]).value)
    # the transform ops below take one kernel each (some refuse several targets)

    def multi_buffer(root):
        for i, d in enumerate(launches):
            if d > 1:
                allocs = transform_d.CastOp(transform_d.OperationType.get("memref.alloc"),
                                            _match(_launch(root, i), ["memref.alloc"])).output
                memref_transform_d.MemRefMultiBufferOp(any_op(), allocs, d, skip_analysis=True)

    if any(d > 1 for d in launches):
        module = apply(module, multi_buffer, "mma.sync multi-buffer")

    def vectorize(root):
        for i in range(len(launches)):
            launch = _launch(root, i)
            v = structured_transform_d.VectorizeOp(
                _match(launch, ["linalg.matmul", "linalg.fill", "linalg.copy"]))
            v.operation.attributes["create_named_contraction"] = ir.UnitAttr.get()
            _patterns(launch, lambda: gpu_transform_d.ApplyUnrollVectorsSubgroupMmaOp(*MMA_SHAPE))
            _patterns(launch, memref_transform_d.ApplyFoldMemrefAliasOpsPatternsOp)
            func = transform_d.GetParentOp(any_op(), launch, op_name="func.func").result
            structured_transform_d.HoistRedundantVectorTransfersOp(any_op(), func)

    module = forward_constant_fills(apply(module, vectorize, "mma.sync vectorize"))

    def to_nvgpu(root):
        # the conversion fails on any scalar float op in its scope (other kernels' linalg
        # bodies): it runs on each warp kernel outlined into a private function, inlined after
        for i in range(len(launches)):
            outlined = loop_transform_d.LoopOutlineOp(any_op(), any_op(), _launch(root, i),
                                                      func_name=f"{_OUTLINED}{i}")
            transform_d.AnnotateOp(outlined.function, "sym_visibility",
                                   param=param_constant("private"))
            transform_d.ApplyRegisteredPassOp(any_op(), outlined.function, "convert-vector-to-gpu",
                                              options={"use-nvgpu": True})
            _patterns(_launch(root, i), lambda: vector_transform_d.ApplyTransferToScfPatternsOp(
                max_transfer_rank=1, full_unroll=True))

    module = _inline_outlined(apply(module, to_nvgpu, "mma.sync vector-to-gpu"))
    while drop_copy_barriers(module):
        pass

    def async_copies(root):
        for i in range(len(launches)):
            launch = nvgpu_transform_d.CreateAsyncGroupsOp(any_op(), _launch(root, i),
                                                           bypass_l1=True).result
            _patterns(launch, lambda: vector_transform_d.ApplyLowerTransferPatternsOp(
                max_transfer_rank=1))

    module = apply(module, async_copies, "mma.sync cp.async")
    piped = [i for i, d in enumerate(launches) if d > 1 and _pipelinable(module, i, d)]

    def pipeline(root):
        for i in piped:
            loop = transform_d.CastOp(transform_d.OperationType.get("scf.for"),
                                      _match(_launch(root, i), ["scf.for"])).output
            nvgpu_transform_d.PipelineSharedMemoryCopiesOp(
                transform_d.OperationType.get("scf.for"), loop, launches[i], peel_epilogue=True,
                failure_propagation_mode=transform_d.FailurePropagationMode.Suppress)

    if piped:
        module = apply(module, pipeline, "mma.sync pipeline")
    return run_pass_pipeline(module, "builtin.module(func.func(nvgpu-optimize-shared-memory))",
                             "cuda mma.sync swizzle")
