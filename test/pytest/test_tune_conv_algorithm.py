"""The algorithm of each convolution (direct, im2col, Winograd F(2x2, 3x3) / F(4x4, 3x3)) is a
decision of the tuner: a record that chooses Winograd is replayed by ``compile(database=)``
(the ``algorithm`` step marks the convolution, the ``winograd`` step rewrites it) and the
result matches PyTorch; without such a record the default compile is unchanged; a real tune of
a 2-convolution net measures the candidates in their units and compiles to PyTorch's result."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlc_mlir as mlc
from mlc_mlir.ir.module import CONV_ALGORITHM_ATTR, CONV_DIRECT, CONV_IM2COL
from mlc_mlir.schedule.rules.conv_strategy import decided_algorithm
from mlc_mlir.target import host_target
from mlc_mlir.tune import MeasureResult, TuningRecord
from mlc_mlir.tune.conv_algorithm import extract_algorithm_tasks


def two_convs():
    """Two 3x3 convolutions with biases and relus (float32, NCHW); the module, input, torch net."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 8, 12, 12)
    return mlc.from_torch(net, (x,)), x, net


class PreferWinograd:
    """An executor whose timings make the Winograd F(4x4, 3x3) candidates of the algorithm
    tasks, and the whole model with a record choosing it (the model check), take ``ratio`` of the
    time of the rest (every other candidate, schedules included, takes 1 ms)."""

    max_workers = 1
    shares_files = False

    def __init__(self, ratio):
        self.ratio = ratio

    def measure(self, inputs, timeout_s):
        for i, inp in enumerate(inputs):
            fast = f"{CONV_ALGORITHM_ATTR} = 4 : i64" in inp.module or any(
                decided_algorithm(mlc.Trace.from_json(TuningRecord.from_json(r).trace)) == 4
                for r in inp.records)
            yield i, MeasureResult(((self.ratio if fast else 1.0),) * inp.repeat)

    def close(self):
        pass


def test_algorithm_candidates_follow_the_winograd_option():
    mod, _, _ = two_convs()
    tgt = host_target()
    tasks = extract_algorithm_tasks(mod, tgt, None)
    assert len(tasks) == 2
    for t in tasks:   # 12 x 12 maps: F(2x2, 3x3), window-local, is the default (36 GEMM rows)
        assert t.candidates == (CONV_DIRECT, CONV_IM2COL, 2, 4) and t.default == 2
        assert decided_algorithm(mlc.Trace.from_json(t.trace_for(4))) == 4
        assert decided_algorithm(mlc.Trace.from_json(t.trace_for(t.default))) is None
    assert all(t.candidates == (CONV_DIRECT, CONV_IM2COL) and t.default in (CONV_DIRECT, CONV_IM2COL)
               for t in extract_algorithm_tasks(mod, tgt, False))


def test_a_tie_keeps_the_default_algorithm(tmp_path):
    """Winograd 1% faster (within the database's 2% tie tolerance): the default stays."""
    mod, _, _ = two_convs()
    db = mlc.tune(mod, trials=8, work_dir=str(tmp_path / "t"), executor=PreferWinograd(0.99), progress=False)
    tkey = host_target().key()
    assert all(db.best(a.task.workload, tkey).is_default for a in extract_algorithm_tasks(mod, host_target(), None))


def test_a_record_choosing_winograd_is_replayed_and_matches_torch(tmp_path):
    mod, x, net = two_convs()
    db = mlc.tune(mod, trials=10, work_dir=str(tmp_path / "t"), executor=PreferWinograd(0.5), progress=False)
    tkey = host_target().key()
    chosen = [decided_algorithm(mlc.Trace.from_json(db.best(a.task.workload, tkey).trace))
              for a in extract_algorithm_tasks(mod, host_target(), None)]
    assert chosen == [4, 4]
    mlc.compile(mod, database=db, dump_ir=str(tmp_path / "tuned"))
    mlc.compile(mod, dump_ir=str(tmp_path / "default"))
    tuned = (tmp_path / "tuned" / "01-layout.mlir").read_text()
    default = (tmp_path / "default" / "01-layout.mlir").read_text()
    # the records' F(4x4, 3x3) (36 transformed points) replaces the default F(2x2, 3x3) (16)
    assert tuned.count("winograd_input\"") == 2 and "tensor<36x16x16xf32>" in tuned
    assert default.count("winograd_input\"") == 2 and "tensor<36x" not in default
    want = net(x).detach().numpy()
    for exe in (mlc.compile(mod, database=db), mlc.compile(mod)):
        np.testing.assert_allclose(exe(x.numpy()), want, rtol=1e-4, atol=1e-4)


def test_real_tune_of_two_convolutions_matches_torch(tmp_path):
    mod, x, net = two_convs()
    db = mlc.tune(mod, trials=8, work_dir=str(tmp_path / "t"), progress=False, timeout_s=60)
    recs = [r for r in db.records() if not r.final]
    assert len(recs) == 8 and all(r.ok for r in recs), [r.error for r in recs]
    tasks = extract_algorithm_tasks(mod, host_target(), None)
    assert {r.workload for r in recs} == {t.task.workload for t in tasks}   # 2 x 4 candidates
    np.testing.assert_allclose(mlc.compile(mod, database=db)(x.numpy()), net(x).detach().numpy(),
                               rtol=1e-4, atol=1e-4)
