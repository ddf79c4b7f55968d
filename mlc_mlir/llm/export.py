"""A transformers causal LM as one static-shape step function with a preallocated KV cache.

:func:`import_step` exports ``step(input_ids (1, q) int64, position () int64, last (1,) int64,
k_0, v_0, k_1, v_1, ...) -> logits (1, 1, vocab)`` with ``torch.export``: the caches are the
wrapper's inputs, installed as the layers of a transformers ``StaticCache`` whose length is
``position``, so the model writes the new keys/values with its own ``index_copy_`` at positions
``position .. position + q - 1`` (an input mutation, imported as an in/out argument written in
place, :meth:`~mlc_mlir.builder.graph_builder.FunctionBuilder.write_argument`) and attends over
the cache with its own causal mask (keys at positions <= the query's). Only the hidden state at
index ``last`` goes through the LM head (transformers' ``logits_to_keep`` tensor).

Any decoder whose attention layers use the cache API (``past_key_values.update``) works:
GPT-2, Llama, Qwen2, Mistral, ... Cache ``i`` has shape ``(1, kv_heads, max_seq_len, head_dim)``
(``k_<layer>``, ``v_<layer>``).

Source: transformers ``StaticCache``/``StaticLayer`` (the static-address cache built for
``torch.compile`` and ExecuTorch export, ``integrations/executorch.py``); TVM Relax / MLC-LLM's
paged KV cache functions (prefill and decode entry points over one preallocated cache).
"""

from __future__ import annotations

from typing import List, Tuple

from ..errors import BuildError
from ..frontends.torch import from_exported_program
from ..ir import Module


def cache_shapes(hf_model, max_seq_len: int) -> List[Tuple[int, ...]]:
    """The shapes of the step's cache arguments, ``k_0, v_0, k_1, ...``: one
    ``(1, kv_heads, max_seq_len, head_dim)`` per layer and kind.

    Raises
    ------
    BuildError
        If the config lacks the attention sizes (``num_hidden_layers``, ``num_attention_heads``,
        ``hidden_size``).
    """
    cfg = hf_model.config.get_text_config(decoder=True)
    try:
        layers, heads, hidden = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
    except AttributeError as e:
        raise BuildError(f"import_step: the model config has no attention sizes ({e}); expected a "
                         "transformers decoder config") from None
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    return [(1, kv, int(max_seq_len), head_dim)] * (2 * layers)


def _static_cache(hf_model, max_seq_len: int, position, caches):
    """A transformers ``StaticCache`` whose layers hold ``caches`` and whose length is
    ``position``; a sliding-window layer whose window covers ``max_seq_len`` is a full one."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    cache = StaticCache(config=hf_model.config, max_cache_len=max_seq_len)
    for i, layer in enumerate(cache.layers):
        if type(layer) is not StaticLayer:
            window = getattr(layer, "max_cache_len", 0)
            if not isinstance(layer, StaticLayer) or window < max_seq_len:
                raise BuildError(f"import_step: cache layer {i} is {type(layer).__name__} (window "
                                 f"{window}); expected full attention over max_seq_len={max_seq_len}")
            layer = cache.layers[i] = StaticLayer(max_cache_len=max_seq_len)
        k, v = caches[2 * i], caches[2 * i + 1]
        layer.keys, layer.values = k, v
        layer.batch_size, layer.num_heads, _, layer.k_head_dim = k.shape
        layer.v_head_dim = v.shape[-1]
        layer.device = k.device
        layer.cumulative_length = position.clone()   # its add_ must not mutate the input
        layer.is_initialized = True
    return cache


def step_module(hf_model, max_seq_len: int):
    """The ``torch.nn.Module`` whose ``forward(input_ids, position, last, *caches)`` is one step
    (see the module docstring); it writes the caches in place, as transformers' static cache
    does, and returns ``logits`` ``(1, 1, vocab)`` of the token at index ``last``."""
    import torch

    class StaticCacheStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = hf_model

        def forward(self, input_ids, position, last, *caches):
            cache = _static_cache(self.lm, max_seq_len, position, caches)
            where = torch.arange(input_ids.shape[1]) + position
            out = self.lm(input_ids=input_ids, past_key_values=cache, use_cache=True,
                          cache_position=where, position_ids=where[None], logits_to_keep=last)
            return out.logits

    return StaticCacheStep().eval()


def import_step(hf_model, max_seq_len: int, query_len: int) -> Module:
    """Export one step of ``hf_model`` for ``query_len`` new tokens and import it.

    Parameters
    ----------
    hf_model : transformers.PreTrainedModel
        A causal LM (``...ForCausalLM``) in float32, batch 1.
    max_seq_len : int
        The cache length (the longest prompt + generation).
    query_len : int
        Tokens per call: 1 for decode, the prefill chunk for prefill.

    Returns
    -------
    Module
        ``main(<weights>..., input_ids, position, last, k_0, v_0, ...)`` returning logits
        ``(1, 1, vocab)``; the cache arguments are in/out (written at ``position``).

    Raises
    ------
    BuildError
        For a model the step cannot express (see :func:`cache_shapes`, sliding windows shorter
        than ``max_seq_len``) or an op the importer does not convert.
    """
    import torch

    if not 1 <= query_len <= max_seq_len:
        raise BuildError(f"import_step: argument 'query_len' is {query_len}; expected 1..{max_seq_len}")
    shapes = cache_shapes(hf_model, max_seq_len)
    dtype = next(hf_model.parameters()).dtype
    args = (torch.zeros((1, query_len), dtype=torch.int64), torch.tensor(0),
            torch.tensor([query_len - 1]), *[torch.zeros(s, dtype=dtype) for s in shapes])
    with torch.no_grad():
        ep = torch.export.export(step_module(hf_model, max_seq_len), args).run_decompositions()
    return from_exported_program(ep)
