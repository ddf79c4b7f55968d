"""The next token from a logits vector: greedy (argmax) or sampled with temperature, top-k and
top-p (nucleus) filtering, in that order, as transformers' ``TemperatureLogitsWarper``,
``TopKLogitsWarper`` and ``TopPLogitsWarper`` apply them.

Source: Holtzman et al., "The Curious Case of Neural Text Degeneration" (top-p, 2020);
transformers ``generation/logits_process.py``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ExecutionError


def check_sampling(temperature: float, top_k: Optional[int], top_p: Optional[float]) -> None:
    """Raise ``ExecutionError`` for a temperature <= 0, top_k < 1 or top_p outside (0, 1]."""
    if not temperature > 0:
        raise ExecutionError(f"generate: argument 'temperature' is {temperature}; expected > 0")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ExecutionError(f"generate: argument 'top_k' is {top_k!r}; expected an int >= 1 or None")
    if top_p is not None and not 0 < top_p <= 1:
        raise ExecutionError(f"generate: argument 'top_p' is {top_p!r}; expected 0 < top_p <= 1 or None")


def next_token(logits: np.ndarray, do_sample: bool = False, temperature: float = 1.0,
               top_k: Optional[int] = None, top_p: Optional[float] = None,
               rng: Optional[np.random.Generator] = None) -> int:
    """The next token id for ``logits`` (a float vector over the vocabulary).

    Greedy: the first index of the maximum (``numpy.argmax``, as ``torch.argmax``). Sampling:
    logits / ``temperature``; only the ``top_k`` largest kept; then only the smallest set of
    most likely tokens whose probability reaches ``top_p`` (at least one); a draw from the
    softmax of the rest with ``rng``.
    """
    if not do_sample:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    if top_k is not None and top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p is not None and top_p < 1:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        drop = order[np.concatenate(([False], cum[:-1] >= top_p))]
        p[drop] = 0
        p /= p.sum()
    return int((rng or np.random.default_rng()).choice(p.size, p=p))
