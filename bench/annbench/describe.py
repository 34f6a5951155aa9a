"""`bench/ann describe --data SET[,SET…]`: what makes a set hard for a graph, without building one.

For each set it prints its size and metric and two figures from the ANN literature, both on
the vectors as every side searches them (angular sets normalised):
- the intrinsic dimension, the Levina–Bickel maximum-likelihood estimate over each sampled
  point's 20 nearest neighbours (`data.intrinsic_dimension`): how many directions the data
  really spreads in near a point. It is how `minilm200k` and `minilm1m` are checked against
  the real sentence embeddings they imitate (`data.like_minilm`);
- the relative contrast at k = 10, the mean distance from a query to the set over the
  distance to its 10th nearest neighbour (He, Kumar & Chang, ICML 2012): the nearer it is to
  1, the less the true neighbours stand out and the more a search must read.

Neither needs a library under test; the difficulty that matters to the race, the `ef` FAISS
needs for recall@10 0.9 / 0.95 / 0.99, is in every run's summary."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from . import data as datasets

SAMPLE_QUERIES = 200
SAMPLE_BASE = 20_000
K = 10


def relative_contrast(dataset: datasets.Dataset, seed: int = 7) -> float:
    """Mean over sampled queries of (mean distance to a sample of the set) / (distance to the
    query's 10th nearest neighbour), the neighbours from the set's exact ground truth."""
    rng = np.random.default_rng(seed)
    base, queries = dataset.base, dataset.queries
    picked = rng.choice(len(queries), min(SAMPLE_QUERIES, len(queries)), replace=False)
    others = base[rng.choice(len(base), min(SAMPLE_BASE, len(base)), replace=False)].astype(np.float64)
    ratios = []
    for q_index in picked:
        q = queries[q_index].astype(np.float64)
        kth = base[dataset.truth[q_index, K - 1]].astype(np.float64)
        nearest = np.sqrt(np.sum((kth - q) ** 2))
        if nearest == 0:
            continue
        mean = np.mean(np.sqrt(np.sum((others - q) ** 2, axis=1)))
        ratios.append(mean / nearest)
    return float(np.mean(ratios))


def main(argv: list[str]) -> None:
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(prog="bench/ann describe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="siftsmall")
    parser.add_argument("--shared", default=str(here.parent.parent / "shared" / "data"))
    parser.add_argument("--cache", default=str(here / ".data"))
    args = parser.parse_args(argv)
    print("| set | points × dimensions | metric | intrinsic dimension (MLE, k 20) | relative contrast at k 10 |")
    print("|---|---|---|---|---|")
    for name in args.data.split(","):
        dataset = datasets.load(name, Path(args.shared), Path(args.cache))
        if dataset.metric == "ip":
            # Inner product has no distance to contrast; the norm bias describes those sets.
            raise SystemExit(f"{name}: an inner-product set; its norm bias is in every run's log")
        n, d = dataset.base.shape
        lid = datasets.intrinsic_dimension(dataset.base)
        contrast = relative_contrast(dataset)
        print(f"| {name} | {n:,} × {d} | {dataset.metric} | {lid:.1f} | {contrast:.2f} |", flush=True)
