"""``mlc generate CONFIG.json --prompt-len 32 --new-tokens 64 [--threads N]``: a transformers
causal LM built from a config (``config.json`` of any ``...ForCausalLM``) with seeded random
weights, compiled with :func:`mlc_mlir.llm.compile_causal_lm`, generating greedily from a random
prompt; prints compile time, prefill time and decode tokens/s.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from ..errors import ExecutionError
from ..llm import compile_causal_lm


def model_from_config(path: str, seed: int = 0):
    """A float32 transformers causal LM from the config file ``path`` (its ``model_type`` picks
    the class, as ``AutoConfig.for_model``), weights drawn with ``torch.manual_seed(seed)``.

    Raises
    ------
    ExecutionError
        If the file cannot be read, lacks ``model_type``, or transformers is missing.
    """
    try:
        import torch
        import transformers
    except ImportError:
        raise ExecutionError("generate: needs torch and transformers (pip install transformers)") from None
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ExecutionError(f"generate: cannot read config {path}: {e}") from None
    if "model_type" not in cfg:
        raise ExecutionError(f"generate: config {path} has no 'model_type'; expected a transformers "
                             "config.json (e.g. \"model_type\": \"llama\")")
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def run_generate(config: str, prompt_len: int, new_tokens: int, threads=None, seed: int = 0,
                 max_seq_len=None) -> int:
    """Build, compile and generate (see the module docstring); returns the exit code."""
    model = model_from_config(config, seed)
    max_len = max_seq_len or prompt_len + new_tokens
    lm = compile_causal_lm(model, max_seq_len=max_len, threads=threads)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = np.random.default_rng(seed).integers(0, vocab, (1, prompt_len))
    out = lm.generate(ids, max_new_tokens=new_tokens)
    t = lm.last_timings
    decoded = max(t["new_tokens"] - 1, 1)   # the first new token comes from the prefill
    print(f"model: {type(model).__name__}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters, threads {threads or 'default'}")
    print(f"compile: {lm.compile_seconds:.1f} s")
    print(f"prefill: {prompt_len} tokens in {t['prefill_s'] * 1e3:.1f} ms")
    print(f"decode: {decoded / t['decode_s']:.1f} tokens/s ({decoded} tokens)")
    print(f"tokens: {out[0, prompt_len:].tolist()}")
    sys.stdout.flush()
    return 0


def add_generate_command(sub, positive_int) -> None:
    """Add the ``generate`` subparser to ``mlc``'s subparsers ``sub``."""
    g = sub.add_parser("generate", help="generate with a transformers config and random weights")
    g.add_argument("config", help="a transformers config.json (with model_type)")
    g.add_argument("--prompt-len", type=positive_int, default=32, help="random prompt tokens")
    g.add_argument("--new-tokens", type=positive_int, default=64, help="tokens to generate")
    g.add_argument("--threads", type=positive_int, default=None, help="threads per step")
    g.add_argument("--seed", type=int, default=0, help="weights and prompt seed")
    g.add_argument("--max-seq-len", type=positive_int, default=None,
                   help="KV cache length (default: prompt + new tokens)")
    g.set_defaults(fn=lambda a: run_generate(a.config, a.prompt_len, a.new_tokens, a.threads, a.seed,
                                             a.max_seq_len))
