"""The elementwise epilogue of a convolution's GEMM (``layout_passes.epilogue_reshape`` moves
it onto the GEMM's shape; ``schedule_mmt4d`` runs it on each register tile of the packed GEMM
when K is one block): ResNet bottleneck chains compared with ``torch.nn.functional.conv2d`` on 1
and 2 threads, the epilogues in the GEMM's unit (the dumped ``02-tasks.mlir``) and, where K is
one block, inside the GEMM's loop nest (the dumped ``03-schedule.mlir``)."""

import os

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ir
from mlc_mlir.ir.walk import function_body_ops
from mlc_mlir.schedule.rules.conv_strategy import prefers_im2col
from mlc_mlir.target import host_target

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _parse(dump_dir, stage):
    return mlc.Module.parse(open(os.path.join(dump_dir, stage)).read())


def _ops_by_task(dump_dir):
    """``{task: [(op name, mlc.name)]}`` of the ``02-tasks.mlir`` dump (ops marked ``mlc.task``)."""
    mod = _parse(dump_dir, "02-tasks.mlir")
    tasks = {}
    with mod.context:
        for op in function_body_ops(mod):
            if "mlc.task" in op.attributes:
                name = ir.StringAttr(op.attributes["mlc.name"]).value if "mlc.name" in op.attributes else ""
                tasks.setdefault(ir.StringAttr(op.attributes["mlc.task"]).value, []).append((op.name, name))
    return tasks


def _loop_nests(dump_dir, func):
    """Top-level loop ops (``scf.forall`` / ``scf.for``) of ``func`` in the ``03-schedule.mlir`` dump."""
    mod = _parse(dump_dir, "03-schedule.mlir")
    with mod.context:
        (f,) = [f for f in mod.func_ops() if ir.StringAttr(f.attributes["sym_name"]).value == func]
        return [op.operation.name for op in f.regions[0].blocks[0].operations
                if op.operation.name in ("scf.forall", "scf.for")]


def _bottlenecks(size, c, mid, rng):
    """Two ResNet bottlenecks (1x1 reduce, 3x3, 1x1 expand + residual, relus) after a 3x3 stem,
    as an mlc module and the torch reference function."""
    w0 = rng.standard_normal((c, 8, 3, 3)).astype(np.float32) * 0.1
    w1 = rng.standard_normal((mid, c, 1, 1)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((mid, mid, 3, 3)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((c, mid, 1, 1)).astype(np.float32) * 0.1
    b1, b2, b3 = (rng.standard_normal(n).astype(np.float32) for n in (mid, mid, c))
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 8, size, size))
        r = ops.relu(ops.conv2d(x, w0, padding=1))
        y = ops.relu(ops.conv2d(r, w1, b1))
        y = ops.relu(ops.conv2d(y, w2, b2, padding=1))
        y = ops.relu(ops.add(ops.conv2d(y, w3, b3), r))
        f.output(ops.relu(ops.add(ops.conv2d(ops.relu(ops.conv2d(y, w1, b1)), w3, b3), y)))
    t = {k: torch.from_numpy(v) for k, v in dict(w0=w0, w1=w1, w2=w2, w3=w3, b1=b1, b2=b2, b3=b3).items()}

    def ref(xn):
        r = F.relu(F.conv2d(torch.from_numpy(xn), t["w0"], padding=1))
        y = F.relu(F.conv2d(F.relu(F.conv2d(r, t["w1"], t["b1"])), t["w2"], t["b2"], padding=1))
        y = F.relu(F.conv2d(y, t["w3"], t["b3"]) + r)
        return F.relu(F.conv2d(F.relu(F.conv2d(y, t["w1"], t["b1"])), t["w3"], t["b3"]) + y).numpy()
    return bb.finish(), ref


@pytest.mark.parametrize("size, c, mid", [(14, 64, 32), (28, 64, 32), (7, 512, 128)])
def test_gemm_epilogues_fuse_into_the_gemm_and_match_torch(size, c, mid, tmp_path):
    """Where a 1x1 convolution takes the GEMM path (:func:`prefers_im2col`), its bias add, the
    residual add and the relu run in the GEMM's unit unless its result is padded for a 3x3
    convolution, and inside the GEMM's single loop nest (no nest of their own); numerically
    torch on 1 and 2 threads."""
    rng = np.random.default_rng(5)
    mod, ref = _bottlenecks(size, c, mid, rng)
    xn = rng.standard_normal((1, 8, size, size)).astype(np.float32)
    want = ref(xn)
    for threads in (1, 2):
        dump = str(tmp_path / f"ir{threads}")
        np.testing.assert_allclose(mlc.compile(mod, threads=threads, dump_ir=dump)(xn), want, rtol=1e-4, atol=1e-4)
    gemm = prefers_im2col(host_target(), (1, size, size, mid), (1, 1, mid, c), (1, size, size, c), "float32")
    if not gemm:
        pytest.skip("the host's rule keeps this 1x1 convolution direct")
    units = _ops_by_task(dump)
    # the 1x1 expand convolutions' bias add, residual add and relu (conv2d_3, conv2d_5 shares its
    # unit); conv2d_1's relu is padded for the 3x3 and keeps its own unit
    (task, unit), = [(t, u) for t, u in units.items() if ("linalg.generic", "add") in u]
    assert {"linalg.mmt4d", "linalg.matmul"} & {o for o, _ in unit}, unit
    assert ("linalg.generic", "relu_3") in unit and ("linalg.generic", "conv2d_3.bias_add") in unit, unit
    if "linalg.mmt4d" in {o for o, _ in unit}:
        assert len(_loop_nests(dump, task)) == 1, _loop_nests(dump, task)
