"""`bench/ann [options]`, `bench/ann summarize --data SET --out DIR`, `bench/ann builds
[options]`, `bench/ann crossover`, `bench/ann describe --data SET`: see bench/README.md."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# One search thread for every OpenMP library (FAISS, NGT) unless a build asks for more, and
# rayon's pool (Cairn's build) sized before the module is first used.
os.environ["OMP_NUM_THREADS"] = "1"


def main() -> None:
    if sys.argv[1:2] == ["quantizers"]:
        from .quantizers import main as quantizers

        quantizers(sys.argv[2:])
        return
    if sys.argv[1:2] == ["crossover"]:
        from .crossover import main as crossover

        crossover(sys.argv[2:])
        return
    if sys.argv[1:2] == ["describe"]:
        from .describe import main as describe

        describe(sys.argv[2:])
        return
    if sys.argv[1:2] == ["builds"]:
        from .builds import main as builds

        builds(sys.argv[2:])
        return
    here = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(prog="bench/ann", description=__doc__)
    parser.add_argument("--data", default="siftsmall",
                        help="comma-separated sets: siftsmall, glove50, pypi-minilm, hard20k, "
                             "hard200k, hard1m, minilm200k, minilm1m; inner product: "
                             "movielens-mips, glove50-ip, longtail200k[-b0.65|-b0.85], "
                             "longtail20k[…]")
    parser.add_argument("--sides", default="cairn-hnsw,cairn-rabitq,hnswlib,faiss-hnsw,scann,ngt-onng,symqg")
    parser.add_argument("--modes", default="batch,single")
    parser.add_argument("--m", default="16,32",
                        help="HNSW M values (SymphonyQG: degree 2M) to build")
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--pass-seconds", type=float, default=None,
                        help="repeat a pass over the queries until it has taken this long "
                             "(default 0.3; 0 times one pass; shorter: a quick check of answers "
                             "whose times mean little)")
    parser.add_argument("--shared", default=str(here.parent.parent / "shared" / "data"),
                        help="the shared data folder (default ../shared/data)")
    parser.add_argument("--cache", default=str(here / ".data"),
                        help="where generated sets are kept")
    parser.add_argument("--out", default=str(here / "results"))
    parser.add_argument("--reference", default="cairn-hnsw",
                        help="the side (batch mode) every ratio is taken against; on "
                             "inner-product sets cairn-ipnsw-plus")
    summarize = sys.argv[1:2] == ["summarize"]
    args = parser.parse_args(sys.argv[2:] if summarize else None)
    os.environ["RAYON_NUM_THREADS"] = str(args.build_threads)

    from . import data as datasets
    from . import plot, runner
    from . import sides as side_module
    from .sides import SIDES

    side_module.GRAPH_M[:] = [int(m) for m in args.m.split(",")]

    sides = [s for s in args.sides.split(",") if s]
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        sys.exit(f"unknown sides {unknown}; known: {sorted(SIDES)}")
    modes = set(args.modes.split(","))
    out = Path(args.out)
    reference = (args.reference, "batch")
    for name in args.data.split(","):
        dataset = datasets.load(name, Path(args.shared), Path(args.cache))
        runner.log(f"{dataset.description}: {dataset.base.shape}, {len(dataset.queries)} queries")
        if dataset.metric == "ip":
            bias = datasets.norm_bias(dataset.base, dataset.truth)
            dataset.description += f"; norm bias {bias:.3f}"
            runner.log(f"norm bias (share of top-10 among the 5% largest norms): {bias:.3f}")
        if summarize:
            # A finished run's CSV read again (e.g. after the summary learnt a new reading).
            passes, built = runner.read_csv(out, dataset.name)
        else:
            passes, built = runner.run(dataset, sides, modes, args.builds, args.rounds,
                                       args.build_threads, args.k, out,
                                       runner.MIN_PASS_SECONDS if args.pass_seconds is None
                                       else args.pass_seconds)
        result = runner.summary(dataset, passes, built, reference)
        text = runner.markdown(dataset, result, reference, args.builds, args.rounds)
        (out / f"{dataset.name}-summary.md").write_text(text)
        (out / f"{dataset.name}-summary.json").write_text(json.dumps(runner.as_json(result), indent=1))
        plot.plot(dataset, passes, out / f"{dataset.name}.png")
        print(text, flush=True)


if __name__ == "__main__":
    main()
