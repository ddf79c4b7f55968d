"""``compile_causal_lm``: a transformers causal LM compiled into a prefill step and a decode step
over one preallocated KV cache, and ``generate`` on top of them.

Both steps are :func:`~mlc_mlir.llm.export.import_step` functions. The prefill step is symbolic
in the query length (``seq`` in ``1 .. max_seq_len``): one compile runs a prompt of any length
in one call, nothing padded. The decode step is static at one token (the schedules of its
matrix-vector products are chosen for ``M = 1`` at compile time). Each step writes its rows of
the caches in place (in/out arguments): no step copies a cache. On request
(``prefill_chunk``), a long prompt is prefilled in pieces of at most that many tokens through
the same symbolic step (bounded scratch memory: the attention scores of a piece are
``piece x max_seq_len``).

Source: MLC-LLM / TVM Relax (``prefill`` and ``decode`` functions of one compiled module over a
preallocated KV cache, the prefill symbolic in the sequence length); llama.cpp's batched prompt
processing in pieces of ``n_batch`` tokens; transformers ``generate`` (greedy / sampling
semantics).
"""

from __future__ import annotations

import time
from typing import List, Optional

import numpy as np

from ..errors import ExecutionError
from ..pipeline import compile as compile_module
from ..runtime.huge_pages import advise_huge_pages
from ..target import get_target
from .export import SEQ, cache_shapes, import_step
from .sampling import check_sampling, next_token
from .wait_policy import WaitPolicy


class CausalLM:
    """A compiled causal LM: ``prefill``/``decode`` steps and their KV cache.

    Attributes
    ----------
    max_seq_len : int
        Prompt plus generated tokens at most.
    prefill_chunk : int or None
        Tokens per prefill call at most (None: the whole prompt in one call).
    prefill_step, decode_step : Function
        The compiled steps: ``prefill_step`` symbolic in ``seq`` (its ``signature.dims`` hold
        ``{"seq": (1, max_seq_len)}``), ``decode_step`` static at one token.
    caches : list of numpy.ndarray
        ``k_0, v_0, k_1, ...``, each ``(1, kv_heads, max_seq_len, head_dim)``, written in place
        (C-contiguous views of one buffer backed by transparent huge pages where the system has
        them, :func:`~mlc_mlir.runtime.huge_pages.advise_huge_pages`).
    compile_seconds : float
        Wall time of the import and both compiles.
    wait_policy : WaitPolicy
        Whether the decode step's OpenMP threads spin or sleep while they wait, chosen by
        timing the decode steps (:class:`~mlc_mlir.llm.wait_policy.WaitPolicy`).
    """

    def __init__(self, prefill, decode, shapes, dtype, max_seq_len: int, prefill_chunk: Optional[int],
                 compile_seconds: float, threads: int = 1):
        self.prefill_step, self.decode_step = prefill, decode
        self.max_seq_len, self.prefill_chunk = max_seq_len, prefill_chunk
        # one buffer for all caches (each a C-contiguous view), on huge pages: every decode
        # step reads them, as it reads the weights
        sizes = [int(np.prod(s)) for s in shapes]
        block = np.zeros(sum(sizes), dtype)
        starts = np.cumsum([0] + sizes[:-1])
        self.caches = [block[a:a + n].reshape(s) for a, n, s in zip(starts, sizes, shapes)]
        advise_huge_pages(block)
        self.compile_seconds = compile_seconds
        self.wait_policy = WaitPolicy(threads)

    def prefill(self, input_ids) -> np.ndarray:
        """Run the prompt ``input_ids`` (``(1, n)`` or ``(n,)`` ints) from position 0; returns the
        logits ``(vocab,)`` after its last token. The caches then hold its keys and values.

        Raises
        ------
        ExecutionError
            For a batch other than 1, or a length ``n`` (the size ``seq``) outside
            ``1 .. max_seq_len``.
        """
        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim == 2 and ids.shape[0] != 1:
            raise ExecutionError(f"prefill: argument 'input_ids' has shape {ids.shape}; expected "
                                 "batch 1, (1, n)")
        ids = ids.reshape(1, -1)
        n, c = ids.shape[1], self.prefill_chunk
        if c is None:   # the step checks 1 <= seq <= max_seq_len itself
            return self.prefill_step(ids, np.array(0, np.int64), *self.caches).reshape(-1)
        if not 1 <= n <= self.max_seq_len:
            raise ExecutionError(f"prefill: size '{SEQ}' (the prompt's length) is {n}; expected "
                                 f"1..{self.max_seq_len} (max_seq_len)")
        logits = None
        for start in range(0, n, c):
            logits = self.prefill_step(np.ascontiguousarray(ids[:, start:start + c]),
                                       np.array(start, np.int64), *self.caches)
        return logits.reshape(-1)

    def decode(self, token: int, position: int) -> np.ndarray:
        """Run one token at ``position`` (the cache holds positions ``0 .. position - 1``);
        returns the logits ``(vocab,)``.

        Raises
        ------
        ExecutionError
            If ``position`` is outside ``0 .. max_seq_len - 1``.
        """
        if not 0 <= position < self.max_seq_len:
            raise ExecutionError(f"decode: argument 'position' is {position}; expected 0.."
                                 f"{self.max_seq_len - 1} (max_seq_len {self.max_seq_len})")
        return self.wait_policy.run(self.decode_step, np.array([[token]], np.int64),
                                    np.array(position, np.int64), *self.caches).reshape(-1)

    def generate(self, input_ids, max_new_tokens: int = 64, do_sample: bool = False,
                 temperature: float = 1.0, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 seed: Optional[int] = None, eos_token_id: Optional[int] = None) -> np.ndarray:
        """Prompt plus up to ``max_new_tokens`` generated tokens, ``(1, n + new)`` int64, as
        transformers' ``generate`` (greedy by default; stops after ``eos_token_id`` if given).

        Sampling (``do_sample=True``) draws from the softmax of logits / ``temperature`` after
        top-k and top-p filtering (:func:`~mlc_mlir.llm.sampling.next_token`) with a
        ``numpy.random.default_rng(seed)``. Timings of the last call are in ``last_timings``
        (``prefill_s``, ``decode_s``, ``new_tokens``).

        Raises
        ------
        ExecutionError
            For invalid sampling arguments, ``max_new_tokens < 0``, or a prompt plus new tokens
            longer than ``max_seq_len``.
        """
        check_sampling(temperature, top_k, top_p)
        ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
        n = ids.shape[1]
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0 or n + max_new_tokens > self.max_seq_len:
            raise ExecutionError(f"generate: prompt {n} + max_new_tokens {max_new_tokens} tokens; "
                                 f"expected max_new_tokens >= 0 and at most max_seq_len={self.max_seq_len} "
                                 "in all")
        rng = np.random.default_rng(seed)
        out: List[int] = []
        t0 = time.perf_counter()
        logits = self.prefill(ids) if max_new_tokens else None
        t1 = time.perf_counter()
        for i in range(max_new_tokens):
            tok = next_token(logits, do_sample, temperature, top_k, top_p, rng)
            out.append(tok)
            if tok == eos_token_id or i == max_new_tokens - 1:
                break
            logits = self.decode(tok, n + i)
        t2 = time.perf_counter()
        self.last_timings = {"prefill_s": t1 - t0, "decode_s": t2 - t1, "new_tokens": len(out)}
        return np.concatenate([ids, np.array([out], np.int64).reshape(1, -1)], axis=1)


def compile_causal_lm(hf_model, max_seq_len: int = 1024, threads: Optional[int] = None,
                      prefill_chunk: Optional[int] = None, target="cpu", database=None) -> CausalLM:
    """Compile a transformers causal LM (float32, batch 1) into a :class:`CausalLM`: one
    symbolic prefill step serving every prompt length ``1 .. max_seq_len`` and a one-token
    decode step, each compiled once.

    Parameters
    ----------
    hf_model : transformers.PreTrainedModel
        A ``...ForCausalLM`` whose attention uses the cache API (GPT-2, Llama, Qwen2, Mistral;
        a ``sliding_window`` shorter than ``max_seq_len`` attends to the window's keys of the
        cache, as transformers' sliding-window mask, see :func:`~mlc_mlir.llm.export.import_step`).
    max_seq_len : int
        Cache length: prompt plus generated tokens at most.
    threads : int, optional
        Threads per step (default: the target's cores).
    prefill_chunk : int, optional
        Prefill a prompt in pieces of at most this many tokens (default: in one call).
    target : str or Target
        A CPU target (``"cpu"``: the host).
    database : mlc.tune.Database, optional
        Tuning records (``CompileOptions.database``) of the steps' units: tune
        ``import_step(hf_model, max_seq_len, 1)`` (decode) and ``import_step(hf_model,
        max_seq_len)`` (prefill; its units with symbolic sizes keep the default schedules).

    Returns
    -------
    CausalLM

    Raises
    ------
    BuildError
        For a model the step cannot express or an unsupported op.
    ExecutionError
        For ``max_seq_len`` < 1, ``prefill_chunk`` outside ``1 .. max_seq_len``, or a target
        other than a CPU.
    """
    if not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ExecutionError(f"compile_causal_lm: argument 'max_seq_len' is {max_seq_len!r}; expected an int >= 1")
    if prefill_chunk is not None and (not isinstance(prefill_chunk, int) or not 1 <= prefill_chunk <= max_seq_len):
        raise ExecutionError(f"compile_causal_lm: argument 'prefill_chunk' is {prefill_chunk!r}; expected "
                             f"1..{max_seq_len} or None")
    if get_target(target).kind != "cpu":
        raise ExecutionError(f"compile_causal_lm: target {target!r}; expected a CPU target (the CUDA "
                             "runtime does not copy in/out cache arguments back to the host yet)")
    t = time.perf_counter()
    derived: dict = {}   # one array per transposed or merged weight for both steps
    decode = compile_module(import_step(hf_model, max_seq_len, 1, derived), target, threads=threads,
                            database=database)["main"]
    prefill = decode if max_seq_len == 1 else \
        compile_module(import_step(hf_model, max_seq_len, derived_weights=derived), target, threads=threads,
                       database=database)["main"]
    dtype = next(hf_model.parameters()).detach().numpy().dtype
    return CausalLM(prefill, decode, cache_shapes(hf_model, max_seq_len), dtype, max_seq_len, prefill_chunk,
                    time.perf_counter() - t, threads or get_target(target).cores)
