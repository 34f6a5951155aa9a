"""The sides of the race: one class per library, each on its own documented parameter grid.

Every side builds with `build_threads` threads and searches on one thread: a batch call that
answers the queries one after another on the calling thread (FAISS with one OpenMP thread,
hnswlib with `num_threads=1`, ScaNN's `search_batched`, NGT's `batch_search`, RaBitQ with
`num_threads=1`, Cairn's own batch), or, for the `single` modes, one library call per query from a Python loop, which
adds the same few microseconds of interpreter work to every query of every side that runs it.
NGT's `batch_search` is an OpenMP loop, on one thread here (OMP_NUM_THREADS=1).

A side names its build configurations (`configs`) and, per configuration, its search grid
(`grid`); the harness builds each configuration `builds` times and runs every grid point in
every round. Grids are each library's own, from its documentation or ann-benchmarks' configs,
widened until the top of the grid passes recall@10 0.99 on the hard sets.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

# A batch answered on one thread, the same for every side.
SEARCH_THREADS = 1

EF_GRID = [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]


class Side:
    """One library on one kind of index. Subclasses set `name`, `configs` and `grid`."""

    name = ""
    #: The modes it is timed in: "batch" (one call for all queries) and/or "single".
    modes = ("batch",)
    #: The data sets' metrics it searches ("ip": maximum inner product, unnormalised).
    metrics = ("l2", "angular")

    def configs(self, data) -> list[dict]:
        raise NotImplementedError

    def grid(self, config: dict, data) -> list[dict]:
        raise NotImplementedError

    def build(self, base: np.ndarray, metric: str, config: dict, seed: int, threads: int):
        raise NotImplementedError

    def prepare(self, params: dict) -> None:
        """Sets the search parameters before a timed pass."""

    def batch(self, queries: np.ndarray, k: int) -> np.ndarray:
        raise NotImplementedError

    def single(self, queries: np.ndarray, k: int) -> np.ndarray:
        raise NotImplementedError

    def memory_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        """Frees the index (and any files) before the next build."""


#: The graph degrees built: M for the HNSW sides (layer 0 holds 2M links in all three),
#: half the degree for SymphonyQG's single layer (so degree 32 and 64). `--m` sets it.
GRAPH_M = [16, 32]


def hnsw_configs(data) -> list[dict]:
    """M 16 and 32 at efConstruction 200 for every HNSW implementation alike."""
    return [dict(M=m, efC=200) for m in GRAPH_M]


class HnswSide(Side):
    """The three HNSW implementations: the same build configurations and the same ef grid."""

    def configs(self, data):
        return hnsw_configs(data)

    def grid(self, config, data):
        return [dict(ef=ef) for ef in EF_GRID]


class Cairn(HnswSide):
    """Cairn's HNSW; on inner-product sets the same graph by inner product (ip-NSW)."""

    name = "cairn-hnsw"
    modes = ("batch", "single")
    metrics = ("l2", "angular", "ip")

    def kind(self, metric):
        return "ip_nsw" if metric == "ip" else "hnsw"

    def build(self, base, metric, config, seed, threads):
        import cairn_index

        # Cairn's build is parallel over rayon's global pool, sized from RAYON_NUM_THREADS
        # before the module first builds (see __main__).
        self.index = cairn_index.Index(
            self.kind(metric), dim=base.shape[1], metric="ip" if metric == "ip" else "l2",
            m=config["M"], ef_construction=config["efC"], seed=seed,
        )
        self.index.add(base)

    def prepare(self, params):
        self.ef = params["ef"]

    def batch(self, queries, k):
        return self.index.search(queries, k=k, ef=self.ef)[0]

    def single(self, queries, k):
        out = np.empty((len(queries), k), dtype=np.int64)
        search, ef = self.index.search, self.ef
        for i, q in enumerate(queries):
            out[i] = search(q, k=k, ef=ef)[0]
        return out

    def memory_bytes(self):
        return self.index.memory_bytes()

    def close(self):
        self.index = None


class CairnIpNswPlus(Cairn):
    """Cairn's ip-NSW+ (inner-product sets only): an angular graph picks the entry points of
    the inner-product graph; the authors' cos_M 10, cos_efC 100, cos_ef 1."""

    name = "cairn-ipnsw-plus"
    metrics = ("ip",)

    def kind(self, metric):
        return "ip_nsw_plus"


class NormScan(Side):
    """Issue #26's first trivial baseline: an exact scan of the p% largest-norm items, p on
    its own grid (the smallest reaching the recall wins). `batch` is one BLAS matrix product
    (one thread) for all queries; `single` one matrix-vector product per query."""

    name = "norm-scan"
    modes = ("batch", "single")
    metrics = ("ip",)

    def configs(self, data):
        return [dict()]

    def grid(self, config, data):
        n = data.base.shape[0]
        shares = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
        return [dict(share=p) for p in shares if p * n >= 10]

    def build(self, base, metric, config, seed, threads):
        norms = np.einsum("ij,ij->i", base, base, dtype=np.float64)
        self.order = np.argsort(-norms, kind="stable")
        self.rows = np.ascontiguousarray(base[self.order])

    def prepare(self, params):
        t = max(10, int(np.ceil(params["share"] * self.rows.shape[0])))
        self.top = self.rows[:t]

    def batch(self, queries, k):
        scores = queries @ self.top.T
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        ranked = np.take_along_axis(best, np.argsort(-np.take_along_axis(scores, best, 1), 1), 1)
        return self.order[ranked]

    def single(self, queries, k):
        out = np.empty((len(queries), k), dtype=np.int64)
        top, order = self.top, self.order
        for i, q in enumerate(queries):
            scores = top @ q
            best = np.argpartition(-scores, k - 1)[:k]
            out[i] = order[best[np.argsort(-scores[best])]]
        return out


class CairnNormScan(Cairn):
    """Cairn's norm-ordered scan (`norm_scan`, inner-product sets only): the same items as
    `norm-scan` on the same grid, read as one byte per coordinate, the best 2 × k re-ranked by
    their rows (up to 512 items, or a whole collection of up to 1,024, it reads floats kept in
    norm order); `ef` is the count."""

    name = "cairn-norm-scan"
    metrics = ("ip",)

    def configs(self, data):
        return [dict()]

    def grid(self, config, data):
        return NormScan.grid(self, config, data)

    def build(self, base, metric, config, seed, threads):
        import cairn_index

        self.index = cairn_index.Index("norm_scan", dim=base.shape[1], metric="ip")
        self.index.add(base)

    def prepare(self, params):
        self.ef = max(10, int(np.ceil(params["share"] * len(self.index))))


class CairnMipsAuto(Cairn):
    """Cairn's automatic choice for inner product (`mips_auto`, the `Dot` default; inner-product
    sets only): the norm scan where the norms spread (then `ef` is the items read, on the
    norm scan's grid of shares), else ip-NSW (`ef` the candidate list, on the graphs' grid).
    The graph's parameters are ip-NSW+'s, as for `cairn-ipnsw-plus`."""

    name = "cairn-mips-auto"
    metrics = ("ip",)

    def kind(self, metric):
        return "mips_auto"

    def grid(self, config, data):
        if self.index.choice.startswith("norm_scan"):
            return NormScan.grid(self, config, data)
        return super().grid(config, data)

    def prepare(self, params):
        if "share" in params:
            self.ef = max(10, int(np.ceil(params["share"] * len(self.index))))
        else:
            self.ef = params["ef"]


class L2Reduction(Cairn):
    """Issue #26's second trivial baseline: MIPS reduced to L2 search (Bachrach et al., RecSys
    2014) by one more coordinate, √(Φ² − |x|²) with Φ the largest norm, on Cairn's own HNSW;
    queries get a 0 there."""

    name = "l2-reduction"
    metrics = ("ip",)

    def build(self, base, metric, config, seed, threads):
        import cairn_index

        squared = np.einsum("ij,ij->i", base, base, dtype=np.float64)
        extra = np.sqrt(np.maximum(squared.max() - squared, 0.0)).astype(np.float32)
        rows = np.ascontiguousarray(np.hstack([base, extra[:, None]]))
        self.index = cairn_index.Index(
            "hnsw", dim=rows.shape[1], metric="l2", m=config["M"],
            ef_construction=config["efC"], seed=seed,
        )
        self.index.add(rows)

    def extended(self, queries):
        return np.ascontiguousarray(np.hstack([queries, np.zeros((len(queries), 1), np.float32)]))

    def batch(self, queries, k):
        return super().batch(self.extended(queries), k)

    def single(self, queries, k):
        return super().single(self.extended(queries), k)


class CairnRabitq(Cairn):
    """Cairn's HNSW with RaBitQ codes of its layer-0 links (`set_codes("rabitq")`): the same
    graph as `cairn-hnsw`, searched by estimates with every result scored exactly. The
    encoding is part of the build time."""

    name = "cairn-rabitq"
    modes = ("batch",)
    metrics = ("l2", "angular")

    def build(self, base, metric, config, seed, threads):
        super().build(base, metric, config, seed, threads)
        self.index.set_codes("rabitq")


class Hnswlib(HnswSide):
    name = "hnswlib"
    metrics = ("l2", "angular", "ip")

    def build(self, base, metric, config, seed, threads):
        import hnswlib

        self.index = hnswlib.Index(space="ip" if metric == "ip" else "l2", dim=base.shape[1])
        self.index.init_index(
            max_elements=base.shape[0], ef_construction=config["efC"], M=config["M"],
            random_seed=seed,
        )
        self.index.add_items(base, num_threads=threads)

    def prepare(self, params):
        self.index.set_ef(params["ef"])

    def batch(self, queries, k):
        return self.index.knn_query(queries, k=k, num_threads=SEARCH_THREADS)[0]


class FaissHnsw(HnswSide):
    """FAISS IndexHNSWFlat; `batch` is its fast path (one search call for all queries, one
    OpenMP thread), `single` the per-query path the old Rust bench measured."""

    name = "faiss-hnsw"
    modes = ("batch", "single")
    metrics = ("l2", "angular", "ip")

    def build(self, base, metric, config, seed, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        kind = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
        self.index = faiss.IndexHNSWFlat(base.shape[1], config["M"], kind)
        self.index.hnsw.efConstruction = config["efC"]
        # FAISS draws HNSW levels from its own fixed seed; rebuilds still differ because the
        # parallel insertion order does.
        self.index.add(base)
        faiss.omp_set_num_threads(SEARCH_THREADS)

    def prepare(self, params):
        self.index.hnsw.efSearch = params["ef"]

    def batch(self, queries, k):
        return self.index.search(queries, k)[1]

    def single(self, queries, k):
        out = np.empty((len(queries), k), dtype=np.int64)
        search = self.index.search
        for i in range(len(queries)):
            out[i] = search(queries[i : i + 1], k)[1][0]
        return out


class Scann(Side):
    """ScaNN: a k-means tree, anisotropic 4-bit product codes scored by its SIMD lookup
    tables, and exact re-ranking (ann-benchmarks' configuration shape). Dot product with the
    anisotropic loss on angular sets (unit vectors; threshold 0.2 as ScaNN's docs recommend),
    squared L2 on the others. On inner-product sets (no spherical tree) two configurations:
    threshold 0.2 scaled by the median norm, and none."""

    name = "scann"
    metrics = ("l2", "angular", "ip")

    def configs(self, data):
        n = data.base.shape[0]
        leaves = int(max(16, min(4000, round(2 * np.sqrt(n)))))
        if data.metric != "ip":
            return [dict(leaves=leaves, dims_per_block=2)]
        # ScaNN reads the threshold as an absolute inner product, and its 0.2 is for unit
        # vectors. An absolute 0.2 is 4× movielens-mips' median norm, and thresholds that large
        # lost recall at every T in `bench/ann quantizers`; 0.2 of the median norm lost recall
        # there on the long-tailed sets and changed nothing on movielens-mips, hence both.
        return [dict(leaves=leaves, dims_per_block=2, threshold=t) for t in ("0.2×median", "none")]

    def grid(self, config, data):
        leaves = config["leaves"]
        pairs = []
        # Up to every leaf: on inner-product sets the tree's leaves (k-means cells of the
        # items) do not follow the norms the answers lean on, and ScaNN needs more than 30% of
        # them for recall 0.95 on movielens-mips (0.94 at 30%, reorder 500). The grid stops
        # once 0.995 is reached, so the larger shares cost only where they are needed.
        for share in (0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.5, 1.0):
            search = max(1, int(round(leaves * share)))
            for reorder in (50, 100, 250, 500):
                pairs.append(dict(leaves_to_search=search, reorder=reorder))
        return pairs

    def build(self, base, metric, config, seed, threads):
        import scann

        angular, dot = metric == "angular", metric in ("angular", "ip")
        builder = scann.scann_ops_pybind.builder(
            base, 10, "dot_product" if dot else "squared_l2"
        )
        builder = builder.tree(
            num_leaves=config["leaves"], num_leaves_to_search=1,
            training_sample_size=min(base.shape[0], 250_000), spherical=angular,
        )
        threshold = 0.2 if angular else float("nan")
        if config.get("threshold") == "0.2×median":
            threshold = 0.2 * float(np.median(np.linalg.norm(base, axis=1)))
        builder = builder.score_ah(config["dims_per_block"], anisotropic_quantization_threshold=threshold)
        builder = builder.reorder(500)
        builder.set_n_training_threads(threads)
        self.index = builder.build()
        self.index.set_num_threads(SEARCH_THREADS)

    def prepare(self, params):
        self.params = params

    def batch(self, queries, k):
        return self.index.search_batched(
            queries, final_num_neighbors=k,
            pre_reorder_num_neighbors=self.params["reorder"],
            leaves_to_search=self.params["leaves_to_search"],
        )[0]


class NgtOnng(Side):
    """NGT's ONNG: an ANNG built with a large edge count, then reshaped by NGT's optimizer
    (outdegree and indegree as in ann-benchmarks' ONNG configuration); searched by its
    `epsilon` grid. NGT-QG (quantized graph) is not
    here: its builder ships in NGT's command-line tools, not in the PyPI wheel."""

    name = "ngt-onng"

    def configs(self, data):
        return [dict(edge=100, outdegree=10, indegree=120)]

    def grid(self, config, data):
        return [dict(epsilon=e) for e in (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.13, 0.16, 0.2, 0.3, 0.4)]

    def build(self, base, metric, config, seed, threads):
        import ngtpy

        self.dir = tempfile.mkdtemp(prefix="ngt-")
        anng, onng = os.path.join(self.dir, "anng"), os.path.join(self.dir, "onng")
        ngtpy.create(anng, base.shape[1], edge_size_for_creation=config["edge"],
                     distance_type="L2", object_type="Float")
        index = ngtpy.Index(anng, log_disabled=True)
        index.batch_insert(base, num_threads=threads)
        index.save()
        index.close()
        optimizer = ngtpy.Optimizer(
            num_of_outgoings=config["outdegree"], num_of_incomings=config["indegree"],
            log_disabled=True,
        )
        # NGT's own optimisations of the graph (shortcut reduction) and of its search
        # (edges explored, prefetch); not the accuracy table, which only searches by
        # `expected_accuracy` use.
        optimizer.set_processing_modes(True, True, True, False)
        optimizer.execute(anng, onng)
        shutil.rmtree(anng, ignore_errors=True)
        self.index = ngtpy.Index(onng, read_only=True, log_disabled=True)

    def prepare(self, params):
        self.index.set(epsilon=params["epsilon"])

    def batch(self, queries, k):
        import ngtpy

        # One thread: OMP_NUM_THREADS is 1 for the whole harness (see __main__).
        results = ngtpy.BatchResults()
        self.index.batch_search(queries, results, k, with_distance=False)
        return results.get_ids()

    def close(self):
        self.index = None
        shutil.rmtree(getattr(self, "dir", ""), ignore_errors=True)


class SymphonyQG(Side):
    """RaBitQ's SymphonyQG (`rabitqlib.SymqgIndex`): RaBitQ codes of each vertex's
    neighbours stored in the graph and scored with FastScan, exact re-rank in the search."""

    name = "symqg"

    def configs(self, data):
        return [dict(degree=2 * m, efC=200) for m in GRAPH_M]

    def grid(self, config, data):
        return [dict(ef=ef) for ef in EF_GRID]

    def build(self, base, metric, config, seed, threads):
        import rabitqlib

        self.index = rabitqlib.SymqgIndex(base.shape[1], config["degree"], metric="l2")
        self.index.build(base, config["efC"], num_threads=threads)

    def prepare(self, params):
        self.ef = params["ef"]

    def batch(self, queries, k):
        found = self.index.search_batch(queries, k, max(self.ef, k), num_threads=SEARCH_THREADS)
        return np.asarray(found[0])


SIDES = {
    cls.name: cls
    for cls in (
        Cairn, CairnRabitq, CairnIpNswPlus, CairnMipsAuto, NormScan, CairnNormScan, L2Reduction,
        Hnswlib,
        FaissHnsw, Scann, NgtOnng, SymphonyQG,
    )
}
