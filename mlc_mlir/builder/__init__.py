"""Graph builder: :class:`GraphBuilder` and the op inventory by category (like TOPI).

Modules, bottom to top (each imports only those below it): ``tensor`` (Tensor) ->
``linalg_emit`` (emission helpers) -> ``elementwise`` -> ``shape`` -> ``reduction`` -> ``nn`` ->
``normalization`` -> ``graph_builder`` (GraphBuilder, FunctionBuilder). Importing this package
imports every op module, which installs Tensor's operators (see :mod:`.tensor`).
"""

from . import elementwise, nn, normalization, reduction, shape  # noqa: F401
from .graph_builder import FunctionBuilder, GraphBuilder  # noqa: F401
from .tensor import Tensor  # noqa: F401
