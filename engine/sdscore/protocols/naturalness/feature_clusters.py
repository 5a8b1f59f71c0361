"""The correlation-cluster PCA of SPEARBench's explainable features (the authors' released
bin/distrib_baselines/analyse_correlations.py), in numpy.

On a matrix of answers × features (NaN = no value):

1. each feature z-scored by the fitting rows' mean and sample std (ddof 1, NaN left out); a feature
   with no spread is dropped;
2. |Spearman ρ| between every two features on the rows where both have a value (fewer than 3 such
   rows, or a constant column there: 0), 1 on the diagonal;
3. average-linkage (UPGMA) clustering of the features on the distance 1 − |ρ|, cut at 1 − threshold
   (scipy's fcluster criterion "distance": every cluster's features are, on average linkage, at
   least `threshold` correlated);
4. per cluster, the first principal component of its z-scored features (NaN as 0), signed so that its
   loadings sum to ≥ 0; an answer's cluster value is its z-scored features (NaN as 0) · the loadings
   (a single-feature cluster: the feature itself);
5. the "general" explainable feature: the first principal component of the cluster values, applied the
   same way.

Principal components come from numpy's SVD of the centred matrix (the explained-variance ratio is
the squared singular value over the sum of all of them), as scikit-learn's PCA computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the |Spearman ρ| at which features join one cluster (the released default's first threshold)
CLUSTER_RHO = 0.8
#: the fewest finite values per system a feature needs to enter the clustering (the released --min-valid)
MIN_VALID = 5


def zscore_parameters(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the mean and sample std (ddof 1) of the finite values (NaN where fewer than 2)."""
    means = np.full(matrix.shape[1], np.nan)
    stds = np.full(matrix.shape[1], np.nan)
    for j in range(matrix.shape[1]):
        values = matrix[np.isfinite(matrix[:, j]), j]
        if values.size >= 2:
            # values near float's limit give inf, which fit_clusters leaves out
            with np.errstate(over="ignore", invalid="ignore"):
                means[j], stds[j] = values.mean(), values.std(ddof=1)
    return means, stds


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]] if values.size else np.zeros(0, dtype=bool)
    first = np.flatnonzero(starts)
    counts = np.diff(np.r_[first, values.size])
    ranks = np.empty(values.size)
    ranks[order] = (first + (counts + 1) / 2.0)[np.cumsum(starts) - 1]
    return ranks


def abs_spearman(matrix: np.ndarray, min_rows: int = 3) -> np.ndarray:
    """|Spearman ρ| between columns on pairwise-complete rows; 0 where undefined; 1 on the diagonal."""
    n = matrix.shape[1]
    out = np.eye(n)
    finite = np.isfinite(matrix)
    for i in range(n):
        for j in range(i + 1, n):
            both = finite[:, i] & finite[:, j]
            if both.sum() < min_rows:
                continue
            a, b = average_ranks(matrix[both, i]), average_ranks(matrix[both, j])
            a, b = a - a.mean(), b - b.mean()
            denominator = np.sqrt((a * a).sum() * (b * b).sum())
            if denominator > 0:
                out[i, j] = out[j, i] = min(1.0, abs(float((a * b).sum() / denominator)))
    return out


def average_linkage_clusters(distance: np.ndarray, cut: float) -> list[list[int]]:
    """UPGMA on a symmetric distance matrix, merging while the closest clusters' average distance is
    ≤ cut; the clusters as sorted index lists, in order of their smallest index."""
    clusters = [[i] for i in range(distance.shape[0])]
    while len(clusters) > 1:
        best, pair = np.inf, None
        for a in range(len(clusters)):
            for b in range(a + 1, len(clusters)):
                d = float(distance[np.ix_(clusters[a], clusters[b])].mean())
                if d < best:
                    best, pair = d, (a, b)
        if best > cut:
            break
        a, b = pair
        clusters[a] = sorted(clusters[a] + clusters[b])
        del clusters[b]
    return sorted(clusters, key=lambda c: c[0])


def principal_components(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(components k × d, explained-variance ratios k, column means d) of a finite matrix, by SVD of the
    centred matrix; each component signed so that its largest-magnitude loading is positive."""
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        raise ValueError(f"principal components need at least 2 rows (got {matrix.shape[0]})")
    centre = matrix.mean(axis=0)
    _, singular, vt = np.linalg.svd(matrix - centre, full_matrices=False)
    power = singular ** 2
    total = power.sum()
    ratios = power / total if total > 0 else np.zeros_like(power)
    components = vt[:k].copy()
    for row in components:
        if row[np.argmax(np.abs(row))] < 0:
            row *= -1
    return components, ratios[:k], centre


def first_component(matrix: np.ndarray) -> tuple[np.ndarray, float]:
    """The released fit_cluster_component: PCA(1) loadings of the matrix (NaN as 0), signed so their
    sum is ≥ 0, and their explained-variance ratio; one column: ([1], 1)."""
    if matrix.shape[1] == 1:
        return np.ones(1), 1.0
    components, ratios, _ = principal_components(np.nan_to_num(matrix, nan=0.0), 1)
    component = components[0]
    if component.sum() < 0:
        component = -component
    return component, float(ratios[0])


@dataclass(frozen=True)
class ClusterModel:
    """A fitted clustering: the features kept, their z-score parameters, the clusters (feature indices
    into `features`), each cluster's loadings and explained ratio, and the general component."""

    features: tuple[str, ...]
    means: np.ndarray
    stds: np.ndarray
    clusters: tuple[tuple[int, ...], ...]
    loadings: tuple[np.ndarray, ...]
    explained: tuple[float, ...]
    general: np.ndarray
    general_explained: float
    threshold: float

    def zscores(self, matrix: np.ndarray) -> np.ndarray:
        return (matrix - self.means) / self.stds

    def cluster_values(self, matrix: np.ndarray) -> np.ndarray:
        """Answers × clusters: each cluster's z-scored features (NaN as 0) · its loadings."""
        z = np.nan_to_num(self.zscores(matrix), nan=0.0)
        return np.column_stack([z[:, list(c)] @ w for c, w in zip(self.clusters, self.loadings)])

    def general_values(self, matrix: np.ndarray) -> np.ndarray:
        return self.cluster_values(matrix) @ self.general


def fit_clusters(matrix: np.ndarray, features: tuple[str, ...], threshold: float = CLUSTER_RHO) -> ClusterModel:
    """Steps 1–5 of the module docstring on `matrix` (answers × features); ValueError when fewer than two
    rows or no feature with spread remain."""
    if not 0 < threshold < 1:
        raise ValueError(f"the correlation threshold must be between 0 and 1 (got {threshold})")
    means, stds = zscore_parameters(matrix)
    keep = np.isfinite(stds) & (stds > 0)
    if not keep.any():
        raise ValueError("no explainable feature has two different values")
    matrix, means, stds = matrix[:, keep], means[keep], stds[keep]
    kept = tuple(name for name, k in zip(features, keep) if k)
    z = (matrix - means) / stds
    groups = average_linkage_clusters(1.0 - abs_spearman(z), 1.0 - threshold)
    loadings, explained = [], []
    for group in groups:
        w, ratio = first_component(z[:, group])
        loadings.append(w)
        explained.append(ratio)
    model = ClusterModel(kept, means, stds, tuple(tuple(g) for g in groups), tuple(loadings), tuple(explained),
                         np.ones(1), 1.0, threshold)
    general, general_ratio = first_component(model.cluster_values(matrix))
    return ClusterModel(kept, means, stds, model.clusters, model.loadings, model.explained, general,
                        general_ratio, threshold)
