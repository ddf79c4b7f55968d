"""CUDA lowering: a GPU-scheduled module (``bind``) to PTX or a cubin, without needing a GPU.

Stages (each inspectable; a failure is a ``PipelineError``, never a process abort):

0. ``fetch``      -- the staged reads of each ``shared`` cache become one copy of their union,
   spread over the block's threads in workgroup memory (:mod:`.cuda_fetch`);
   ``pad``        -- each ``tensor.pad`` outside the kernels (conv2d's padding) becomes a fill
   and a copy kernel (:mod:`.cuda_pads`);
1. ``bufferize``  -- ``transform.bufferization.one_shot_bufferize`` (function boundaries,
   ``memcpy_op = "linalg.copy"``: device code cannot call ``memrefCopy``);
2. ``map``        -- per kernel (a top-level ``scf.forall`` mapped to ``#gpu.block``):
   ``transform.gpu.map_forall_to_blocks {generate_gpu_launch}`` then
   ``transform.gpu.map_nested_forall_to_threads`` with the block size read from the thread-level
   foralls; the latter puts a ``gpu.barrier`` after each thread-level forall (cooperative copies
   into shared memory, then compute); a ``memref.copy`` left between kernels becomes a
   device-to-device ``gpu.memcpy`` (:func:`_device_copies`), and any other op that would touch
   a buffer on the host is refused (:func:`_check_host`); a kernel's threads that never
   share data get no barrier (:func:`_needs_barriers`); then
   :func:`.cuda_shuffle.shuffle_reductions`: the combine of each block-per-row reduction with
   warp shuffles, its partials in registers (one barrier, not one per level);
3. ``buffers``    -- :func:`.cuda_buffers.clean_kernel_buffers`: staging copies straight into
   shared memory, thread accumulators kept in registers across the ``k`` loop, no device
   ``malloc``; then tensor cores for matmuls annotated ``mlc.mma_sync`` (:mod:`.cuda_mma`);
4. ``workgroup``  -- each ``memref.alloca``/``alloc`` in ``#gpu.address_space<workgroup>``
   inside a ``gpu.launch`` becomes a workgroup attribution of the launch (``.shared`` in PTX;
   NVPTX cannot allocate shared memory on the stack); then the matmul's ``A`` panel stored
   ``k``-major, its next panels prefetched into registers (:func:`.cuda_panels.rewrite_panels`),
   and the vector transfers of vectorized kernels lowered to vector loads and stores
   (:func:`.cuda_vectors.lower_transfers`);
5. ``host``       -- with host code: :func:`.cuda_host.host_memory` (weights resident on the
   device, one slab of device memory per function, a copying entry per public function);
6. ``kernels``    -- ``pipelines/cuda_kernels.pipeline`` (loops, kernel outlining); then
   :func:`.cuda_panels.annotate_kernels`: every global buffer argument of a kernel that is a
   device allocation or a caller's buffer gets ``llvm.align`` =
   :data:`~mlc_mlir.runtime.cuda.DEVICE_ALIGNMENT` (the runtime's buffers are aligned so, a
   foreign one is checked), so LLVM proves a thread's
   16-byte accesses aligned and emits ``ld.global.v4`` / ``st.global.v4``; each ``.shared``
   array is aligned to as many bytes; each kernel gets ``nvvm.maxnreg`` (a register budget
   per thread);
7. ``lower``      -- ``pipelines/cuda.pipeline`` (the kernels' private function inlined into its
   entries, ``gpu-async-region``: one stream per call,
   ``gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90 cubin-format=isa}``), the chip and format
   substituted from the target; with host code, the resident memory's load and unload
   functions become global constructor and destructor.

``compile_to_ptx`` returns the PTX of every kernel module; ``check_ptx`` runs ``ptxas``.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Tuple

from .._mlir import (bufferization_transform_d, gpu_d, gpu_transform_d, ir,
                     structured_transform_d, transform_interpreter)
from ..ir.transform_values import any_op, build_script
from ..errors import PipelineError
from ..ir.module import Module, diagnostics
from ..ir.walk import find_ops, function_body_ops
from ..ir.pass_pipeline import run_pass_pipeline
from ..runtime.cuda import DEVICE_SUFFIX
from ..target import WARP_SIZE, cuda_arch
from .cuda_buffers import clean_kernel_buffers, drop_self_copies
from .cuda_fetch import stage_fetches
from .cuda_mma import lower_mma_sync
from .cuda_host import host_memory, register_resident
from .cuda_pads import materialize_host_pads
from .cuda_panels import annotate_kernels, rewrite_panels
from .cuda_vectors import lower_transfers
from .cuda_shuffle import shuffle_reductions
from .registry import load_pipeline

#: Marks a linear thread mapping (``#gpu.thread<linear_dim_0>``).
_LINEAR = "linear_dim_"


def _apply(module: Module, build, stage: str) -> Module:
    """Build a transform script with ``build(root)`` and apply it to a copy of ``module``."""
    out = module.clone()
    with out.context, ir.Location.unknown():
        script, seq = build_script(build)
        try:
            transform_interpreter.apply_named_sequence(out.operation, seq, script)
        except (ir.MLIRError, ValueError) as e:
            msg = diagnostics(e) if isinstance(e, ir.MLIRError) else str(e)
            raise PipelineError(f"cuda {stage}: {msg}\n{script}") from None
    return out


def _bufferize(root: ir.Value) -> None:
    bufferization_transform_d.OneShotBufferizeOp(
        any_op(), root, bufferize_function_boundaries=True, function_boundary_type_conversion=1,
        memcpy_op="linalg.copy")


def _mapping(op: ir.Operation) -> List[str]:
    if "mapping" not in op.attributes:
        return []
    return [str(a) for a in ir.ArrayAttr(op.attributes["mapping"])]


def _trip_counts(op: ir.Operation) -> List[int]:
    ub = ir.DenseI64ArrayAttr(op.attributes["staticUpperBound"])
    lb = ir.DenseI64ArrayAttr(op.attributes["staticLowerBound"])
    st = ir.DenseI64ArrayAttr(op.attributes["staticStep"])
    out = []
    for u, l_, s in zip(ub, lb, st):
        if min(u, l_, s) < 0 or s == 0:   # dynamic bound
            raise PipelineError(f"cuda map: a GPU-mapped scf.forall has dynamic bounds: {op}")
        out.append(-(-(u - l_) // s))
    return out


def _block_dims(forall: ir.Operation) -> List[int]:
    """Threads per block a kernel needs: the largest extent per thread axis over its thread-level
    foralls (a linear mapping counts its threads over the whole block: on x when the other
    foralls give ``y * z`` too few; a warp level counts its warps on y/z and a warp of lanes
    on x)."""
    dims = {"x": 1, "y": 1, "z": 1}
    linear = 1   # most threads of a linearly mapped forall

    for op in find_ops(forall, "scf.forall"):   # a plain loop: _trip_counts may raise
        m = _mapping(op)
        kind = m[0][len("#gpu."):m[0].index("<")] if m else None
        if kind not in ("warp", "thread"):
            continue
        counts = _trip_counts(op)
        lanes = WARP_SIZE if kind == "warp" else 1   # whole warps: x counts threads, y/z warps
        if kind == "warp":   # a warp is WARP_SIZE threads along x, also when no warp loop is on x
            dims["x"] = max(dims["x"], WARP_SIZE)
        if any(_LINEAR in a for a in m):
            linear = max(linear, lanes * math.prod(counts))
        else:
            for a, c in zip(m, counts):
                ax = a[len(f"#gpu.{kind}<"):-1]
                dims[ax] = max(dims[ax], c * (lanes if ax == "x" else 1))

    # a linear mapping numbers the threads of the whole block (x fastest): it needs x*y*z of
    # them, more along x only where the other foralls leave too few
    rest = dims["y"] * dims["z"]
    dims["x"] = max(dims["x"], -(-linear // rest))
    if dims["x"] * dims["y"] * dims["z"] > 1024:
        raise PipelineError(f"cuda map: a kernel needs {dims['x']}x{dims['y']}x{dims['z']} threads "
                            "per block; CUDA allows at most 1024")
    return [dims["x"], dims["y"], dims["z"]]


#: Ops that may sit in a kernel outside its thread-level forall without needing a barrier after
#: it: index arithmetic, views, serial loops (they read and write no memory).
_QUIET = ("affine.apply", "affine.min", "affine.max", "memref.subview", "memref.cast",
          "memref.collapse_shape", "memref.expand_shape", "memref.reinterpret_cast", "scf.for",
          "scf.yield", "scf.forall.in_parallel")


def _needs_barriers(forall: ir.Operation) -> bool:
    """Whether kernel ``forall`` needs the barrier ``map_nested_forall_to_threads`` puts after
    each thread-level forall. It does not when it has exactly one thread-level forall (perhaps
    inside serial loops: a block-strided loop of an elementwise op), no buffer outside global
    memory (shared or private) and nothing but index arithmetic, views and loops around that
    forall: every iteration gives each thread the same tiles of the outputs, which no other
    thread reads or writes, so no barrier orders anything (one barrier per iteration would
    stall the block's warps on the slowest)."""
    threads, other = [], []

    def visit(op):
        op = op.operation
        if op.name == "scf.forall" and _mapping(op) and not _mapping(op)[0].startswith("#gpu.block"):
            threads.append(op)
            return ir.WalkResult.SKIP
        if op != forall and not (op.name in _QUIET or op.name.startswith("arith.")):
            other.append(op.name)
        for r in op.results:
            if isinstance(r.type, ir.MemRefType) and ir.MemRefType(r.type).memory_space is not None:
                other.append(str(r.type))
        return ir.WalkResult.ADVANCE

    forall.walk(visit, ir.WalkOrder.PRE_ORDER)
    if len(threads) != 1:
        return True
    inside = []

    def scan(op):
        op = op.operation
        for r in op.results:
            if isinstance(r.type, ir.MemRefType) and ir.MemRefType(r.type).memory_space is not None:
                inside.append(op.name)
        if op.name.startswith("gpu.") or op.name == "scf.forall" and op != threads[0]:
            inside.append(op.name)
        return ir.WalkResult.ADVANCE

    threads[0].walk(scan, ir.WalkOrder.PRE_ORDER)
    return bool(other or inside)


def _kernels(module: Module) -> List[Tuple[int, List[int], bool]]:
    """Mark each top-level block-mapped forall ``mlc.kernel = i``; returns ``(i, block dims,
    whether it needs barriers)`` (:func:`_needs_barriers`)."""
    out = []
    with module.context:
        for op in function_body_ops(module):
            if op.name == "scf.forall" and any(a.startswith("#gpu.block") for a in _mapping(op)):
                i = len(out)
                op.attributes["mlc.kernel"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
                out.append((i, _block_dims(op), _needs_barriers(op)))
    return out


def _map(module: Module, kernels) -> Module:
    def build(root):
        for i, dims, sync in kernels:
            forall = structured_transform_d.MatchOp(
                any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get("scf.forall")]),
                op_attrs=ir.DictAttr.get({"mlc.kernel": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), i)})).result
            launch = gpu_transform_d.MapForallToBlocks(any_op(), forall, generate_gpu_launch=True).result
            gpu_transform_d.MapNestedForallToThreads(any_op(), launch, block_dims=dims,
                                                     sync_after_distribute=sync)

    return _apply(module, build, "map")


def _workgroup_allocations(module: Module) -> Module:
    """Turn ``memref.alloca`` in workgroup memory inside a ``gpu.launch`` into workgroup
    attributions of the launch (a rewrite with the bindings; upstream has no pass for it)."""
    out = module.clone()
    with out.context, ir.Location.unknown():
        ws = ir.Attribute.parse("#gpu.address_space<workgroup>")  # debt: no builder for it
        for launch in find_ops(out, "gpu.launch"):
            found = []

            def visit(op):
                op = op.operation
                if op.name in ("memref.alloca", "memref.alloc"):
                    t = ir.MemRefType(op.results[0].type)
                    if t.memory_space is not None and t.memory_space == ws:
                        found.append(op)
                return ir.WalkResult.ADVANCE

            launch.walk(visit, ir.WalkOrder.PRE_ORDER)
            if not found:
                continue
            body = launch.regions[0].blocks[0]
            n = ir.IntegerAttr(launch.attributes["workgroup_attributions"]).value \
                if "workgroup_attributions" in launch.attributes else 0
            if len(body.arguments) != 12 + n:
                raise PipelineError("cuda workgroup: a gpu.launch with private attributions or "
                                    "clusters is not supported")
            for op in found:
                arg = body.add_argument(op.results[0].type, ir.Location.unknown())
                op.results[0].replace_all_uses_with(arg)
                op.erase()
            launch.attributes["workgroup_attributions"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), n + len(found))
    return out.verify()


#: Ops that may stay in host code outside the kernels: they compute sizes and views, allocate
#: and order the device work, but never read or write a buffer's elements (which live in device
#: memory: the host would fault on them). ``memref.dealloc`` is not one: the temporaries become
#: device memory in a slab of :func:`.cuda_host.host_memory` (a host ``free`` of it would corrupt
#: the heap).
_HOST_DIALECTS = ("arith.", "index.", "gpu.")
_HOST_OPS = frozenset((
    "func.return", "affine.apply", "ub.poison", "memref.alloc", "memref.get_global",
    "memref.subview", "memref.collapse_shape", "memref.expand_shape", "memref.cast",
    "memref.reinterpret_cast", "memref.view", "memref.dim", "memref.extract_strided_metadata"))


def _check_host(module: Module) -> None:
    """Refuse any op in a function body, outside the kernels, that is not in :data:`_HOST_OPS`
    or of :data:`_HOST_DIALECTS`: a computation (linalg, a loop nest) or an access to a buffer's
    elements (``memref.load``/``store``/``copy``) would run on the host, on device memory."""
    left = []

    def visit(op):
        op = op.operation
        if op.name == "gpu.launch":
            return ir.WalkResult.SKIP
        if op.name not in _HOST_OPS and not op.name.startswith(_HOST_DIALECTS):
            name = op.attributes["mlc.name"] if "mlc.name" in op.attributes else op.name
            left.append(str(name).strip('"'))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    with module.context:
        for f in module.func_ops():
            if not f.is_external:
                for op in f.regions[0].blocks[0].operations:
                    op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if left:
        raise PipelineError(f"cuda: {left} would run on the host, on device memory: bind their "
                            "loops to blockIdx/threadIdx (or use the default GPU schedule, "
                            "mlc.compile(target='cuda'))")


def _device_copies(module: Module) -> Module:
    """Each ``memref.copy`` in a function body (outside the kernels: ``buffer-results-to-out-params``
    copies a result that is a view, e.g. the ``collapse_shape`` of a grouped conv's output, into
    its out-param) becomes a device-to-device ``gpu.memcpy`` on a stream of its own, waited; on the
    host it would be a ``memcpy`` between device pointers. Returns ``module`` when it has none.

    Raises
    ------
    PipelineError
        If a copied buffer is not static with the identity layout (``gpu.memcpy`` copies
        contiguous buffers).
    """
    with module.context:
        if not any(op.name == "memref.copy" for op in function_body_ops(module)):
            return module
    out = module.clone()
    with out.context, ir.Location.unknown():
        tok_t = gpu_d.AsyncTokenType.get()
        for op in [op for op in function_body_ops(out) if op.name == "memref.copy"]:
            src, dst = op.operands[0], op.operands[1]
            for v in (src, dst):
                t = ir.MemRefType(v.type)
                if not t.has_static_shape or t.affine_map != ir.AffineMap.get_identity(t.rank):
                    raise PipelineError(f"cuda host: a copy between buffers of types {src.type} "
                                        f"and {dst.type} outside the kernels; expected static "
                                        "identity-layout memrefs")
            with ir.InsertionPoint(op):
                copy = gpu_d.MemcpyOp(tok_t, [gpu_d.WaitOp(tok_t, []).result], dst, src)
                gpu_d.WaitOp(None, [copy.result])
            op.erase()
    return out.verify()


def _num_results(module: Module) -> Dict[str, int]:
    """Results per function (before ``buffer-results-to-out-params`` turns them into trailing
    out-params)."""
    with module.context:
        return {ir.StringAttr(f.attributes["sym_name"]).value:
                len(ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).results)
                for f in module.func_ops()}


def lower_to_gpu(module: Module, chip: str = "sm_90", fmt: str = "isa",
                 host_code: bool = False) -> Module:
    """Stages 0-6 of the module docstring: ``gpu.binary`` ops with PTX (``fmt="isa"``) or a
    cubin (``fmt="bin"``, needs ``ptxas`` on PATH) for ``chip``, host code in the LLVM dialect.
    With ``host_code`` each public function ``f`` copies its arguments to device buffers and its
    results back, and ``f__device`` runs the kernels on device buffers; the constants the
    kernels read are uploaded once, when the code is loaded, and the buffers between kernels
    live in one slab of device memory per function, all on one stream per call
    (:mod:`.cuda_host`).

    Raises
    ------
    PipelineError
        If no kernel was produced, computation is left on the host, or a stage fails.
    """
    if fmt not in ("isa", "bin", "fatbin"):
        raise PipelineError(f"cuda: format {fmt!r}; expected 'isa', 'bin' or 'fatbin'")
    staged = stage_fetches(module, _apply)
    buf = _apply(materialize_host_pads(staged, _apply, cuda_arch(chip)), _bufferize, "bufferize")
    outputs = _num_results(buf)
    buf = run_pass_pipeline(buf, "builtin.module(buffer-results-to-out-params{hoist-static-allocs "
                            "modify-public-functions},canonicalize,cse)", "cuda out-params")
    buf = drop_self_copies(buf)   # in-place insert_slice (the pad kernels' copy) leaves them
    kernels = _kernels(buf)
    if not kernels:
        raise PipelineError("cuda: no GPU kernel was produced; bind loops to blockIdx/threadIdx first")
    mapped = _device_copies(_map(buf, kernels))
    _check_host(mapped)
    mapped = run_pass_pipeline(shuffle_reductions(mapped), "builtin.module(canonicalize,cse)",
                               "cuda buffers")   # one value per view: the rewrites compare them
    # tensor cores before the workgroup attributions: the shared-memory rewrites
    # (nvgpu-optimize-shared-memory) take memref.alloc
    mapped = _workgroup_allocations(lower_mma_sync(clean_kernel_buffers(mapped, cuda_arch(chip)), _apply))
    mapped = lower_transfers(rewrite_panels(mapped), _apply)
    if host_code:
        mapped = host_memory(mapped, outputs, DEVICE_SUFFIX)
    kernels = annotate_kernels(run_pass_pipeline(mapped, load_pipeline("cuda_kernels"), "cuda kernels"),
                               cuda_arch(chip))
    text = load_pipeline("cuda").replace("cubin-chip=sm_90", f"cubin-chip={chip}") \
        .replace("cubin-format=isa", f"cubin-format={fmt}")
    lowered = run_pass_pipeline(kernels, text, "cuda lower")
    return register_resident(lowered) if host_code else lowered


def compile_to_ptx(module: Module, chip: str = "sm_90") -> Dict[str, str]:
    """Lower ``module`` for CUDA and return ``{kernel module name: PTX text}``.

    Parameters
    ----------
    module : Module
        A scheduled payload (``sch.mod``) whose ops are bound to GPU axes.
    chip : str
        SM architecture (``sm_90``, ``sm_80``).

    Raises
    ------
    PipelineError
        If lowering fails, or no kernel was produced (nothing was bound to GPU axes).
    """
    lowered = lower_to_gpu(module, chip, "isa")
    ptx = {}
    with lowered.context:
        for op in find_ops(lowered, "gpu.binary"):
            name = ir.StringAttr(op.attributes["sym_name"]).value
            for attr in ir.ArrayAttr(op.attributes["objects"]):
                ptx[name] = gpu_d.ObjectAttr(attr).object.decode()
    if not ptx:
        raise PipelineError("cuda: no GPU kernel was produced; bind loops to blockIdx/threadIdx first")
    return ptx


def check_ptx(ptx: str, arch: str = "sm_90", verbose: bool = False) -> str:
    """Assemble ``ptx`` with ``ptxas -arch=<arch>`` (``-v`` with ``verbose``); returns what
    ptxas printed (with ``-v``: registers and spills per kernel).

    Raises
    ------
    PipelineError
        If ``ptxas`` is not on PATH or rejects the PTX (the message has the command to rerun).
    """
    exe = shutil.which("ptxas")
    if exe is None:
        raise PipelineError("cuda: ptxas is not on PATH")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [exe, f"-arch={arch}", *(["-v"] if verbose else []), src, "-o",
               os.path.join(d, "kernel.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            keep = tempfile.mkstemp(prefix="mlc-kernel-", suffix=".ptx")[1]
            shutil.copy(src, keep)
            raise PipelineError(f"cuda: ptxas rejected the PTX:\n{proc.stderr}\nreproduce with: "
                                f"ptxas -arch={arch} {keep}")
        return proc.stdout + proc.stderr
