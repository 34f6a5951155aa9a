"""`bench/ann builds`: build times only, each build in a process of its own, for comparing
Cairn's builds between commits beside the other libraries.

Why a separate command. The race (`bench/ann`) builds each side in one long-lived process and
then searches it for most of an hour; a change to Cairn's insertion path is judged by its build
time, which that run spends 45 minutes to give three numbers of. Here every build is a fresh
`python` process (no allocator or page-cache state carried from the build before), the
variants' order rotates each round, and a recall@10 at one fixed ef checks that a faster build
did not buy its speed with a worse graph.

Variants are harness sides (`faiss-hnsw`, `hnswlib`, `cairn-hnsw`: this checkout's wheel, as
`bench/ann` installs it) and, with `--wheels NAME=DIR,...`, Cairn wheels of other commits,
each installed into a folder of its own (`pip install --no-cache-dir --no-deps --target DIR ./python` at that
commit), which is put first on the child's `PYTHONPATH`. The CSV goes to `--out`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: The fixed search setting of the graph-quality check (every HNSW side alike).
CHECK_EF = 64


def child(argv: list[str]) -> None:
    """One build in this process: prints `{"seconds", "recall", "module"}` as JSON."""
    import time

    from . import data as datasets
    from . import sides

    name, shared, cache, side_name, seed, m, threads = argv
    dataset = datasets.load(name, Path(shared), Path(cache))
    side = sides.SIDES[side_name]()
    # The race's own build configuration (efConstruction 200 for every HNSW side), at one M.
    sides.GRAPH_M[:] = [int(m)]
    (config,) = sides.hnsw_configs(dataset)
    started = time.perf_counter()
    side.build(dataset.base, dataset.metric, config, int(seed), int(threads))
    seconds = time.perf_counter() - started
    side.prepare(dict(ef=CHECK_EF))
    found = side.batch(dataset.queries, 10)
    recall = datasets.recall_at(found, dataset.truth, 10)
    module = None
    if side_name.startswith("cairn"):
        import cairn_index

        module = cairn_index.__file__
    print(json.dumps(dict(seconds=seconds, recall=recall, module=module)))


def module_file(folder: str | None) -> Path:
    """The extension module a Cairn variant imports: the one in its wheel folder, or this
    checkout's, installed in the harness's virtualenv."""
    if folder is None:
        import importlib.util

        spec = importlib.util.find_spec("cairn_index")
        if spec is None or spec.origin is None:
            sys.exit("cairn_index is not installed in the harness's virtualenv")
        package = Path(spec.origin).parent
    else:
        package = Path(folder, "cairn_index")
    found = sorted(package.glob("cairn_index*.so"))
    if not found:
        sys.exit(f"{package}: no extension module")
    return found[0]


def refuse_identical_wheels(variants: list[tuple[str, str, str | None]]) -> None:
    """Stops when two Cairn variants would import byte-identical extension modules.

    Why. Wheels of several checkouts built with one `CARGO_TARGET_DIR` can come out as one
    binary: cargo decides that a path crate is fresh by comparing its sources' modification
    times with the last build's, so a checkout whose files are older than the artifact another
    checkout just built reuses it. Such a comparison measures one binary against itself (touch
    the sources, or give each checkout its own target folder, before building its wheel).
    """
    import hashlib

    seen: dict[str, str] = {}
    for label, side, folder in variants:
        if not side.startswith("cairn"):
            continue
        digest = hashlib.sha256(module_file(folder).read_bytes()).hexdigest()
        if digest in seen:
            sys.exit(f"{label} and {seen[digest]} are the same extension module: rebuild one "
                     f"after `find index python -name '*.rs' -exec touch {{}} +` in its checkout")
        seen[digest] = label


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(prog="bench/ann builds", description=__doc__)
    parser.add_argument("--data", default="hard1m")
    parser.add_argument("--sides", default="cairn-hnsw,faiss-hnsw,hnswlib")
    parser.add_argument("--wheels", default="",
                        help="NAME=DIR,...: Cairn wheels of other commits, built as cairn-hnsw")
    parser.add_argument("--allow-identical", action="store_true",
                        help="time Cairn variants with the same extension module (a test of the "
                             "command itself)")
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--builds", type=int, default=3, help="rounds; seeds 1, 2, 3, ...")
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--shared", default=str(here.parent.parent / "shared" / "data"))
    parser.add_argument("--cache", default=str(here / ".data"))
    parser.add_argument("--out", default=str(here / "results"))
    args = parser.parse_args(argv)

    variants = [(s, s, None) for s in args.sides.split(",") if s]
    for item in filter(None, args.wheels.split(",")):
        label, _, folder = item.partition("=")
        if not Path(folder, "cairn_index").is_dir():
            sys.exit(f"{folder}: no cairn_index package (pip install --no-deps --target {folder} ./python)")
        variants.append((label, "cairn-hnsw", str(Path(folder).resolve())))
    if not args.allow_identical:
        refuse_identical_wheels(variants)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.build_threads), OMP_NUM_THREADS="1")
    rows = []
    for round_ in range(args.builds):
        shift = round_ % len(variants)
        for label, side, folder in variants[shift:] + variants[:shift]:
            child_env = dict(env)
            child_env["PYTHONPATH"] = os.pathsep.join(([folder] if folder else []) + [str(here)])
            command = [sys.executable, "-m", "annbench", "builds", "--child", args.data,
                       args.shared, args.cache, side, str(round_ + 1), str(args.m),
                       str(args.build_threads)]
            done = subprocess.run(command, env=child_env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{label}: build failed\n{done.stderr}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if folder and not result["module"].startswith(folder):
                sys.exit(f"{label}: imported {result['module']}, not the wheel in {folder}")
            rows.append(dict(variant=label, seed=round_ + 1, seconds=result["seconds"],
                             recall=result["recall"]))
            print(f"round {round_ + 1} {label}: {result['seconds']:.1f} s, "
                  f"recall@10 {result['recall']:.4f} at ef {CHECK_EF}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{args.data}-builds.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["variant", "seed", "seconds", "recall"])
        writer.writeheader()
        writer.writerows(rows)
    medians = {}
    for label, _, _ in variants:
        mine = [r for r in rows if r["variant"] == label]
        medians[label] = statistics.median(r["seconds"] for r in mine)
        spread = f"{min(r['seconds'] for r in mine):.1f}–{max(r['seconds'] for r in mine):.1f}"
        recall = statistics.median(r["recall"] for r in mine)
        print(f"{label}: median {medians[label]:.1f} s [{spread}], recall@10 {recall:.4f} "
              f"at ef {CHECK_EF}")
    first = variants[0][0]
    for label in medians:
        if label != first:
            print(f"{first} / {label}: {medians[first] / medians[label]:.3f}")
