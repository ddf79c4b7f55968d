"""Decoder language models: a transformers causal LM compiled into a prefill step and a decode
step over one preallocated KV cache updated in place, and ``generate`` (greedy and sampling).

>>> lm = mlc.llm.compile_causal_lm(hf_model, max_seq_len=1024)
>>> tokens = lm.generate(input_ids, max_new_tokens=64)
"""

from .causal_lm import CausalLM, compile_causal_lm  # noqa: F401
from .export import cache_shapes, import_step  # noqa: F401
