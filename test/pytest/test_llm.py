"""Decoder LLMs: tiny GPT-2 / Llama / Qwen2 / Mistral logits vs transformers (static import),
Mistral's sliding window (covering the cache or shorter than the prompt),
``ops.update_slice`` and in/out arguments vs numpy, the KV-cache decode step never copying a
cache (bufferized IR), q/k/v and gate/up merged into one matmul each in the decode step,
and ``mlc.llm`` generation token-exact with transformers' ``generate``."""

import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mlc_mlir as mlc  # noqa: E402
from mlc_mlir import ops  # noqa: E402
from mlc_mlir.errors import BuildError, ExecutionError  # noqa: E402
from mlc_mlir.pipeline.compile import lower, run_stages  # noqa: E402
from mlc_mlir.pipeline.options import CompileOptions  # noqa: E402

RTOL = 1e-4


def _tiny(name: str, **config):
    """A 2-layer decoder of kind ``name`` with seeded random weights; ``config`` overrides the
    Llama/Qwen2/Mistral config's arguments."""
    torch.manual_seed(0)
    t = transformers
    gqa = dict(dict(num_hidden_layers=2, hidden_size=128, intermediate_size=344, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=1000), **config)
    model = {
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**gqa)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**gqa)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**gqa)),
    }[name]()
    return model.eval()


class _Logits(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits


@pytest.fixture(scope="module")
def compiled_lm():
    """``compiled_lm(name, max_seq_len, **config)``: the tiny decoder ``name`` (``_tiny``'s
    ``config``) compiled by ``compile_causal_lm`` once per module, shared by the tests that
    generate with it, read its linked weights or inspect its imported steps. Returns a namespace:
    ``model``, ``lm`` (its ``prefill_chunk`` reset to None on each request), ``compiled`` (each
    module ``compile_causal_lm`` compiled, in order) and ``imports`` (per ``import_step`` call,
    decode then prefill: ``(module, derived_weights, its length before, its length after)``)."""
    import mlc_mlir.llm.causal_lm as causal_lm

    built = {}

    def get(name, max_seq_len, **config):
        key = (name, max_seq_len, tuple(sorted(config.items())))
        if key not in built:
            ns = types.SimpleNamespace(model=_tiny(name, **config), compiled=[], imports=[])

            def importer(model, max_len, *args, **kwargs):
                derived = kwargs.get("derived_weights", args[1] if len(args) > 1 else None)
                before = len(derived)
                mod = real_import(model, max_len, *args, **kwargs)
                ns.imports.append((mod, derived, before, len(derived)))
                return mod

            real_import, real_compile = causal_lm.import_step, causal_lm.compile_module
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(causal_lm, "import_step", importer)
                mp.setattr(causal_lm, "compile_module",
                           lambda mod, *a, **k: ns.compiled.append(mod) or real_compile(mod, *a, **k))
                ns.lm = mlc.llm.compile_causal_lm(ns.model, max_seq_len=max_seq_len)
            built[key] = ns
        built[key].lm.prefill_chunk = None
        return built[key]

    return get

@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "mistral"])
def test_decoder_logits_match_transformers(name):
    lm = _Logits(_tiny(name))
    ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = lm(ids).numpy()
    got = mlc.compile(mlc.from_torch(lm, (ids,)))(ids.numpy())
    err = np.abs(got - want).max() / np.abs(want).max()
    assert got.shape == want.shape and err < RTOL, err


def test_mistral_sliding_window_logits_dynamic_seq_match_transformers():
    """Mistral with a window of 16, logits for the whole sequence (no cache), imported with a
    symbolic ``seq`` (its mask indexes positions with ``(1, 1, seq, 1)`` index tensors): one
    compile, logits equal to transformers' at lengths 5, 32 and 77 (the window cuts in above 16)."""
    lm = _Logits(_tiny("mistral", sliding_window=16))
    ids = torch.zeros((1, 32), dtype=torch.int64)
    exe = mlc.compile(mlc.from_torch(lm, (ids,), dynamic_shapes={"ids": {1: torch.export.Dim("seq", min=2, max=128)}}))
    for n in (5, 32, 77):
        ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = lm(ids).numpy()
        got = np.asarray(exe(ids.numpy()))
        assert got.shape == want.shape and np.abs(got - want).max() / np.abs(want).max() < RTOL


def _update_module(shape, upd, writable):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        c = f.arg("c", shape)
        u = f.arg("u", upd)
        p = f.arg("p", (1,), "int64")
        new = ops.update_slice(c, u, [0, p, 0])
        if writable:
            f.write_argument(c, new)
        f.output(ops.sum(new, axis=1))
    return bb.finish()


@pytest.mark.parametrize("writable", [False, True])
def test_update_slice_matches_numpy_and_clamps(writable):
    exe = mlc.compile(_update_module((2, 40, 8), (2, 3, 8), writable))
    rng = np.random.default_rng(0)
    u = rng.random((2, 3, 8), dtype=np.float32)
    for p, at in ((0, 0), (5, 5), (37, 37), (39, 37), (-4, 0)):   # offsets clamp as in XLA
        c = rng.random((2, 40, 8), dtype=np.float32)
        want = c.copy()
        want[:, at:at + 3] = u
        before = c.copy()
        got = exe(c, u, np.array([p]))
        np.testing.assert_allclose(got, want.sum(1), rtol=1e-5)
        np.testing.assert_array_equal(c, want if writable else before)   # in/out vs read-only


def test_write_argument_refuses_other_readers_and_dead_writes():
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="readers"):
        with bb.function("main") as f:
            c, u = f.arg("c", (4, 8)), f.arg("u", (1, 8))
            new = ops.update_slice(c, u, [1, 0])
            f.write_argument(c, new)
            f.output(ops.add(new, c))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="never read"):
        with bb.function("main") as f:
            c, u = f.arg("c", (4, 8)), f.arg("u", (1, 8))
            f.write_argument(c, ops.update_slice(c, u, [1, 0]))
            f.output(ops.relu(u))
    bb = mlc.GraphBuilder()
    with pytest.raises(BuildError, match="update_slice"):
        with bb.function("main") as f:
            c = f.arg("c", (4, 8))
            f.write_argument(c, ops.relu(c))


_BUFFERIZE = ("builtin.module(eliminate-empty-tensors, one-shot-bufferize{bufferize-function-boundaries "
              "function-boundary-type-conversion=identity-layout-map}, canonicalize, cse, canonicalize, "
              "buffer-results-to-out-params{hoist-static-allocs modify-public-functions})")


@pytest.mark.parametrize("name,config,max_len", [("gpt2", {}, 128), ("llama", {}, 128),
                                                  ("mistral", {"sliding_window": 16}, 96)])
def test_decode_step_never_copies_a_cache(name, config, max_len, compiled_lm, tmp_path):
    """The decode step of the tiny GPT-2 / Llama (and Mistral with a window of 16 over a cache
    of 96), as ``compile_causal_lm`` imported it, through the compile's stages up to ``prepare``
    (without LLVM) and bufferized as cpu.pipeline does: no memref.copy and no allocation has a
    cache's shape (each step writes its K/V row into the caller's arrays). GPT-2 and Llama (2 KV
    heads for 4: grouped-query): each layer's attention is fused into one call that reads the
    cache arguments themselves; nothing of a cache's size (nor of its repeat_kv broadcast) is
    copied or allocated, and the key loop prefetches from the caches' buffers."""
    entry = compiled_lm(name, max_len, **config)
    shape = mlc.llm.cache_shapes(entry.model, max_len)[0]
    decode = entry.imports[0][0]
    assert decode.signature("main").dims == {}                # the static one-token step
    prepared = run_stages(decode, CompileOptions(target="cpu", dump_ir=str(tmp_path)), until="prepare")[1]
    text = str(lower(prepared, _BUFFERIZE))
    cache_type = "x".join(str(d) for d in shape) + "xf32"
    assert re.search(r"memref<" + cache_type, text)          # the caches are there...
    copies = re.findall(r"memref\.copy [^\n]*", text) + re.findall(r"linalg\.copy [^\n]*", text)
    allocs = re.findall(r"memref\.alloca?\([^\n]*", text)
    assert not [c for c in copies + allocs if cache_type in c], copies + allocs   # ...never copied
    if name == "mistral":
        return
    kv, d = shape[1], 32
    calls = re.findall(r"call @main_attention\w*\([^)]*\) [^:]*: \(([^)]*)\)",
                       (tmp_path / "03-schedule.mlir").read_text())
    assert len(calls) == 2, calls                                   # one per layer
    cache = f"tensor<1x{kv}x{max_len}x{d}xf32>"
    assert all(c.count(cache) == 2 for c in calls), calls          # K and V: the caches, not copies
    sizes = {f"1x{kv}x{max_len}x{d}xf32", f"1x4x{max_len}x{d}xf32", f"1x2x2x{max_len}x{d}xf32",
             f"4x{d}x{max_len}xf32", f"4x{max_len}x{d}xf32"}
    moved = re.findall(r"memref\.copy [^\n]*", text) + re.findall(r"memref\.alloca?\([^\n]*", text)
    assert not [m for m in moved if any(s in m for s in sizes)], moved
    # the single-row key loop prefetches the next key block's K and V rows from the caches
    assert re.search(rf"memref\.prefetch [^\n]*memref<1x{kv}x{max_len}x{d}xf32", text), text[:2000]


def test_llama_decode_step_merges_qkv_and_gate_up_and_generates_transformers_tokens(compiled_lm):
    """``merge-projections`` (test_merge_projections.py) on the tiny Llama's decode step as
    ``compile_causal_lm`` imported it: q/k/v and gate/up become one matmul each (the merged
    weight's columns are q 128 + k 64 + v 64 and gate 344 + up 344), and the compiled steps'
    greedy tokens match transformers'."""
    from mlc_mlir.ir.walk import find_ops
    from mlc_mlir.pipeline.layout import merge_projections
    from mlc_mlir.target import host_target

    entry = compiled_lm("llama", 128)
    step = entry.imports[0][0]                        # the decode step
    assert len(find_ops(step, "linalg.matmul")) == 2 * 7 + 1   # q, k, v, o, gate, up, down per layer; head
    merged = merge_projections(step, host_target(), ["main"], CompileOptions(host_target()))
    shapes = sorted(str(op.operands[1].type) for op in find_ops(merged, "linalg.matmul"))
    assert len(shapes) == 2 * 4 + 1                  # qkv, o, gate_up, down per layer; head
    assert shapes.count("tensor<128x256xf32>") == 2   # q 128 + k 64 + v 64
    assert shapes.count("tensor<128x688xf32>") == 2   # gate 344 + up 344
    ids = torch.tensor([[1, 5, 7, 2]])
    want = entry.model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0).numpy()
    np.testing.assert_array_equal(entry.lm.generate(ids.numpy(), max_new_tokens=8), want)


def _want(model, ids, new):
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0).numpy()


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_generate_is_token_exact_with_transformers(name, monkeypatch, compiled_lm):
    """One compile of the symbolic prefill serves prompts of 1, 2, 7, 21 and 64 tokens (and the
    same prompts in pieces of 8), token-exact with transformers' greedy ``generate``."""
    import mlc_mlir.llm.causal_lm as causal_lm

    entry = compiled_lm(name, 128)
    model, lm = entry.model, entry.lm
    assert len(entry.compiled) == 2                              # decode, then prefill: once each
    compiled = []   # and nothing more while generating
    real = causal_lm.compile_module
    monkeypatch.setattr(causal_lm, "compile_module", lambda mod, *a, **k: compiled.append(mod) or real(mod, *a, **k))
    assert lm.prefill_step.signature.dims == {"seq": (1, 128)}    # symbolic in the prompt length
    assert lm.decode_step.signature.dims == {}
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(2))
    np.testing.assert_array_equal(lm.generate(ids.numpy()[:, :21], max_new_tokens=64), _want(model, ids[:, :21], 64))
    for n in (1, 2, 7, 64):   # the caches are reused from position 0
        np.testing.assert_array_equal(lm.generate(ids.numpy()[:, :n], max_new_tokens=6), _want(model, ids[:, :n], 6))
    lm.prefill_chunk = 8      # pieces of 8 (the last one 5 or 1 tokens) through the same step
    for n in (21, 57):
        np.testing.assert_array_equal(lm.generate(ids.numpy()[:, :n], max_new_tokens=4), _want(model, ids[:, :n], 4))
    assert not compiled
    lm.prefill_chunk = None
    # seeded sampling is reproducible and stays in the vocabulary
    kw = dict(max_new_tokens=8, do_sample=True, temperature=0.8, top_k=50, top_p=0.9, seed=3)
    s1, s2 = lm.generate(ids.numpy()[:, :21], **kw), lm.generate(ids.numpy()[:, :21], **kw)
    np.testing.assert_array_equal(s1, s2)
    assert s1.shape == (1, 29) and (s1 >= 0).all() and (s1 < 1000).all()
    with pytest.raises(ExecutionError, match="max_seq_len"):
        lm.generate(ids.numpy()[:, :21], max_new_tokens=120)
    with pytest.raises(ExecutionError, match="temperature"):
        lm.generate(ids.numpy()[:, :21], do_sample=True, temperature=0)
    long = np.zeros((1, 129), np.int64)
    with pytest.raises(ExecutionError, match=r"size 'seq' is 129 \(input_ids.shape\[1\]\); expected at most 128"):
        lm.prefill(long)          # the compiled step checks its symbolic size
    with pytest.raises(ExecutionError, match="size 'seq' is 0"):
        lm.prefill(long[:, :0])
    lm.prefill_chunk = 8
    with pytest.raises(ExecutionError, match="size 'seq'.* is 129"):
        lm.prefill(long)
    assert not compiled


def test_mistral_generate_is_token_exact_with_and_without_a_short_window(compiled_lm):
    """Mistral's sliding-window attention: a window (4096 by default) covering ``max_seq_len``
    is full attention, and 64 greedy tokens after a 21-token prompt match transformers'
    ``generate``. A window of 16, shorter than the 32-token prompt and the cache: the steps
    attend to keys ``q - 16 < k <= q`` of the cache written at ``position`` (transformers'
    sliding-window mask over absolute positions), and 64 greedy tokens match ``generate``
    (``DynamicSlidingWindowLayer``) through the symbolic prefill in one call, in pieces of 8
    (a piece's keys reach into the previous pieces), and the static decode step; the tokens
    differ from full attention's, so the window is exercised."""
    entry = compiled_lm("mistral", 96)
    model, lm = entry.model, entry.lm
    assert model.config.sliding_window >= 96
    ids = torch.randint(0, 1000, (1, 21), generator=torch.Generator().manual_seed(4))
    np.testing.assert_array_equal(lm.generate(ids.numpy(), max_new_tokens=64), _want(model, ids, 64))
    entry = compiled_lm("mistral", 96, sliding_window=16)
    windowed, lm = entry.model, entry.lm
    ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(5))
    want = _want(windowed, ids, 64)
    np.testing.assert_array_equal(lm.generate(ids.numpy(), max_new_tokens=64), want)
    lm.prefill_chunk = 8
    np.testing.assert_array_equal(lm.generate(ids.numpy(), max_new_tokens=8), want[:, :40])
    windowed.config.sliding_window = None
    try:
        assert (_want(windowed, ids, 64) != want).any()
    finally:
        windowed.config.sliding_window = 16   # the model is shared (compiled_lm)


def test_next_token_filters_like_transformers():
    from mlc_mlir.llm.sampling import next_token
    logits = np.array([0.0, 3.0, 2.9, -1.0, 2.0], np.float32)
    assert next_token(logits) == 1
    rng = np.random.default_rng(0)
    draws = {next_token(logits, True, top_k=2, rng=rng) for _ in range(200)}
    assert draws == {1, 2}                     # top-k keeps the two largest only
    draws = {next_token(logits, True, temperature=1e-3, rng=rng) for _ in range(50)}
    assert draws == {1}                        # a tiny temperature is greedy
    # top_p=0.5: token 1 alone has p ~0.44 < 0.5, so token 2 joins; nothing else
    draws = {next_token(logits, True, top_p=0.5, rng=rng) for _ in range(200)}
    assert draws == {1, 2}


def test_cli_generate_prints_rate_and_transformers_tokens(tmp_path, mlc_main):
    """``mlc generate`` through ``main(argv)`` in this process (conftest's ``mlc_main``;
    test_cli_errors runs ``python -m mlc_mlir.cli.mlc`` as a real process): exit 0,
    the decode rate and transformers' greedy tokens printed; an unreadable config is a user
    error (exit 2, one line on stderr)."""
    import json

    from mlc_mlir.cli.generate_command import model_from_config

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
                               "intermediate_size": 128, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "vocab_size": 500}))
    code, out, err = mlc_main("generate", cfg, "--prompt-len", "8", "--new-tokens", "6", "--threads", "1")
    assert code == 0, err
    assert re.search(r"decode: [0-9.]+ tokens/s", out), out
    tokens = json.loads(re.search(r"tokens: (\[.*\])", out).group(1))
    model = model_from_config(str(cfg), seed=0)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 500, (1, 8)))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    assert tokens == want[0, 8:].tolist()
    bad, _, err = mlc_main("generate", tmp_path / "none.json")
    assert bad == 2 and "cannot read config" in err and err.count("\n") == 1, err   # a user error: exit 2


def test_compile_causal_lm_refuses_bad_arguments():
    model = _tiny("gpt2")
    with pytest.raises(ExecutionError, match="CPU target"):
        mlc.llm.compile_causal_lm(model, target="cuda")
    with pytest.raises(ExecutionError, match="prefill_chunk"):
        mlc.llm.compile_causal_lm(model, max_seq_len=16, prefill_chunk=32)
    with pytest.raises(ExecutionError, match="max_seq_len"):
        mlc.llm.compile_causal_lm(model, max_seq_len=0)


def test_steps_share_one_transposed_copy_of_each_weight(compiled_lm):
    """The imports of the decode and prefill steps (as ``compile_causal_lm`` makes them, one
    ``derived_weights`` dict for both) hold the same array for each transposed ``nn.Linear``
    weight (one copy, not one per step), equal to the transpose of the model's weight."""
    entry = compiled_lm("llama", 128)
    model = entry.model
    (decode, derived, empty, count), (prefill, derived_too, before, after) = entry.imports
    assert derived is derived_too and empty == 0
    # q/k/v/o, gate/up/down per layer and the LM head
    assert count == 7 * 2 + 1
    assert after == before      # the prefill import adds none (the decode's compile added the merged ones)
    weight = model.model.layers[1].mlp.down_proj.weight.detach().numpy()
    mine = [a for (name, *_), (a, _) in derived.items() if name == "lm.model.layers.1.mlp.down_proj.weight.T"]
    assert len(mine) == 1
    np.testing.assert_array_equal(mine[0], weight.T)

    def weights(mod):
        with mod.context:
            attrs = [op.attributes["value"] for f in mod.func_ops() for op in f.regions[0].blocks[0].operations
                     if op.operation.name == "arith.constant" and "tensor<" in str(op.operation.results[0].type)]
            return {a.ctypes.data for a in (mod.constant_value(v) for v in attrs) if a is not None and a.size > 1000}
    assert mine[0].ctypes.data in weights(decode) & weights(prefill)


def test_compiled_steps_link_each_weight_once(compiled_lm):
    """The compiled prefill (symbolic rows) and decode steps link one buffer per weight between
    them: q/k/v and gate/up are merged in both steps into the same concatenated array
    (``merge-projections`` with one derived-weight store), so the distinct bytes the two
    engines read equal the model's weight bytes, each projection counted once. Both steps
    still generate transformers' greedy tokens."""
    from mlc_mlir.pipeline.jit_weights import LINK_MIN_BYTES

    entry = compiled_lm("llama", 128)
    model, lm = entry.model, entry.lm
    linked = {}
    for step in (lm.prefill_step, lm.decode_step):
        arrays = step._invoke._weights
        assert arrays, "no weight linked"
        linked.update({a.ctypes.data: a.nbytes for a in arrays})
    params = sum(p.numel() * p.element_size() for p in model.parameters()
                 if p.numel() * p.element_size() >= LINK_MIN_BYTES)
    assert sum(linked.values()) == params
    ids = torch.randint(0, 1000, (1, 9), generator=torch.Generator().manual_seed(3))
    want = model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0).numpy()
    np.testing.assert_array_equal(lm.generate(ids.numpy(), max_new_tokens=32), want)


def test_steps_tune_and_compile_with_their_records(tmp_path, compiled_lm, monkeypatch):
    """``mlc.tune.extract_tasks`` on the decode step (static, its cache-write units take the
    caller's clamped position as an ``index`` argument) and on the symbolic prefill step (its
    static units), as ``compile_causal_lm`` imported them for the tiny GPT-2 (``compiled_lm``);
    a cache-write unit runs alone (its position fixed at 0) as numpy computes it; both steps
    tuned (random search; the decode attention's knobs too; no whole-model check, so every
    record is applied) and compiled with the records, token-exact with transformers."""
    import mlc_mlir.tune.tuner as tuner
    from mlc_mlir.target import host_target
    from mlc_mlir.tune.attention_task import extract_attention_tasks
    from mlc_mlir.tune.search import RandomSearch

    entry = compiled_lm("gpt2", 128)
    model = entry.model
    (decode, *_), (prefill, *_) = entry.imports
    tasks = {"decode": mlc.tune.extract_tasks(decode), "prefill": mlc.tune.extract_tasks(prefill)}
    assert all(len(v) > 1 for v in tasks.values())
    write = next(t for t in tasks["decode"] if t.name.startswith("fused_slice_1_") and "update_slice" in t.name)
    x, cache = np.random.default_rng(0).standard_normal((1, 1, 384)).astype(np.float32), np.zeros((1, 4, 128, 32), np.float32)
    assert [a.shape for a in write.module.signature(write.func_name).args] == [x.shape, cache.shape]
    want = cache.copy()
    want[0, :, 0, :] = x[0, 0, 128:256].reshape(4, 32)     # the key slice of c_attn's output, row 0
    np.testing.assert_array_equal(mlc.compile(write.module)[write.func_name](x, cache.copy()), want)
    db = None
    for name, step in (("decode", decode), ("prefill", prefill)):
        attention = extract_attention_tasks(step, host_target())   # tune() measures their knobs first
        # tune() would extract the same tasks of `step` again (every candidate kernel emitted:
        # seconds): it gets these
        monkeypatch.setattr(tuner, "extract_attention_tasks",
                            lambda mod, tgt, step=step, found=attention: found if mod is step
                            else extract_attention_tasks(mod, tgt))
        knobs = sum(len(a.candidates) for a in attention)
        db = mlc.tune(step, trials=2 * len(tasks[name]) + knobs, work_dir=str(tmp_path), strategy=RandomSearch(),
                      progress=False, finalists=0, check_model=False)
        got = {r.workload for r in db.records() if r.ok}
        assert {t.workload for t in tasks[name]} <= got, name
    lm = mlc.llm.compile_causal_lm(model, max_seq_len=128, database=db)
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(2))
    np.testing.assert_array_equal(lm.generate(ids.numpy()[:, :9], max_new_tokens=12), _want(model, ids[:, :9], 12))
