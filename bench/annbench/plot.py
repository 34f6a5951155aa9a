"""Recall/QPS plots of a run: one line per side and mode (its Pareto frontier over every
configuration, of the build with the median QPS at recall 0.95), QPS on a log scale."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .runner import curves, frontier, qps_at  # noqa: E402


def plot(dataset, passes: list, path: Path) -> None:
    per_build = curves(passes)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for side, mode in sorted({(s, m) for (s, m, _) in per_build}):
        builds = [points for (s, m, _), points in per_build.items() if (s, m) == (side, mode)]
        builds.sort(key=lambda pts: (qps_at(pts, 0.95) or (0, 0))[1])
        chosen = frontier(builds[len(builds) // 2])
        ax.plot([r for r, _ in chosen], [q for _, q in chosen], marker="o", markersize=3,
                label=f"{side} ({mode})")
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second, one thread (log)")
    ax.set_yscale("log")
    ax.set_xlim(left=0.8, right=1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(dataset.description, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
