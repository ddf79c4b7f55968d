"""Decoder LLMs on the CPU: ``mlc.llm.compile_causal_lm`` vs transformers eager (its KV cache),
models from configs with seeded random weights, one row per (model, threads).

Columns: compile s (import + both steps), prefill ms at 32/128/512 prompt tokens (ours: one
call of the prefill step, symbolic in the prompt length, compiled once for all three), decode
tokens/s at context 128 and 1024 over 64 new tokens, the decode's share of the bandwidth
roofline, the round's read bandwidth, peak RSS of the worker (``VmHWM``) after
the compile ("cRSS") and after our prefills and decodes ("RSS"; transformers eager runs after it
in the same worker). GPT-2 has 1024 positions in all: its "1024" context is 1024 - 64 = 960
tokens.

Rounds (``--rounds R``, :class:`timing.Rounds`): the shared hosts have fast and slow phases
lasting minutes (one decode of the same model read 83 and 112 tokens/s 15 minutes apart), so the
whole sequence runs ``R`` times: in each round, per (model, threads), the bandwidth probe, ours +
eager, then each peer. Every round's rows are printed as measured (``r<k>``); then each (model,
threads, implementation) keeps its round with the highest geometric-mean decode tokens/s
(``best<k>``, the whole row from that round), the min-max spread of ours, eager and the probe
per thread count, and the decode targets judged per thread count.

Roofline: a decode step reads every weight once, so tokens/s <= read bandwidth / weight bytes
(the KV cache's bytes are not counted). The read bandwidth is measured per thread count ``t`` in
every round, right before the rows it judges (:func:`read_bandwidth`: the fastest of a BLAS GEMV
over 1 GiB on ``t`` BLAS threads and a stream read of 1 GiB split over ``t`` threads by BLAS
``sdot``, best of 5, each ``t`` in its own subprocess), for the row's ``t`` and for all cores.
Each decode row prints two shares: ``roof<ctx>`` against the bandwidth of the row's own thread
count in the same round (``bw GB/s``; what ``t`` cores can read: one core alone cannot saturate
the memory system) and ``best<ctx>`` against that round's best over the probed thread counts.

Each (model, threads) runs in its own subprocess (``OMP_NUM_THREADS``, ``torch.set_num_threads``).

Peers (``--peers``), each in its own subprocess killed after ``--peer-timeout`` s:
``compile``: transformers' static cache + ``torch.compile`` (inductor on the CPU): decode is
``generate(cache_implementation="static")`` with its compiled decode step
(``CompileConfig(fullgraph=True, mode="default")`` with ``_compile_all_devices`` set),
prefill a ``torch.compile``-d forward (one compile per prompt length); its compile s is the
first generate's extra time plus the prefill compiles. ``ort``: onnxruntime on the decoder-with-past exported by
``mlc_mlir.llm.onnx_export.export_decoder`` (``torch.onnx.export``, dynamo, dynamic
batch/sequence/past axes): prefill with an empty past, decode feeding ``present`` back as
``past`` (the optimum / onnxruntime-genai form; each step's graph concatenates the cache); its
compile s is the export plus the session build. ``mlc-onnx``: the same file through
``mlc.from_onnx`` (batch/seq/past symbolic, ``dim_bounds`` letting past be 0) and one
``mlc.compile``, run the same way (the ONNX path, next to ``mlc.llm``'s in-place cache).

    python benchmarks/llm_cpu.py [--models tiny-gpt2,gpt2-124m] [--threads 1,2] [--json]
                                 [--peers compile,ort,mlc-onnx] [--peer-timeout 1200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
from timing import Rounds  # benchmarks/timing.py; this folder is on sys.path

#: name -> (transformers model class name, config class name, config kwargs)
MODELS = {
    "tiny-gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)),
    "tiny-llama": ("LlamaForCausalLM", "LlamaConfig", dict(
        num_hidden_layers=2, hidden_size=128, intermediate_size=344, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000)),
    "gpt2-124m": ("GPT2LMHeadModel", "GPT2Config", dict()),
    "llama-110m": ("LlamaForCausalLM", "LlamaConfig", dict(
        num_hidden_layers=12, hidden_size=768, intermediate_size=2048, num_attention_heads=12,
        num_key_value_heads=4, vocab_size=32000)),
}
PREFILL = (32, 128, 512)
CONTEXTS = (128, 1024)
NEW = 64


def _read_gemv(a, threads, pool) -> float:
    """BLAS ``sgemv`` ``(16384, 16384) @ x`` on ``threads`` BLAS threads (each a contiguous block
    of rows: the decode step's access pattern, the weight streamed once, x in L2)."""
    from threadpoolctl import threadpool_limits
    w, x = a.reshape(16384, -1), np.ones(a.size // 16384, np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        return _timed(lambda: w @ x)


def _read_dot(a, threads, pool) -> float:
    """``threads`` Python threads (numpy releases the GIL), each ``np.dot(p, p)`` (BLAS ``sdot``
    on 1 BLAS thread: unrolled vector accumulators, each element loaded once) over its contiguous
    piece: a stream read with no arithmetic bound (``np.sum`` of float32 sums pairwise and is
    bound by its adds, ~9 GB/s per Zen 5 core)."""
    from threadpoolctl import threadpool_limits
    pieces = np.array_split(a, threads)
    with threadpool_limits(limits=1, user_api="blas"):
        return _timed(lambda: list(pool.map(lambda p: np.dot(p, p), pieces)))


#: Read-bandwidth methods of :func:`read_bandwidths`, each ``(name, fn(a, threads, pool))``
#: timing one read of the 1 GiB float32 buffer ``a`` on ``threads`` threads.
READ_METHODS = (("gemv", _read_gemv), ("dot", _read_dot))


def read_bandwidths(threads: int, repeat: int = 5) -> dict:
    """``{method: bytes/s}``: 1 GiB of float32 read on ``threads`` threads by each of
    :data:`READ_METHODS`, best of ``repeat``; the methods take turns within each repeat (the
    same contention for all on a loaded host)."""
    from concurrent.futures import ThreadPoolExecutor

    a = np.ones(1 << 28, np.float32)
    best = {name: float("inf") for name, _ in READ_METHODS}
    with ThreadPoolExecutor(threads) as pool:
        for _, fn in READ_METHODS:
            fn(a, threads, pool)             # pages touched, BLAS and Python threads started
        for _ in range(repeat):
            for name, fn in READ_METHODS:
                best[name] = min(best[name], fn(a, threads, pool))
    return {name: a.nbytes / t for name, t in best.items()}


def read_bandwidth(threads: int) -> float:
    """Bytes/s reading 1 GiB of float32 on ``threads`` threads: the fastest of
    :func:`read_bandwidths` (a measurement can only under-read what the cores can stream, so
    the best method is the honest roofline)."""
    return max(read_bandwidths(threads).values())


def _bandwidths(threads) -> dict:
    """``{t: read_bandwidths(t)}`` for each thread count, each in its own subprocess (the 1 GiB
    buffer stays out of the workers' peak RSS)."""
    out = {}
    for t in threads:
        r = subprocess.run([sys.executable, __file__, "--bandwidth-worker", str(t)],
                           env=dict(os.environ, OMP_NUM_THREADS=str(t)), capture_output=True, text=True)
        out[t] = json.loads(r.stdout.splitlines()[-1])
    return out


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _model(name):
    import torch
    import transformers
    cls, cfg_cls, kw = MODELS[name]
    torch.manual_seed(0)
    return getattr(transformers, cls)(getattr(transformers, cfg_cls)(**kw)).eval()


def _weight_bytes(model) -> int:
    """Bytes of the model's parameters (what a decode step reads once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def worker(name: str, threads: int) -> dict:
    import torch
    import mlc_mlir as mlc

    torch.set_num_threads(threads)
    model = _model(name)
    vocab = model.config.vocab_size
    weight_bytes = _weight_bytes(model)
    rng = np.random.default_rng(0)
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    max_len = min(max(CONTEXTS) + NEW, positions)
    contexts = [min(c, max_len - NEW) for c in CONTEXTS]   # GPT-2: 1024 positions in all
    lm = mlc.llm.compile_causal_lm(model, max_seq_len=max_len, threads=threads)
    row = {"model": name, "threads": threads, "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
           "weight_MB": round(weight_bytes / 1e6, 1), "compile_s": round(lm.compile_seconds, 1),
           "peak_rss_compile_MB": _peak_rss_mb()}
    ids_pf = {n: rng.integers(0, vocab, (1, n)) for n in PREFILL}
    ids_ctx = {c: rng.integers(0, vocab, (1, c)) for c in contexts}
    # ours first, then eager: torch's thread pool must not spin while ours runs
    for n in PREFILL:
        row[f"prefill{n}_ms"] = round(min(_timed(lambda: lm.prefill(ids_pf[n])) for _ in range(3)) * 1e3, 2)
    row["contexts"] = contexts
    for label, ctx in zip(CONTEXTS, contexts):
        lm.generate(ids_ctx[ctx], max_new_tokens=NEW)
        t = lm.last_timings
        row[f"decode{label}_tok_s"] = round((t["new_tokens"] - 1) / t["decode_s"], 1)
    row["peak_rss_MB"] = _peak_rss_mb()
    eager = {}
    with torch.no_grad():
        for n in PREFILL:
            t = torch.from_numpy(ids_pf[n])
            eager[f"prefill{n}_ms"] = round(min(_timed(lambda: model(t)) for _ in range(3)) * 1e3, 2)
        for label, ctx in zip(CONTEXTS, contexts):
            tid = torch.from_numpy(ids_ctx[ctx])
            pre = min(_timed(lambda: model(tid, use_cache=True)) for _ in range(2))
            gen = _timed(lambda: model.generate(tid, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                                pad_token_id=0))
            eager[f"decode{label}_tok_s"] = round((NEW - 1) / max(gen - pre, 1e-9), 1)
    row["eager"] = eager
    row["weight_bytes"] = weight_bytes
    return row


def _peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``, MB): unlike ``ru_maxrss``, which Linux keeps
    across ``execve``, it does not include the parent's peak (the 1 GiB bandwidth buffer)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 0)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)


def _contexts(model):
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    max_len = min(max(CONTEXTS) + NEW, positions)
    return [min(c, max_len - NEW) for c in CONTEXTS]


def peer_compile(name: str, threads: int) -> dict:
    """transformers + ``torch.compile``: prefill ms of a compiled forward, decode tokens/s of
    ``generate`` with a static cache and its compiled decode step (see the module docstring)."""
    import torch
    from transformers import CompileConfig

    torch.set_num_threads(threads)
    model = _model(name)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    row, compile_s = {"impl": "compile"}, 0.0
    fwd = torch.compile(model)
    with torch.no_grad():
        for n in PREFILL:
            t = torch.from_numpy(rng.integers(0, vocab, (1, n)))
            compile_s += _timed(lambda: fwd(t, use_cache=False))
            times = [_timed(lambda: fwd(t, use_cache=False)) for _ in range(3)]
            compile_s -= min(times)
            row[f"prefill{n}_ms"] = round(min(times) * 1e3, 2)
        cfg = CompileConfig(fullgraph=True, mode="default")  # reduce-overhead's CUDA graphs do not apply
        cfg._compile_all_devices = True  # a class attribute: generate compiles on CUDA only otherwise
        for label, ctx in zip(CONTEXTS, _contexts(model)):
            tid = torch.from_numpy(rng.integers(0, vocab, (1, ctx)))

            def gen(k):
                return model.generate(tid, max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0,
                                      cache_implementation="static", compile_config=cfg)
            first = _timed(lambda: gen(NEW))            # compiles the decode step
            pre = min(_timed(lambda: gen(1)) for _ in range(2))
            full = min(_timed(lambda: gen(NEW)) for _ in range(2))
            compile_s += first - full
            row[f"decode{label}_tok_s"] = round((NEW - 1) / max(full - pre, 1e-9), 1)
    row["compile_s"] = round(compile_s, 1)
    row["peak_rss_MB"], row["weight_bytes"] = _peak_rss_mb(), _weight_bytes(model)
    return row


def _peer_onnx(name: str, threads: int, runtime: str) -> dict:
    """A runtime on the decoder-with-past exported by
    :func:`mlc_mlir.llm.onnx_export.export_decoder`: prefill ms with an empty past, decode
    tokens/s feeding each step's ``present`` back as ``past`` (greedy). ``runtime``: ``ort``
    (onnxruntime) or ``mlc-onnx`` (``mlc.from_onnx`` with batch/seq/past symbolic, one
    ``mlc.compile``)."""
    import tempfile

    import onnxruntime as ort
    import torch

    import mlc_mlir as mlc
    from mlc_mlir.llm.onnx_export import export_decoder

    torch.set_num_threads(threads)
    model = _model(name)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{name}.onnx")
        inputs, _ = export_decoder(model, path, past=True)
        if runtime == "ort":
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            run = lambda args: sess.run(None, dict(zip(inputs, args)))  # noqa: E731
        else:
            exe = mlc.compile(mlc.from_onnx(path, dim_bounds={"past": (0, None)}), threads=threads)
            run = lambda args: [np.asarray(o) for o in exe(*args)]  # noqa: E731
    row = {"impl": runtime, "compile_s": round(time.perf_counter() - t0, 1)}
    _, kv_heads, _, head_dim = mlc.llm.cache_shapes(model, 1)[0]
    no_past = [np.zeros((1, kv_heads, 0, head_dim), np.float32)] * (len(inputs) - 1)

    def step(ids, past):
        out = run([ids, *past])
        return out[0], out[1:]
    for n in PREFILL:
        ids = rng.integers(0, vocab, (1, n))
        step(ids, no_past)
        row[f"prefill{n}_ms"] = round(min(_timed(lambda: step(ids, no_past)) for _ in range(3)) * 1e3, 2)
    for label, ctx in zip(CONTEXTS, _contexts(model)):
        ids = rng.integers(0, vocab, (1, ctx))
        first = step(ids, no_past)   # the prefill, not timed

        def decode(logits=first[0], past=first[1]):
            for _ in range(NEW - 1):
                logits, past = step(logits[:, -1:].argmax(-1), past)
        row[f"decode{label}_tok_s"] = round((NEW - 1) / _timed(decode), 1)
    row["peak_rss_MB"], row["weight_bytes"] = _peak_rss_mb(), _weight_bytes(model)
    return row


PEERS = {"compile": peer_compile, "ort": lambda name, threads: _peer_onnx(name, threads, "ort"),
         "mlc-onnx": lambda name, threads: _peer_onnx(name, threads, "mlc-onnx")}


def _peer_rows(name: str, threads: int, peers, timeout: float):
    """Each peer's row, measured in a subprocess per peer as the caller asks for it (a
    generator); a peer that fails or runs past ``timeout`` gives a row saying why."""
    for peer in peers:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        try:
            r = subprocess.run([sys.executable, __file__, "--peer-worker", peer, name, str(threads)],
                               env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            yield {"impl": peer, "failed": f"did not finish in {timeout:.0f} s"}
            continue
        got = [json.loads(ln[4:]) for ln in r.stdout.splitlines() if ln.startswith("ROW ")]
        yield got[0] if got else {"impl": peer, "failed": (r.stderr.strip().splitlines() or ["?"])[-1][:160]}


def _decode_score(row: dict) -> float:
    """A row's score among its rounds: the geometric mean of its decode tokens/s over the
    contexts (the prefill times of the kept round come with it: one row is one round)."""
    return float(np.prod([row[f"decode{c}_tok_s"] for c in CONTEXTS])) ** (1 / len(CONTEXTS))


def _shares(row: dict) -> list:
    """The decode row's roofline shares (fractions): for each context against the tokens/s its
    own round's bandwidth on its thread count allows (``bw``), then against that round's best
    over the probed thread counts (``bw_best``)."""
    return [row[f"decode{c}_tok_s"] * row["weight_bytes"] / row[k] for k in ("bw", "bw_best") for c in CONTEXTS]


def _print_row(name: str, threads: int, impl: str, label: str, row: dict) -> None:
    """One table line; ``label``: the round (``r1``, ...) or ``best<r>`` for a kept round."""
    rss = " ".join(f"{row[k]:7.0f}" if row.get(k) else f"{'':7s}" for k in ("peak_rss_MB", "peak_rss_compile_MB"))
    note = f"  (decode: {row['decode']})" if "decode" in row else ""
    print(f"{name:11s} {threads:3d} {impl:8s} {label:5s} {row.get('compile_s', 0):9.1f} " +
          " ".join(f"{row[f'prefill{n}_ms']:9.2f}" for n in PREFILL) + " " +
          " ".join(f"{row[f'decode{c}_tok_s']:12.1f}" for c in CONTEXTS) + " " +
          " ".join(f"{x * 100:7.0f}%" for x in _shares(row)) + f" {row['bw'] / 1e9:7.1f} {rss}{note}", flush=True)


def _round(name: str, threads: int, rnd: int, a, rounds: Rounds) -> None:
    """One round of ``(name, threads)``: the bandwidth probe on ``threads`` and on all cores,
    ours and eager (one worker), then each peer; every row gets this round's bandwidths
    (``bw``: its thread count's, ``bw_best``: the best probed) and is printed and recorded."""
    methods = _bandwidths(sorted({threads, os.cpu_count() or 1}))
    bw = {"bw": max(methods[threads].values()), "bw_best": max(max(m.values()) for m in methods.values()),
          "round": rnd}
    rounds.add((name, threads, "bandwidth"), dict(bw, methods=methods[threads]))
    r = subprocess.run([sys.executable, __file__, "--worker", name, str(threads)],
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    got = [json.loads(ln[4:]) for ln in r.stdout.splitlines() if ln.startswith("ROW ")]

    def record(impl: str, row: dict) -> None:
        if a.json:
            print("# " + json.dumps(dict(row, model=name, threads=threads, impl=impl, **bw)))
        if "failed" in row:
            print(f"{name:11s} {threads:3d} {impl:8s} r{rnd:<4d} failed: {row['failed']}", flush=True)
            rounds.fail((name, threads, impl), row["failed"])
            return
        row = dict(row, **bw)
        rounds.add((name, threads, impl), row)
        _print_row(name, threads, impl, f"r{rnd}", row)
    if got:
        mlc = {k: v for k, v in got[0].items() if k != "eager"}
        record("mlc", mlc)
        record("eager", dict(got[0]["eager"], weight_bytes=mlc["weight_bytes"]))
    else:
        why = (r.stderr.strip().splitlines() or ["?"])[-1][:160]
        record("mlc", {"failed": why})
        record("eager", {"failed": why})
    for peer in _peer_rows(name, threads, [q for q in a.peers.split(",") if q], a.peer_timeout):
        record(peer["impl"], peer)


def _summary(models, thread_counts, rounds: Rounds, n) -> None:
    """The kept rounds (``best<r>``), the rounds' spread of ours, eager and the bandwidth probe
    per (model, threads), and the issue's decode targets judged per thread count: >= 70% of the
    roofline of the row's own round and thread count, >= 1.5x eager and >= 1.0x torch.compile."""
    print(f"# best of {n} round(s) per row (the round with the highest geometric-mean decode tokens/s; "
          "its shares use that round's bandwidth)")
    for name in models:
        for t in thread_counts:
            for key in [k for k in rounds.keys() if k[:2] == (name, t) and k[2] != "bandwidth"]:
                row = rounds.best(key, _decode_score)
                if row is None:
                    print(f"{name:11s} {t:3d} {key[2]:8s} {'best':5s} failed: {rounds.error(key)}")
                else:
                    _print_row(name, t, key[2], f"best{row['round']}", row)
    print(f"# spread (min-max over {n} round(s))")
    for name in models:
        for t in thread_counts:
            parts = []
            for impl in ("mlc", "eager"):
                for c in CONTEXTS:
                    sp = rounds.spread((name, t, impl), lambda r: r[f"decode{c}_tok_s"])
                    parts += [f"{impl} dec{c} {sp[0]:.1f}-{sp[1]:.1f} t/s"] if sp else []
            sp = rounds.spread((name, t, "bandwidth"), lambda r: r["bw"] / 1e9)
            parts += [f"bandwidth {sp[0]:.1f}-{sp[1]:.1f} GB/s"] if sp else []
            print(f"#   {name} {t} thr: " + ", ".join(parts))
    print("# targets per thread count (the kept rows): decode >= 70% of roof<ctx>, >= 1.5x eager, >= 1.0x compile")
    for name in models:
        for t in thread_counts:
            ours = rounds.best((name, t, "mlc"), _decode_score)
            if ours is None:
                continue
            parts = [f"roof{c} {x * 100:.0f}% ({'probe under-read' if x > 1 else 'met' if x >= 0.7 else 'missed'})"
                     for c, x in zip(CONTEXTS, _shares(ours))]   # > 100%: the probe ran in a slower phase
            for impl, goal in (("eager", 1.5), ("compile", 1.0)):
                peer = rounds.best((name, t, impl), _decode_score)
                for c in CONTEXTS if peer else ():
                    x = ours[f"decode{c}_tok_s"] / peer[f"decode{c}_tok_s"]
                    parts.append(f"dec{c} {x:.2f}x {impl} ({'met' if x >= goal else 'missed'})")
            print(f"#   {name} {t} thr: " + ", ".join(parts))


def _interrupt(signum, frame):
    """SIGTERM handler: stop the measurement as SIGINT does (the child in flight is killed by
    ``subprocess.run``), so the rounds measured so far are summarized."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--json", action="store_true", help="also print each row as JSON (a '# ' line)")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    p.add_argument("--peers", default="compile,ort,mlc-onnx", help="comma-separated peers besides eager: "
                   + ",".join(PEERS) + " ('' for none)")
    p.add_argument("--peer-timeout", type=float, default=1200.0, help="seconds per peer subprocess")
    p.add_argument("--rounds", type=int, default=3, help="measure every (model, threads, implementation) this "
                   "many times, in turn, and keep each row's best round (the host has slow phases of minutes)")
    p.add_argument("--bandwidth-worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--peer-worker", nargs=3, metavar=("PEER", "MODEL", "THREADS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.peer_worker:
        print("ROW " + json.dumps(PEERS[a.peer_worker[0]](a.peer_worker[1], int(a.peer_worker[2]))))
        return 0
    if a.bandwidth_worker:
        print(json.dumps(read_bandwidths(a.bandwidth_worker)))
        return 0
    if a.worker:
        print("ROW " + json.dumps(worker(a.worker[0], int(a.worker[1]))))
        return 0
    models = a.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad:
        p.error(f"--models {bad}: expected some of {list(MODELS)}")
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.strip()
    thread_counts = [int(t) for t in a.threads.split(",")]
    print(f"# {cpu}; {a.rounds} round(s), each: per (model, threads) the read-bandwidth probe (the fastest of a "
          "BLAS GEMV and an sdot stream read over 1 GiB on the row's threads and on all cores, best of 5), ours + "
          "eager, the peers")
    print(f"# prefill: ours in one call of the symbolic step; decode: {NEW} new tokens after a prompt of "
          "the context length; roofline = weight bytes / bandwidth per token: roof<ctx> with the bandwidth of "
          "the row's thread count in the same round (bw GB/s), best<ctx> with that round's best over thread counts")
    print(f"{'model':11s} {'thr':>3s} {'impl':8s} {'rnd':5s} {'compile s':>9s} " +
          " ".join(f"{'pf' + str(n) + ' ms':>9s}" for n in PREFILL) + " " +
          " ".join(f"{'dec' + str(c) + ' t/s':>12s}" for c in CONTEXTS) + " " +
          " ".join(f"{'roof' + str(c):>8s}" for c in CONTEXTS) + " " +
          " ".join(f"{'best' + str(c):>8s}" for c in CONTEXTS) + f" {'bw GB/s':>7s} {'RSS MB':>7s} {'cRSS MB':>7s}")
    rounds, done = Rounds(), 0
    signal.signal(signal.SIGTERM, _interrupt)   # a background run ignores SIGINT: kill it with SIGTERM
    try:
        for rnd in range(1, a.rounds + 1):
            for name in models:
                for threads in thread_counts:
                    _round(name, threads, rnd, a, rounds)
            done = rnd
    except KeyboardInterrupt:   # SIGINT or SIGTERM: summarize the rounds measured so far
        print(f"# interrupted in round {done + 1}: the summary holds the rows measured so far")
    _summary(models, thread_counts, rounds, done if done == a.rounds else f"{done}-{done + 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
