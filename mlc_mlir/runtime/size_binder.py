"""``SizeBinder``: the symbolic sizes of a compiled function's signature, bound from the
arrays of a call (the shape function that :class:`~mlc_mlir.runtime.executable.Function` runs
for a function compiled with symbolic dims)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence

import numpy as np

from ..errors import ExecutionError, format_shape
from ..ir.module import FunctionSignature
from ..ir.symbolic import SymDim


class SizeBinder:
    """The symbolic sizes of a signature, bound from a call's arrays (a shape function, as
    Relax's ``match_cast`` at a function boundary). Built once per function; a call costs one
    pass over the plain-symbol dims plus the derived and static checks.

    ``binder(arrays)`` returns ``{name: size}``, checked: every use of a name has one value,
    derived sizes (``2*seq``) and static dims agree, each size lies within its bounds
    (``sig.dims``); ``binder.result_shapes(sizes)`` gives the results' shapes.

    Raises
    ------
    ExecutionError
        ``main: size 'seq' is 7 in x.shape[1] but 9 in y.shape[0]``, ``main: size 'seq' is 3000
        (x.shape[1]); expected at most 2048``, or a static dim that differs.
    """

    def __init__(self, sig: FunctionSignature):
        self.sig = sig
        self._defs, self._derived, self._static = [], [], []
        for k, spec in enumerate(sig.args):
            for i, d in enumerate(spec.shape):
                if not isinstance(d, SymDim):
                    self._static.append((k, i, d))
                elif d.symbol is not None:
                    self._defs.append((k, i, d.symbol))
                else:
                    self._derived.append((k, i, d))
        self._bounds = [(n, lo, hi) for n, (lo, hi) in sig.dims.items()]
        self._results = [tuple(d.symbol or d if isinstance(d, SymDim) else d for d in r.shape)
                         for r in sig.results]

    def __call__(self, arrays: Sequence[np.ndarray]) -> Dict[str, int]:
        sig = self.sig
        sizes: Dict[str, int] = {}
        for k, i, name in self._defs:
            v = arrays[k].shape[i]
            old = sizes.setdefault(name, v)
            if old != v:
                raise ExecutionError(f"{sig.name}: size '{name}' is {old} in {self._where(name)} but "
                                     f"{v} in {sig.args[k].name}.shape[{i}]")
        for k, i, d in self._static:
            if arrays[k].shape[i] != d:
                raise ExecutionError(f"{sig.name}: argument '{sig.args[k].name}' has shape "
                                     f"{format_shape(arrays[k].shape)}; expected "
                                     f"{format_shape(sig.args[k].shape)}")
        for k, i, d in self._derived:
            want = d.evaluate(sizes)
            if want != arrays[k].shape[i]:
                raise ExecutionError(f"{sig.name}: argument '{sig.args[k].name}' has shape[{i}] = "
                                     f"{arrays[k].shape[i]}; expected {d} = {want}")
        for name, lo, hi in self._bounds:
            v = sizes.get(name)
            if v is not None and (v < lo or (hi is not None and v > hi)):
                bound = f"at least {lo}" if v < lo else f"at most {hi}"
                raise ExecutionError(f"{sig.name}: size '{name}' is {v} ({self._where(name)}); "
                                     f"expected {bound}")
        return sizes

    def _where(self, name: str) -> str:
        k, i = next((k, i) for k, i, n in self._defs if n == name)
        return f"{self.sig.args[k].name}.shape[{i}]"

    def result_shapes(self, sizes: Mapping[str, int]) -> List[tuple]:
        """The results' shapes for bound ``sizes``."""
        return [tuple(sizes[d] if isinstance(d, str) else d.evaluate(sizes) if isinstance(d, SymDim) else d
                      for d in shape) for shape in self._results]
