"""Ratings from pairwise battles (S2S-Arena; Chatbot Arena / FastChat practice) and judging biases.

A battles frame has columns model_a (shown first, "position A"), model_b and winner, one of
"model_a", "model_b", "tie", "tie (bothbad)" (FastChat's vocabulary). Ties count as half a win
for each side in every rating here; S2S-Arena itself collected no ties.

Rating scale (both Elo and Bradley–Terry): P(i beats j) = 1 / (1 + base^((R_j − R_i)/scale)),
base 10, scale 400, start/centre 1000.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import optimize
from scipy.sparse import csgraph

from sdscore.metrics._inputs import check_columns
from sdscore.runtime.compute_budget import blas_threads_within

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")


def _battle_arrays(battles: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(model_a, model_b, score of model_a ∈ {1, 0, ½}) after checking the frame."""
    check_columns(battles, ["model_a", "model_b", "winner"], "battles")
    if battles.height == 0:
        raise ValueError("battles frame is empty; ratings need at least one battle")
    for column in ("model_a", "model_b", "winner"):
        if battles[column].null_count():
            row = int(np.flatnonzero(battles[column].is_null().to_numpy())[0])
            raise ValueError(f"battles row {row} has a null {column}")
    model_a = battles["model_a"].cast(pl.String).to_numpy().astype(object)
    model_b = battles["model_b"].cast(pl.String).to_numpy().astype(object)
    winner = battles["winner"].cast(pl.String).to_numpy().astype(object)
    unknown = np.flatnonzero(~np.isin(winner, WINNERS))
    if unknown.size:
        raise ValueError(f"battles row {unknown[0]} has unknown winner {winner[unknown[0]]!r}; expected one of {list(WINNERS)}")
    same = np.flatnonzero(model_a == model_b)
    if same.size:
        raise ValueError(f"battles row {same[0]} pits {model_a[same[0]]!r} against itself")
    score_a = np.where(winner == "model_a", 1.0, np.where(winner == "model_b", 0.0, 0.5))
    return model_a, model_b, score_a


def online_elo(
    battles: pl.DataFrame, k: float = 32.0, base: float = 10.0, scale: float = 400.0, initial: float = 1000.0
) -> dict[str, float]:
    """Sequential Elo over the battles in the given order (the result depends on that order).

    E_A = 1/(1 + base^((R_B − R_A)/scale)); R_A += k(S_A − E_A), R_B += k((1 − S_A) − (1 − E_A)),
    S_A = 1 win, 0 loss, ½ tie. Returns {model: rating}, highest first.
    """
    model_a, model_b, score_a = _battle_arrays(battles)
    rating: dict[str, float] = {}
    for a, b, s in zip(model_a, model_b, score_a):
        ra, rb = rating.get(a, initial), rating.get(b, initial)
        expected_a = 1.0 / (1.0 + base ** ((rb - ra) / scale))
        rating[a] = float(ra + k * (s - expected_a))
        rating[b] = float(rb + k * ((1.0 - s) - (1.0 - expected_a)))
    return dict(sorted(rating.items(), key=lambda item: -item[1]))


def online_elo_by(battles: pl.DataFrame, column: str, **elo_options) -> dict[str, dict[str, float]]:
    """``online_elo`` per value of ``column`` (e.g. S2S-Arena's per-domain Elo), battles kept in order."""
    check_columns(battles, [column], "battles")
    groups = battles[column].unique(maintain_order=True).to_list()
    return {group: online_elo(battles.filter(pl.col(column) == group), **elo_options) for group in groups}


def _win_matrix(model_a, model_b, score_a, weights=None) -> tuple[list[str], np.ndarray]:
    """Models (sorted) and W ``[m, m]``: W[i, j] = wins of i over j plus ½ per tie (weighted)."""
    models = sorted(set(model_a) | set(model_b))
    index = {m: i for i, m in enumerate(models)}
    ia = np.fromiter((index[m] for m in model_a), dtype=np.int64, count=len(model_a))
    ib = np.fromiter((index[m] for m in model_b), dtype=np.int64, count=len(model_b))
    w = np.ones(len(score_a)) if weights is None else weights
    wins = np.zeros((len(models), len(models)))
    np.add.at(wins, (ia, ib), w * score_a)
    np.add.at(wins, (ib, ia), w * (1.0 - score_a))
    return models, wins


class RatingsDivergeError(ValueError):
    """The Bradley–Terry MLE does not exist for these battles (some models never lose or never win)."""


def _check_mle_exists(models: list[str], wins: np.ndarray, context: str) -> None:
    """The MLE is finite iff the 'beat or tied' graph is strongly connected (Zermelo/Ford)."""
    n_components, label = csgraph.connected_components(wins > 0, directed=True, connection="strong")
    if n_components > 1:
        groups = [[m for m, lab in zip(models, label) if lab == c] for c in range(n_components)]
        raise RatingsDivergeError(
            f"Bradley–Terry MLE does not exist{context}: some models never lose (or never win) against the "
            f"others, so their ratings diverge; groups {groups}. Add battles, or regularise with l2 > 0 "
            f"(`sdscore eval arena --l2 0.01`)"
        )


def _fit_strengths(wins: np.ndarray, l2: float, start: np.ndarray | None = None) -> np.ndarray:
    """Natural-log strengths θ (sum zero) maximising Σ W_ij log σ(θ_i − θ_j) − (l2/2)|θ|².

    ``start`` (sum zero, default zeros) only speeds convergence: the optimum is unique.
    Callers fit under ``blas_threads_within(1)``: a fit is many BLAS calls on a few models' vectors,
    each slower to hand to a second thread than to do.
    """
    total = wins.sum()

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        diff = theta[None, :] - theta[:, None]  # diff[i, j] = θ_j − θ_i
        loss = (wins * np.logaddexp(0.0, diff)).sum() / total + 0.5 * l2 * theta @ theta
        g = wins * (0.5 * (1.0 + np.tanh(0.5 * diff)))  # W_ij σ(θ_j − θ_i)
        grad = (g.sum(axis=0) - g.sum(axis=1)) / total + l2 * theta
        return loss, grad

    result = optimize.minimize(
        objective, np.zeros(wins.shape[0]) if start is None else start, jac=True, method="L-BFGS-B",
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-12},
    )
    return result.x - result.x.mean()


def _to_ratings(theta, models, scale, base, initial, anchor) -> np.ndarray:
    ratings = scale / np.log(base) * theta + initial
    if anchor is not None:
        name, value = anchor
        if name not in models:
            raise ValueError(f"anchor model {name!r} is not in the battles; models are {models}")
        ratings = ratings + (value - ratings[models.index(name)])
    return ratings


def bradley_terry(
    battles: pl.DataFrame,
    scale: float = 400.0,
    base: float = 10.0,
    initial: float = 1000.0,
    anchor: tuple[str, float] | None = None,
    l2: float = 0.0,
) -> dict[str, float]:
    """Bradley–Terry MLE ratings (order-free), as FastChat's ``compute_mle_elo``.

    Logistic likelihood over all battles, ties as half a win each, maximised with scipy L-BFGS;
    strengths θ scaled by ``scale``/ln(``base``) and shifted by ``initial``. The likelihood fixes
    only differences: without ``anchor`` the mean rating is ``initial`` — what FastChat's
    unpenalised LogisticRegression started at zero converges to — and ``anchor=(model, rating)``
    pins one model instead (FastChat pins a reference model, e.g. mixtral-8x7b-instruct at 1114).
    ``l2`` > 0 adds a ridge on θ (not FastChat), which makes the MLE finite when some model never
    loses; with l2 = 0 that case raises ValueError. Returns {model: rating}, highest first.
    """
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    models, wins = _win_matrix(*_battle_arrays(battles))
    if l2 == 0:
        _check_mle_exists(models, wins, "")
    with blas_threads_within(1):
        theta = _fit_strengths(wins, l2)
    ratings = _to_ratings(theta, models, scale, base, initial, anchor)
    return dict(sorted(zip(models, ratings.tolist()), key=lambda item: -item[1]))


def bootstrap_bradley_terry(
    battles: pl.DataFrame,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    anchor: tuple[str, float] | None = None,
    l2: float = 0.0,
    **scale_options,
) -> pl.DataFrame:
    """Bradley–Terry ratings with percentile bootstrap CIs over battles (resampled with replacement).

    Resamples come from ``numpy.random.default_rng(seed)``; each is refitted like ``bradley_terry``.
    Returns a frame [model, rating (fit on all battles), lower, upper], highest rating first.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    full = bradley_terry(battles, anchor=anchor, l2=l2, **scale_options)
    model_a, model_b, score_a = _battle_arrays(battles)
    models, wins = _win_matrix(model_a, model_b, score_a)
    options = {"scale": 400.0, "base": 10.0, "initial": 1000.0} | scale_options
    rng = np.random.default_rng(seed)
    samples = np.empty((n_boot, len(models)))
    with blas_threads_within(1):
        start = _fit_strengths(wins, l2)  # warm start for every resample
        for b in range(n_boot):
            weights = np.bincount(rng.integers(0, score_a.size, score_a.size),
                                  minlength=score_a.size).astype(np.float64)
            _, wins = _win_matrix(model_a, model_b, score_a, weights)
            if l2 == 0:
                _check_mle_exists(models, wins, f" on bootstrap resample {b}")
            theta = _fit_strengths(wins, l2, start)
            samples[b] = _to_ratings(theta, models, options["scale"], options["base"], options["initial"], anchor)
    alpha = 1.0 - level
    lower, upper = np.quantile(samples, [alpha / 2, 1 - alpha / 2], axis=0)
    frame = pl.DataFrame({"model": models, "rating": [full[m] for m in models], "lower": lower, "upper": upper})
    return frame.sort("rating", descending=True)


def pairwise_win_rate(battles: pl.DataFrame, models: Sequence[str] | None = None) -> pl.DataFrame:
    """Win-rate matrix: row model's (wins + ½ ties) / battles against the column model, either position.

    Returns a frame with a ``model`` column and one column per opponent; null on the diagonal and
    where two models never met. ``models`` fixes the order (default: sorted names).
    """
    all_models, wins = _win_matrix(*_battle_arrays(battles))
    order = list(models) if models is not None else all_models
    unknown = [m for m in order if m not in all_models]
    if unknown:
        raise ValueError(f"models {unknown} are not in the battles; models are {all_models}")
    pick = [all_models.index(m) for m in order]
    wins = wins[np.ix_(pick, pick)]
    games = wins + wins.T
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(games > 0, wins / games, np.nan)
    np.fill_diagonal(rate, np.nan)
    columns = {"model": order} | {m: rate[:, j] for j, m in enumerate(order)}
    return pl.DataFrame(columns).fill_nan(None)


def position_bias(battles: pl.DataFrame, prompt_column: str | None = None) -> dict:
    """Position effects of a judge (S2S-Arena §5.3).

    ``first_position_win_rate``: share of decisive battles won by model_a (position A).
    With ``prompt_column``, battles of the same prompt and model pair judged in both orders are
    compared, every (A-B, B-A) pairing once: ``swap_flip_rate`` is the share whose verdict (the
    winning model, or a tie) changes; ``second_position_share_of_flips`` is, among flips with a
    winner both times, the share where the second position won both times. None when undefined.
    """
    model_a, model_b, score_a = _battle_arrays(battles)
    decisive = score_a != 0.5
    result = {
        "n_decisive": int(decisive.sum()),
        "first_position_win_rate": float(score_a[decisive].mean()) if decisive.any() else None,
        "n_swapped_pairs": None,
        "swap_flip_rate": None,
        "second_position_share_of_flips": None,
    }
    if prompt_column is None:
        return result
    check_columns(battles, [prompt_column], "battles")
    verdict = np.where(score_a == 1.0, model_a, np.where(score_a == 0.0, model_b, "tie"))
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for prompt, a, b, v in zip(battles[prompt_column].to_list(), model_a, model_b, verdict):
        groups.setdefault((prompt, frozenset((a, b))), []).append((a, v))
    n_pairs = n_flips = n_decisive_flips = n_second = 0
    for judgments in groups.values():
        first_model = min(a for a, _ in judgments)
        forward = [v for a, v in judgments if a == first_model]
        backward = [v for a, v in judgments if a != first_model]
        for v_forward in forward:
            for v_backward in backward:
                n_pairs += 1
                if v_forward != v_backward:
                    n_flips += 1
                    if "tie" not in (v_forward, v_backward):
                        n_decisive_flips += 1
                        n_second += v_forward != first_model  # second position won in the forward order
    result["n_swapped_pairs"] = n_pairs
    result["swap_flip_rate"] = n_flips / n_pairs if n_pairs else None
    result["second_position_share_of_flips"] = n_second / n_decisive_flips if n_decisive_flips else None
    return result


def length_bias(battles: pl.DataFrame, length_a: str = "length_a", length_b: str = "length_b") -> dict:
    """Length effects over decisive battles (S2S-Arena §5.3; lengths in any unit, e.g. seconds).

    ``longer_win_rate``: share won by the longer response, among decisive battles of unequal
    lengths; ``mean_winner_length`` and ``mean_loser_length`` over all decisive battles.
    """
    model_a, model_b, score_a = _battle_arrays(battles)
    check_columns(battles, [length_a, length_b], "battles")
    lengths = []
    for column in (length_a, length_b):
        values = battles[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        if bad.size:
            raise ValueError(f"{column} must be finite and >= 0, got {values[bad[0]]} in row {bad[0]}")
        lengths.append(values)
    la, lb = lengths
    decisive = score_a != 0.5
    a_won = score_a[decisive] == 1.0
    winner = np.where(a_won, la[decisive], lb[decisive])
    loser = np.where(a_won, lb[decisive], la[decisive])
    unequal = winner != loser
    return {
        "n_decisive": int(decisive.sum()),
        "n_unequal": int(unequal.sum()),
        "longer_win_rate": float((winner[unequal] > loser[unequal]).mean()) if unequal.any() else None,
        "mean_winner_length": float(winner.mean()) if winner.size else None,
        "mean_loser_length": float(loser.mean()) if loser.size else None,
    }
