#!/usr/bin/env bash
# Before/after a change, in one session: builds one criterion bench of cairn-faiss at two
# commits and runs the two binaries in turn (A B B A …), whole runs, so machine drift falls on
# both sides alike. Prints each run's interleaved Cairn/FAISS lines; the raw outputs stay in
# the output folder for the tables in BENCHMARKS.md.
#
#   scripts/ab-bench.sh BEFORE AFTER [ROUNDS] [BENCH] [FILTER]
#   scripts/ab-bench.sh 5ec00b1 4af3e19 2 hnsw 'hnsw_search/'
#
# Environment: CAIRN_BENCH_* as the bench reads them (CAIRN_BENCH_HNSW_RS=0 is set unless
# given), CAIRN_SHARED_DATA (default ../shared/data), AB_OUT (default target/ab-bench),
# AB_TARGET_DIR (default: a cargo target folder of its own, whose first use builds FAISS once,
# about 10 minutes on 2 cores). Run it on a quiet machine, one benchmark at a time.
set -euo pipefail

before=${1:?usage: ab-bench.sh BEFORE AFTER [ROUNDS] [BENCH] [FILTER]}
after=${2:?usage: ab-bench.sh BEFORE AFTER [ROUNDS] [BENCH] [FILTER]}
rounds=${3:-2}
bench=${4:-hnsw}
filter=${5:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${AB_OUT:-$repo/target/ab-bench}
# A target folder of its own: cargo names a workspace crate's artifacts without its path, so
# two source trees sharing one target folder would overwrite each other's crates.
target=${AB_TARGET_DIR:-$HOME/.cache/cairn/target-ab}
export CAIRN_SHARED_DATA=${CAIRN_SHARED_DATA:-$(cd "$repo/.." && pwd)/shared/data}
export CAIRN_BENCH_HNSW_RS=${CAIRN_BENCH_HNSW_RS:-0}
mkdir -p "$out"

build() { # commit side
  local src="$out/src-$2"
  rm -rf "$src" && mkdir -p "$src"
  git -C "$repo" archive "$1" | tar -x -C "$src"
  # Fresh mtimes, so cargo rebuilds these crates instead of trusting the other side's.
  find "$src" -name '*.rs' -exec touch {} +
  local exe
  exe=$(cd "$src" && CARGO_TARGET_DIR=$target cargo bench --no-run -p cairn-faiss --bench "$bench" 2>&1 \
    | sed -n "s/.*Executable benches\/$bench.rs (\(.*\))/\1/p")
  [ -n "$exe" ] || { echo "ab-bench: no $bench bench binary built at $1" >&2; exit 1; }
  cp "$exe" "$out/$bench-$2"
}

build "$before" before
build "$after" after
cmp -s "$out/$bench-before" "$out/$bench-after" && { echo "ab-bench: the two builds are identical" >&2; exit 1; }

for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for side in $order; do
    echo "== round $round: $side ($(date +%T))"
    (cd "$out" && "./$bench-$side" --bench --noplot --warm-up-time 1 --measurement-time 3 $filter \
      > "$out/$side-r$round.out" 2> "$out/$side-r$round.err")
    grep -h "interleaved" "$out/$side-r$round.err" || true
  done
done
echo "ab-bench: outputs in $out"
