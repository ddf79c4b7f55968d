"""A transformers decoder as an ONNX file with dynamic axes, in the two forms ONNX runtimes
load: logits only (``input_ids -> logits``, the whole sequence recomputed per token) and the
decoder with past (``input_ids, past_key_values.<i>.key/value -> logits, present.<i>.key/value``,
the form optimum and onnxruntime-genai use: each step feeds the last step's ``present``
tensors back as ``past``).

``torch.onnx.export(dynamo=True)`` (``torch.export`` then onnxscript) with ``batch``, ``seq``
and ``past`` as dynamic dims; the past tensors enter the model as a transformers
``DynamicCache``, so every decoder whose attention uses the cache API exports (GPT-2, Llama,
Qwen2, Mistral, ...). :func:`~mlc_mlir.frontends.onnx.from_onnx` imports the file with those
dims symbolic.

``torch``, ``transformers`` and ``onnxscript`` are optional dependencies, imported where used.

The decoder-with-past form copies its cache on every step: each ``present.<i>.key`` is
``Concat(past_key_values.<i>.key, new, axis=-2)``, a new ``(batch, kv_heads, past + seq,
head_dim)`` tensor that the next step reads as ``past`` (``mlc.from_onnx`` compiles it as
written, as onnxruntime runs it). Turning it into an in-place write into a cache preallocated to
a maximum length (as :mod:`mlc_mlir.llm.export`'s step does) changes the function's interface,
and is not done: (1) a ``(batch, kv_heads, max_len, head_dim)`` cache in place of ``past`` leaves
``past`` (the length written so far) a value, a position argument, while the compiler's symbolic
sizes are bound only from argument shapes (the runtime's size check reads ``arr.shape``), and the
exported graph sizes everything from ``Shape(past_key_values.0.key)``: the position ids
(``Range(past, past + seq)``), the causal mask ``(seq, past + seq)`` and the attention over
``present``; (2) ``past`` and ``present`` cannot share one caller buffer either: with heads
before positions, the C-contiguous ``(.., past, d)`` and ``(.., past + seq, d)`` layouts of one
buffer place every head but the first at different offsets (the runtime takes C-contiguous
arrays only). The torch path avoids both: its step attends over all ``max_len`` positions of the
cache with a mask computed from the position argument (transformers' ``StaticCache``).

Source: optimum's ``decoder_model_merged`` / onnxruntime-genai decoder inputs and outputs
(``past_key_values.%d.key``, ``present.%d.key``); transformers ``DynamicCache``.
"""

from __future__ import annotations

from typing import List, Tuple

from ..errors import BuildError
from .export import cache_shapes


def _cache_dims(hf_model) -> Tuple[int, int, int]:
    """``(layers, kv_heads, head_dim)`` of a transformers decoder config (from
    :func:`~mlc_mlir.llm.export.cache_shapes`)."""
    shapes = cache_shapes(hf_model, 1)
    return len(shapes) // 2, shapes[0][1], shapes[0][3]


def io_names(hf_model, past: bool) -> Tuple[List[str], List[str]]:
    """The input and output names of :func:`export_decoder`'s file: ``input_ids`` and
    ``logits``, then (``past``) ``past_key_values.<i>.key``/``.value`` and
    ``present.<i>.key``/``.value`` for each layer ``i``."""
    layers = _cache_dims(hf_model)[0] if past else 0
    kv = [f"{i}.{k}" for i in range(layers) for k in ("key", "value")]
    return ["input_ids"] + [f"past_key_values.{n}" for n in kv], ["logits"] + [f"present.{n}" for n in kv]


def export_decoder(hf_model, path: str, past: bool = True, max_len: int = 4096) -> Tuple[List[str], List[str]]:
    """Export a transformers causal LM (eval mode, float) to ``path``.

    Inputs: ``input_ids`` (batch, seq) int64; with ``past``, ``past_key_values.<i>.key`` and
    ``.value`` (batch, kv_heads, past, head_dim) float32 per layer. Outputs: ``logits``
    (batch, seq, vocab); with ``past``, ``present.<i>.key``/``.value`` (batch, kv_heads,
    past + seq, head_dim). Positions continue after the past (``past .. past + seq - 1``);
    the causal mask lets query ``j`` see the past and keys up to ``past + j``.

    Parameters
    ----------
    hf_model : transformers ``PreTrainedModel`` with a causal LM head
    path : str
        Where to write the ``.onnx`` file.
    past : bool
        The decoder-with-past form (True) or logits only.
    max_len : int
        Upper bound of ``seq`` and ``past`` given to ``torch.export``.

    Returns
    -------
    (input names, output names), as :func:`io_names`.

    Raises
    ------
    BuildError
        If the config lacks the attention sizes (see ``cache_shapes``), or ``torch.onnx.export`` fails (its message
        included).
    """
    import torch
    from transformers import DynamicCache

    layers, kv_heads, head_dim = _cache_dims(hf_model)
    n_past = layers if past else 0

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = hf_model

        def forward(self, ids, *past_kv):
            if not past_kv:
                return self.m(input_ids=ids, use_cache=False).logits
            cache = DynamicCache(config=self.m.config)
            for i in range(n_past):
                cache.update(past_kv[2 * i], past_kv[2 * i + 1], i)
            out = self.m(input_ids=ids, past_key_values=cache, use_cache=True)
            present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=max_len)
    past_len = torch.export.Dim("past", max=max_len)
    ids = torch.zeros((2, 3), dtype=torch.int64)   # 2 and 3: example sizes torch.export keeps dynamic
    kv = tuple(torch.zeros((2, kv_heads, 5, head_dim)) for _ in range(2 * n_past))
    dims = {"ids": {0: batch, 1: seq}}
    if kv:
        dims["past_kv"] = tuple({0: batch, 2: past_len} for _ in kv)
    names = io_names(hf_model, past)
    try:
        torch.onnx.export(Decoder().eval(), (ids, *kv), path, dynamo=True, dynamic_shapes=dims,
                          input_names=names[0], output_names=names[1], verbose=False)
    except Exception as e:  # noqa: BLE001  (torch.export / onnxscript errors of many types)
        cause = e.__cause__ or e
        raise BuildError(f"export_decoder: torch.onnx.export failed ({type(cause).__name__}: "
                         f"{str(cause)[:400]}); expected a transformers decoder whose attention uses "
                         "the cache API") from e
    return names
