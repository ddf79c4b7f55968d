"""Indices of a schedule's payload ops by name, by function and by consumer.

The default rules and the primitives ask, once per decision, which ops a function holds, which
ops read an op's result and which op has a given name. A scan of every named op per question
makes a function of ``n`` ops cost ``O(n^2)`` to schedule (DenseNet-121's main function, 617
ops, spent most of its schedule stage there); :class:`OpIndex` answers each from a dict built
once from the fixed op set (``analyze_module``'s ``{(func, mlc.name): OpInfo}``).

Source: the block-to-``StmtSRef`` maps of TVM's ``ScheduleState``, kept beside the IR so that
lookups do not walk it.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

Key = Tuple[str, str]


class OpIndex:
    """Read-only indices of ``ops`` (``{(func, name): OpInfo}``, each ``OpInfo`` with
    ``func``, ``name`` and ``producers``); lists are in the order of ``ops`` (payload order)."""

    def __init__(self, ops: Mapping[Key, object]):
        self._named: Dict[str, List[Key]] = {}
        self._of_func: Dict[str, list] = {}
        self._consumers: Dict[Key, List[str]] = {}
        for (func, name), info in ops.items():
            self._named.setdefault(name, []).append((func, name))
            self._of_func.setdefault(func, []).append(info)
            for p in dict.fromkeys(info.producers):
                self._consumers.setdefault((func, p), []).append(name)

    def named(self, name: str) -> List[Key]:
        """The ``(func, name)`` keys of the ops named ``name`` (one per function holding one)."""
        return list(self._named.get(name, ()))

    def of_func(self, func: str) -> list:
        """The ``OpInfo`` of every named op of ``func``."""
        return list(self._of_func.get(func, ()))

    def consumers(self, func: str, name: str) -> List[str]:
        """Names of the named ops of ``func`` that read the result of op ``name``."""
        return list(self._consumers.get((func, name), ()))
