"""A transformers causal LM as one step function with a preallocated KV cache.

:func:`import_step` exports ``step(input_ids (1, q) int64, position () int64, k_0, v_0, k_1,
v_1, ...) -> logits (1, 1, vocab)`` with ``torch.export``: the caches are the wrapper's inputs,
installed as the layers of a transformers ``StaticCache`` whose length is ``position``, so the
model writes the new keys/values with its own ``index_copy_`` at positions ``position ..
position + q - 1`` (an input mutation, imported as an in/out argument written in place,
:meth:`~mlc_mlir.builder.graph_builder.FunctionBuilder.write_argument`) and attends over the
cache with its own causal mask (keys at positions <= the query's; with a ``sliding_window``,
Mistral's, also > the query's minus the window). Only the last token's hidden
state goes through the LM head (transformers' ``logits_to_keep=1``).

The query length ``q`` is static (a decode step: ``q = 1``) or symbolic: a ``torch.export.Dim``
``seq`` in ``1 .. max_seq_len`` on ``input_ids``' dim 1, imported as the symbolic size ``seq``,
so one compiled function prefills a prompt of any length and a call with a longer one raises
``ExecutionError`` naming ``seq``.

Any decoder whose attention layers use the cache API (``past_key_values.update``) works:
GPT-2, Llama, Qwen2, Mistral, ... Cache ``i`` has shape ``(1, kv_heads, max_seq_len, head_dim)``
(``k_<layer>``, ``v_<layer>``).

Source: transformers ``StaticCache``/``StaticLayer`` (the static-address cache built for
``torch.compile`` and ExecuTorch export, ``integrations/executorch.py``); TVM Relax / MLC-LLM's
prefill and decode functions over one preallocated cache, the prefill symbolic in the sequence
length.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..errors import BuildError
from ..frontends.torch import from_torch
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
    ``position``. A sliding-window layer (``StaticSlidingWindowLayer``, a ring buffer of
    ``window`` positions) becomes a full ``StaticLayer`` written at ``position``: the model's
    mask function (the config's ``sliding_window``: ``create_sliding_window_causal_mask``,
    key ``k`` visible to query ``q`` iff ``q - window < k <= q``) is built over absolute cache
    positions, so the attention reads the same keys as transformers' ``DynamicCache`` /
    ``DynamicSlidingWindowLayer`` in ``generate``.

    Raises
    ------
    BuildError
        For a cache layer that is neither (linear attention, quantized or indexed layers).
    """
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    cache = StaticCache(config=hf_model.config, max_cache_len=max_seq_len)
    for i, layer in enumerate(cache.layers):
        if type(layer) is StaticSlidingWindowLayer:
            layer = cache.layers[i] = StaticLayer(max_cache_len=max_seq_len)
        elif type(layer) is not StaticLayer:
            raise BuildError(f"import_step: cache layer {i} is {type(layer).__name__}; expected StaticLayer or "
                             "StaticSlidingWindowLayer (attention over keys and values written at 'position')")
        k, v = caches[2 * i], caches[2 * i + 1]
        layer.keys, layer.values = k, v
        layer.batch_size, layer.num_heads, _, layer.k_head_dim = k.shape
        layer.v_head_dim = v.shape[-1]
        layer.device = k.device
        layer.cumulative_length = position.clone()   # its add_ must not mutate the input
        layer.is_initialized = True
    return cache


def step_module(hf_model, max_seq_len: int):
    """The ``torch.nn.Module`` whose ``forward(input_ids, position, *caches)`` is one step
    (see the module docstring); it writes the caches in place, as transformers' static cache
    does, and returns the ``logits`` ``(1, 1, vocab)`` of the last token."""
    import torch

    class StaticCacheStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = hf_model

        def forward(self, input_ids, position, *caches):
            cache = _static_cache(self.lm, max_seq_len, position, caches)
            where = torch.arange(input_ids.shape[1]) + position
            out = self.lm(input_ids=input_ids, past_key_values=cache, use_cache=True,
                          cache_position=where, position_ids=where[None], logits_to_keep=1)
            return out.logits

    return StaticCacheStep().eval()


#: The name of the symbolic query length of a prefill step.
SEQ = "seq"


def import_step(hf_model, max_seq_len: int, query_len: Optional[int] = None,
                derived_weights: Optional[Dict] = None) -> Module:
    """Export one step of ``hf_model`` and import it.

    Parameters
    ----------
    hf_model : transformers.PreTrainedModel
        A causal LM (``...ForCausalLM``) in float32, batch 1.
    max_seq_len : int
        The cache length (the longest prompt + generation).
    query_len : int, optional
        Tokens per call: an int for a static step (1: decode); None (default) for the symbolic
        size :data:`SEQ` in ``1 .. max_seq_len`` (prefill of any prompt length; with
        ``max_seq_len == 1`` the static one-token step).
    derived_weights : dict, optional
        Shared by the imports of several steps of one model: one array per weight the import
        derives (transposed weights), and the compile (the ``merge-projections`` step's
        concatenated weights), for all of them (:func:`~mlc_mlir.frontends.torch.from_torch`).

    Returns
    -------
    Module
        ``main(input_ids, position, caches_0, caches_1, ...)`` returning logits
        ``(1, 1, vocab)``; the cache arguments are in/out (written at ``position``).

    Raises
    ------
    BuildError
        For a model the step cannot express (see :func:`cache_shapes`; a cache layer other than
        full or sliding-window attention, see ``_static_cache``), an op the importer does not
        convert, or ``query_len`` outside ``1 .. max_seq_len``.
    """
    import torch

    if query_len is not None and not 1 <= query_len <= max_seq_len:
        raise BuildError(f"import_step: argument 'query_len' is {query_len}; expected 1..{max_seq_len} or None")
    if max_seq_len == 1:
        query_len = 1
    shapes = cache_shapes(hf_model, max_seq_len)
    dtype = next(hf_model.parameters()).dtype
    # the example length of a symbolic step: not 0 or 1, which torch.export specializes
    example = query_len or 2
    args = (torch.zeros((1, example), dtype=torch.int64), torch.tensor(0),
            *[torch.zeros(s, dtype=dtype) for s in shapes])
    dynamic = None
    if query_len is None:
        seq = torch.export.Dim(SEQ, min=1, max=max_seq_len)
        dynamic = {"input_ids": {1: seq}, "position": None, "caches": (None,) * len(shapes)}
    return from_torch(step_module(hf_model, max_seq_len), args, dynamic_shapes=dynamic,
                      derived_weights=derived_weights)
