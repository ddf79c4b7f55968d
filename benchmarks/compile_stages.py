"""CPU seconds of each stage of ``mlc.compile`` for one model (default schedules, 1 thread):
``from_onnx``, the stages of :data:`mlc_mlir.pipeline.compile.CPU_STAGES` in order (the
``layout`` steps too, indented), the weights' linking and the ``jit`` stage (LLVM IR, LLVM's
``-O2`` and code generation in MLIR's ExecutionEngine). CPU seconds of the process
(``time.process_time``), so other processes on the host count little; ``--profile FILE`` also
writes a cProfile of the stages (wall-clock timer: on a loaded host read it as shares).

    python benchmarks/compile_stages.py densenet121|inception_v1|resnet18|<light model> [--profile out.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import sys
import tempfile
import time

import models_cpu  # benchmarks/models_cpu.py; this folder is on sys.path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    """Parse the arguments, compile the model stage by stage and print the CPU s of each."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--profile", help="write a cProfile of the stages to this file")
    a = ap.parse_args()
    import mlc_mlir as mlc
    from mlc_mlir.graph.dispatch_library import runtime_bindings
    from mlc_mlir.pipeline.jit_weights import link_weights
    from mlc_mlir.pipeline.libraries import runtime_library_paths
    from mlc_mlir.pipeline.options import CompileOptions
    from mlc_mlir.runtime.executable import load_engine
    stages = importlib.import_module("mlc_mlir.pipeline.compile").CPU_STAGES

    with tempfile.TemporaryDirectory() as work:
        if a.model == "resnet18":
            models_cpu.export_onnx(work)
            path = models_cpu.onnx_path("resnet18-onnx", work)
        else:
            path = models_cpu.light_models()[a.model]
        c0 = time.process_time()
        module = mlc.from_onnx(path)
        print(f"{'from_onnx':<28}{time.process_time() - c0:>8.2f}")
    options = CompileOptions(target="cpu", threads=1)
    prof = cProfile.Profile() if a.profile else None
    total = 0.0
    with_library = module
    for stage in stages:
        c0 = time.process_time()
        if prof:
            prof.enable()
        for step in stage.steps:
            s0 = time.process_time()
            module = step.run(module, options)
            print(f"  {stage.name + '.' + step.name:<26}{time.process_time() - s0:>8.2f}")
        module = stage.run(module, options) if stage.run is not None else module
        if prof:
            prof.disable()
        total += time.process_time() - c0
        print(f"{stage.name:<28}{time.process_time() - c0:>8.2f}")
        if stage.name == "library":
            with_library = module
    c0 = time.process_time()
    jit_module, symbols, _weights = link_weights(module)
    libs = runtime_library_paths(options.target) + tuple(runtime_bindings(with_library)[0])
    load_engine(jit_module, options.opt_level, libs, [], symbols)
    total += time.process_time() - c0
    print(f"{'link weights + jit':<28}{time.process_time() - c0:>8.2f}")
    print(f"{'total (stages + jit)':<28}{total:>8.2f}")
    if prof:
        prof.dump_stats(a.profile)


if __name__ == "__main__":
    main()
