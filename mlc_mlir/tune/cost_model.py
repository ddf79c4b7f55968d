"""Cost models: predict how fast a candidate runs from its features (:mod:`.features`), so a
search strategy measures only promising candidates.

The target of learning is the *normalized throughput* of a candidate within its task: the best
measured latency divided by its latency (1 for the best, towards 0 for slow ones, 0 for failed
candidates), as TVM MetaSchedule's XGBoost model does. :class:`XGBCostModel` retrains a
gradient-boosted tree ensemble on every measurement so far whenever new ones arrive;
:class:`RandomCostModel` is the baseline (uniform random scores). Source: TVM MetaSchedule
``CostModel``/``XGBModel`` (``python/tvm/meta_schedule/cost_model/xgb_model.py``), XGBoost
(Chen & Guestrin, KDD 2016).
"""

from __future__ import annotations

import abc
import math
import random
from typing import List, Optional, Sequence

import numpy as np

from ..errors import TuningError

def normalized_throughput(latencies_ms: Sequence[float]) -> np.ndarray:
    """``min(latencies) / latency`` per candidate; 0 for a failed one (``inf``, NaN or <= 0).

    Parameters
    ----------
    latencies_ms : sequence of float
        Latencies in ms (``inf`` for failed candidates).

    Returns
    -------
    numpy.ndarray
        float32, shape ``(N,)``, within [0, 1]; all zeros if no candidate ran.
    """
    lat = np.asarray(list(latencies_ms), dtype=np.float64)
    ok = np.isfinite(lat) & (lat > 0)
    out = np.zeros(lat.shape, np.float32)
    if ok.any():
        out[ok] = lat[ok].min() / lat[ok]
    return out


def _check(features: np.ndarray, latencies: Optional[Sequence[float]] = None) -> np.ndarray:
    x = np.asarray(features, dtype=np.float32)
    if x.ndim != 2:
        raise TuningError(f"cost model: features have shape {x.shape}; expected (N, F)")
    if latencies is not None and len(latencies) != x.shape[0]:
        raise TuningError(f"cost model: {x.shape[0]} feature rows but {len(latencies)} latencies")
    return x


class CostModel(abc.ABC):
    """Predicts normalized throughput from features (TVM MetaSchedule ``CostModel``)."""

    @property
    @abc.abstractmethod
    def trained(self) -> bool:
        """Whether predictions carry information (a model before any measurement does not)."""

    @abc.abstractmethod
    def update(self, features: np.ndarray, latencies_ms: Sequence[float]) -> None:
        """Learn from measured candidates.

        Parameters
        ----------
        features : numpy.ndarray
            ``(N, F)`` rows of :func:`~mlc_mlir.tune.features.candidate_features`.
        latencies_ms : sequence of float
            ``N`` latencies in ms (``inf`` for a failed candidate).

        Raises
        ------
        TuningError
            If the shapes do not match (or the model's feature width changes).
        """

    @abc.abstractmethod
    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted normalized throughput, higher is better.

        Parameters
        ----------
        features : numpy.ndarray
            ``(N, F)``.

        Returns
        -------
        numpy.ndarray
            float, shape ``(N,)``.
        """


class RandomCostModel(CostModel):
    """Uniform random scores in [0, 1) (TVM MetaSchedule ``RandomModel``): the baseline a
    learned model must beat.

    Parameters
    ----------
    seed : int
        Seed of the scores.
    """

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    @property
    def trained(self) -> bool:
        return True

    def update(self, features: np.ndarray, latencies_ms: Sequence[float]) -> None:
        _check(features, latencies_ms)

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self._rng.random(_check(features).shape[0])


class XGBCostModel(CostModel):
    """Gradient-boosted trees on candidate features, regressing normalized throughput
    (:func:`normalized_throughput` over every measurement so far; TVM ``XGBModel``).

    Each :meth:`update` appends the measurements and retrains from scratch (the targets change
    as a new best latency re-normalizes them). Deterministic for a given seed (one thread).

    Parameters
    ----------
    rounds : int
        Boosting rounds per training.
    max_depth : int
        Depth of each tree.
    eta : float
        Learning rate.
    seed : int
        XGBoost's seed.
    min_samples : int
        Measurements (successful ones) needed before the model counts as :attr:`trained`.

    Raises
    ------
    TuningError
        If xgboost is not installed (``pip install 'mlc-mlir[tune]'``).
    """

    def __init__(self, rounds: int = 80, max_depth: int = 6, eta: float = 0.2, seed: int = 0,
                 min_samples: int = 4):
        try:  # the optional extra mlc-mlir[tune]; imported here, not with the package (~1.5 s)
            import xgboost
        except ImportError:
            raise TuningError("XGBCostModel: xgboost is not installed; install the 'tune' extra "
                              "(pip install 'mlc-mlir[tune]') or pass RandomCostModel()") from None
        self._xgb = xgboost
        self.rounds = rounds
        self.min_samples = min_samples
        self.params = {"max_depth": max_depth, "eta": eta, "objective": "reg:squarederror",
                       "seed": seed, "nthread": 1, "min_child_weight": 1, "subsample": 1.0,
                       "verbosity": 0}
        self._x: List[np.ndarray] = []
        self._lat: List[float] = []
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    @property
    def num_samples(self) -> int:
        """Measurements learned so far."""
        return len(self._lat)

    def update(self, features: np.ndarray, latencies_ms: Sequence[float]) -> None:
        x = _check(features, latencies_ms)
        if self._x and x.shape[0] and x.shape[1] != self._x[0].shape[0]:
            raise TuningError(f"XGBCostModel.update: features have width {x.shape[1]}; the model "
                              f"was trained on width {self._x[0].shape[0]}")
        self._x.extend(x)
        self._lat.extend(float(v) if v is not None else math.inf for v in latencies_ms)
        y = normalized_throughput(self._lat)
        if int((y > 0).sum()) < self.min_samples:
            return
        dtrain = self._xgb.DMatrix(np.stack(self._x), label=y, nthread=1)
        self._booster = self._xgb.train(self.params, dtrain, num_boost_round=self.rounds)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted normalized throughput.

        Raises
        ------
        TuningError
            If the model is not :attr:`trained` yet (callers rank randomly until it is).
        """
        x = _check(features)
        if self._booster is None:
            raise TuningError(f"XGBCostModel.predict: not trained yet ({self.num_samples} "
                              f"measurements, {self.min_samples} successful ones needed)")
        return self._booster.inplace_predict(x)


def random_scores(rng: random.Random, n: int) -> np.ndarray:
    """``n`` uniform scores from ``rng`` (how a search ranks before its model is trained)."""
    return np.asarray([rng.random() for _ in range(n)])
