"""Epilogues of packed GEMMs: an NHWC 1x1 convolution's batch norm, residual add and relu move
into the mmt4d's result shape (``layout_passes.PropagateReshapes``), fuse into its unit and
its register tiles (``schedule_mmt4d``, ``epilogue_at_tile``); numerics vs PyTorch at 1 and 2
threads, and both placements of the epilogue vs the unscheduled unit."""

import numpy as np
import pytest
import torch

import mlc_mlir as mlc
from mlc_mlir.ir.walk import find_ops
from mlc_mlir.schedule.default_rules import apply_default_schedule
from mlc_mlir.target import host_target
from mlc_mlir.tune import extract_tasks
from mlc_mlir.tune.space_rules import default_space, generate, sampled_decisions

TOL = dict(rtol=1e-4, atol=1e-4)


class Bottleneck(torch.nn.Module):
    """A 1x1 convolution, then two 1x1 convolutions with batch norms whose output is added to
    the first one's (ResNet's bottleneck without its 3x3 convolution; the residual is an NHWC
    tensor, as between ResNet's blocks)."""

    def __init__(self, c: int, mid: int):
        super().__init__()
        self.c0 = torch.nn.Conv2d(c, c, 1)
        self.c1, self.b1 = torch.nn.Conv2d(c, mid, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.c2, self.b2 = torch.nn.Conv2d(mid, c, 1, bias=False), torch.nn.BatchNorm2d(c)

    def forward(self, x):
        x = self.c0(x)
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


def bottleneck(c=64, mid=32, hw=12, seed=0):
    torch.manual_seed(seed)
    net = Bottleneck(c, mid).eval()
    with torch.no_grad():
        for bn in (net.b1, net.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    x = torch.randn(1, c, hw, hw)
    return net, x


@pytest.mark.parametrize("threads", [1, 2])
def test_bottleneck_with_fused_epilogues_matches_torch(threads):
    net, x = bottleneck()
    mod = mlc.from_torch(net, (x,))
    got = mlc.compile(mod, threads=threads)(x.numpy())
    np.testing.assert_allclose(got, net(x).detach().numpy(), **TOL)


def test_residual_add_and_relu_join_the_packed_gemm_unit():
    net, x = bottleneck()
    tasks = extract_tasks(mlc.from_torch(net, (x,)))
    gemms = [t for t in tasks if find_ops(t.module, "linalg.mmt4d")]
    assert len(gemms) == 3, [t.name for t in tasks]
    for t in gemms:
        # every elementwise op of the unit (bn, add, relu) runs in the mmt4d's result shape
        shape = find_ops(t.module, "linalg.mmt4d")[0].results[0].type
        generics = find_ops(t.module, "linalg.generic")
        full = [g for g in generics if g.results[0].type.rank == shape.rank]
        assert all(g.results[0].type == shape for g in full), t.name
    # bn + relu in the second GEMM's unit, bn, add and relu in the third's
    assert sorted(sum(g.results[0].type.rank == 4 for g in find_ops(t.module, "linalg.generic"))
                  for t in gemms) == [0, 2, 3], [t.name for t in gemms]


@pytest.mark.parametrize("at_tile", [0, 1])
def test_epilogue_placements_match_the_unscheduled_unit(at_tile):
    net, x = bottleneck(c=32, mid=16, hw=8)
    task = next(t for t in extract_tasks(mlc.from_torch(net, (x,)))
                if find_ops(t.module, "linalg.mmt4d") and len(find_ops(t.module, "linalg.generic")) >= 3)
    target = host_target()
    sch = mlc.Schedule(task.module)
    apply_default_schedule(sch, target, 1)
    kinds = [i.kind for i in sch.trace.insts]
    assert "reverse_compute_at" in kinds
    decisions = sampled_decisions(sch.trace)
    assert decisions[-1] == 1          # the register tile by default (K in one KC block)
    cand = generate(default_space(target, 1), task.module, forced=decisions[:-1] + [at_tile])
    assert sampled_decisions(cand.trace)[-1] == at_tile
    rng = np.random.default_rng(0)
    func = task.module.get_function(task.func_name)
    args = [rng.standard_normal(a.type.shape).astype(np.float32) for a in func.arguments]
    ref = mlc.compile(task.module, schedule="none")(*args)
    np.testing.assert_allclose(mlc.compile(cand.mod)(*args), ref, **TOL)
