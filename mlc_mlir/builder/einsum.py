"""``einsum``: Einstein summation over subscripts, emitted as one ``linalg.generic`` whose
indexing maps are the subscripts (the form every linalg contraction has: ``linalg.matmul`` is
``ik,kj->ij`` with ``k`` a reduction iterator).

The equation is parsed into one term per operand and an output term (explicit after ``->``,
or numpy's implicit output); each distinct letter becomes one iteration dim of the generic,
``...`` becomes the numpy-broadcast batch dims. Output dims are ``parallel``, the rest
``reduction``.

Source: numpy ``einsum`` (subscript grammar, implicit output, ellipsis and size-1
broadcasting, diagonals), ONNX operator spec (Einsum-12), MLIR ``linalg.generic``.
"""

from __future__ import annotations

import string
from typing import Dict, List, Optional, Sequence, Tuple

from .._mlir import arith_d, ir
from ..errors import BuildError, format_shape
from ..ir import dtypes
from . import linalg_emit as emit
from .tensor import Tensor

ELLIPSIS = "..."
_LETTERS = frozenset(string.ascii_letters)

Term = Tuple[str, ...]  # letters and at most one ELLIPSIS, in subscript order


def _tokenize(equation: str, term: str, where: str) -> Term:
    """``'b...ij'`` -> ``('b', '...', 'i', 'j')``.

    Raises
    ------
    BuildError
        For a character other than a letter or ``...``, or two ellipses in one term.
    """
    out: List[str] = []
    i = 0
    while i < len(term):
        if term.startswith(ELLIPSIS, i):
            if ELLIPSIS in out:
                raise BuildError(f"einsum: argument 'equation' is {equation!r}; {where} {term!r} has "
                                 f"more than one '...'")
            out.append(ELLIPSIS)
            i += 3
            continue
        c = term[i]
        if c not in _LETTERS:
            what = "a '.' that is not part of '...'" if c == "." else f"the character {c!r}"
            raise BuildError(f"einsum: argument 'equation' is {equation!r}; {where} {term!r} has {what}; "
                             f"expected letters a-z, A-Z and '...'")
        out.append(c)
        i += 1
    return tuple(out)


def parse_equation(equation: str, num_operands: int) -> Tuple[List[Term], Optional[Term]]:
    """Split an einsum equation into its input terms and its output term (None when the
    output is implicit, i.e. there is no ``->``). Whitespace is ignored.

    Parameters
    ----------
    equation : str
        ``'ij,jk->ik'``, ``'...ii->...i'``, ``'i,i'``; letters a-z, A-Z and ``...``.
    num_operands : int
        Operands given; the equation must have one input term per operand.

    Returns
    -------
    (inputs, output)
        Each term a tuple of letters and ``'...'``.

    Raises
    ------
    BuildError
        For a non-str equation, more than one ``->``, a bad character, two ellipses in one
        term, or a number of input terms other than ``num_operands``
        (``einsum: argument 'equation' is 'ij,jk'; it has 2 input terms for 3 operands``).
    """
    if not isinstance(equation, str):
        raise BuildError(f"einsum: argument 'equation' is {type(equation).__name__}; expected a str")
    eq = "".join(equation.split())
    if eq.count("->") > 1:
        raise BuildError(f"einsum: argument 'equation' is {equation!r}; expected at most one '->'")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != num_operands:
        raise BuildError(f"einsum: argument 'equation' is {equation!r}; it has {len(terms)} input "
                         f"term(s) for {num_operands} operand(s); expected one term per operand")
    inputs = [_tokenize(equation, t, f"input term {k}") for k, t in enumerate(terms)]
    return inputs, (_tokenize(equation, rhs, "the output term") if arrow else None)


def _implicit_output(inputs: Sequence[Term]) -> Term:
    """numpy's implicit output: ``...`` (if any input has it), then the letters that occur
    exactly once in all inputs, in alphabetical (ASCII: upper case first) order."""
    counts: Dict[str, int] = {}
    for term in inputs:
        for c in term:
            if c != ELLIPSIS:
                counts[c] = counts.get(c, 0) + 1
    ell = (ELLIPSIS,) if any(ELLIPSIS in t for t in inputs) else ()
    return ell + tuple(sorted(c for c, k in counts.items() if k == 1))


def _check_output(equation: str, inputs: Sequence[Term], output: Term, batch: Tuple[int, ...]) -> None:
    """Raises BuildError for an output letter that repeats or occurs in no input, or broadcast
    dims (``...`` in an input) that the output does not keep."""
    seen = set()
    letters = {c for t in inputs for c in t}
    for c in output:
        if c == ELLIPSIS:
            continue
        if c in seen:
            raise BuildError(f"einsum: argument 'equation' is {equation!r}; the output has the subscript "
                             f"{c!r} more than once")
        if c not in letters:
            raise BuildError(f"einsum: argument 'equation' is {equation!r}; the output subscript {c!r} "
                             f"occurs in no input term")
        seen.add(c)
    if batch and ELLIPSIS not in output:
        raise BuildError(f"einsum: argument 'equation' is {equation!r}; '...' stands for "
                         f"{len(batch)} dim(s) {format_shape(batch)} but the output has no '...' to keep "
                         f"them (numpy raises ValueError)")


def _operand_layout(equation: str, k: int, term: Term, x: Tensor) -> Tuple[Dict[str, int], Tuple[int, ...]]:
    """Sizes of operand ``k``'s letters and of its ``...`` dims.

    Raises
    ------
    BuildError
        If its rank does not match its term, or a repeated letter (a diagonal) has unequal sizes.
    """
    letters = [c for c in term if c != ELLIPSIS]
    sub = "".join(term)
    if ELLIPSIS in term:
        if x.ndim < len(letters):
            raise BuildError(f"einsum: argument 'operands[{k}]' has shape {format_shape(x.shape)}; "
                             f"expected rank >= {len(letters)} for the subscripts {sub!r}")
    elif x.ndim != len(letters):
        raise BuildError(f"einsum: argument 'operands[{k}]' has shape {format_shape(x.shape)}; "
                         f"expected rank {len(letters)} for the subscripts {sub!r} of {equation!r}")
    e = term.index(ELLIPSIS) if ELLIPSIS in term else len(term)
    n_ell = x.ndim - len(letters)
    dims = list(x.shape[:e]) + list(x.shape[e + n_ell:])
    sizes: Dict[str, int] = {}
    for c, d in zip(letters, dims):
        if sizes.setdefault(c, d) != d:
            raise BuildError(f"einsum: argument 'operands[{k}]' has shape {format_shape(x.shape)}; expected "
                             f"equal sizes for the repeated subscript {c!r} of {sub!r} ({sizes[c]} vs {d})")
    return sizes, tuple(x.shape[e:e + n_ell])


def _letter_sizes(equation: str, per_operand: Sequence[Dict[str, int]], xs: Sequence[Tensor]) -> Dict[str, int]:
    """Each letter's size over all operands: equal, or 1 (broadcast, as numpy).

    Raises
    ------
    BuildError
        ``einsum: subscript 'j' of 'ij,jk' has size 3 in operands[0] (2, 3) and 4 in operands[1]
        (4, 5); expected equal sizes or 1``.
    """
    sizes: Dict[str, int] = {}
    first: Dict[str, int] = {}
    for k, op_sizes in enumerate(per_operand):
        for c, d in op_sizes.items():
            if d == 1:
                sizes.setdefault(c, 1)
                continue
            if sizes.get(c, 1) not in (1, d):
                j = first[c]
                raise BuildError(f"einsum: subscript {c!r} of {equation!r} has size {sizes[c]} in "
                                 f"operands[{j}] {format_shape(xs[j].shape)} and {d} in operands[{k}] "
                                 f"{format_shape(xs[k].shape)}; expected equal sizes or 1")
            sizes[c] = d
            first.setdefault(c, k)
    return sizes


def einsum(equation: str, *operands, name: Optional[str] = None) -> Tensor:
    """Einstein summation like ``numpy.einsum(equation, *operands)``: one ``linalg.generic``
    (``name``) with one iteration dim per distinct letter (and per ``...`` dim), ``parallel``
    for the output's dims and ``reduction`` for the others (summed), whose body multiplies the
    operands' elements (``arith.mulf``/``muli``) and adds the product to the accumulator
    (``arith.addf``/``addi``; a zero ``linalg.fill`` ``<name>.init``). Without reduced dims
    (``'ij->ji'``, ``'ii->i'``) the body is the product alone and there is no fill.

    Each operand is read through the map of its subscripts: ``'bij,bjk->bik'`` reads
    ``(b, i, j, k) -> (b, i, j)`` and ``(b, i, j, k) -> (b, j, k)``, writes ``(b, i, k)``.

    * Output: explicit after ``->``, or implicit (numpy): ``...`` first if any input has it,
      then the letters that occur once, sorted (upper case before lower case).
    * ``...`` in an input stands for the dims its letters leave; the ``...`` dims of all inputs
      broadcast together (numpy rules, aligned on the right) and must be kept in the output.
    * A letter repeated in one term (``'ii->i'``, ``'ii'`` = trace) reads a diagonal: both
      positions map to one dim (the map is not a projected permutation, so the op is not
      vectorized). Known limit: the default CPU reduction rule does not check that yet
      (``OpFacts.simple_maps``), so a diagonal that is also reduced can fail in the schedule
      stage (``'jij->j'``); ``compile(..., schedule="none")`` runs it.
    * A letter of size 1 in one operand broadcasts against its size elsewhere (a constant-0 map
      result), as in numpy.

    Parameters
    ----------
    equation : str
        Subscripts ``'in0,in1,...[->out]'``: letters a-z, A-Z and at most one ``...`` per term;
        whitespace is ignored.
    *operands : Tensor or numpy.ndarray
        At least one; one dtype in {float16, bfloat16, float32, float64, int8, int16, int32,
        int64} (no promotion; numpy arrays take the first Tensor's dtype). The rank of operand
        ``k`` is the number of letters of term ``k`` (at least that with ``...``).
    name : str, optional
        The generic's ``mlc.name`` (default ``einsum``).

    Returns
    -------
    Tensor
        Shape: the output term's sizes (``...`` as the broadcast batch shape); the operands'
        dtype. Integers accumulate in their own dtype (as numpy, wrapping on overflow).

    Raises
    ------
    BuildError
        For a malformed equation (``einsum: argument 'equation' is 'ij,jk->ik->'; expected at
        most one '->'``, a bad character, a term count other than the operand count, an output
        letter that repeats or is in no input, ``...`` dims the output drops), an operand whose
        rank does not match its term (``einsum: argument 'operands[1]' has shape (3, 4, 5);
        expected rank 2 for the subscripts 'jk' of 'ij,jk->ik'``), unequal sizes of one letter
        (other than 1), ``...`` shapes that do not broadcast, mismatched dtypes, or bool
        operands.
    """
    if not operands:
        raise BuildError("einsum: argument 'operands' is empty; expected at least one Tensor or numpy.ndarray")
    inputs, output = parse_equation(equation, len(operands))
    fn = emit.function_of("einsum", *operands)
    dtype = emit.common_dtype("einsum", *operands)
    if dtype == "bool":
        raise BuildError("einsum: dtype bool is not supported; expected a float or int dtype (use ops.cast)")
    xs = [emit.as_tensor("einsum", f"operands[{k}]", fn, x, dtype) for k, x in enumerate(operands)]
    layouts = [_operand_layout(equation, k, t, x) for k, (t, x) in enumerate(zip(inputs, xs))]
    sizes = _letter_sizes(equation, [s for s, _ in layouts], xs)
    batch = emit.broadcast_shapes("einsum", *[b for t, (_, b) in zip(inputs, layouts) if ELLIPSIS in t]) \
        if any(ELLIPSIS in t for t in inputs) else ()
    if output is None:
        output = _implicit_output(inputs)
    _check_output(equation, inputs, output, batch)

    # iteration dims: the output's (``...`` expanded) in output order, then the reduced letters
    # in order of first occurrence
    batch_keys = [(ELLIPSIS, i) for i in range(len(batch))]
    out_keys = [k for c in output for k in (batch_keys if c == ELLIPSIS else [c])]
    red_keys = list(dict.fromkeys(c for t in inputs for c in t if c != ELLIPSIS and c not in output))
    dim_of = {k: i for i, k in enumerate(out_keys + red_keys)}
    extent = {**sizes, **dict(zip(batch_keys, batch))}
    rank = len(dim_of)

    def expr(key, size):
        if size == 1 and extent[key] != 1:  # broadcast: read index 0
            return ir.AffineConstantExpr.get(0)
        return ir.AffineDimExpr.get(dim_of[key])

    in_maps = []
    for term, x, (_, own_batch) in zip(inputs, xs, layouts):
        keys = [k for c in term
                for k in (batch_keys[len(batch) - len(own_batch):] if c == ELLIPSIS else [c])]
        in_maps.append(ir.AffineMap.get(rank, 0, [expr(k, d) for k, d in zip(keys, x.shape)]))
    out_shape = tuple(extent[k] for k in out_keys)
    out_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(dim_of[k]) for k in out_keys])
    iterators = ["parallel"] * len(out_keys) + ["reduction"] * len(red_keys)
    nm = emit.op_name(fn, "einsum", name)
    is_float = dtypes.is_float(dtype)
    mul, add = (arith_d.mulf, arith_d.addf) if is_float else (arith_d.muli, arith_d.addi)

    def body(*args):
        prod = args[0]
        for a in args[1:len(xs)]:
            prod = mul(prod, a)
        return [add(args[-1], prod) if red_keys else prod]

    init = emit.filled(out_shape, dtype, 0, f"{nm}.init") if red_keys else emit.empty(out_shape, dtype)
    res = emit.generic(nm, [x.value for x in xs], in_maps, [init], [out_map], iterators, body)
    return Tensor(res[0], fn)
