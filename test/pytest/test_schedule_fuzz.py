"""Fuzz of the CPU schedule rules: every rule kind x derandomized shapes (1, primes, odd
windows, strides, groups) x thread counts x the default rule or a sample of the tuner's design
space, compiled and run in child processes (a schedule that reaches an MLIR assertion aborts
the process, which an ``except`` cannot catch) and compared with PyTorch / numpy. Also: a block whose indexing map linalg tiling cannot slice (a negative
index coefficient) is left to plain loops by the rules and refused with a ScheduleError when a
hand-written schedule would tile it.

Run cases by hand: ``python test/pytest/test_schedule_fuzz.py '[{"kind": "conv2d", ...}]'``.
"""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops, te
from mlc_mlir.target import Target
from mlc_mlir.graph import FuseOps
from mlc_mlir.pipeline.compile import run_stages
from mlc_mlir.pipeline.options import CompileOptions
from mlc_mlir.tune.space_rules import default_space, generate

THREADS = (1, 2, 3, 4)
KINDS = ("matmul", "batch_matmul", "conv2d", "grouped_conv2d", "conv_transpose2d", "pooling",
         "reduction", "elementwise", "take", "te_flip")
PER_KIND = 4


def _case(kind: str, i: int, rng: random.Random) -> dict:
    """Case ``i`` of ``kind``: a plain dict (it crosses to the child as JSON)."""
    ext = lambda: rng.choice([1, 2, 3, 7, 13, 16, 17, 32, 64, 96, 257])
    k = KINDS.index(kind)
    c = {"kind": kind, "threads": THREADS[(i + k) % len(THREADS)], "const": (i + k) % 2 == 1, "seed": i,
         "space": i % 2 == 1}   # odd cases: a sample (seed i) of the tuner's design space
    if kind == "matmul":
        c["shape"] = [ext(), ext(), ext() * 4]
    elif kind == "batch_matmul":
        c["shape"] = [rng.choice([1, 2, 3]), ext(), ext(), ext()]
    elif kind in ("conv2d", "grouped_conv2d", "conv_transpose2d"):
        g = rng.choice([2, 4]) if kind == "grouped_conv2d" else 1
        k = rng.choice([1, 3, 3, 4, 5])
        c.update(n=rng.choice([1, 2]), c=g * rng.choice([1, 3, 8, 32, 64]), f=g * rng.choice([1, 4, 17, 32]),
                 hw=k + rng.choice([0, 3, 12, 28]), k=k, groups=g, stride=rng.choice([1, 1, 2]),
                 pad=rng.choice([0, 1, k // 2]))
    elif kind == "pooling":
        c.update(shape=[rng.choice([1, 2]), rng.choice([1, 3, 16, 64]), rng.choice([7, 12, 17, 32]),
                        rng.choice([7, 12, 32])], k=rng.choice([2, 3]), stride=rng.choice([1, 2]),
                 op=rng.choice(["max", "avg"]))
    elif kind == "reduction":
        c.update(shape=[ext(), ext() * rng.choice([1, 8])], op=rng.choice(["sum", "softmax"]))
    elif kind == "elementwise":
        c.update(shape=[ext(), ext(), ext() * rng.choice([1, 8])], op=rng.choice(["add", "transpose"]))
    elif kind == "take":
        c.update(shape=[ext(), ext() * 4], m=ext())
    elif kind == "te_flip":
        c.update(shape=[ext() * 4, ext() * 8])
    return c


#: Cases that once aborted the process, kept beside the random ones.
REGRESSIONS = {
    # tile_using_forall of the flipped filter's `3 - d3` map: TileCheck asserted
    "conv_transpose2d": [{"kind": "conv_transpose2d", "threads": 2, "const": False, "seed": 0, "space": False,
                          "n": 1, "c": 64, "f": 32, "hw": 32, "k": 4, "groups": 1, "stride": 2, "pad": 1}],
}


def cases(kind: str) -> list:
    """The derandomized cases of ``kind`` (the same on every run) and its regressions."""
    rng = random.Random(f"schedule-fuzz-{kind}")
    return [_case(kind, i, rng) for i in range(PER_KIND)] + REGRESSIONS.get(kind, [])


# ------------------------------------------------------------------ the child: build, compile, run
def _build(c: dict, rs: np.random.RandomState):
    """``(module, inputs, expected)`` of case ``c``; the oracle is PyTorch (convolutions,
    pooling) or numpy."""
    import torch
    import torch.nn.functional as F

    kind = c["kind"]
    bb = mlc.GraphBuilder()
    inputs = []

    def arg(f, name, a):
        """A graph argument (``const`` false) or a constant (true) holding ``a``."""
        if c["const"] and name != "x":
            return a
        inputs.append(a)
        return f.arg(name, a.shape, dtype=str(a.dtype))

    t = lambda a: torch.from_numpy(a).double()
    with bb.function("main") as f:
        if kind == "matmul":
            m, k, n = c["shape"]
            a, b = rs.randn(m, k).astype("f4"), rs.randn(k, n).astype("f4")
            y, want = ops.matmul(arg(f, "x", a), arg(f, "b", b)), a.astype("f8") @ b
        elif kind == "batch_matmul":
            bt, m, k, n = c["shape"]
            a, b = rs.randn(bt, m, k).astype("f4"), rs.randn(bt, k, n).astype("f4")
            y, want = ops.batch_matmul(arg(f, "x", a), arg(f, "b", b)), a.astype("f8") @ b
        elif kind in ("conv2d", "grouped_conv2d"):
            x = rs.randn(c["n"], c["c"], c["hw"], c["hw"] + 1).astype("f4")
            w = rs.randn(c["f"], c["c"] // c["groups"], c["k"], c["k"]).astype("f4")
            y = ops.conv2d(arg(f, "x", x), arg(f, "w", w), strides=c["stride"], padding=c["pad"],
                           groups=c["groups"])
            want = F.conv2d(t(x), t(w), stride=c["stride"], padding=c["pad"], groups=c["groups"]).numpy()
        elif kind == "conv_transpose2d":
            x = rs.randn(c["n"], c["c"], c["hw"], c["hw"] + c["stride"] - 1).astype("f4")
            w = rs.randn(c["c"], c["f"], c["k"], c["k"]).astype("f4")
            pad = min(c["pad"], c["k"] - 1)
            y = ops.conv_transpose2d(arg(f, "x", x), arg(f, "w", w), strides=c["stride"], padding=pad)
            want = F.conv_transpose2d(t(x), t(w), stride=c["stride"], padding=pad).numpy()
        elif kind == "pooling":
            x = rs.randn(*c["shape"]).astype("f4")
            pool, tpool = (ops.max_pool2d, F.max_pool2d) if c["op"] == "max" else (ops.avg_pool2d, F.avg_pool2d)
            y = pool(arg(f, "x", x), c["k"], strides=c["stride"])
            want = tpool(t(x), c["k"], stride=c["stride"]).numpy()
        elif kind == "reduction":
            x = rs.randn(*c["shape"]).astype("f4")
            if c["op"] == "sum":
                y, want = ops.sum(arg(f, "x", x), axis=1), x.astype("f8").sum(1)
            else:
                e = np.exp(x - x.max(1, keepdims=True))
                y, want = ops.softmax(arg(f, "x", x), axis=1), e / e.sum(1, keepdims=True)
        elif kind == "elementwise":
            x = rs.randn(*c["shape"]).astype("f4")
            if c["op"] == "add":
                b = rs.randn(c["shape"][-1]).astype("f4")
                y, want = ops.relu(ops.add(arg(f, "x", x), arg(f, "b", b))), np.maximum(x + b, 0)
            else:
                y, want = ops.transpose(arg(f, "x", x), [2, 0, 1]), x.transpose(2, 0, 1)
        elif kind == "take":
            x = rs.randn(*c["shape"]).astype("f4")
            idx = rs.randint(-c["shape"][0], c["shape"][0], size=(c["m"],)).astype("i8")
            y, want = ops.take(arg(f, "table", x), arg(f, "x", idx)), x[idx]
        elif kind == "te_flip":
            h, w_ = c["shape"]
            x = rs.randn(h, w_).astype("f4")
            xa = arg(f, "x", x)
            y = te.compute((h, w_), lambda i, j: xa[h - 1 - i, w_ - 1 - j] * 2.0, name="flip")
            want = x[::-1, ::-1] * 2
        else:
            raise ValueError(f"unknown case kind {kind!r}")
        f.output(y)
    return bb.finish(), inputs, want


def _fused(mod, target):
    """The module as a tuner samples it: the compiler's layout stage (Winograd on), then the
    units outlined (FuseOps)."""
    _, laid = run_stages(mod, CompileOptions(target=target, winograd=True), until="layout")
    return FuseOps()(laid)


def run_cases(cs: list) -> None:
    """Compile and run each case, one JSON line per case on stdout (``"case"`` printed first,
    so a process that dies names the case it died in)."""
    for c in cs:
        print(json.dumps({"case": c}), flush=True)
        mod, inputs, want = _build(c, np.random.RandomState(c["seed"]))
        try:
            if c["space"]:
                target = Target.host()
                mod = generate(default_space(target, c["threads"]), _fused(mod, target), seed=c["seed"]).mod
            got = mlc.compile(mod, threads=c["threads"])(*inputs)
            # relative to the output's scale: Winograd's float32 transforms lose ~1e-4 of it; a
            # wrong tile or a missed element is off by O(1)
            err = float(np.max(np.abs(got - want)) / (1 + np.max(np.abs(want)))) if want.size else 0.0
            res = {"ok": bool(got.shape == want.shape and err < 1e-3), "err": err}
        except mlc.MlcError as e:
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        print(json.dumps(res), flush=True)


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def fuzz_results() -> dict:
    """Every kind's cases run in one child process (torch and the compiler imported once, not
    once per kind), with ``OMP_NUM_THREADS=4`` so that the cases' thread counts (1 to 4) all
    get their threads. A child that dies (an MLIR assertion aborts it) is restarted after the
    case it died in, which is reported as dead with the child's exit code and stderr.

    Returns ``{kind: [(case, result), ...]}``."""
    env = dict(os.environ, OMP_NUM_THREADS="4")
    todo = [c for kind in KINDS for c in cases(kind)]
    results: dict = {kind: [] for kind in KINDS}
    while todo:
        proc = subprocess.run([sys.executable, __file__, json.dumps(todo)], capture_output=True,
                              text=True, timeout=900 * len(KINDS), env=env)
        lines = [json.loads(s) for s in proc.stdout.splitlines() if s.startswith("{")]
        done = list(zip(lines[0::2], lines[1::2]))
        for a, b in done:
            results[a["case"]["kind"]].append((a["case"], b))
        if proc.returncode == 0 and len(done) == len(todo):
            break
        died = todo[min(len(done), len(todo) - 1)]
        results[died["kind"]].append((died, {"ok": False, "error": f"child died (rc {proc.returncode}) in "
                                                                    f"this case:\n{proc.stderr[-3000:]}"}))
        todo = todo[len(done) + 1:]
    return results


@pytest.mark.parametrize("kind", KINDS)
def test_default_schedules_never_abort(kind, fuzz_results):
    """Each kind's cases must all run (no child died in one) with every result correct."""
    results = fuzz_results[kind]
    assert len(results) == len(cases(kind)), results
    bad = [(c, r) for c, r in results if not r["ok"]]
    assert not bad, bad


def _flip_module(h=16, w=24):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (h, w))
        f.output(te.compute((h, w), lambda i, j: x[h - 1 - i, w - 1 - j] + 1.0, name="flip"))
    return bb.finish()


def test_untileable_block_is_refused_not_aborted():
    sch = mlc.Schedule(_flip_module())
    i, _ = sch.get_loops(sch.get_block("flip"))
    outer, _ = sch.split(i, [2, 8])
    sch.parallel(outer)
    with pytest.raises(mlc.ScheduleError, match=r"'flip'.*cannot be tiled: operand 0 is indexed by '-d0 \+ 15'"):
        sch.mod


def test_untileable_block_left_to_plain_loops_by_default_rules():
    from mlc_mlir.schedule.default_rules import SKIPPED, apply_default_schedule, classify

    sch = mlc.Schedule(_flip_module())
    assert classify(sch.model.ops[("main", "flip")]) == "untileable" and "untileable" in SKIPPED
    apply_default_schedule(sch, Target.host(), threads=4)
    assert not sch.model.blocks   # no rule touched it
    x = np.random.rand(16, 24).astype("f4")
    np.testing.assert_allclose(mlc.compile(_flip_module(), threads=4)(x), x[::-1, ::-1] + 1, rtol=1e-6)


if __name__ == "__main__":
    run_cases(json.loads(sys.argv[1]))
