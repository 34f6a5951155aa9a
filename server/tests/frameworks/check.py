"""LangChain's and LlamaIndex's Qdrant vector stores, unmodified, against a Cairn server.

Usage: check.py langchain|llamaindex URL DATA_DIR

The documents are PyPI packages and their vectors the all-MiniLM-L6-v2 embeddings of the
packages' summaries from ../shared/data/pypi-minilm (real text, a real model, computed once
offline). The `Embeddings` classes below return those stored vectors for a package name, as a
cache in front of the model would: running the model itself needs torch, which this test does
not install. Each store is then used as its documentation shows, and its answers are checked
against an exact search over the same vectors (numpy).
"""

import re
import struct
import sys
import uuid
import warnings
import zlib
from pathlib import Path

import numpy as np

DOCS = 2000
QUERIES = 50
K = 10


def read_fvecs(path: Path, limit: int) -> np.ndarray:
    raw = path.read_bytes()
    dim = struct.unpack_from("<i", raw)[0]
    rows = np.frombuffer(raw, dtype=np.float32).reshape(-1, dim + 1)[:limit, 1:]
    return np.ascontiguousarray(rows)


def load(data: Path):
    names = (data / "base_packages.txt").read_text().split("\n")
    vectors = read_fvecs(data / "base.fvecs", DOCS * 2)
    seen, docs, rows = set(), [], []
    for name, row in zip(names, vectors):
        if name and name not in seen:
            seen.add(name)
            docs.append(name)
            rows.append(row)
        if len(docs) == DOCS:
            break
    query_names = (data / "query_packages.txt").read_text().split("\n")[:QUERIES]
    queries = read_fvecs(data / "query.fvecs", QUERIES)
    return docs, np.stack(rows), query_names, queries


def exact_top(rows: np.ndarray, query: np.ndarray, k: int, allowed=None) -> list[int]:
    scores = rows @ query  # unit vectors: cosine
    order = [i for i in np.argsort(-scores, kind="stable") if allowed is None or allowed(i)]
    return order[:k]


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth))
    return hits / sum(len(t) for t in truth)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def words(text: str) -> tuple[list[int], list[float]]:
    """The test's own sparse encoder (no model to download): each lower-cased word of the
    text is a dimension (its CRC-32 modulo 2^20), weighted by a fixed function of the word,
    the way a term-weighting model gives each term a weight."""
    weights: dict[int, float] = {}
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        code = zlib.crc32(word.encode())
        weights[code % (1 << 20)] = 0.5 + (code >> 20) % 100 / 100.0
    return list(weights), list(weights.values())


def sparse_exact(texts: list[str], query: str, k: int) -> list[tuple[int, float]]:
    """The exact sparse ranking of `texts` for `query`: dot products over shared words."""
    qi, qv = words(query)
    q = dict(zip(qi, qv))
    scored = []
    for i, text in enumerate(texts):
        di, dv = words(text)
        score = sum(q[d] * v for d, v in zip(di, dv) if d in q)
        if any(d in q for d in di):
            scored.append((i, score))
    scored.sort(key=lambda kv: -kv[1])
    return scored[:k]


def langchain(url: str, docs, rows, query_names, queries) -> None:
    from langchain_core.embeddings import Embeddings
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    # LangChain measures the dimension by embedding "dummy_text".
    documents = dict(zip(docs, rows)) | {"dummy_text": rows[0]}
    asked = dict(zip(query_names, queries))

    class StoredMiniLM(Embeddings):
        def embed_documents(self, texts):
            return [documents[t].tolist() for t in texts]

        def embed_query(self, text):
            return asked.get(text, documents.get(text)).tolist()

    embeddings = StoredMiniLM()
    metadatas = [{"source": f"s{i % 10}", "rank": i} for i in range(len(docs))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the client's version check must not warn
        store = QdrantVectorStore.from_texts(
            docs, embeddings, metadatas=metadatas, url=url, collection_name="lc"
        )
    client = QdrantClient(url=url)
    check(client.count("lc").count == len(docs), "from_texts stored every document")
    index_of = {name: i for i, name in enumerate(docs)}

    found, truth = [], []
    for name, query in zip(query_names, queries):
        hits = store.similarity_search_with_score(name, k=K)
        found.append([index_of[doc.page_content] for doc, _ in hits])
        truth.append(exact_top(rows, query, K))
        scores = [score for _, score in hits]
        check(scores == sorted(scores, reverse=True), f"scores best first: {scores}")
    r = recall(found, truth)
    print(f"langchain similarity_search recall@{K} = {r:.3f}")
    check(r >= 0.9, f"recall@{K} {r:.3f} below 0.9")

    # A filter on the metadata LangChain stores under `metadata`.
    only = models.Filter(
        must=[models.FieldCondition(key="metadata.source", match=models.MatchValue(value="s3"))]
    )
    hits = store.similarity_search(query_names[0], k=K, filter=only)
    got = [index_of[d.page_content] for d in hits]
    want = exact_top(rows, queries[0], K, allowed=lambda i: i % 10 == 3)
    check(all(d.metadata["source"] == "s3" for d in hits), "the filter held")
    check(len(set(got) & set(want)) >= 8, f"filtered results {got} against {want}")

    # The MMR retriever: diverse results from the nearest candidates, scored by the server.
    mmr = store.max_marginal_relevance_search(query_names[2], k=5, fetch_k=40, lambda_mult=0.3)
    picked = [index_of[d.page_content] for d in mmr]
    nearest40 = exact_top(rows, queries[2], 40)
    check(len(picked) == 5 and len(set(picked)) == 5, f"mmr picked {picked}")
    check(picked[0] == nearest40[0], "mmr starts from the nearest document")
    # The server's 40 candidates come from its graph: allow one outside the exact 40.
    check(len(set(picked) - set(nearest40)) <= 1, f"mmr picks among the candidates: {picked}")
    check(picked != nearest40[:5], "lambda 0.3 changed the order of the nearest five")

    # Documents by id, deleted by id.
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, d)) for d in docs[:3]]
    store.add_texts(docs[:3], metadatas=metadatas[:3], ids=ids)
    check(client.count("lc").count == len(docs) + 3, "add_texts with ids added three")
    check(
        sorted(d.page_content for d in store.get_by_ids(ids)) == sorted(docs[:3]),
        "get_by_ids",
    )
    check(store.delete(ids) is True, "delete answers True once completed")
    check(store.get_by_ids(ids) == [], "deleted")

    # Opening the existing collection validates its configuration.
    again = QdrantVectorStore.from_existing_collection(
        embedding=embeddings, collection_name="lc", url=url
    )
    check(len(again.similarity_search(query_names[1], k=3)) == 3, "existing collection serves")
    langchain_hybrid(url, docs, rows, embeddings, metadatas)
    print("langchain check passed")


def langchain_hybrid(url: str, docs, rows, embeddings, metadatas) -> None:
    """HYBRID retrieval: dense and sparse prefetches fused by RRF on the server."""
    from langchain_qdrant import QdrantVectorStore, RetrievalMode, SparseEmbeddings
    from langchain_qdrant.sparse_embeddings import SparseVector
    from qdrant_client import QdrantClient, models

    class Words(SparseEmbeddings):
        def embed_documents(self, texts):
            return [SparseVector(indices=i, values=v) for i, v in map(words, texts)]

        def embed_query(self, text):
            indices, values = words(text)
            return SparseVector(indices=indices, values=values)

    store = QdrantVectorStore.from_texts(
        docs,
        embeddings,
        metadatas=metadatas,
        url=url,
        collection_name="lc-hybrid",
        sparse_embedding=Words(),
        retrieval_mode=RetrievalMode.HYBRID,
    )
    client = QdrantClient(url=url)
    index_of = {name: i for i, name in enumerate(docs)}
    for i in (5, 17, 404):
        name = docs[i]
        hits = store.similarity_search_with_score(name, k=K)
        got = [index_of[doc.page_content] for doc, _ in hits]
        check(got[0] == i, f"hybrid search for {name!r} puts it first: {got}")
        # The same fusion, computed here from the two searches LangChain's prefetches run.
        dense = client.query_points("lc-hybrid", query=rows[i].tolist(), using="", limit=K).points
        indices, values = words(name)
        sparse = client.query_points(
            "lc-hybrid",
            query=models.SparseVector(indices=indices, values=values),
            using="langchain-sparse",
            limit=K,
        ).points
        want_sparse = sparse_exact(docs, name, K)
        check(
            [round(h.score, 4) for h in sparse] == [round(s, 4) for _, s in want_sparse],
            f"sparse leg scores {[h.score for h in sparse]} against exact {want_sparse}",
        )
        rrf: dict = {}
        for leg in (dense, sparse):
            for rank, h in enumerate(leg):
                rrf[h.id] = rrf.get(h.id, 0.0) + 1.0 / (rank + 2)
        want = sorted(rrf.values(), reverse=True)[:K]
        check(
            [round(score, 5) for _, score in hits] == [round(s, 5) for s in want],
            f"hybrid scores {[score for _, score in hits]} are the RRF of the legs {want}",
        )
    only = models.Filter(
        must=[models.FieldCondition(key="metadata.source", match=models.MatchValue(value="s7"))]
    )
    hits = store.similarity_search(docs[17], k=K, filter=only)
    check(hits and all(d.metadata["source"] == "s7" for d in hits), "hybrid search filters")
    check(hits[0].page_content == docs[17], "doc 17 (source s7) first under its filter")


def llamaindex(url: str, docs, rows, query_names, queries) -> None:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.types import (
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
    )
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = QdrantClient(url=url)
    store = QdrantVectorStore(client=client, collection_name="li")
    node_ids = [str(uuid.uuid5(uuid.NAMESPACE_DNS, d)) for d in docs]
    nodes = [
        TextNode(
            id_=node_ids[i],
            text=name,
            embedding=rows[i].tolist(),
            metadata={"source": f"s{i % 10}", "rank": i},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i % 20}")},
        )
        for i, name in enumerate(docs)
    ]
    added = store.add(nodes[:1500])
    check(added == node_ids[:1500], "add answers the node ids")
    # A second add, from a store opened on the existing collection: no create, no 409.
    store = QdrantVectorStore(client=client, collection_name="li")
    check(store.add(nodes[1500:]) == node_ids[1500:], "the second add answers its ids")
    check(client.count("li").count == len(docs), "both adds stored their nodes")
    info = client.get_collection("li")
    check("doc_id" in info.payload_schema, f"the doc_id index LlamaIndex asks for: {info}")
    check(info.payload_schema["doc_id"].points == len(docs), "every node indexed by doc_id")
    index_of = {node_id: i for i, node_id in enumerate(node_ids)}

    found, truth = [], []
    for query in queries:
        result = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=K))
        found.append([index_of[i] for i in result.ids])
        truth.append(exact_top(rows, query, K))
    r = recall(found, truth)
    print(f"llamaindex query recall@{K} = {r:.3f}")
    check(r >= 0.9, f"recall@{K} {r:.3f} below 0.9")

    filters = MetadataFilters(
        filters=[
            MetadataFilter(key="source", value="s4"),
            MetadataFilter(key="rank", value=1000, operator=FilterOperator.LT),
        ]
    )
    result = store.query(
        VectorStoreQuery(query_embedding=queries[0].tolist(), similarity_top_k=K, filters=filters)
    )
    got = [index_of[i] for i in result.ids]
    want = exact_top(rows, queries[0], K, allowed=lambda i: i % 10 == 4 and i < 1000)
    check(got == want, f"filtered query {got} against exact {want}")

    # The source document's nodes, deleted by its id (doc_id, the indexed key).
    store.delete("doc3")
    check(client.count("li").count == len(docs) - len(docs) // 20, "delete(ref_doc_id)")
    some = node_ids[:2]  # nodes of doc0 and doc1
    check(len(store.get_nodes(node_ids=some)) == 2, "get_nodes by id")
    store.delete_nodes(node_ids=some)
    check(store.get_nodes(node_ids=some) == [], "delete_nodes")
    # An empty list of ids deletes nothing (Qdrant's empty `should`).
    before = client.count("li").count
    store.delete_nodes(node_ids=[])
    check(client.count("li").count == before, "delete_nodes([]) deleted nothing")
    store.clear()
    check(not client.collection_exists("li"), "clear drops the collection")
    llamaindex_hybrid(client, docs, rows, queries)
    print("llamaindex check passed")


def llamaindex_hybrid(client, docs, rows, queries) -> None:
    """`enable_hybrid`: a named dense vector and a sparse one, queried in HYBRID mode (two
    searches in one batch, fused by LlamaIndex) and in SPARSE mode."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    def encode(texts):
        pairs = [words(t) for t in texts]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    store = QdrantVectorStore(
        client=client,
        collection_name="li-hybrid",
        enable_hybrid=True,
        sparse_doc_fn=encode,
        sparse_query_fn=encode,
    )
    node_ids = [str(uuid.uuid5(uuid.NAMESPACE_OID, d)) for d in docs]
    nodes = [
        TextNode(id_=node_ids[i], text=name, embedding=rows[i].tolist())
        for i, name in enumerate(docs)
    ]
    store.add(nodes)
    info = client.get_collection("li-hybrid")
    check("text-dense" in info.config.params.vectors, f"named dense vector: {info}")
    check("text-sparse-new" in info.config.params.sparse_vectors, f"sparse vector: {info}")
    index_of = {node_id: i for i, node_id in enumerate(node_ids)}
    for i in (3, 250, 1999):
        result = store.query(
            VectorStoreQuery(
                query_embedding=rows[i].tolist(),
                query_str=docs[i],
                similarity_top_k=K,
                sparse_top_k=K,
                mode=VectorStoreQueryMode.HYBRID,
            )
        )
        got = [index_of[n] for n in result.ids]
        check(got and got[0] == i, f"hybrid query for {docs[i]!r} puts it first: {got}")
        sparse = store.query(
            VectorStoreQuery(
                query_embedding=rows[i].tolist(),
                query_str=docs[i],
                similarity_top_k=K,
                sparse_top_k=K,
                mode=VectorStoreQueryMode.SPARSE,
            )
        )
        want = sparse_exact(docs, docs[i], K)
        check(
            [round(s, 4) for s in sparse.similarities] == [round(s, 4) for _, s in want],
            f"sparse mode scores {sparse.similarities} against exact {want}",
        )
    store.clear()


def main() -> None:
    which, url, data = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    docs, rows, query_names, queries = load(data)
    {"langchain": langchain, "llamaindex": llamaindex}[which](url, docs, rows, query_names, queries)


if __name__ == "__main__":
    main()
