"""Tuning (TVM MetaSchedule's shape): tasks, search strategies over stochastic schedule
functions, measurement in worker processes, a JSON-lines database, ``tune()`` and
``apply_best()``.

>>> import mlc_mlir as mlc
>>> db = mlc.tune(mod, target="cpu", trials=64, work_dir="tune/")   # the package is callable
>>> exe = mlc.compile(mod, database=db)            # or mlc.compile(mlc.apply_best(mod, db, "cpu"))
"""

import sys
import types

from .apply import apply_best  # noqa: F401
from .database import Database  # noqa: F401
from .executor import Executor, LocalExecutor, RayExecutor  # noqa: F401
from .measure import MeasureInput, MeasureResult  # noqa: F401
from .record import TuningRecord  # noqa: F401
from .search import RandomSearch, SearchStrategy, Space, TuneContext  # noqa: F401
from .task import Task, extract_tasks  # noqa: F401
from .tuner import tune  # noqa: F401


class _CallableModule(types.ModuleType):
    """``mlc.tune(...)`` calls :func:`tune`; ``mlc.tune.Database`` etc. stay reachable (the
    package is not shadowed by the function of the same name)."""

    def __call__(self, *args, **kwargs):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
