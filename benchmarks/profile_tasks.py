"""Per-task profile of a whole model: the tuning tasks of ``mlc.tune.extract_tasks`` (the
primitive functions ``graph.FuseOps`` outlines after the layout rewrites) and the fused
attention kernels (``mlc.tune.attention_task``), each compiled alone
with the default schedules for each thread count (``mlc.compile(threads=N)``, as the model is)
and timed on that many OpenMP threads, its tensor arguments writable (a unit that writes into
a slice of a destination argument, an input of a concatenation, writes it in place as in the
model, :func:`writable_arguments`), with its weight (calls per
inference), GFLOP/s and the weighted total.

A task runs on random inputs with warm caches (its arguments, and the packed weights it reads,
stay in L2/L3 between calls), so the weighted total is a lower bound of the whole model; the
whole model's own native call (min of single calls, as ``benchmarks/models_cpu.py``) is timed in
the same process and each row shows its share of it: the gap (whole minus weighted total) is what
the model loses to cold caches and to the code between tasks (calls, OpenMP forks, copies). Used to find which kernels to work on (TVM MetaSchedule's task-level view;
onnxruntime's per-node profile, ``SessionOptions.enable_profiling``, is the peer's).

    python benchmarks/profile_tasks.py [--model resnet18-onnx|squeezenet|x.onnx] [--threads 1,2]
                                       [--filter conv] [--ort] [--json]

``--ort`` (an ONNX model) adds onnxruntime's own per-node profile of the same file in the same
process (``SessionOptions.enable_profiling``: each node's kernel time, min over 50 runs, per
thread count), to rank layers by ours minus the peer's.

``--decode MODEL --ctx N`` profiles an LLM decode step instead (``llm_cpu.MODELS``:
``mlc.llm.import_step(model, N + 64, 1)`` at position N, 1 thread; ``N + 64`` capped at the
model's positions): each task is timed cold
(:func:`decode_profile`: a 128 MiB read evicts the caches before each single call, as a decode
step reads every weight from DRAM), plus the fused attention kernel over the KV cache, the
whole step's native call and its Python call; the rows give bytes per call, GB/s and the share
of the step, grouped into GEMV, attention, cache writes, layer norms and the rest, and the
remainder (step minus the kernels) is the time between kernels. A cold call of a tiny kernel
(a layer norm of 768 floats) also waits on its code and the OpenMP runtime's state, which a
step finds in cache: the small kernels' times are upper bounds, and the remainder can come out
negative on a small model.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import tempfile
import time

import numpy as np
from models_cpu import MODELS, export_onnx, light_models, onnx_path, torch_model  # benchmarks/, on sys.path


def onnx_file(name: str):
    """The ONNX file of ``name`` when it is one (a path, or a light model of the onnx wheel:
    :func:`models_cpu.light_models`), else None."""
    return name if name.endswith(".onnx") else light_models().get(name)


def load(name: str, work: str):
    """The model ``name`` (one of :data:`models_cpu.MODELS`, a light ONNX model's name such as
    ``squeezenet``, or the path of an ONNX file) as an mlc Module, params bound."""
    import mlc_mlir as mlc
    if onnx_file(name):
        return mlc.from_onnx(onnx_file(name))
    if name in ("resnet18", "bert"):
        return mlc.from_torch(*torch_model(name))
    if name != "resnet50-light":
        export_onnx(work)
    return mlc.from_onnx(onnx_path(name, work))


def profile(name: str, threads, pattern: str = ""):
    """``(rows, whole)``: rows ``{task, weight, mflop, ms: {threads: min ms}}`` of the tasks of
    ``name`` whose name contains ``pattern``, in the order of the tasks, and ``whole``
    ``{threads: min ms}`` of the whole model's native call (its default compile)."""
    import mlc_mlir as mlc
    from mlc_mlir.pipeline.libraries import libomp_path
    from mlc_mlir.target import host_target
    from mlc_mlir.tune.attention_task import extract_attention_tasks
    from mlc_mlir.tune.task import extract_tasks

    with tempfile.TemporaryDirectory() as work:
        mod = load(name, work)
        tasks = extract_tasks(mod) + [a.task for a in extract_attention_tasks(mod, host_target())]
        inputs = [rng_inputs(a) for a in mod.signature("main").args]
    omp = ctypes.CDLL(libomp_path())
    rows = []
    for t in tasks:
        if pattern not in t.name:
            continue
        unit = writable_arguments(t.module, t.func_name)
        ms = {}
        for th in threads:     # compiled for each thread count, as the model is
            fn = mlc.compile(unit, threads=th)[t.func_name]
            args = [rng_inputs(a) for a in fn.signature.args]
            omp.omp_set_num_threads(th)
            fn.benchmark(*args, number=5, repeat=1)          # threads started, caches warm
            ms[th] = fn.benchmark(*args, number=20, repeat=7).min_ms
        rows.append({"task": t.name, "weight": t.weight, "mflop": t.flops / 1e6, "ms": ms})
    whole = {}
    for th in threads:
        exe = mlc.compile(mod, threads=th)["main"]
        omp.omp_set_num_threads(th)
        exe.benchmark(*inputs, number=5, repeat=1)
        whole[th] = exe.benchmark(*inputs, number=1, repeat=300).min_ms
    return rows, whole


def writable_arguments(mod, func_name: str):
    """``mod`` with the tensor arguments of ``func_name`` marked ``bufferization.writable``: a
    unit that writes into a slice of its destination argument (an input of a concatenation
    written in place, the concatenation passed in) then writes it in place, as in the model,
    instead of copying all of it first (a public function's arguments are read-only
    otherwise). The unit may overwrite its random inputs; the timing is what matters here."""
    from mlc_mlir.pipeline.compile import mark_tensor_arguments
    with mod.context:
        mark_tensor_arguments(mod.get_function(func_name), True, keep=False)
    return mod


def ort_profile(path: str, threads) -> dict:
    """onnxruntime's own per-node profile of the ONNX file ``path`` (``SessionOptions.
    enable_profiling``, all graph optimizations), per thread count: ``{threads: [{node, op,
    shape, ms}]}``, ``ms`` the min over 50 runs of the node's kernel time, in execution order."""
    import onnxruntime as ort
    out = {}
    with tempfile.TemporaryDirectory() as work:
        for th in threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = th
            so.enable_profiling = True
            so.profile_file_prefix = f"{work}/ort{th}"
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            shapes = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in sess.get_inputs()}
            feeds = {k: np.random.default_rng(0).standard_normal(v).astype(np.float32)
                     for k, v in shapes.items()}
            for _ in range(50):
                sess.run(None, feeds)
            with open(sess.end_profiling()) as f:
                events = json.load(f)
            nodes: dict = {}
            for e in events:
                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                    r = nodes.setdefault(e["name"][:-len("_kernel_time")],
                                         {"op": e["args"].get("op_name", ""), "ms": [],
                                          "shape": [list(v.values())[0] for v in e["args"].get("output_type_shape", [])][:1]})
                    r["ms"].append(e["dur"] / 1e3)
            out[th] = [{"node": k, "op": v["op"], "shape": v["shape"], "ms": min(v["ms"])} for k, v in nodes.items()]
    return out


def print_ort(prof: dict) -> None:
    """The table of :func:`ort_profile`: per node, each thread count's ms, and the totals."""
    threads = list(prof)
    print("# onnxruntime per-node profile (min kernel ms over 50 runs)")
    print(f"{'node':40s} {'op':18s} {'output':24s} " + " ".join(f"{f'{th}T ms':>8s}" for th in threads))
    for i, r in enumerate(prof[threads[0]]):
        cells = " ".join(f"{prof[th][i]['ms']:8.4f}" if i < len(prof[th]) else f"{'':8s}" for th in threads)
        print(f"{r['node'][:40]:40s} {r['op'][:18]:18s} {str(r['shape'])[:24]:24s} {cells}")
    print(f"{'onnxruntime kernels total (ms)':84s} " + " ".join(f"{sum(r['ms'] for r in prof[th]):8.4f}" for th in threads))


def rng_inputs(arg) -> np.ndarray:
    """A random array for a signature argument: standard normal floats, integer zeros (valid
    indices)."""
    rng = np.random.default_rng(0)
    return rng.standard_normal(arg.shape).astype(arg.dtype) if np.dtype(arg.dtype).kind == "f" \
        else np.zeros(arg.shape, arg.dtype)


def _unit_bytes(mod, func_name: str, constants: bool) -> int:
    """Bytes a unit reads and writes once: its arguments, results and (with ``constants``: a
    GEMV reads all of its weight; a gather reads rows of its table) its tensor constants."""
    from mlc_mlir._mlir import ir
    sig = mod.signature(func_name)
    total = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in sig.args + sig.results)
    with mod.context:
        for op in [] if not constants else mod.get_function(func_name).regions[0].blocks[0].operations:
            t = op.operation.results[0].type if op.operation.name == "arith.constant" else None
            if isinstance(t, ir.RankedTensorType) and t.has_static_shape:
                total += int(np.prod(t.shape)) * ir.FloatType(t.element_type).width // 8 \
                    if isinstance(t.element_type, ir.FloatType) else 0
    return total


def _kind(name: str) -> str:
    """The row group of a decode task (by its anchor op, the first in ``FuseOps``'s name)."""
    for key, kind in (("fused_matmul", "GEMV"), ("fused_layer_norm", "layer norm")):
        if name.startswith(key):
            return kind
    return "cache write" if "update_slice" in name else "other"


def _call_floor_ms(repeat: int) -> float:
    """Min ms of one native call of a one-element add: the timing's own cost, subtracted from
    every kernel's."""
    import mlc_mlir as mlc
    from mlc_mlir import ops
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("a", (1,)), f.arg("b", (1,))))
    fn = mlc.compile(bb.finish(), threads=1)["main"]
    one = np.ones(1, np.float32)
    return min(fn.benchmark(one, one, number=1, repeat=1, warmup=0).min_ms for _ in range(repeat * 4))


def _cold_ms(fn, args, flush: np.ndarray, repeat: int) -> float:
    """Min ms of one native call of ``fn`` after a read of ``flush`` (caches evicted), timing
    cost included."""
    times = []
    for _ in range(repeat):
        flush.sum()
        times.append(fn.benchmark(*args, number=1, repeat=1, warmup=0).min_ms)
    return min(times)


def decode_profile(name: str, ctx: int, repeat: int = 15) -> dict:
    """Per-kernel profile of ``name``'s decode step at position ``ctx`` on 1 thread (see the
    module docstring): ``{rows: [{task, kind, calls, MB, ms}], step_ms, call_ms, floor_ms,
    bandwidth_GBs}``; ``ms`` is the min over ``repeat`` cold single calls less ``floor_ms`` (a
    one-element call's). A cache-write unit alone returns a new cache (a copy; in the step it
    writes one row in place): it is not timed, its row is in the time between kernels."""
    import mlc_mlir as mlc
    from llm_cpu import _model, read_bandwidth
    from mlc_mlir.pipeline.compile import run_stages
    from mlc_mlir.pipeline.libraries import libomp_path
    from mlc_mlir.pipeline.options import CompileOptions
    from mlc_mlir.pipeline.tasks import unit_module
    from mlc_mlir.runtime.huge_pages import advise_huge_pages
    from mlc_mlir.target import host_target
    from mlc_mlir.tune.task import extract_tasks

    ctypes.CDLL(libomp_path()).omp_set_num_threads(1)
    model = _model(name)
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    max_len = min(ctx + 64, positions)    # as llm_cpu.py: GPT-2's "1024" context is 960 tokens
    if ctx >= max_len:
        raise SystemExit(f"--ctx {ctx}: the model has {positions} positions; expected at most {positions - 64}")
    step = mlc.llm.import_step(model, max_len, 1)
    rng = np.random.default_rng(0)
    flush = np.ones(1 << 25, np.float32)

    def inputs(sig):
        return [rng.standard_normal(a.shape).astype(a.dtype) if np.dtype(a.dtype).kind == "f"
                else np.zeros(a.shape, a.dtype) for a in sig.args]
    rows = []
    floor = _call_floor_ms(repeat)
    for t in extract_tasks(step):
        if _kind(t.name) == "cache write":
            continue
        fn = mlc.compile(t.module, threads=1)[t.func_name]
        rows.append({"task": t.name, "kind": _kind(t.name), "calls": t.weight,
                     "MB": _unit_bytes(t.module, t.func_name, _kind(t.name) == "GEMV") / 1e6,
                     "ms": max(_cold_ms(fn, inputs(fn.signature), flush, repeat) - floor, 1e-4)})
    laid = run_stages(step, CompileOptions(host_target(), threads=1), until="layout")[1]
    main_text = str(laid.get_function("main"))
    for f in laid.function_names():
        if f.endswith("_attention"):   # the fused attention kernel (scheduled by its rule)
            unit = unit_module(laid, f)
            fn = mlc.compile(unit, threads=1)[f]
            args = inputs(fn.signature)
            kv = np.concatenate([args[1].ravel(), args[2].ravel()])   # one buffer, as CausalLM's caches
            advise_huge_pages(kv)
            args[1:3] = kv[:args[1].size].reshape(args[1].shape), kv[args[1].size:].reshape(args[2].shape)
            args[-1][..., ctx + 1:] = -np.inf   # the causal mask of position ctx: keys 0..ctx
            kv = sum(a.nbytes for a in args[1:3]) * (ctx + 1) / max_len
            rows.append({"task": f, "kind": "attention", "calls": main_text.count(f"@{f}("),
                         "MB": (args[0].nbytes * 2 + args[-1].nbytes + kv) / 1e6,
                         "ms": max(_cold_ms(fn, args, flush, repeat) - floor, 1e-4)})
    exe = mlc.compile(step, threads=1)["main"]
    shapes = mlc.llm.cache_shapes(model, max_len)
    block = rng.standard_normal(int(np.prod(shapes[0])) * len(shapes)).astype(np.float32)
    advise_huge_pages(block)
    caches = list(block.reshape(len(shapes), *shapes[0]))
    args = [np.zeros((1, 1), np.int64), np.array(ctx, np.int64), *caches]
    step_ms = min(exe.benchmark(*args, number=1, repeat=1, warmup=0).min_ms for _ in range(repeat)) - floor
    call_ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe(*args)
        call_ms.append((time.perf_counter() - t0) * 1e3)
    return {"model": name, "ctx": ctx, "rows": rows, "step_ms": step_ms, "call_ms": min(call_ms),
            "floor_ms": floor, "bandwidth_GBs": read_bandwidth(1) / 1e9}


def print_decode(prof: dict) -> None:
    """The table of :func:`decode_profile`: per task, then per kind, then the step."""
    bw = prof["bandwidth_GBs"]
    print(f"# {prof['model']} decode step at position {prof['ctx']}, 1 thread; cold single calls (min of "
          f"repeats, less a one-element call's {prof['floor_ms'] * 1e3:.1f} us); 1-thread read bandwidth "
          f"{bw:.1f} GB/s (llm_cpu.read_bandwidth(1))")
    print(f"{'task':58s} {'kind':11s} {'calls':>5s} {'MB':>8s} {'ms':>8s} {'GB/s':>6s} {'x bw':>5s} {'all ms':>8s}")
    kinds: dict = {}
    for r in prof["rows"]:
        gbs = r["MB"] / r["ms"]
        k = kinds.setdefault(r["kind"], [0.0, 0.0])
        k[0] += r["calls"] * r["ms"]
        k[1] += r["calls"] * r["MB"]
        print(f"{r['task'][:58]:58s} {r['kind']:11s} {r['calls']:5d} {r['MB']:8.2f} {r['ms']:8.3f} {gbs:6.1f} "
              f"{gbs / bw:5.2f} {r['calls'] * r['ms']:8.2f}")
    kernels = sum(v[0] for v in kinds.values())
    step = prof["step_ms"]
    for kind, (ms, mb) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"# {kind:11s} {ms:8.2f} ms ({ms / step * 100:4.1f}% of the step) {mb:8.1f} MB "
              f"{mb / ms:6.1f} GB/s; at {bw:.1f} GB/s: {mb / bw:7.2f} ms")
    print(f"# kernels {kernels:.2f} ms; step (native call) {step:.2f} ms; between kernels {step - kernels:.2f} ms; "
          f"Python call {prof['call_ms']:.2f} ms (+{prof['call_ms'] - step:.2f} ms marshalling)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18-onnx",
                    help=f"one of {', '.join(MODELS)}, a light ONNX model ({', '.join(light_models())}), "
                    "or the path of an ONNX file")
    ap.add_argument("--ort", action="store_true",
                    help="an ONNX model: also print onnxruntime's per-node profile (same process)")
    ap.add_argument("--threads", default="1,2", help="comma-separated OpenMP thread counts")
    ap.add_argument("--filter", default="", help="only tasks whose name contains this")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--decode", help="profile this llm_cpu model's decode step instead (1 thread)")
    ap.add_argument("--ctx", type=int, default=1024, help="--decode: the step's position (context)")
    args = ap.parse_args()
    if args.decode:
        prof = decode_profile(args.decode, args.ctx)
        print(json.dumps(prof) if args.json else "", end="\n" if args.json else "")
        if not args.json:
            print_decode(prof)
        return 0
    if args.model not in MODELS and not onnx_file(args.model):
        ap.error(f"--model {args.model!r}: expected one of {list(MODELS)}, a light ONNX model "
                 f"({list(light_models())}) or an .onnx path")
    if args.ort and not (onnx_file(args.model) or args.model in ("resnet18-onnx", "resnet50-light")):
        ap.error(f"--ort: --model {args.model!r} is not an ONNX model")
    threads = [int(t) for t in args.threads.split(",")]
    from mlc_mlir.target import describe, host_target
    rows, whole = profile(args.model, threads, args.filter)
    if args.ort:
        with tempfile.TemporaryDirectory() as work:
            path = onnx_file(args.model)
            if path is None:
                export_onnx(work)
                path = onnx_path(args.model, work)
            ort_rows = ort_profile(path, threads)
    totals = {th: sum(r["weight"] * r["ms"][th] for r in rows) for th in threads}
    if args.json:
        print(json.dumps({"model": args.model, "cpu": describe(host_target()), "tasks": rows,
                          "weighted_total_ms": totals, "whole_ms": whole,
                          **({"onnxruntime": ort_rows} if args.ort else {})}))
        return 0
    print(f"CPU: {describe(host_target())}")
    print(f"{'task':58s} {'calls':>5s} {'MFLOP':>8s} " +
          " ".join(f"{f'{th}T ms':>8s} {'GFLOP/s':>8s} {'share':>6s}" for th in threads))
    for r in rows:
        cells = " ".join(f"{r['ms'][th]:8.4f} {r['mflop'] / r['ms'][th]:8.1f} "
                         f"{100 * r['weight'] * r['ms'][th] / whole[th]:5.1f}%" for th in threads)
        print(f"{r['task'][:58]:58s} {r['weight']:5d} {r['mflop']:8.1f} {cells}")
    for label, v in (("weighted total (ms)", totals), ("whole model, native call (ms)", whole),
                     ("gap: whole - weighted total (ms)", {th: whole[th] - totals[th] for th in threads})):
        print(f"{label:58s} {'':5s} {'':8s} " + " ".join(f"{v[th]:8.4f} {'':8s} {'':6s}" for th in threads))
    if args.ort:
        print_ort(ort_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
