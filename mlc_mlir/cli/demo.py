"""The main job, ``mlc demo``: a scikit-learn MLP on the digits data set, rebuilt and compiled.

Trains scikit-learn's ``MLPClassifier`` (64 -> 128 relu -> 10) on a fixed split of the bundled
digits data set (1797 8x8 images, UCI), rebuilds the network with :class:`GraphBuilder` from the
trained weights, compiles it for the CPU and runs the whole test split at batch 1 and as one
batch. Prints accuracy, agreement with scikit-learn's predictions, the max |logit difference|
versus a numpy reference, and a latency table (ours vs numpy, measured in the same run).
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from typing import Optional

import numpy as np

from .. import ops
from ..builder import GraphBuilder
from ..pipeline import compile
from ..schedule import Schedule
from ..target import describe, host_target
from ..tune import tune
from ..schedule.default_rules import apply_default_schedule


def train_mlp(seed: int = 0):
    """Train ``MLPClassifier(hidden_layer_sizes=(128,))`` on digits (80/20 stratified split).

    Returns ``(clf, x_train, x_test, y_train, y_test)``; images are float32 scaled to [0, 1].
    The training runs with one BLAS thread (``threadpoolctl``, a scikit-learn dependency): its
    GEMMs are a few hundred rows, which a second thread only slows down, and on a busy host
    OpenBLAS threads spinning against other work made it minutes instead of a second.
    """
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    import threadpoolctl

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(128,), activation="relu", max_iter=200,
                        random_state=seed)
    with warnings.catch_warnings(), threadpoolctl.threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x_train, y_train)
    return clf, x_train, x_test, y_train, y_test


def build_mlp_module(weights, biases, batch_sizes):
    """Graph module with one function ``mlp_b<batch>`` per batch size: dense-relu-dense logits.

    weights[i]: (in, out) as scikit-learn stores ``coefs_``; biases[i]: (out,).
    """
    bb = GraphBuilder()
    for b in batch_sizes:
        with bb.function(f"mlp_b{b}") as f:
            h = f.arg("x", shape=(b, weights[0].shape[0]), dtype="float32")
            for i, (w, c) in enumerate(zip(weights, biases)):
                h = ops.dense(h, np.ascontiguousarray(w.T), c, name=f"dense{i}")
                if i + 1 < len(weights):
                    h = ops.relu(h, name=f"relu{i}")
            f.output(h)
    return bb.finish()


def schedule_mlp(mod, target):
    """The target's default schedules for every op of ``mod`` (what :func:`mlc_mlir.compile` does
    by itself), kept as a Schedule so its trace and transform script can be shown: each dense
    layer gets the Goto recipe with a register tile and cache blocks derived from ``target`` and
    threads over its rows, its bias add and relu fused into the tiles."""
    return apply_default_schedule(Schedule(mod), target)


def numpy_mlp(x, weights, biases):
    """numpy reference of the MLP's logits (float32, same operation order)."""
    h = x
    for i, (w, c) in enumerate(zip(weights, biases)):
        h = h @ w + c
        if i + 1 < len(weights):
            h = np.maximum(h, 0)
    return h


def _time_numpy(fn, number: int, repeat: int) -> float:
    best = float("inf")
    fn()
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) * 1e3 / number)
    return best


def run_demo(dump_ir: Optional[str] = None, seed: int = 0, out=print, tune_trials: int = 0,
             tune_dir: Optional[str] = None) -> dict:
    """Run the demo end to end; returns the numbers it prints (accuracy, agreement, ...).

    With ``tune_trials`` > 0 the MLP is also tuned (:func:`mlc_mlir.tune`, records and curve in
    ``tune_dir`` or a new folder under the system's temporary directory, kept so that the
    printed paths stay valid) and its latency compared with the default schedules'.

    Raises
    ------
    MlcError
        If a compile stage fails.
    """
    t_start = time.perf_counter()
    clf, _, x_test, _, y_test = train_mlp(seed)
    t_train = time.perf_counter() - t_start
    weights = [w.astype(np.float32) for w in clf.coefs_]
    biases = [b.astype(np.float32) for b in clf.intercepts_]
    n = x_test.shape[0]
    out(f"digits: {n} test images (8x8), MLP 64-128-10 trained by scikit-learn in {t_train:.1f} s")

    mod = build_mlp_module(weights, biases, (1, n))
    t0 = time.perf_counter()
    target = host_target()
    sch = schedule_mlp(mod, target)
    scheduled = sch.mod
    # trained weights hold subnormals (weight decay); x86 FMAs on them take microcode assists
    subnormal = sum(int(((w != 0) & (np.abs(w) < np.finfo(np.float32).tiny)).sum()) for w in weights)
    exe = compile(scheduled, target="cpu", dump_ir=dump_ir, flush_denormals=True)
    t_compile = time.perf_counter() - t0
    if dump_ir:
        sch.transform_script().save(os.path.join(dump_ir, "schedule.transform.mlir"))
        with open(os.path.join(dump_ir, "schedule.trace.py"), "w") as fh:
            fh.write(str(sch.trace) + "\n")
    out(f"default schedules for {target.cpu} ({len(sch.trace)} trace instructions: tiled, packed, "
        f"vectorized, bias+relu fused, {target.cores} threads) and compiled mlp_b1 and mlp_b{n} "
        f"in {t_compile * 1e3:.0f} ms")
    out(f"{subnormal} subnormal weights: compiled with flush_denormals=True (FTZ/DAZ while our code "
        "runs, like torch.set_flush_denormal; numpy keeps IEEE subnormals)")

    f1, fn_ = exe["mlp_b1"], exe[f"mlp_b{n}"]
    logits_b1 = np.concatenate([f1(x_test[i:i + 1]) for i in range(n)])
    logits_bn = fn_(x_test)
    ref = numpy_mlp(x_test, weights, biases)
    pred = logits_bn.argmax(axis=1)
    sk_pred = clf.predict(x_test)
    acc = float((pred == y_test).mean())
    agree = float((pred == sk_pred).mean())
    agree_b1 = float((logits_b1.argmax(axis=1) == sk_pred).mean())
    diff = float(max(np.abs(logits_bn - ref).max(), np.abs(logits_b1 - ref).max()))
    out(f"accuracy            : {acc * 100:.2f}% ({int(round(acc * n))}/{n})")
    out(f"agreement w/ sklearn: {agree * 100:.2f}% (batch {n}), {agree_b1 * 100:.2f}% (batch 1)")
    out(f"max |logit diff|    : {diff:.3e} vs numpy reference")

    x1 = np.ascontiguousarray(x_test[:1])
    rows = []
    for label, fn, x, number in (("batch 1", f1, x1, 2000), (f"batch {n}", fn_, x_test, 200)):
        ours = fn.benchmark(x, number=number, repeat=5).min_ms
        theirs = _time_numpy(lambda: numpy_mlp(x, weights, biases), number, 5)
        rows.append((label, ours, theirs))
    if tune_trials:
        # a folder of its own, kept: tune() prints the path of the curve it writes there
        tune_dir = tune_dir or tempfile.mkdtemp(prefix="mlc-demo-tune-")
        db = tune(mod, target=target, trials=tune_trials, work_dir=tune_dir)
        tuned = compile(mod, target=target, database=db, flush_denormals=True)
        ratios = []
        for label, name, x, number in (("batch 1 tuned", "mlp_b1", x1, 2000),
                                       (f"batch {n} tuned", f"mlp_b{n}", x_test, 200)):
            np.testing.assert_allclose(tuned[name](x), numpy_mlp(x, weights, biases), rtol=1e-4,
                                       atol=1e-4)
            # tuned and default in alternating rounds: a shared host's load moves by minutes
            ours, base = float("inf"), float("inf")
            for _ in range(5):
                ours = min(ours, tuned[name].benchmark(x, number=number, repeat=1).min_ms)
                base = min(base, exe[name].benchmark(x, number=number, repeat=1).min_ms)
            theirs = _time_numpy(lambda: numpy_mlp(x, weights, biases), number, 5)
            rows.append((label, ours, theirs))
            ratios.append(f"{label[:-len(' tuned')]} {base / ours:.2f}x")
    out("")
    out(f"target: {describe(target)}")
    out(f"{'latency (min of 5)':<20}{'mlc-mlir ms':>14}{'numpy ms':>12}{'numpy/ours':>12}")
    for label, ours, theirs in rows:
        out(f"{label:<20}{ours:>14.4f}{theirs:>12.4f}{theirs / ours:>11.2f}x")
    if tune_trials:
        out(f"default / tuned, timed in alternating rounds (min of 5): {', '.join(ratios)}")
    out("")
    if tune_trials:
        out(f"tuning records and curve kept in {tune_dir}/ (database.jsonl, tuning_curve.png)")
    if dump_ir:
        out(f"IR of each stage written to {dump_ir}/ (schedule.trace.py, schedule.transform.mlir, "
            "00-graph.mlir, 01-layout.*.mlir, 02-tasks.mlir, 03-schedule.mlir = scheduled graph, ..., 07-lower.mlir, 08-denormals.mlir, 09-llvm.ll)")
    else:
        out("IR of each stage (schedule trace and transform script, scheduled graph, prepare, "
            "lower, LLVM IR): rerun with --dump-ir DIR")
    out(f"total {time.perf_counter() - t_start:.1f} s")
    return {"accuracy": acc, "agreement": agree, "agreement_b1": agree_b1, "max_logit_diff": diff,
            "latency": rows}
