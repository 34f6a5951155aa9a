"""`bench/ann crossover`: where reading every item stops paying, for `mips_auto`'s small rule.

Where the norms do not lean, `mips_auto` serves a collection of up to `SMALL_SCAN_ROWS`
points by the norm scan reading every item (the norm order tells little there), and a larger
one by ip-NSW (`index/src/mips_auto/`). This measures the two on growing prefixes
of three real sets searched by inner product, whose norms hardly spread: GloVe-50 as published
(50-d), siftsmall (128-d) and pypi-minilm (384-d, normalised: inner product is cosine). For
each size n: `norm_scan` on its grid of shares (the items read) and `ip_nsw` (M 32,
efConstruction 200, `mips_auto`'s graph) on the graphs' ef grid, batch calls on one thread,
recall@10 against exact ground truth, the sides interleaved for `--rounds` rounds; QPS at
recall@10 0.9 / 0.95 / 0.99 read between grid points on the Pareto frontier of the rounds'
medians, as the harness reads it. Prints CSV: the scan's QPS over ip-NSW's, ≥ 1 where the
scan wins. Up to 1,024 items `mips_auto` scans exactly, so sizes start there.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

from .data import exact_truth_ip, normalise, read_vecs, recall_at
from .runner import interpolated_qps_at
from .sides import EF_GRID

# (name, folder under the shared data, normalised, the prefixes measured)
SETS = [
    ("glove50-ip", "glove50-5k-angular", False, [1024, 2048, 4550]),
    ("siftsmall-ip", "siftsmall", False, [1024, 2048, 4096, 8192, 10000]),
    ("pypi-minilm-ip", "pypi-minilm", True, [1024, 2048, 4096, 8192, 16384]),
]
SHARES = [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
TARGETS = (0.9, 0.95, 0.99)
QUERIES = 500


def passes(index, queries, efs, truth, rounds_out):
    """One timed batch pass per ef; appends QPS and sets the recall of each."""
    for ef in efs:
        start = time.perf_counter()
        ids = index.search(queries, k=10, ef=ef)[0]
        rounds_out[ef][0].append(len(queries) / (time.perf_counter() - start))
        rounds_out[ef][1] = recall_at(ids, truth, 10)


def main(argv: list[str]) -> None:
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(prog="bench/ann crossover", description=__doc__)
    parser.add_argument("--shared", default=str(here.parent.parent / "shared" / "data"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import cairn_index

    out = csv.writer(sys.stdout)
    out.writerow(["set", "dim", "n", "code_bytes", "target", "scan_qps", "ipnsw_qps", "scan_over_ipnsw"])
    for name, folder, unit, sizes in SETS:
        base_all = read_vecs(Path(args.shared) / folder / "base.fvecs", np.float32)
        queries = read_vecs(Path(args.shared) / folder / "query.fvecs", np.float32)[:QUERIES]
        if unit:
            base_all, queries = normalise(base_all), normalise(queries)
        if len(queries) < QUERIES:  # siftsmall's 100, each asked again, for steadier timing
            queries = np.ascontiguousarray(np.tile(queries, (QUERIES // len(queries), 1)))
        dim = base_all.shape[1]
        for n in sizes:
            base = np.ascontiguousarray(base_all[:n])
            truth = exact_truth_ip(base, queries, 10)
            scan = cairn_index.Index("norm_scan", dim=dim, metric="ip")
            graph = cairn_index.Index("ip_nsw", dim=dim, metric="ip", m=32, ef_construction=200)
            scan.add(base)
            graph.add(base)
            grids = {
                "scan": (scan, sorted({max(10, int(np.ceil(s * n))) for s in SHARES})),
                "ipnsw": (graph, EF_GRID),
            }
            runs = {side: {ef: [[], 0.0] for ef in efs} for side, (_, efs) in grids.items()}
            for round_ in range(args.rounds):
                for side in (["scan", "ipnsw"] if round_ % 2 == 0 else ["ipnsw", "scan"]):
                    index, efs = grids[side]
                    passes(index, queries, efs, truth, runs[side])
            for target in TARGETS:
                qps = {
                    side: interpolated_qps_at(
                        [(r, float(np.median(q))) for q, r in runs[side].values()], target
                    )
                    for side in grids
                }
                ratio = qps["scan"] / qps["ipnsw"] if qps["scan"] and qps["ipnsw"] else None
                out.writerow([
                    name, dim, n, n * 4 * -(-dim // 4), target,
                    f"{qps['scan']:.0f}" if qps["scan"] else "",
                    f"{qps['ipnsw']:.0f}" if qps["ipnsw"] else "",
                    f"{ratio:.2f}" if ratio else "",
                ])
                sys.stdout.flush()
