"""Whole models on the CPU at batch 1: mlc-mlir (``mlc.compile`` with the default schedules)
vs onnxruntime, PyTorch eager and ``torch.compile`` (inductor, freezing), same run, per
thread count; plus our import + compile time.

Models: ResNet-18 (torchvision's architecture with random weights, defined here: the
torchvision wheels do not load with this torch) imported through ``torch.export``
(``mlc.from_torch``) and through ONNX (``torch.onnx.export`` -> ``mlc.from_onnx``); the light
ResNet-50 of the onnx wheel (``onnx/backend/test/data/light``, constant weights); a small BERT
(``transformers.BertConfig``: 2 layers, hidden 128, 2 heads, random weights, sequence 128).

Each (model, implementation) runs in its own subprocess, one after the other, never
interleaved (OpenMP / MKL thread pools spin against each other). Ours compiles once per model
and sets the OpenMP thread count per measurement (``omp_set_num_threads`` of the libomp the
engine loaded); onnxruntime gets ``intra_op_num_threads``; PyTorch ``torch.set_num_threads``.
Times: min and median over repeats (``benchmarks/timing.py``); ratios are peer time / our time
from the same run (> 1: ours is faster); ``--tune N`` adds our tuned rows, tuned for each thread count
on its own (``mlc.tune(threads=t)``); their ratio is default / tuned time at that thread count (> 1: tuning paid),
both timed in one process, in alternating rounds (with onnxruntime at one thread: no thread pool
spins there). With ``--rounds N`` the whole sequence runs N times
and each row keeps its best round: the shared hosts have slow phases of minutes in which one
implementation's run lands and the next one's does not.

    python benchmarks/models_cpu.py [--models resnet18,resnet18-onnx,resnet50-light,bert]
                                    [--threads 1,2] [--no-torch-compile] [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from timing import Rounds, cpu_seconds, min_median_seconds  # benchmarks/timing.py; this folder is on sys.path

MODELS = ("resnet18", "resnet18-onnx", "resnet50-light", "bert")
#: model -> implementations measured (ours first)
IMPLS = {"resnet18": ("mlc", "torch", "torch.compile"), "resnet18-onnx": ("mlc", "onnxruntime"),
         "resnet50-light": ("mlc", "onnxruntime"), "bert": ("mlc", "onnxruntime", "torch", "torch.compile")}
#: the ONNX file of each model, written by the parent into the work folder
ONNX_FILES = {"resnet18-onnx": "resnet18.onnx", "bert": "bert.onnx"}
#: ``--tune``: rounds that time the tuned and the default executables (and onnxruntime, for an
#: ONNX model at one thread) in turn in one process, and builds of each of ours (identical compiles of
#: ResNet-18 differ by 3-5% in one process: where their code and buffers land)
INTERLEAVED_ROUNDS = 8
BUILDS = 2


# ------------------------------------------------------------------------------------ models
def resnet18():
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]) with seeded random weights and
    non-trivial batch-norm statistics, in eval mode; input (1, 3, 224, 224) float32."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for i, cout in enumerate((64, 128, 256, 512)):
                layers.append(nn.Sequential(Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)))
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(512, 1000)

        def forward(self, x):
            x = self.layers(self.maxpool(torch.relu(self.bn1(self.conv1(x)))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(0)
    model = ResNet18().eval()
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    x = torch.randn(1, 3, 224, 224, generator=g)
    return model, (x,)


def bert(layers: int = 2, vocab: int = 30522):
    """A ``layers``-layer BERT (hidden 128, 2 heads, intermediate 512, ``vocab`` tokens, random
    weights) returning the last hidden state; input ids (1, 128) int64. The tests lower one layer
    and a small vocabulary (the same op kinds, a fraction of the kernels and constants)."""
    import torch
    import transformers

    cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=layers, num_attention_heads=2,
                                  intermediate_size=512, vocab_size=vocab)
    torch.manual_seed(0)
    inner = transformers.BertModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = inner

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    ids = torch.randint(0, cfg.vocab_size, (1, 128), generator=torch.Generator().manual_seed(1))
    return Wrap().eval(), (ids,)


def light_resnet50_path() -> str:
    """Path of the light ResNet-50 shipped in the onnx wheel (weights are ConstantOfShape splats)."""
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_resnet50.onnx")


def light_models() -> dict:
    """``{name: path}`` of the light ONNX models shipped in the onnx wheel
    (``onnx/backend/test/data/light``: DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
    SqueezeNet, VGG-19, ZFNet-512, AlexNet; weights are ConstantOfShape splats)."""
    import onnx
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {os.path.basename(p)[len("light_"):-len(".onnx")]: p
            for p in sorted(glob.glob(os.path.join(root, "light_*.onnx")))}


def torch_model(name, **sizes):
    """``(model, example args)`` of a torch-defined model name; ``sizes`` go to its builder
    (``bert``: ``layers``, ``vocab``)."""
    return {"resnet18": resnet18, "resnet18-onnx": resnet18, "bert": bert}[name](**sizes)


def onnx_path(name: str, work: str) -> str:
    """The ONNX file of ``name`` (exported into ``work``, or the onnx wheel's light model)."""
    return light_resnet50_path() if name == "resnet50-light" else os.path.join(work, ONNX_FILES[name])


def numpy_inputs(name: str):
    """The inputs of ``name`` as numpy arrays (the same values for every implementation)."""
    if name == "resnet50-light":
        return [np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)]
    return [t.numpy() for t in torch_model(name)[1]]


def export_onnx(work: str) -> None:
    """Write the ONNX files of the torch-defined models (legacy TorchScript exporter, opset 17)."""
    import torch
    for name, file in ONNX_FILES.items():
        model, args = torch_model(name)
        with torch.no_grad():
            torch.onnx.export(model, args, os.path.join(work, file), dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["output"])


# ---------------------------------------------------------------------------- measurements
def measure_mlc(name: str, work: str, threads, tune_trials: int = 0):
    """Import, compile once (default schedules, weights as constants) and time per OpenMP thread
    count. With ``tune_trials``, per thread count t: ``mlc.tune(threads=t)`` in
    ``work/tune-<name>-<t>t``, then :data:`BUILDS` of ``mlc.compile(database=, threads=t)`` (the
    tuning and the first compile counted as compile time), as many of the default
    ``mlc.compile(threads=t)`` and, for an ONNX model at one thread, an onnxruntime session,
    timed in turn in
    :data:`INTERLEAVED_ROUNDS` rounds (:func:`interleaved`; ``default_min_ms``,
    ``interleaved_ms``: each kind's median, ``max_abs_diff``: each kind's first output against
    the default's).
    Returns (rows, CPU description)."""
    import ctypes
    import mlc_mlir as mlc
    from mlc_mlir.pipeline.libraries import libomp_path
    from mlc_mlir.target import describe, host_target

    t0 = time.perf_counter()
    if name in ("resnet18", "bert"):
        model, args = torch_model(name)
        mod = mlc.from_torch(model, args)
    else:
        mod = mlc.from_onnx(onnx_path(name, work))
    t1 = time.perf_counter()
    xs = numpy_inputs(name)
    omp = ctypes.CDLL(libomp_path())
    rows = []
    if not tune_trials:
        exe = mlc.compile(mod)
        t2 = time.perf_counter()
        exe(*xs)
        for t in threads:
            omp.omp_set_num_threads(t)
            lo, med = min_median_seconds(lambda: exe(*xs), repeat=5, min_repeat_s=0.2)
            rows.append({"threads": t, "min_ms": lo * 1e3, "median_ms": med * 1e3,
                         "import_s": t1 - t0, "compile_s": t2 - t1})
        return rows, describe(host_target())
    for t in threads:   # one tuning per thread count: a schedule is tuned for its thread count
        omp.omp_set_num_threads(t)
        t2, cpu0, load0 = time.perf_counter(), cpu_seconds(), os.getloadavg()[0]
        db = mlc.tune(mod, trials=tune_trials, work_dir=os.path.join(work, f"tune-{name}-{t}t"),
                      threads=t, progress=False)
        workloads = {r.workload for r in db.records()}
        tuning = {"wall_s": time.perf_counter() - t2, "cpu_s": cpu_seconds() - cpu0,
                  "trials": len([r for r in db.records() if not r.final]),
                  "load": [load0, os.getloadavg()[0]],
                  # the whole-model check's verdict: records given back to the default, and kept
                  "rejected": sum(db.rejected(w) is not None for w in workloads),
                  "replaced": sum(not getattr(db.best(w), "is_default", True) for w in workloads)}
        runs = {"tuned": [mlc.compile(mod, database=db, threads=t)]}
        t3 = time.perf_counter()
        runs["tuned"] += [mlc.compile(mod, database=db, threads=t) for _ in range(BUILDS - 1)]
        runs["default"] = [mlc.compile(mod, threads=t) for _ in range(BUILDS)]
        if "onnxruntime" in IMPLS[name] and t == 1:   # more threads: the two pools spin against each other
            runs["onnxruntime"] = [ort_session(name, work, t)[0]]
        got = {kind: first_output(fs[0](*xs)) for kind, fs in runs.items()}
        mins = interleaved({kind: [lambda f=f: f(*xs) for f in fs] for kind, fs in runs.items()})
        rows.append({"threads": t, "min_ms": min(mins["tuned"]) * 1e3,
                     "median_ms": statistics.median(mins["tuned"]) * 1e3,
                     "default_min_ms": min(mins["default"]) * 1e3,
                     "interleaved_ms": {k: statistics.median(v) * 1e3 for k, v in mins.items()},
                     "max_abs_diff": {k: float(np.max(np.abs(v - got["default"]))) for k, v in got.items()},
                     "import_s": t1 - t0, "compile_s": t3 - t2, "tuning": tuning})
    return rows, describe(host_target())


def first_output(out) -> np.ndarray:
    """The first output of a call (ours returns one array or a tuple; onnxruntime a list)."""
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def interleaved(runs: dict, rounds: int = INTERLEAVED_ROUNDS) -> dict:
    """``{kind: [fastest repeat of each round and callable, s]}`` for ``runs`` (``{kind:
    [callables]}``): every round calls every callable in turn (3 repeats of at least 0.1 s), the
    order rotated by one per round, so that the host's fast and slow phases reach them alike."""
    calls = [(kind, f) for kind, fs in runs.items() for f in fs]
    out = {kind: [] for kind in runs}
    for r in range(rounds):
        k = r % len(calls)
        for kind, f in calls[k:] + calls[:k]:
            out[kind].append(min_median_seconds(f, repeat=3, min_repeat_s=0.1)[0])
    return out


def ort_session(name: str, work: str, t: int):
    """``(run, seconds to create)``: ``run()`` calls an onnxruntime session of ``name`` (CPU
    provider, all graph optimizations, ``t`` intra-op threads) on :func:`numpy_inputs`."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = t, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(onnx_path(name, work), so, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), numpy_inputs(name))}
    return (lambda *_: sess.run(None, feeds)), t1 - t0


def measure_ort(name: str, work: str, threads):
    """onnxruntime (CPU provider, all graph optimizations) per ``intra_op_num_threads``."""
    rows = []
    for t in threads:
        run, compile_s = ort_session(name, work, t)
        lo, med = min_median_seconds(run, repeat=5, min_repeat_s=0.2)
        rows.append({"threads": t, "min_ms": lo * 1e3, "median_ms": med * 1e3, "compile_s": compile_s})
    return rows, None


def measure_torch(name: str, compiled: bool, threads):
    """PyTorch eager, or ``torch.compile`` (inductor, freezing) recompiled per thread count."""
    import torch
    model, args = torch_model(name)
    rows = []
    for t in threads:
        torch.set_num_threads(t)
        fn, compile_s = model, None
        if compiled:
            import torch._inductor.config as inductor_config
            inductor_config.freezing = True
            torch._dynamo.reset()
            fn = torch.compile(model)
            t0 = time.perf_counter()
            with torch.no_grad():
                fn(*args)
            compile_s = time.perf_counter() - t0

        def call():
            with torch.no_grad():
                fn(*args)
        lo, med = min_median_seconds(call, repeat=5, min_repeat_s=0.2)
        rows.append({"threads": t, "min_ms": lo * 1e3, "median_ms": med * 1e3, "compile_s": compile_s})
    return rows, None


def child(name: str, impl: str, work: str, threads) -> None:
    """The subprocess side: measure one (model, implementation), print ``RESULT {json}``."""
    if impl.startswith("mlc"):   # "mlc" or "mlc-tuned<N>"
        rows, cpu = measure_mlc(name, work, threads, int(impl[len("mlc-tuned"):] or 0) if impl != "mlc" else 0)
    elif impl == "onnxruntime":
        rows, cpu = measure_ort(name, work, threads)
    else:
        rows, cpu = measure_torch(name, impl == "torch.compile", threads)
    print("RESULT " + json.dumps({"rows": rows, "cpu": cpu}))


# ------------------------------------------------------------------------------------ parent
def run_child(name: str, impl: str, work: str, threads, timeout: int):
    """Run :func:`child` in a subprocess; returns (rows, cpu, error)."""
    cmd = [sys.executable, __file__, "--child", name, impl, work, "--threads", ",".join(map(str, threads))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None, f"timed out after {timeout} s"
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            return res["rows"], res["cpu"], None
    err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return None, None, f"exit {p.returncode}: {err[:200]}"


def main() -> int:
    """Parse arguments, measure every (model, implementation) in turn (``--rounds`` times),
    print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per (model, implementation)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every (model, implementation) this many times, in turn, and keep "
                         "each row's best round (the host has slow phases lasting minutes)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="also measure ours tuned with N trials per model (mlc.tune, then "
                         "compile with the database); its ratio column is default / tuned ms, "
                         "both timed in the tuned row's process, interleaved")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "IMPL", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    if args.child:
        child(*args.child, threads)
        return 0
    models = args.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error(f"--models {bad}: expected some of {list(MODELS)}")
    rounds, measured, cpu = Rounds(), [], None   # rounds: (model, impl, threads) -> rows; errors by (model, impl)
    with tempfile.TemporaryDirectory(prefix="mlc-models-") as work:
        if any(m in ONNX_FILES for m in models):
            export_onnx(work)
        for rnd in range(args.rounds):
            for m in models:
                for impl in IMPLS[m] + ((f"mlc-tuned{args.tune}",) if args.tune else ()):
                    if impl == "torch.compile" and args.no_torch_compile:
                        continue
                    rows, c, err = run_child(m, impl, work, threads, args.timeout)
                    cpu = cpu or c
                    measured += [] if (m, impl) in measured else [(m, impl)]
                    if err:
                        rounds.fail((m, impl), err)
                    for r in rows or ():
                        rounds.add((m, impl, r["threads"]), r)
                    if not args.json:
                        print(f"  measured {m} / {impl} (round {rnd + 1}): {'ok' if rows else err}",
                              file=sys.stderr, flush=True)
    results = {}   # (model, impl) -> {"rows": each thread count's best round, "error"}
    for m, impl in measured:
        best = [rounds.best((m, impl, t), lambda r: -r["min_ms"]) for t in threads]
        best = [r for r in best if r]
        results[(m, impl)] = {"rows": best, "error": None if best else rounds.error((m, impl))}
    if args.json:
        print(json.dumps({"cpu": cpu, "results": [{"model": m, "impl": i, **v} for (m, i), v in results.items()]},
                         indent=1))
        return 0
    print(f"CPU: {cpu}")
    print(f"{'model':15s} {'impl':14s} {'thr':>3s} {'min ms':>9s} {'med ms':>9s} {'peer/ours':>9s} {'compile s':>10s}")
    for (m, impl), v in results.items():
        if not v["rows"]:
            print(f"{m:15s} {impl:14s} {'':>3s} {v['error']}")
            continue
        ours = {r["threads"]: r["min_ms"] for r in (results[(m, "mlc")]["rows"] or [])}
        for r in v["rows"]:
            base = r.get("default_min_ms", ours.get(r["threads"]))   # tuned: its own process's default
            ratio = "" if impl == "mlc" or base is None else f"{r['min_ms'] / base:.2f}x"
            if "default_min_ms" in r:   # tuned: default / tuned, > 1 when tuning paid
                ratio = f"{base / r['min_ms']:.2f}x"
            comp = r.get("compile_s")
            comp = "" if comp is None else (f"{r['import_s']:.1f}+{comp:.1f}" if "import_s" in r else f"{comp:.1f}")
            print(f"{m:15s} {impl:14s} {r['threads']:3d} {r['min_ms']:9.2f} {r['median_ms']:9.2f} {ratio:>9s} {comp:>10s}")
    for (m, impl), v in results.items():
        for tuning, t in ((r["tuning"], r["threads"]) for r in v["rows"] or [] if r.get("tuning")):
            print(f"tuning {m}, {t} thread(s): {tuning['trials']} trials measured, {tuning['wall_s']:.1f} s wall, "
                  f"{tuning['cpu_s']:.1f} CPU s (tuner and its workers), load average "
                  f"{tuning['load'][0]:.1f} -> {tuning['load'][1]:.1f}; {tuning['replaced']} tasks tuned, "
                  f"{tuning['rejected']} given back to the default by the whole-model check")
            row = [r for r in v["rows"] if r.get("threads") == t][0]
            inter = row.get("interleaved_ms")
            if inter:
                d = inter["default"]
                print(f"  same process, {INTERLEAVED_ROUNDS} interleaved rounds, {BUILDS} builds of ours each "
                      "(median of the rounds' fastest repeat): " + ", ".join(
                          f"{k} {ms:.2f} ms ({d / ms:.2f}x default)" for k, ms in inter.items())
                      + "; max |output - default's|: " + ", ".join(
                          f"{k} {x:.1e}" for k, x in row["max_abs_diff"].items() if k != "default"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
