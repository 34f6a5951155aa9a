"""Builds and times every side on one data set: `builds` independent builds per side and
configuration, and per build `rounds` interleaved rounds in which every side runs its whole
grid before any side runs again (the order rotates each round), so that a slow minute of a
shared machine lands on every side alike rather than on one.

Each timed pass answers every query once (repeated until the pass has taken `--pass-seconds`,
0.3 s by default, for small query sets); QPS is queries answered / wall seconds of the pass.
Recall@k is against the exact ground truth of the data set.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path

from . import data as datasets
from .sides import SIDES

#: Once a configuration reaches this recall in the first round, its larger settings are
#: skipped: the goals stop at 0.99.
RECALL_CAP = 0.995

TARGETS = (0.9, 0.95, 0.99)

#: A pass over a small query set is repeated until it has taken this long, so that a timer
#: tick or one preemption does not decide a point. A grid of ~250 points then costs a
#: minute on a 10k set whatever its queries cost; a run that checks answers rather than
#: times (the harness's own test) passes a shorter floor.
MIN_PASS_SECONDS = 0.3


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclasses.dataclass
class Pass:
    side: str
    mode: str
    config: str
    build: int
    round: int
    params: str
    recall: float
    qps: float


@dataclasses.dataclass
class Build:
    side: str
    config: str
    build: int
    seconds: float
    memory_bytes: int | None
    rss_growth: int


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(dataset, side_names, modes, builds, rounds, threads, k, out: Path,
        pass_seconds: float = MIN_PASS_SECONDS) -> tuple:
    passes: list[Pass] = []
    built: list[Build] = []
    out.mkdir(parents=True, exist_ok=True)
    for build_no in range(builds):
        instances = []
        for name in side_names:
            if dataset.metric not in SIDES[name].metrics:
                continue
            for config in SIDES[name]().configs(dataset):
                side = SIDES[name]()
                gc.collect()
                before = rss_bytes()
                started = time.perf_counter()
                side.build(dataset.base, dataset.metric, config, seed=build_no + 1, threads=threads)
                seconds = time.perf_counter() - started
                tag = json.dumps(config, sort_keys=True)
                record = Build(name, tag, build_no, seconds, side.memory_bytes(), rss_bytes() - before)
                built.append(record)
                log(f"build {build_no} {name} {tag}: {seconds:.1f} s")
                grid = side.grid(config, dataset)
                instances.append((side, tag, grid))
        for round_no in range(rounds):
            shift = round_no % len(instances)
            for side, tag, grid in instances[shift:] + instances[:shift]:
                for mode in side.modes:
                    if mode not in modes:
                        continue
                    search = side.batch if mode == "batch" else side.single
                    for params in list(grid):
                        side.prepare(params)
                        started = time.perf_counter()
                        found = search(dataset.queries, k)
                        calls = 1
                        while (seconds := time.perf_counter() - started) < pass_seconds:
                            search(dataset.queries, k)
                            calls += 1
                        recall = datasets.recall_at(found, dataset.truth, k)
                        passes.append(
                            Pass(side.name, mode, tag, build_no, round_no,
                                 json.dumps(params, sort_keys=True), recall,
                                 calls * len(dataset.queries) / seconds)
                        )
                        if round_no == 0 and recall >= RECALL_CAP:
                            # Cut the grid here for every later round and mode.
                            del grid[grid.index(params) + 1 :]
                            break
            log(f"build {build_no} round {round_no} done")
        for side, _, _ in instances:
            side.close()
        del instances
        gc.collect()
        # Written after every build, so that a long run stopped early keeps what it measured.
        write_csv(out / f"{dataset.name}-passes.csv", passes)
        write_csv(out / f"{dataset.name}-builds.csv", built)
    return passes, built


def read_csv(out: Path, name: str) -> tuple:
    """The passes and builds a run wrote, to be summarised again (`bench/ann summarize`)."""
    def rows(kind, cls):
        with open(out / f"{name}-{kind}.csv", newline="") as f:
            types = {f.name: f.type for f in dataclasses.fields(cls)}
            parse = dict(int=int, float=float, str=str)
            return [
                cls(**{k: (None if v == "" else parse.get(str(types[k]).split(" ")[0], float)(v))
                       for k, v in row.items()})
                for row in csv.DictReader(f)
            ]
    return rows("passes", Pass), rows("builds", Build)


def write_csv(path: Path, rows: list) -> None:
    if not rows:
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in dataclasses.fields(rows[0])])
        writer.writeheader()
        for row in rows:
            writer.writerow(dataclasses.asdict(row))


def curves(passes: list[Pass]) -> dict:
    """(side, mode, build) → [(recall, qps, config, params)], each point the median of its
    rounds."""
    grouped: dict = {}
    for p in passes:
        grouped.setdefault((p.side, p.mode, p.build, p.config, p.params), []).append(p)
    out: dict = {}
    for (side, mode, build, config, params), group in grouped.items():
        point = (
            statistics.median(p.recall for p in group),
            statistics.median(p.qps for p in group),
            config,
            params,
        )
        out.setdefault((side, mode, build), []).append(point)
    return out


def qps_at(points: list, target: float) -> tuple | None:
    """The fastest point whose recall reaches `target` (ann-benchmarks' reading of a curve:
    no interpolation between settings)."""
    reached = [p for p in points if p[0] >= target]
    return max(reached, key=lambda p: p[1]) if reached else None


def frontier(points: list) -> list:
    """The (recall, qps) points no other point beats on both, by recall."""
    best, out = -1.0, []
    for recall, qps, *_ in sorted(points, key=lambda p: (-p[0], -p[1])):
        if qps > best:
            out.append((recall, qps))
            best = qps
    return sorted(out)


def interpolated_qps_at(points: list, target: float) -> float | None:
    """QPS at exactly `target` recall on the Pareto frontier, log-QPS interpolated linearly in
    recall between the two settings around it (never extrapolated: None when no point
    reaches it, the first point's QPS when every point does).

    Why beside `qps_at`: on a grid of ef steps of 1.3–1.5× the fastest point past a target
    can overshoot it by a lot, and by how much depends on where each side's grid happens to
    fall: one side can land at 0.950 and another at 0.972, a third of its QPS lost to the
    grid. Between two settings a side can always be run at the setting in between."""
    curve = frontier(points)
    if not curve or curve[-1][0] < target:
        return None
    if curve[0][0] >= target:
        return curve[0][1]
    for (r0, q0), (r1, q1) in zip(curve, curve[1:]):
        if r1 >= target:
            share = (target - r0) / (r1 - r0)
            return math.exp(math.log(q0) + share * (math.log(q1) - math.log(q0)))
    return None


def summary(dataset, passes: list[Pass], built: list[Build], reference: str) -> dict:
    """Per side and mode: QPS at each target recall (median and range over builds), its ratio
    to the reference side, build seconds and memory."""
    per_build = curves(passes)
    sides = sorted({(s, m) for (s, m, _) in per_build})
    table = {}
    for side, mode in sides:
        row = {}
        for target in TARGETS:
            hits = [qps_at(points, target) for (s, m, _), points in per_build.items()
                    if (s, m) == (side, mode)]
            values = [h[1] for h in hits if h is not None]
            between = [interpolated_qps_at(points, target)
                       for (s, m, _), points in per_build.items() if (s, m) == (side, mode)]
            between = [q for q in between if q is not None]
            row[target] = dict(
                median=statistics.median(values) if len(values) == len(hits) else None,
                low=min(values) if values else None,
                high=max(values) if values else None,
                reached=f"{len(values)}/{len(hits)}",
                settings=sorted({(h[2], h[3]) for h in hits if h is not None}),
                interpolated=statistics.median(between) if len(between) == len(hits) else None,
                interpolated_low=min(between) if between else None,
                interpolated_high=max(between) if between else None,
            )
        table[(side, mode)] = row
    ref = table.get(reference)
    for key, row in table.items():
        for target, cell in row.items():
            for reading, ratio in (("median", "ratio"), ("interpolated", "interpolated_ratio")):
                mine = ref[target][reading] if ref else None
                cell[ratio] = (mine / cell[reading]) if mine and cell[reading] else None
    builds: dict = {}
    for b in built:
        builds.setdefault((b.side, b.config), []).append(b)
    build_rows = {
        key: dict(
            seconds=statistics.median(b.seconds for b in group),
            low=min(b.seconds for b in group),
            high=max(b.seconds for b in group),
            memory=group[0].memory_bytes,
            rss_growth=statistics.median(b.rss_growth for b in group),
        )
        for key, group in builds.items()
    }
    return dict(table=table, builds=build_rows, difficulty=difficulty(passes))


def difficulty(passes: list[Pass], side: str = "faiss-hnsw", m: int = 16) -> dict:
    """How hard a set is, in the issue's terms: the smallest efSearch at which FAISS's HNSW
    (M = 16, efConstruction 200) reaches each target recall, median over builds."""
    config = json.dumps(dict(M=m, efC=200), sort_keys=True)
    out = {}
    for target in TARGETS:
        per_build = {}
        for p in passes:
            if p.side == side and p.config == config and p.round == 0 and p.recall >= target:
                ef = json.loads(p.params)["ef"]
                per_build[p.build] = min(ef, per_build.get(p.build, ef))
        builds = {p.build for p in passes if p.side == side and p.config == config}
        out[target] = statistics.median(per_build.values()) if builds and len(per_build) == len(builds) else None
    return out


def as_json(result: dict) -> dict:
    """The summary with string keys: `side/mode` → target → cell, `side config` → build."""
    return dict(
        search={f"{s}/{m}": {str(t): c for t, c in row.items()} for (s, m), row in result["table"].items()},
        builds={f"{s} {c}": b for (s, c), b in result["builds"].items()},
        difficulty={str(t): ef for t, ef in result["difficulty"].items()},
    )


def markdown(dataset, result: dict, reference: tuple, builds: int, rounds: int) -> str:
    lines = [
        f"### {dataset.description}",
        "",
        f"{len(dataset.queries)} queries, recall@10 against exact ground truth; {builds} builds per "
        f"configuration, {rounds} interleaved rounds per build; QPS on one thread: median over "
        f"builds [lowest–highest]; ratio = {reference[0]} ({reference[1]}) ÷ the row's median.",
        "",
        "| side | mode | " + " | ".join(f"QPS at {t}" for t in TARGETS) + " | "
        + " | ".join(f"ratio at {t}" for t in TARGETS) + " |",
        "|---|---|" + "---|" * (2 * len(TARGETS)),
    ]
    hardness = ", ".join(
        f"{t}: ef {ef:g}" if ef else f"{t}: not reached" for t, ef in result["difficulty"].items()
    )
    lines.insert(3, f"Difficulty (FAISS HNSW, M 16, efConstruction 200, smallest ef reaching recall@10): {hardness}.")
    lines.insert(4, "")

    def fmt(cell):
        if cell["median"] is None:
            return f"not reached ({cell['reached']} builds)"
        return f"{cell['median']:,.0f} [{cell['low']:,.0f}–{cell['high']:,.0f}]"

    for (side, mode), row in sorted(result["table"].items()):
        ratios = [f"{row[t]['ratio']:.2f}×" if row[t]["ratio"] else "—" for t in TARGETS]
        lines.append(f"| {side} | {mode} | " + " | ".join(fmt(row[t]) for t in TARGETS)
                     + " | " + " | ".join(ratios) + " |")

    def fmt_between(cell):
        if cell["interpolated"] is None:
            return "not reached"
        return (f"{cell['interpolated']:,.0f} "
                f"[{cell['interpolated_low']:,.0f}–{cell['interpolated_high']:,.0f}]")

    lines += ["", "The same curves read between grid points: log-QPS interpolated at the exact "
              "recall on each build's frontier, median over builds [lowest–highest].", "",
              "| side | mode | " + " | ".join(f"QPS at {t}" for t in TARGETS) + " | "
              + " | ".join(f"ratio at {t}" for t in TARGETS) + " |",
              "|---|---|" + "---|" * (2 * len(TARGETS))]
    for (side, mode), row in sorted(result["table"].items()):
        ratios = [f"{row[t]['interpolated_ratio']:.2f}×" if row[t]["interpolated_ratio"] else "—"
                  for t in TARGETS]
        lines.append(f"| {side} | {mode} | " + " | ".join(fmt_between(row[t]) for t in TARGETS)
                     + " | " + " | ".join(ratios) + " |")
    lines += ["", "| side | build configuration | build s (2 threads) [range] | index bytes/vector | RSS growth/vector |",
              "|---|---|---|---|---|"]
    n = dataset.base.shape[0]
    for (side, config), b in sorted(result["builds"].items()):
        memory = f"{b['memory'] / n:.0f}" if b["memory"] else "—"
        lines.append(f"| {side} | `{config}` | {b['seconds']:.1f} [{b['low']:.1f}–{b['high']:.1f}] "
                     f"| {memory} | {b['rss_growth'] / n:.0f} |")
    return "\n".join(lines) + "\n"
