"""The `cairn_index` module as a user installs it (the wheel maturin builds), against exact
ground truth on the shared datasets: recall, batch and single searches alike, save and load,
errors, and the GIL released while it searches.

Run by `tests/module.rs` as `python test_cairn_index.py DATA_DIR`.
"""

import os
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

import cairn_index

DATA = sys.argv.pop(1) if len(sys.argv) > 1 else os.environ.get("CAIRN_SHARED_DATA", "")


def fvecs(path):
    raw = np.fromfile(path, dtype=np.int32)
    dim = raw[0]
    return raw.reshape(-1, dim + 1)[:, 1:].view(np.float32).copy()


def ivecs(path):
    raw = np.fromfile(path, dtype=np.int32)
    return raw.reshape(-1, raw[0] + 1)[:, 1:].copy()


def dataset(name):
    folder = os.path.join(DATA, name)
    return (
        fvecs(os.path.join(folder, "base.fvecs")),
        fvecs(os.path.join(folder, "query.fvecs")),
        ivecs(os.path.join(folder, "groundtruth.ivecs")),
    )


def recall_at_10(ids, truth):
    hits = sum(len(set(row[:10]) & set(want[:10])) for row, want in zip(ids, truth))
    return hits / (10 * len(ids))


def built(name, kind, metric, **params):
    """An index of `kind` over dataset `name`, its queries, ground truth and base vectors."""
    base, queries, truth = dataset(name)
    index = cairn_index.Index(kind, dim=base.shape[1], metric=metric, **params)
    assert index.add(base) == (0, len(base))
    return index, queries, truth, base


class Recall(unittest.TestCase):
    def test_hnsw_l2_on_siftsmall(self):
        index, queries, truth, base = built("siftsmall", "hnsw", "l2", m=16, ef_construction=200)
        ids, scores = index.search(queries, k=10, ef=64)
        self.assertEqual(ids.shape, (len(queries), 10))
        self.assertGreaterEqual(recall_at_10(ids, truth), 0.95)
        # Scores are L2 distances, ascending.
        want = np.linalg.norm(base[ids[0]] - queries[0], axis=1)
        np.testing.assert_allclose(scores[0], want, rtol=1e-4)
        self.assertTrue(np.all(np.diff(scores, axis=1) >= 0))
        exact, _ = index.search(queries, k=10, exact=True)
        self.assertGreaterEqual(recall_at_10(exact, truth), 0.99)

    def test_codes_on_siftsmall(self):
        index, queries, truth, base = built("siftsmall", "hnsw", "l2", m=16, ef_construction=200)
        plain, _ = index.search(queries, k=10, ef=64)
        for kind in ("rabitq", "int8"):
            index.set_codes(kind)
            ids, scores = index.search(queries, k=10, ef=64)
            self.assertGreaterEqual(recall_at_10(ids, truth), 0.95, kind)
            # Scores are the exact distances: link codes score results exactly, int8 rescores.
            want = np.linalg.norm(base[ids[0]] - queries[0], axis=1)
            np.testing.assert_allclose(scores[0], want, rtol=1e-4)
        index.set_codes(None)
        np.testing.assert_array_equal(index.search(queries, k=10, ef=64)[0], plain)
        with self.assertRaisesRegex(ValueError, "unknown codes"):
            index.set_codes("pq")
        flat = cairn_index.Index("flat", dim=128)
        with self.assertRaisesRegex(ValueError, "graph"):
            flat.set_codes("rabitq")

    def test_hnsw_cosine_on_glove50(self):
        index, queries, truth, _ = built("glove50-5k-angular", "hnsw", "cosine")
        ids, scores = index.search(queries, k=10, ef=128)
        self.assertGreaterEqual(recall_at_10(ids, truth), 0.95)
        self.assertTrue(np.all(scores <= 1.0 + 1e-5))

    def test_ip_nsw_plus_on_movielens(self):
        index, queries, truth, base = built("movielens-mips", "ip_nsw_plus", "ip")
        ids, scores = index.search(queries, k=10, ef=128)
        self.assertGreaterEqual(recall_at_10(ids, truth), 0.95)
        want = base[ids[0]] @ queries[0]
        np.testing.assert_allclose(scores[0], want, rtol=1e-4, atol=1e-4)


class Behaviour(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(7)
        self.base = rng.standard_normal((3000, 24), dtype=np.float32)
        self.queries = rng.standard_normal((50, 24), dtype=np.float32)
        self.index = cairn_index.Index("hnsw", dim=24, m=8, ef_construction=64)
        self.index.add(self.base)

    def test_a_batch_answers_as_single_queries_do(self):
        ids, scores = self.index.search(self.queries, k=7, ef=40)
        for q, query in enumerate(self.queries):
            one_ids, one_scores = self.index.search(query, k=7, ef=40)
            self.assertEqual(one_ids.shape, (7,))
            np.testing.assert_array_equal(one_ids, ids[q])
            np.testing.assert_array_equal(one_scores, scores[q])

    def test_saved_and_loaded_it_answers_the_same(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "index.cidx")
            self.index.save(path)
            again = cairn_index.Index.load(path)
        self.assertEqual((again.kind, again.dim, again.metric, len(again)), ("hnsw", 24, "l2", 3000))
        before = self.index.search(self.queries, k=10, ef=50)
        after = again.search(self.queries, k=10, ef=50)
        np.testing.assert_array_equal(before[0], after[0])
        np.testing.assert_array_equal(before[1], after[1])
        np.testing.assert_array_equal(again.vector(5), self.base[5])

    def test_fewer_results_than_k_are_padded(self):
        index = cairn_index.Index("flat", dim=2)
        index.add(np.array([[0, 0], [1, 0], [0, 2]], dtype=np.float32))
        ids, scores = index.search(np.array([0, 0], dtype=np.float32), k=5)
        np.testing.assert_array_equal(ids, [0, 1, 2, -1, -1])
        self.assertTrue(np.isnan(scores[3:]).all())
        np.testing.assert_allclose(scores[:3], [0, 1, 2])

    def test_bad_input_is_a_value_error_naming_it(self):
        cases = [
            (lambda: cairn_index.Index("hnsw", dim=4, bogus=1), "bogus"),
            (lambda: cairn_index.Index("nope", dim=4), "nope"),
            (lambda: cairn_index.Index("hnsw", dim=4, metric="manhattan"), "metric"),
            (lambda: cairn_index.Index("ip_nsw_plus", dim=4, metric="l2"), "inner-product"),
            (lambda: self.index.add(np.zeros((2, 5), dtype=np.float32)), "columns"),
            (lambda: self.index.search(np.zeros(5, dtype=np.float32)), "shape"),
            (lambda: self.index.search(self.queries[:, ::2]), "shape"),
            (lambda: self.index.search(self.queries, k=0), "k must"),
            (lambda: self.index.vector(10**6), "no vector"),
        ]
        for call, needle in cases:
            with self.assertRaises(ValueError) as caught:
                call()
            self.assertIn(needle, str(caught.exception))
        with self.assertRaises(TypeError):
            self.index.search(self.queries.astype(np.float64))
        with self.assertRaises(OSError):
            cairn_index.Index.load("/nonexistent/index.cidx")


class Threads(unittest.TestCase):
    def test_the_gil_is_released_while_it_searches(self):
        """While another thread is inside a long batch search, this thread keeps running
        Python: if the search held the GIL, no tick could fall between its start and end."""
        rng = np.random.default_rng(3)
        base = rng.standard_normal((20000, 32), dtype=np.float32)
        index = cairn_index.Index("hnsw", dim=32, m=8, ef_construction=32)
        index.add(base)
        queries = rng.standard_normal((4000, 32), dtype=np.float32)
        span = {}

        def search():
            span["start"] = time.perf_counter()
            index.search(queries, k=10, ef=256)
            span["end"] = time.perf_counter()

        worker = threading.Thread(target=search)
        ticks = []
        worker.start()
        while worker.is_alive():
            ticks.append(time.perf_counter())
            time.sleep(0.001)
        worker.join()
        inside = [t for t in ticks if span["start"] < t < span["end"]]
        self.assertGreater(span["end"] - span["start"], 0.05, "the search was too short to tell")
        self.assertGreaterEqual(len(inside), 10, f"{len(inside)} ticks inside the search")


if __name__ == "__main__":
    unittest.main(verbosity=2)
