"""IR containers: :class:`Module`, dtype tables, contexts."""

from .module import FunctionSignature, Module, TensorSpec  # noqa: F401
