"""Lowering pipelines (files in ``pipelines/``), targets and :func:`compile`."""

from .compile import compile, lower  # noqa: F401
from .registry import available, load_pipeline  # noqa: F401
from .target import Target, get_target  # noqa: F401
