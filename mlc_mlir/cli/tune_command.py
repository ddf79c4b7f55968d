"""``mlc tune MODULE.mlir --trials N -o DIR``: tune a graph module's units (tasks) and
keep the records in ``DIR/database.jsonl`` (resumable), then report the speedup of the compiled
module with the tuned records over the default schedules.
"""

from __future__ import annotations

import numpy as np

from ..errors import IRError, MlcError
from ..ir.module import Module
from ..pipeline import compile
from ..tune import tune


def _random_inputs(exe, name: str, rng: np.random.Generator):
    return [rng.standard_normal(a.shape).astype(a.dtype) if np.dtype(a.dtype).kind == "f"
            else rng.integers(-8, 8, a.shape).astype(a.dtype)
            for a in exe[name].signature.args if not a.is_param]


def run_tune(path: str, trials: int, work_dir: str, timeout_s: float, out=print) -> int:
    """Tune the module in ``path``; print the default vs tuned latency of each public function.

    Raises
    ------
    MlcError
        If the file cannot be read or parsed, or tuning fails.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise MlcError(f"tune: cannot read {path}: {e}") from None
    try:
        mod = Module.parse(text)
    except IRError as e:
        raise IRError(f"tune: {path} is not a graph module in MLIR text ({e}); expected a file "
                      "written by mlc-opt or str(mod)") from e
    db = tune(mod, target="cpu", trials=trials, work_dir=work_dir, timeout_s=timeout_s)
    default, tuned = compile(mod), compile(mod, database=db)
    rng = np.random.default_rng(0)
    out(f"{'function':<24}{'default ms':>12}{'tuned ms':>12}{'speedup':>9}")
    for name in default.function_names:
        args = _random_inputs(default, name, rng)
        np.testing.assert_allclose(tuned[name](*args), default[name](*args), rtol=1e-3, atol=1e-3)
        d = default[name].benchmark(*args, number=20, repeat=5).min_ms
        t = tuned[name].benchmark(*args, number=20, repeat=5).min_ms
        out(f"{name:<24}{d:>12.4f}{t:>12.4f}{d / t:>8.2f}x")
    out(f"records: {db.path} ({len(db)}); compile with mlc.compile(mod, database=mlc.tune.Database(path))")
    return 0
