"""CUDA lowering: a GPU-scheduled module (``bind``) to PTX or a cubin, without needing a GPU.

Stages (each inspectable; a failure is a ``PipelineError``, never a process abort):

0. ``pad``        -- each ``tensor.pad`` outside the kernels (conv2d's padding) becomes a fill
   and a copy kernel (:mod:`.cuda_pads`);
1. ``bufferize``  -- ``transform.bufferization.one_shot_bufferize`` (function boundaries,
   ``memcpy_op = "linalg.copy"``: device code cannot call ``memrefCopy``);
2. ``map``        -- per kernel (a top-level ``scf.forall`` mapped to ``#gpu.block``):
   ``transform.gpu.map_forall_to_blocks {generate_gpu_launch}`` then
   ``transform.gpu.map_nested_forall_to_threads`` with the block size read from the thread-level
   foralls; the latter puts a ``gpu.barrier`` after each thread-level forall (cooperative copies
   into shared memory, then compute);
3. ``workgroup``  -- each ``memref.alloca`` in ``#gpu.address_space<workgroup>`` inside a
   ``gpu.launch`` becomes a workgroup attribution of the launch (``.shared`` in PTX; NVPTX
   cannot allocate shared memory on the stack);
4. ``buffers``    -- :func:`.cuda_buffers.clean_kernel_buffers`: staging copies straight into
   shared memory, thread accumulators kept in registers across the ``k`` loop, no device
   ``malloc``;
   then tensor cores for matmuls annotated ``mlc.mma_sync`` (:func:`_mma_sync`);
5. ``host``       -- with host code: :func:`.cuda_host.host_memory` (weights resident on the
   device, one slab of device memory per function, a copying entry per public function);
6. ``lower``      -- ``pipelines/cuda.pipeline`` (kernel outlining, ``gpu-async-region``: one
   stream per call, ``gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90 cubin-format=isa}``), the
   chip and format substituted from the target; with host code, the resident memory's load
   and unload functions become global constructor and destructor.

``compile_to_ptx`` returns the PTX of every kernel module; ``check_ptx`` runs ``ptxas``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Tuple

from .._mlir import (bufferization_transform_d, gpu_d, gpu_transform_d, ir,
                     nvgpu_transform_d, structured_transform_d, transform_interpreter)
from ..ir.transform_values import any_op, build_script
from ..errors import PipelineError
from ..ir.module import Module, diagnostics
from ..ir.walk import find_ops, function_body_ops
from ..ir.pass_pipeline import run_pass_pipeline
from ..runtime.cuda import DEVICE_SUFFIX
from ..target import WARP_SIZE, cuda_arch
from .cuda_buffers import clean_kernel_buffers, drop_self_copies
from .cuda_host import host_memory, register_resident
from .cuda_pads import materialize_host_pads
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
    foralls (a linear mapping counts all its threads on x)."""
    dims = {"x": 1, "y": 1, "z": 1}

    def visit(op):
        op = op.operation
        if op.name == "scf.forall":
            m = _mapping(op)
            if m and m[0].startswith("#gpu.warp"):   # whole warps: x counts threads, y/z warps
                counts = _trip_counts(op)
                if any(_LINEAR in a for a in m):
                    total = WARP_SIZE
                    for c in counts:
                        total *= c
                    dims["x"] = max(dims["x"], total)
                else:
                    # a warp is WARP_SIZE threads along x, also when no warp loop is on x
                    dims["x"] = max(dims["x"], WARP_SIZE)
                    for a, c in zip(m, counts):
                        ax = a[len("#gpu.warp<"):-1]
                        dims[ax] = max(dims[ax], c * (WARP_SIZE if ax == "x" else 1))
            elif m and m[0].startswith("#gpu.thread"):
                counts = _trip_counts(op)
                if any(_LINEAR in a for a in m):
                    total = 1
                    for c in counts:
                        total *= c
                    dims["x"] = max(dims["x"], total)
                else:
                    for a, c in zip(m, counts):
                        ax = a[len("#gpu.thread<"):-1]
                        dims[ax] = max(dims[ax], c)
        return ir.WalkResult.ADVANCE

    forall.walk(visit, ir.WalkOrder.PRE_ORDER)
    if dims["x"] * dims["y"] * dims["z"] > 1024:
        raise PipelineError(f"cuda map: a kernel needs {dims['x']}x{dims['y']}x{dims['z']} threads "
                            "per block; CUDA allows at most 1024")
    return [dims["x"], dims["y"], dims["z"]]


def _kernels(module: Module) -> List[Tuple[int, List[int]]]:
    """Mark each top-level block-mapped forall ``mlc.kernel = i``; returns ``(i, block dims)``."""
    out = []
    with module.context:
        for op in function_body_ops(module):
            if op.name == "scf.forall" and any(a.startswith("#gpu.block") for a in _mapping(op)):
                i = len(out)
                op.attributes["mlc.kernel"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
                out.append((i, _block_dims(op)))
    return out


def _map(module: Module, kernels) -> Module:
    def build(root):
        for i, dims in kernels:
            forall = structured_transform_d.MatchOp(
                any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get("scf.forall")]),
                op_attrs=ir.DictAttr.get({"mlc.kernel": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), i)})).result
            launch = gpu_transform_d.MapForallToBlocks(any_op(), forall, generate_gpu_launch=True).result
            gpu_transform_d.MapNestedForallToThreads(any_op(), launch, block_dims=dims)

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


#: Annotation (``sch.annotate(block, MMA_SYNC, True)``) asking for tensor cores.
MMA_SYNC = "mlc.mma_sync"

#: (A, B, C) operand shapes and element type ``nvgpu.mma.sync`` takes for one warp's matmul.
MMA_SHAPES = {((16, 16), (16, 8), (16, 8)): "f16"}


def _mma_sync(module: Module) -> Module:
    """Tensor cores: each ``linalg.matmul`` annotated :data:`MMA_SYNC` (computed by a whole warp:
    its loops bound to ``warpIdx``) becomes ``nvgpu.mma.sync`` (``m16n8k16``) through
    ``transform.nvgpu.rewrite_matmul_as_mma_sync``, which inserts the per-lane fragment loads and
    stores. Returns ``module`` when nothing is annotated.

    Raises
    ------
    PipelineError
        If an annotated matmul's tile is not one ``mma.sync`` shape of :data:`MMA_SHAPES`.
    """
    found = [op for op in find_ops(module, "linalg.matmul") if MMA_SYNC in op.attributes]
    if not found:
        return module
    with module.context:
        for op in found:
            ts = [ir.MemRefType(v.type) for v in op.operands]
            key = tuple(tuple(t.shape) for t in ts)
            if MMA_SHAPES.get(key) != str(ts[0].element_type) or \
                    len({str(t.element_type) for t in ts}) != 1:
                raise PipelineError(f"cuda mma.sync: a matmul annotated {MMA_SYNC} has operands "
                                    f"{[str(t) for t in ts]}; expected one warp tile of "
                                    f"{list(MMA_SHAPES.items())} (bind 16x8 tiles to warpIdx, "
                                    "split k by 16)")
        attr = found[0].attributes[MMA_SYNC]

    def build(root):
        mm = structured_transform_d.MatchOp(
            any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get("linalg.matmul")]),
            op_attrs=ir.DictAttr.get({MMA_SYNC: attr})).result
        nvgpu_transform_d.RewriteMatmulAsMmaSyncOp(mm)

    return _apply(module, build, "mma.sync")


def _check_host(module: Module) -> None:
    """Refuse computation left outside the kernels (it would run on the host, on device data)."""
    left = []

    def visit(op):
        op = op.operation
        if op.name == "gpu.launch":
            return ir.WalkResult.SKIP
        if op.name.startswith("linalg.") or op.name == "scf.forall":
            name = op.attributes["mlc.name"] if "mlc.name" in op.attributes else op.name
            left.append(str(name))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if left:
        raise PipelineError(f"cuda: {left} would run on the host: bind their loops to blockIdx/"
                            "threadIdx (or use the default GPU schedule, mlc.compile(target='cuda'))")


def _num_results(module: Module) -> Dict[str, int]:
    """Results per function (before ``buffer-results-to-out-params`` turns them into trailing
    out-params)."""
    with module.context:
        return {ir.StringAttr(f.attributes["sym_name"]).value:
                len(ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value).results)
                for f in module.func_ops()}


def lower_to_gpu(module: Module, chip: str = "sm_90", fmt: str = "isa",
                 host_code: bool = False) -> Module:
    """Stages 1-5 of the module docstring: ``gpu.binary`` ops with PTX (``fmt="isa"``) or a
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
    buf = _apply(materialize_host_pads(module, _apply, cuda_arch(chip)), _bufferize, "bufferize")
    outputs = _num_results(buf)
    buf = run_pass_pipeline(buf, "builtin.module(buffer-results-to-out-params{hoist-static-allocs "
                            "modify-public-functions},canonicalize,cse)", "cuda out-params")
    buf = drop_self_copies(buf)   # in-place insert_slice (the pad kernels' copy) leaves them
    kernels = _kernels(buf)
    if not kernels:
        raise PipelineError("cuda: no GPU kernel was produced; bind loops to blockIdx/threadIdx first")
    mapped = _map(buf, kernels)
    _check_host(mapped)
    mapped = run_pass_pipeline(_workgroup_allocations(mapped), "builtin.module(canonicalize,cse)",
                               "cuda buffers")   # one value per view: the rewrites compare them
    mapped = _mma_sync(clean_kernel_buffers(mapped, cuda_arch(chip)))
    if host_code:
        mapped = host_memory(mapped, outputs, DEVICE_SUFFIX)
    text = load_pipeline("cuda").replace("cubin-chip=sm_90", f"cubin-chip={chip}") \
        .replace("cubin-format=isa", f"cubin-format={fmt}")
    lowered = run_pass_pipeline(mapped, text, "cuda lower")
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


def check_ptx(ptx: str, arch: str = "sm_90") -> None:
    """Assemble ``ptx`` with ``ptxas -arch=<arch>``.

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
        cmd = [exe, f"-arch={arch}", src, "-o", os.path.join(d, "kernel.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            keep = tempfile.mkstemp(prefix="mlc-kernel-", suffix=".ptx")[1]
            shutil.copy(src, keep)
            raise PipelineError(f"cuda: ptxas rejected the PTX:\n{proc.stderr}\nreproduce with: "
                                f"ptxas -arch={arch} {keep}")
