"""`bench/ann quantizers --from DIR`: ScaNN's anisotropic quantizer beside Cairn's NEQ, at
equal bytes, on the very arrays the `neq` bench measured (issue #26).

The `neq` bench (BENCHMARKS.md C6) with `CAIRN_BENCH_DUMP=DIR` writes every set it measures
as `DIR/<set>/{base,queries}.fvecs` and `truth.ivecs` (exact top-10 by inner product). This
measures ScaNN on them by the bench's own figure: every item is scored against every query
by ScaNN's asymmetric hashing (AH: lookup tables, no tree, no re-rank), items are ranked by
that estimate, and recall@10 within the top T is the share of the exact top-10 among the
first T, T = 16…1024.

Equal bytes: NEQ and plain VQ spend M bytes per item (M = 4, 8). ScaNN spends them as M
blocks of 256 centres (`lut256`) or 2M blocks of 16 (`lut16`, its fast path). Where the
dimension does not split into that many blocks (GloVe's 50 into 16), ScaNN gets one block
more than its share, never fewer.

ScaNN's own grid: both block shapes, and the anisotropic threshold T. ScaNN takes T as an
absolute inner product: an item of norm |x| weighs parallel error (d − 1)·t²/(1 − t²) times
the perpendicular, t = T/|x| (`ComputeParallelCostMultiplier`). Its documented 0.2 is for
unit vectors, so on sets whose norms vary the grid sets T relative to the median norm
(t = 0.1 … 1.0 for the median item) and includes no threshold at all (plain reconstruction
loss). The best grid point at each T is ScaNN's figure, as if tuned per T. (Its lookup tables
are int8; float tables gave the same recall to ±0.001 on movielens-mips.)
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from .data import read_vecs, recall_at

T_VALUES = (16, 32, 64, 128, 256, 512, 1024)
K = 10
#: The codebooks train on this many items, as the `neq` bench's (`CAIRN_BENCH_NEQ_TRAIN`).
TRAIN = 50_000
#: ScaNN's grid: (hash type, thresholds relative to the median norm; NaN for none). Larger
#: thresholds (2 and 3 × the median) lost recall at every T on movielens-mips, and `lut16`
#: trailed `lut256` at every T there, so the grid spends its builds on `lut256`.
GRID = (("lut256", (math.nan, 0.1, 0.2, 0.5, 1.0)), ("lut16", (math.nan, 0.2)))


def block_width(dim: int, blocks: int) -> int:
    """Dimensions per block such that ScaNN makes `blocks` blocks, or the fewest more."""
    width = math.ceil(dim / blocks)
    if math.ceil(dim / width) == blocks:
        return width
    return max(1, dim // blocks)


def measure(base, queries, truth, m: int, hash_type: str, threshold: float) -> list[float]:
    import scann

    blocks = m if hash_type == "lut256" else 2 * m
    width = block_width(base.shape[1], blocks)
    builder = scann.scann_ops_pybind.builder(base, T_VALUES[-1], "dot_product")
    builder = builder.score_ah(
        width, anisotropic_quantization_threshold=threshold,
        training_sample_size=min(TRAIN, base.shape[0]), hash_type=hash_type,
    )
    searcher = builder.build()
    searcher.set_num_threads(2)
    found, _ = searcher.search_batched(queries, final_num_neighbors=T_VALUES[-1])
    return [recall_at(np.asarray(found), truth, K, within=t) for t in T_VALUES]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench/ann quantizers", description=__doc__)
    parser.add_argument("--from", dest="source", required=True,
                        help="the folder the neq bench wrote with CAIRN_BENCH_DUMP")
    parser.add_argument("--out", default=None,
                        help="where neq-scann-<set>-m<M>.csv go (default: beside the sets)")
    parser.add_argument("--sets", default="", help="comma-separated set names (default: all)")
    args = parser.parse_args(argv)
    source = Path(args.source)
    out = Path(args.out) if args.out else source
    out.mkdir(parents=True, exist_ok=True)
    wanted = [s for s in args.sets.split(",") if s]
    names = sorted(p.name for p in source.iterdir() if (p / "base.fvecs").exists())
    for name in names:
        if wanted and name not in wanted:
            continue
        folder = source / name
        base = read_vecs(folder / "base.fvecs", np.float32)
        queries = read_vecs(folder / "queries.fvecs", np.float32)
        truth = read_vecs(folder / "truth.ivecs", np.int32)
        median = float(np.median(np.linalg.norm(base, axis=1)))
        header = " | ".join(f"T={t}" for t in T_VALUES)
        for m in (4, 8):
            print(f"\n{name} M={m} ({base.shape[0]}×{base.shape[1]}, median norm {median:.3g}): "
                  f"recall@{K} within the top T | {header}", flush=True)
            rows, best = [], [0.0] * len(T_VALUES)
            for hash_type, relatives in GRID:
                for relative in relatives:
                    label = f"scann-{hash_type}-t{'none' if math.isnan(relative) else relative}"
                    recalls = measure(base, queries, truth, m, hash_type, relative * median)
                    best = [max(a, b) for a, b in zip(best, recalls)]
                    print(f"| {label} | " + " | ".join(f"{r:.3f}" for r in recalls) + " |",
                          flush=True)
                    rows += [(label, f"T={t}", f"{r:.4f}", "", t) for t, r in zip(T_VALUES, recalls)]
            print("| **scann (best of its grid)** | " + " | ".join(f"{r:.3f}" for r in best) + " |",
                  flush=True)
            rows += [("scann-best", f"T={t}", f"{r:.4f}", "", t) for t, r in zip(T_VALUES, best)]
            path = out / f"neq-scann-{name}-m{m}.csv"
            with path.open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["series", "label", "recall", "qps", "distance_computations"])
                writer.writerows(rows)
