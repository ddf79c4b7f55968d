"""``Tensor``: a tensor value of a graph function being built, and the protocol ops expect of
the function that owns it.

This module is the bottom of ``builder/`` (it imports no other builder module). The ops live
above it (``tensor -> linalg_emit -> elementwise -> shape -> reduction -> nn -> normalization
-> graph_builder``), so ``Tensor`` cannot call them by import. Its numpy-style operators
(``+ - * / @``, unary ``-``) dispatch through a table that the op modules fill when they are
imported (:meth:`Tensor.install_operators`): ``elementwise`` installs ``add``, ``subtract``,
``multiply``, ``divide``, ``negative``; ``nn`` installs ``matmul``. The dependency points
downward only (an op module hands its functions to the lower module), which is the layering
rule of DESIGN.md ("a lower layer that needs a service from a higher one receives it"), and
``import mlc_mlir.builder`` imports every op module, so the table is full before a Tensor exists.

Indexing a Tensor with tensor-expression indices (``A[i, k]`` inside ``te.compute``) follows the
same idea in the other direction: ``te`` is a sibling layer the builder does not import, so an
index object that defines ``__mlc_access__(tensor, indices)`` builds the access itself (double
dispatch, as numpy's ``__array_ufunc__``).
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Protocol

from .._mlir import ir
from ..errors import BuildError, format_shape
from ..ir import dtypes


class FunctionLike(Protocol):
    """What ops need from the function being built (implemented by
    :class:`~mlc_mlir.builder.graph_builder.FunctionBuilder`): its name, its builder (context,
    constants to keep alive) and op-name bookkeeping."""

    name: str
    builder: object
    symbols: object  # SymbolScope: symbolic shapes of the function's values

    def unique_op_name(self, base: str) -> str: ...

    def claim_op_name(self, name: str, op_kind: str) -> str: ...

    def _check_open(self, what: str) -> None: ...


_ACTIVE = threading.local()


def push_function(fn: FunctionLike) -> None:
    """Make ``fn`` the function being built on this thread (``GraphBuilder.function`` does it,
    like the insertion point MLIR's bindings keep per thread)."""
    stack: List[FunctionLike] = getattr(_ACTIVE, "stack", None) or []
    stack.append(fn)
    _ACTIVE.stack = stack


def pop_function(fn: FunctionLike) -> None:
    """Undo :func:`push_function`."""
    stack = getattr(_ACTIVE, "stack", [])
    if stack and stack[-1] is fn:
        stack.pop()


def current_function() -> Optional[FunctionLike]:
    """The function open in ``with bb.function(...)`` on this thread, or None (Relax's
    ``BlockBuilder.current()``): where an op whose operands are all numpy arrays emits."""
    stack = getattr(_ACTIVE, "stack", None)
    return stack[-1] if stack else None


class Tensor:
    """A tensor value of the function being built (an SSA value of ``tensor<...>`` type).

    Operators follow numpy: ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``-a`` emit
    ``ops.add``/``subtract``/``multiply``/``divide``/``negative`` (broadcasting), ``a @ b`` emits
    ``ops.matmul``; operands may be Tensors, numpy arrays or Python scalars.

    Attributes
    ----------
    value : mlir.ir.Value
        The SSA value.
    fn : FunctionBuilder
        The function it belongs to.
    shape : tuple of int or SymDim
        Shape; a dynamic dim is a :class:`~mlc_mlir.ir.symbolic.SymDim` (``seq``, ``2*seq``).
    dtype : str
        dtype name (``'float32'``, ...).
    """

    __slots__ = ("value", "fn")
    __array_priority__ = 1000  # numpy defers to our operators: np_array + tensor -> ops.add

    #: operator name ("add", "matmul", ...) -> op function, filled by the op modules
    _operators: Dict[str, Callable] = {}

    def __init__(self, value: ir.Value, fn: FunctionLike):
        self.value = value
        self.fn = fn

    @classmethod
    def install_operators(cls, **ops: Callable) -> None:
        """Register the op functions behind Tensor's operators (called by the op modules at
        import: ``Tensor.install_operators(add=add, ...)``)."""
        cls._operators.update(ops)

    def _apply(self, opname: str, *args):
        fn = self._operators.get(opname)
        if fn is None:  # only if mlc_mlir.builder.tensor is used without mlc_mlir.builder
            raise BuildError(f"Tensor operator: op '{opname}' is not installed; import mlc_mlir.ops")
        return fn(*args)

    @property
    def type(self) -> ir.RankedTensorType:
        """The MLIR ``RankedTensorType``."""
        return ir.RankedTensorType(self.value.type)

    @property
    def shape(self) -> tuple:
        """Shape: ints, and a :class:`~mlc_mlir.ir.symbolic.SymDim` for each dynamic dim."""
        t = self.type
        return tuple(t.shape) if t.has_static_shape else self.fn.symbols.shape_of(self.value)

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self.shape)

    @property
    def dtype(self) -> str:
        """dtype name."""
        return dtypes.from_ir_type(self.type.element_type)

    def __repr__(self) -> str:
        return f"Tensor({self.dtype}{format_shape(self.shape)})"

    def __getitem__(self, indices):
        """``A[i, k]`` with tensor-expression indices (inside ``te.compute``): an element access.

        Raises
        ------
        BuildError
            For other indices (slicing a Tensor is ``ops.slice``).
        """
        idx = indices if isinstance(indices, tuple) else (indices,)
        for i in idx:
            access = getattr(type(i), "__mlc_access__", None)
            if access is not None:
                return access(self, idx)
        raise BuildError(f"Tensor[{indices!r}]: indexing takes tensor-expression indices (in "
                         "te.compute); use ops.slice to slice a Tensor")

    def __add__(self, o):
        return self._apply("add", self, o)

    def __radd__(self, o):
        return self._apply("add", o, self)

    def __sub__(self, o):
        return self._apply("subtract", self, o)

    def __rsub__(self, o):
        return self._apply("subtract", o, self)

    def __mul__(self, o):
        return self._apply("multiply", self, o)

    def __rmul__(self, o):
        return self._apply("multiply", o, self)

    def __truediv__(self, o):
        return self._apply("divide", self, o)

    def __rtruediv__(self, o):
        return self._apply("divide", o, self)

    def __neg__(self):
        return self._apply("negative", self)

    def __matmul__(self, o):
        return self._apply("matmul", self, o)

    def __rmatmul__(self, o):
        return self._apply("matmul", o, self)
