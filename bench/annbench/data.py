"""The harness's data sets: the shared real sets and seeded generated ones, each with exact
top-100 ground truth computed here.

Angular sets are normalised once, here, and every side then searches them by Euclidean
distance on unit vectors, which ranks exactly as cosine does. Every library gets the same
float32 arrays, so no side pays (or skips) a normalisation the others do not. Inner-product
sets (`ip`, maximum inner product search) are searched as they are: their norms are the
point of them.

Generated sets are cached under the cache folder as .npy files with an `info.json` naming the
generator and its parameters; a cached set whose parameters differ is made again.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

GT_K = 100


@dataclasses.dataclass
class Dataset:
    name: str
    metric: str  # "l2", "angular" (unit vectors, searched by L2) or "ip" (inner product)
    base: np.ndarray  # float32 (n, dim), C-contiguous
    queries: np.ndarray  # float32 (nq, dim)
    truth: np.ndarray  # int32 (nq, GT_K): exact nearest first
    description: str

    @property
    def dim(self) -> int:
        return self.base.shape[1]


def read_vecs(path: Path, dtype) -> np.ndarray:
    """Reads an fvecs or ivecs file: each row is an int32 dimension then the row."""
    raw = np.fromfile(path, dtype=np.int32)
    dim = int(raw[0])
    rows = raw.reshape(-1, dim + 1)
    if not (rows[:, 0] == dim).all():
        raise ValueError(f"{path}: rows of different dimensions")
    return np.ascontiguousarray(rows[:, 1:]).view(dtype)


def normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray((x / norms).astype(np.float32))


def exact_truth(base: np.ndarray, queries: np.ndarray, k: int = GT_K) -> np.ndarray:
    """Exact k nearest by Euclidean distance.

    Candidates come from a float32 matrix product (||x||² − 2q·x), 64 more than needed, and
    are ranked again by distances computed in float64 from the rows themselves, so float32
    cancellation cannot reorder the answer. Ties go to the smaller id.
    """
    base_sq = np.einsum("ij,ij->i", base, base, dtype=np.float64).astype(np.float32)
    wide = min(k + 64, base.shape[0])
    out = np.empty((queries.shape[0], k), dtype=np.int32)
    block = max(1, min(256, (1 << 28) // (4 * base.shape[0])))
    for start in range(0, queries.shape[0], block):
        q = queries[start : start + block]
        scores = base_sq[None, :] - 2.0 * (q @ base.T)
        cand = np.argpartition(scores, wide - 1, axis=1)[:, :wide]
        for row, (query, ids) in enumerate(zip(q, cand)):
            diff = base[ids].astype(np.float64) - query.astype(np.float64)
            dist = np.einsum("ij,ij->i", diff, diff)
            order = np.lexsort((ids, dist))[:k]
            out[start + row] = ids[order]
    return out


def exact_truth_ip(base: np.ndarray, queries: np.ndarray, k: int = GT_K) -> np.ndarray:
    """Exact k largest inner products: candidates from a float32 matrix product, 64 more than
    needed, ranked again in float64 from the rows; ties go to the smaller id."""
    wide = min(k + 64, base.shape[0])
    out = np.empty((queries.shape[0], k), dtype=np.int32)
    block = max(1, min(256, (1 << 28) // (4 * base.shape[0])))
    for start in range(0, queries.shape[0], block):
        q = queries[start : start + block]
        scores = q @ base.T
        cand = np.argpartition(-scores, wide - 1, axis=1)[:, :wide]
        for row, (query, ids) in enumerate(zip(q, cand)):
            dots = base[ids].astype(np.float64) @ query.astype(np.float64)
            order = np.lexsort((ids, -dots))[:k]
            out[start + row] = ids[order]
    return out


def truth_for(metric: str, base: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return exact_truth_ip(base, queries) if metric == "ip" else exact_truth(base, queries)


def norm_bias(base: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    """The ip-NSW+ paper's statistic: the share of the exact top-k results that lie among the
    5% largest-norm items (1.0: a scan of those 5% answers every query)."""
    norms = np.linalg.norm(base.astype(np.float64), axis=1)
    cut = np.sort(norms)[::-1][max(len(norms) // 20, 1) - 1]
    return float((norms[truth[:, :k]] >= cut).mean())


def recall_at(found: np.ndarray, truth: np.ndarray, k: int, within: int | None = None) -> float:
    """Mean share of the true k nearest among the first `within` returned (default k; ids < 0
    never match)."""
    hits = 0
    for got, want in zip(found[:, : within or k], truth[:, :k]):
        hits += len(np.intersect1d(got[got >= 0], want, assume_unique=False))
    return hits / (k * truth.shape[0])


# ---------------------------------------------------------------- shared real sets

SHARED = {
    "siftsmall": ("l2", "siftsmall: 10k×128 SIFT descriptors, L2 (real, in cache)"),
    "glove50": (
        "angular",
        "glove50-5k-angular: 4.5k×50 GloVe word vectors, cosine (real, in cache)",
    ),
    "pypi-minilm": (
        "angular",
        "pypi-minilm: 50k×384 all-MiniLM-L6-v2 sentence embeddings, cosine (real)",
    ),
    "movielens-mips": (
        "ip",
        "movielens-mips: 9.7k×64 PureSVD item factors of real ratings, inner product (real)",
    ),
    "glove50-ip": (
        "ip",
        "glove50-ip: 4.5k×50 GloVe word vectors as published (unnormalised), inner product (real)",
    ),
}

FOLDERS = {
    "siftsmall": "siftsmall",
    "glove50": "glove50-5k-angular",
    "glove50-ip": "glove50-5k-angular",
    "pypi-minilm": "pypi-minilm",
    "movielens-mips": "movielens-mips",
}


def load_shared(name: str, shared: Path) -> Dataset:
    metric, description = SHARED[name]
    folder = shared / FOLDERS[name]
    base = read_vecs(folder / "base.fvecs", np.float32)
    queries = read_vecs(folder / "query.fvecs", np.float32)
    if metric == "angular":
        base, queries = normalise(base), normalise(queries)
    truth = truth_for(metric, base, queries)
    shipped = read_vecs(folder / "groundtruth.ivecs", np.int32)
    # glove50-ip's shipped truth is by cosine, not by inner product: nothing to compare.
    agree = 1.0 if name == "glove50-ip" else recall_at(truth, shipped, 10)
    if agree < 0.999:
        raise ValueError(f"{name}: computed ground truth agrees with the shipped one at {agree:.4f}")
    return Dataset(name, metric, base, queries, truth, description)


# ---------------------------------------------------------------- generated sets


def hard128(n: int, nq: int, seed: int, clusters: int, intrinsic: int, spread: float) -> tuple:
    """Overlapping Gaussian clusters, each confined to its own random `intrinsic`-dimensional
    subspace of R^128 plus 5% isotropic noise (the model of `cairn_index::dataset::synthetic`,
    with numpy's generator). Queries share the clusters (centres and subspaces from `seed`)
    and draw their points from `seed + 1`. A higher intrinsic dimension and a larger spread
    make neighbours less distinct, and graph search needs a larger ef for the same recall."""
    dim = 128
    structure = np.random.default_rng(seed)
    centres = structure.standard_normal((clusters, dim), dtype=np.float32)
    bases = structure.standard_normal((clusters, intrinsic, dim), dtype=np.float32)
    bases /= np.float32(np.sqrt(intrinsic))

    def draw(count: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((count, dim), dtype=np.float32)
        which = rng.integers(0, clusters, size=count)
        for c in range(clusters):
            rows = np.flatnonzero(which == c)
            if rows.size == 0:
                continue
            latent = rng.standard_normal((rows.size, intrinsic), dtype=np.float32)
            noise = rng.standard_normal((rows.size, dim), dtype=np.float32)
            out[rows] = centres[c] + spread * (latent @ bases[c] + 0.05 * noise)
        return out

    base = draw(n, np.random.default_rng([seed, 1]))
    queries = draw(nq, np.random.default_rng([seed, 2]))
    return base, queries


def like_minilm(n: int, nq: int, seed: int, model: np.ndarray, clusters: int) -> tuple:
    """384-d vectors with the structure of the real pypi-minilm embeddings, at any size.

    The model set is cut into `clusters` k-means cells (a few iterations of Lloyd's algorithm
    on unit vectors). A point is a cell's centre plus a Gaussian residual along the strongest
    `r` principal directions of all the real set's residuals (their eigen-decomposition,
    scaled so the residuals keep their total variance), normalised to unit length.

    Why `r` and not the whole spectrum: a Gaussian with the residuals' full covariance spreads
    near every point in all the directions that carry variance, and its intrinsic dimension
    came out at 57 (50k points) against the real set's 25: real embeddings lie on a curved
    surface of few dimensions, which the covariance does not see. `r` is the smallest number
    of directions whose generated set (as many points as the model, a fixed seed) reaches the
    model's intrinsic dimension, found by bisection (`intrinsic_dimension` is the yardstick
    `bench/ann describe` prints)."""
    rng = np.random.default_rng(seed)
    centres = model[rng.choice(model.shape[0], clusters, replace=False)].astype(np.float64)
    x = model.astype(np.float64)
    for _ in range(8):
        assign = np.argmax(x @ centres.T, axis=1)
        for c in range(clusters):
            members = x[assign == c]
            if len(members):
                centres[c] = members.mean(axis=0)
    assign = np.argmax(x @ centres.T, axis=1)
    residual = x - centres[assign]
    cov = residual.T @ residual / len(residual)
    values, vectors = np.linalg.eigh(cov)
    values, vectors = np.clip(values[::-1], 0, None), vectors[:, ::-1]
    weights = np.bincount(assign, minlength=clusters) / len(assign)

    def draw(count: int, gen: np.random.Generator, r: int) -> np.ndarray:
        # The r strongest directions, scaled up to the residuals' whole variance.
        scale = vectors[:, :r] * np.sqrt(values[:r] * values.sum() / values[:r].sum())
        which = gen.choice(clusters, size=count, p=weights)
        out = np.empty((count, model.shape[1]), dtype=np.float32)
        for start in range(0, count, 65536):
            w = which[start : start + 65536]
            z = gen.standard_normal((len(w), r))
            out[start : start + len(w)] = centres[w] + z @ scale.T
        return normalise(out)

    target = intrinsic_dimension(model)
    lo, hi = 1, model.shape[1]
    while lo < hi:
        mid = (lo + hi) // 2
        trial = draw(model.shape[0], np.random.default_rng([seed, 3]), mid)
        if intrinsic_dimension(trial) < target:
            lo = mid + 1
        else:
            hi = mid
    print(f"like_minilm: {lo} of {model.shape[1]} residual directions give the model's "
          f"intrinsic dimension {target:.1f}", file=sys.stderr, flush=True)
    return draw(n, np.random.default_rng([seed, 1]), lo), draw(nq, np.random.default_rng([seed, 2]), lo)


def intrinsic_dimension(x: np.ndarray, sample: int = 2000, k: int = 20, seed: int = 7) -> float:
    """Levina–Bickel maximum-likelihood estimate of intrinsic dimension, averaged over a
    sample of points with their k nearest neighbours in the whole set."""
    rng = np.random.default_rng(seed)
    points = x[rng.choice(x.shape[0], min(sample, x.shape[0]), replace=False)]
    nearest = exact_truth(x, points, k + 1)
    estimates = []
    for p, ids in zip(points, nearest):
        d = np.sqrt(np.sum((x[ids].astype(np.float64) - p) ** 2, axis=1))
        d = d[d > 0][:k]
        if len(d) < k:
            continue
        estimates.append((k - 1) / np.sum(np.log(d[-1] / d[:-1])))
    return float(np.mean(estimates))


def long_tailed(n: int, nq: int, dim: int, sigma: float, seed: int) -> tuple:
    """Uniform directions, log-normal norms exp(σ·z) (the long tail of recommendation
    factors), and unit-norm queries of uniform directions. The directions and z do not depend
    on σ, so σ alone moves the norm bias."""
    rng = np.random.default_rng(seed)
    directions = normalise(rng.standard_normal((n, dim), dtype=np.float32))
    z = rng.standard_normal(n)
    base = np.ascontiguousarray((directions * np.exp(sigma * z)[:, None]).astype(np.float32))
    queries = normalise(rng.standard_normal((nq, dim), dtype=np.float32))
    return base, queries


def long_tailed_with_bias(n: int, nq: int, dim: int, seed: int, bias: float) -> tuple:
    """[`long_tailed`] with the σ whose norm bias (against its first 200 queries) is closest to
    `bias`: bisection on σ in [0, 2], 14 steps (the Rust bench's
    `dataset::long_tailed_with_bias` does the same on its own generator)."""
    lo, hi, best = 0.0, 2.0, None
    for _ in range(14):
        sigma = (lo + hi) / 2
        base, queries = long_tailed(n, nq, dim, sigma, seed)
        got = norm_bias(base, exact_truth_ip(base, queries[:200], k=10))
        if got < bias:
            lo = sigma
        else:
            hi = sigma
        if best is None or abs(got - bias) < abs(best[0] - bias):
            best = (got, sigma)
    return long_tailed(n, nq, dim, best[1], seed)


def generated_specs(shared: Path) -> dict:
    """Every generated set by name: (metric, generator, parameters, description)."""
    hard = dict(clusters=10, intrinsic=64, spread=1.0, seed=20261127)
    specs = {}
    for label, n in (("hard1m", 1_000_000), ("hard200k", 200_000), ("hard20k", 20_000)):
        specs[label] = (
            "l2",
            lambda p=dict(hard, n=n, nq=1000): hard128(**p),
            dict(hard, n=n, nq=1000, generator="hard128"),
            f"{label}: {n // 1000}k×128, 10 overlapping clusters in 64-d subspaces, L2 (generated)",
        )
    for label, n in (("minilm1m", 1_000_000), ("minilm200k", 200_000)):
        params = dict(n=n, nq=1000, seed=20261127, clusters=256)

        def make(p=params):
            model = load_shared("pypi-minilm", shared).base
            return like_minilm(p["n"], p["nq"], p["seed"], model, p["clusters"])

        specs[label] = (
            "angular",
            make,
            # The generator's name changed with the way it draws: a cache of the old sets is
            # not read as the new.
            dict(params, generator="like_minilm/rank"),
            f"{label}: {n // 1000}k×384 with pypi-minilm's cells, residual directions and "
            "intrinsic dimension, cosine (generated)",
        )
    for label, n in (("longtail200k", 200_000), ("longtail20k", 20_000)):
        params = dict(n=n, nq=1000, dim=64, sigma=0.8, seed=20261128)
        specs[label] = (
            "ip",
            lambda p=params: long_tailed(**p),
            dict(params, generator="long_tailed"),
            f"{label}: {n // 1000}k×64, uniform directions, log-normal norms σ 0.8, inner product (generated)",
        )
        for bias in (0.65, 0.85):
            biased = dict(n=n, nq=1000, dim=64, seed=20261128, bias=bias)
            specs[f"{label}-b{bias}"] = (
                "ip",
                lambda p=biased: long_tailed_with_bias(**p),
                dict(biased, generator="long_tailed_with_bias"),
                f"{label}-b{bias}: {n // 1000}k×64, uniform directions, log-normal norms with the σ "
                f"of norm bias {bias}, inner product (generated)",
            )
    return specs


def load(name: str, shared: Path, cache: Path) -> Dataset:
    if name in SHARED:
        return load_shared(name, shared)
    specs = generated_specs(shared)
    if name not in specs:
        known = ", ".join(sorted(list(SHARED) + list(specs)))
        raise SystemExit(f"unknown data set {name!r}; known: {known}")
    metric, make, params, description = specs[name]
    folder = cache / name
    info_path = folder / "info.json"
    if info_path.exists() and json.loads(info_path.read_text()).get("params") == params:
        base = np.load(folder / "base.npy")
        queries = np.load(folder / "queries.npy")
        truth = np.load(folder / "truth.npy")
        return Dataset(name, metric, base, queries, truth, description)
    started = time.perf_counter()
    base, queries = make()
    if metric == "angular":
        base, queries = normalise(base), normalise(queries)
    made = time.perf_counter() - started
    truth = truth_for(metric, base, queries)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "base.npy", base)
    np.save(folder / "queries.npy", queries)
    np.save(folder / "truth.npy", truth)
    info = dict(params=params, seconds=dict(generate=made, truth=time.perf_counter() - started - made))
    info_path.write_text(json.dumps(info, indent=2))
    return Dataset(name, metric, base, queries, truth, description)
