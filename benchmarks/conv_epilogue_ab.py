"""Same-process A/B of the convolution GEMMs' epilogue fusion on a whole model: the model
compiled with the elementwise epilogue chains of the im2col GEMMs moved onto the GEMM's shape
(``layout_passes.epilogue_reshape``: bias, residual add and relu then run on each register
tile of the packed ``linalg.mmt4d`` where K is one block, ``schedule_mmt4d``) and without the
move (the passes' moves replaced by no-ops: the epilogue runs as a pass of its own over the
output), plus onnxruntime on the same ONNX file; timed in turn at 1 and 2 threads over
``rounds`` interleaved rounds (min ms), with the outputs' max difference. At 1 thread each call's
CPU time (``time.thread_time``: OpenMP runs a 1-thread region on the calling thread) is
reported too: on a loaded host it leaves out the time the process waits for a core.

    python benchmarks/conv_epilogue_ab.py [resnet50-light] [rounds]
"""

import ctypes
import os
import sys
import time

import numpy as np

import models_cpu as mc
import mlc_mlir as mlc
from mlc_mlir.pipeline.layout_passes import conv_im2col, pack_matmul
from mlc_mlir.pipeline.libraries import libomp_path
from timing import min_median_seconds


def _compile(mod, moved: bool):
    keep = conv_im2col.move_epilogue_across_reshape, pack_matmul.move_epilogue_across_reshape, \
        pack_matmul.epilogue_movable
    if not moved:
        conv_im2col.move_epilogue_across_reshape = lambda y, dims: False
        pack_matmul.move_epilogue_across_reshape = lambda y, dims: False
        pack_matmul.epilogue_movable = lambda y: False
    try:
        t = time.process_time()
        return mlc.compile(mod), time.process_time() - t
    finally:
        conv_im2col.move_epilogue_across_reshape, pack_matmul.move_epilogue_across_reshape, \
            pack_matmul.epilogue_movable = keep


def _cpu_ms(fn, calls: int = 10) -> float:
    """CPU milliseconds of the calling thread per call of ``fn`` over ``calls`` calls."""
    fn()
    t = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t) / calls * 1e3


def main() -> None:
    import onnxruntime as ort
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet50-light"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    work = os.path.join("/tmp", "conv_epilogue_ab")
    os.makedirs(work, exist_ok=True)
    if name != "resnet50-light":
        mc.export_onnx(work)
    path = mc.onnx_path(name, work)
    mod = mlc.from_onnx(path)
    xs = mc.numpy_inputs(name)
    runs = {}
    for k, moved in (("fused", True), ("unfused", False)):
        exe, cpu_s = _compile(mod, moved)
        runs[k] = lambda exe=exe: exe(*xs)
        print(f"{name} {k}: compile CPU {cpu_s:.1f} s", flush=True)
    outs = [np.asarray(runs[k]()) for k in ("fused", "unfused")]
    print(f"max|fused - unfused| {np.max(np.abs(outs[0] - outs[1])):.2e}", flush=True)
    omp = ctypes.CDLL(libomp_path())
    for th in (1, 2):
        omp.omp_set_num_threads(th)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = th, 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feeds = {i.name: x for i, x in zip(sess.get_inputs(), xs)}
        calls = dict(runs, onnxruntime=lambda: sess.run(None, feeds))
        best = {k: float("inf") for k in calls}
        cpu = {k: float("inf") for k in calls}
        for _ in range(rounds):
            for k, fn in calls.items():
                best[k] = min(best[k], min_median_seconds(fn, repeat=3, min_repeat_s=0.2)[0])
                if th == 1:
                    cpu[k] = min(cpu[k], _cpu_ms(fn))
        if th == 1:
            print("  1 thr CPU ms per call: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()) +
                  f"; unfused/fused {cpu['unfused'] / cpu['fused']:.3f}; ort/fused {cpu['onnxruntime'] / cpu['fused']:.3f}",
                  flush=True)
        ort_ms = best["onnxruntime"] * 1e3
        print(f"  {th} thr: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in best.items()) +
              f"; unfused/fused {best['unfused'] / best['fused']:.3f}; ort/fused {ort_ms / (best['fused'] * 1e3):.3f}"
              f", ort/unfused {ort_ms / (best['unfused'] * 1e3):.3f}", flush=True)


if __name__ == "__main__":
    main()
