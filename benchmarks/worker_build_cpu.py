"""CPU seconds of the builds a tuning run makes outside its schedule search, each against
``mlc.compile`` of the same module in this process: the whole-model check's build (the model's
text, parsed in a tuning :class:`~mlc_mlir.tune.worker.Worker` and compiled with its default
schedules) and the builds of every algorithm candidate (:mod:`mlc_mlir.tune.conv_algorithm`: a
graph unit holding one convolution and its constant filter, sent as text).

A worker receives modules as MLIR text, so what it compiles is ``Module.parse(text)``; the
first two rows show whether that costs more than compiling the built module (the weights of
parsed text must be readable at compile time: folded with numpy, linked by the JIT, not
compiled into the object). Each worker build is timed after a first one that computes its
reference (the plain loops' outputs). One process, one thread, default schedules;
``timing.cpu_seconds`` of this process (the worker runs in it), so other load on the host
counts little.

    python benchmarks/worker_build_cpu.py [--model resnet18-onnx|<light model>] [--onnx-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import models_cpu  # benchmarks/models_cpu.py; this folder is on sys.path
from timing import cpu_seconds  # benchmarks/timing.py

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir.schedule.trace import Trace  # noqa: E402
from mlc_mlir.target import describe, host_target  # noqa: E402
from mlc_mlir.tune.conv_algorithm import extract_algorithm_tasks  # noqa: E402
from mlc_mlir.tune.measure import MeasureInput  # noqa: E402
from mlc_mlir.tune.worker import Worker  # noqa: E402


def cpu_s(fn) -> float:
    """CPU seconds of ``fn()`` (:func:`timing.cpu_seconds`)."""
    c0 = cpu_seconds()
    fn()
    return cpu_seconds() - c0


def worker_build_s(worker: Worker, inp: MeasureInput) -> float:
    """CPU seconds of ``worker.build(inp)`` once the worker holds the reference of ``inp`` 's
    module (a first build computes it: the plain loops' outputs, not counted)."""
    def build():
        res = worker.build(inp)
        if res["error"]:
            raise SystemExit(f"worker build failed: {res['error']}")
    build()
    return cpu_s(build)


def main() -> None:
    """Parse the arguments, build the model and its algorithm candidates both ways, print CPU s."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18-onnx")
    ap.add_argument("--onnx-dir", default=None, help="where resnet18-onnx is exported (default: a temp dir)")
    args = ap.parse_args()
    tgt = host_target()
    with tempfile.TemporaryDirectory() as tmp:
        path = models_cpu.onnx_path(args.model, args.onnx_dir or tmp) if args.model == "resnet18-onnx" \
            else models_cpu.light_models()[args.model]
        mod = mlc.from_onnx(path)
    print(f"# {args.model}; CPU: {describe(tgt)}; 1 thread, default schedules")
    empty = Trace().as_json()
    whole = MeasureInput("main", str(mod), empty, tgt, threads=1, seed=0, repeat=1)
    rows = [("model: mlc.compile(built module)", cpu_s(lambda: mlc.compile(mod, threads=1))),
            ("model: tuning worker (its text parsed)", worker_build_s(Worker(), whole))]
    worker, total, n = Worker(), 0.0, 0
    for a in extract_algorithm_tasks(mod, tgt, None):
        for c in a.candidates:
            total += worker_build_s(worker, MeasureInput(a.task.func_name, a.module_for(c), empty, tgt,
                                                         threads=1, seed=0, repeat=1))
            n += 1
    rows.append((f"{n} algorithm candidates: tuning worker", total))
    for name, s in rows:
        print(f"{name:55s} {s:7.1f} s")


if __name__ == "__main__":
    main()
