"""Graph builder: :class:`GraphBuilder` and the op inventory by category (like TOPI)."""

from .graph_builder import FunctionBuilder, GraphBuilder, Tensor  # noqa: F401
