"""Drives Cairn with the official Qdrant Python client (REST mode), unmodified.

Usage: check.py URL [API_KEY [CA_FILE]] — exits non-zero on the first wrong answer.
With an API key, the client sends it, and a client without it is first shown to be refused.
With a CA file (an https:// URL), the client trusts the server's certificate through it.
"""
import datetime
import hashlib
import io
import math
import ssl
import sys
import warnings

import httpx

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

url = sys.argv[1]
api_key = sys.argv[2] if len(sys.argv) > 2 else None
# Passed through to the client's httpx transport.
tls = {"verify": ssl.create_default_context(cafile=sys.argv[3])} if len(sys.argv) > 3 else {}
if api_key:
    keyless = QdrantClient(
        url=url, prefer_grpc=False, timeout=30, check_compatibility=False, **tls
    )
    try:
        keyless.get_collections()
        raise AssertionError("a client without the API key was served")
    except UnexpectedResponse as refused:
        assert refused.status_code == 401, refused
# The client warns that a key over plain HTTP can be read on the way; the test is on loopback.
warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
client = QdrantClient(
    url=url, api_key=api_key, prefer_grpc=False, timeout=30, check_compatibility=False, **tls
)
name = "qdrant_client_check"

assert not client.collection_exists(name)
assert client.create_collection(
    collection_name=name,
    vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT),
)
assert client.collection_exists(name)
assert name in [c.name for c in client.get_collections().collections]

points = [
    models.PointStruct(id=1, vector=[0.05, 0.61, 0.76, 0.74], payload={"city": "Berlin", "n": 1}),
    models.PointStruct(id=2, vector=[0.19, 0.81, 0.75, 0.11], payload={"city": "London", "n": 2}),
    models.PointStruct(id=3, vector=[0.36, 0.55, 0.47, 0.94], payload={"city": "Moscow", "n": 3}),
    models.PointStruct(id=4, vector=[0.18, 0.01, 0.85, 0.80], payload={"city": "New York", "n": 4}),
    models.PointStruct(id=5, vector=[0.24, 0.18, 0.22, 0.44], payload={"city": "Beijing", "n": 5}),
    models.PointStruct(id="a3bb189e-8bf9-3888-9912-ace4e6543002", vector=[0.35, 0.08, 0.11, 0.44], payload={"city": "Mumbai", "n": 6}),
]
result = client.upsert(collection_name=name, points=points, wait=True)
assert result.status == models.UpdateStatus.COMPLETED, result

query = [0.2, 0.1, 0.9, 0.7]
hits = client.query_points(collection_name=name, query=query, limit=3, with_payload=True).points
assert [h.id for h in hits] == [4, 1, 3], [h.id for h in hits]
assert abs(hits[0].score - (0.2 * 0.18 + 0.1 * 0.01 + 0.9 * 0.85 + 0.7 * 0.80)) < 1e-5, hits[0].score
assert hits[0].payload == {"city": "New York", "n": 4}

london_or_more = models.Filter(
    must=[models.FieldCondition(key="n", range=models.Range(gte=2))],
    must_not=[models.FieldCondition(key="city", match=models.MatchValue(value="New York"))],
)
hits = client.query_points(collection_name=name, query=query, query_filter=london_or_more, limit=3).points
assert [h.id for h in hits] == [3, 2, 5], [h.id for h in hits]

records = client.retrieve(collection_name=name, ids=[2, "a3bb189e-8bf9-3888-9912-ace4e6543002", 99], with_vectors=True)
assert sorted(str(r.id) for r in records) == ["2", "a3bb189e-8bf9-3888-9912-ace4e6543002"], records
by_id = {str(r.id): r for r in records}
assert by_id["2"].payload == {"city": "London", "n": 2}
assert [round(x, 5) for x in by_id["2"].vector] == [0.19, 0.81, 0.75, 0.11]

page, offset = client.scroll(collection_name=name, limit=4, with_payload=True)
assert [p.id for p in page] == [1, 2, 3, 4], [p.id for p in page]
assert offset == 5, offset
page, offset = client.scroll(collection_name=name, limit=4, offset=offset)
assert [str(p.id) for p in page] == ["5", "a3bb189e-8bf9-3888-9912-ace4e6543002"] and offset is None

assert client.count(collection_name=name, exact=True).count == 6
city_filter = models.Filter(must=[models.FieldCondition(key="city", match=models.MatchAny(any=["Berlin", "Moscow"]))])
assert client.count(collection_name=name, count_filter=city_filter).count == 2
two_of_three = models.Filter(
    min_should=models.MinShould(
        conditions=[
            models.FieldCondition(key="n", range=models.Range(gte=3)),
            models.FieldCondition(key="city", match=models.MatchValue(value="Moscow")),
            models.HasIdCondition(has_id=[3, 4]),
        ],
        min_count=2,
    )
)
assert client.count(collection_name=name, count_filter=two_of_three).count == 2
one_city = models.Filter(must=[models.FieldCondition(key="city", values_count=models.ValuesCount(gte=1, lt=2))])
assert client.count(collection_name=name, count_filter=one_city).count == 6

client.delete(collection_name=name, points_selector=models.PointIdsList(points=[1]), wait=True)
client.delete(collection_name=name, points_selector=models.FilterSelector(filter=city_filter), wait=True)
assert client.count(collection_name=name).count == 4
assert client.retrieve(collection_name=name, ids=[1, 3]) == []

# Payload updates: set (merged in), overwrite, delete keys, clear.
client.set_payload(collection_name=name, payload={"tag": "x"}, points=[2], wait=True)
assert client.retrieve(collection_name=name, ids=[2])[0].payload == {"city": "London", "n": 2, "tag": "x"}
client.overwrite_payload(collection_name=name, payload={"city": "Paris"}, points=[2], wait=True)
assert client.retrieve(collection_name=name, ids=[2])[0].payload == {"city": "Paris"}
client.delete_payload(collection_name=name, keys=["city"], points=[2], wait=True)
assert client.retrieve(collection_name=name, ids=[2])[0].payload == {}
client.clear_payload(collection_name=name, points_selector=models.PointIdsList(points=[2]), wait=True)
assert not client.retrieve(collection_name=name, ids=[2])[0].payload
client.overwrite_payload(collection_name=name, payload={"city": "London", "n": 2}, points=[2], wait=True)

# A new vector for an existing point; its payload stays.
client.update_vectors(
    collection_name=name, points=[models.PointVectors(id=2, vector=[0.5, 0.5, 0.5, 0.5])], wait=True
)
moved = client.retrieve(collection_name=name, ids=[2], with_vectors=True)[0]
assert moved.vector == [0.5, 0.5, 0.5, 0.5] and moved.payload == {"city": "London", "n": 2}, moved

# `update_filter`: a stored point is replaced only where the filter holds; a new one is inserted.
only_london = models.Filter(must=[models.FieldCondition(key="city", match=models.MatchValue(value="London"))])
client.upsert(
    collection_name=name,
    points=[
        models.PointStruct(id=2, vector=[0.5, 0.5, 0.5, 0.5], payload={"city": "London", "n": 2, "v": 2}),
        models.PointStruct(id=4, vector=[0.1, 0.1, 0.1, 0.1], payload={"city": "Nowhere"}),
        models.PointStruct(id=40, vector=[0.1, 0.1, 0.1, 0.1], payload={"city": "New"}),
    ],
    update_filter=only_london,
    wait=True,
)
assert client.retrieve(collection_name=name, ids=[2])[0].payload == {"city": "London", "n": 2, "v": 2}
assert client.retrieve(collection_name=name, ids=[4])[0].payload["city"] == "New York"
assert client.retrieve(collection_name=name, ids=[40])[0].payload == {"city": "New"}
client.delete(collection_name=name, points_selector=models.PointIdsList(points=[40]), wait=True)
client.overwrite_payload(collection_name=name, payload={"city": "London", "n": 2}, points=[2], wait=True)

# match.text_any without a text index: any whitespace-separated piece as a substring.
def any_piece(text):
    match = models.MatchTextAny(text_any=text)
    only = models.Filter(must=[models.FieldCondition(key="city", match=match)])
    return client.count(collection_name=name, count_filter=only, exact=True).count


assert any_piece("Lon Mum") == 2 and any_piece("york") == 0, (any_piece("Lon Mum"), any_piece("york"))
# A batch of writes, applied in order.
results = client.batch_update_points(
    collection_name=name,
    update_operations=[
        models.UpsertOperation(
            upsert=models.PointsList(points=[models.PointStruct(id=30, vector=[0.1, 0.2, 0.3, 0.4], payload={"n": 30})])
        ),
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"b": 1}, points=[30])),
        models.DeleteOperation(delete=models.PointIdsList(points=[30])),
    ],
    wait=True,
)
assert [r.status for r in results] == [models.UpdateStatus.COMPLETED] * 3, results
assert client.retrieve(collection_name=name, ids=[30]) == []

# A payload index, reported in the info the client's models read.
result = client.create_payload_index(
    collection_name=name, field_name="city", field_schema=models.PayloadSchemaType.KEYWORD
)
assert result.status == models.UpdateStatus.COMPLETED, result
info = client.get_collection(collection_name=name)
assert info.payload_schema["city"].data_type == models.PayloadSchemaType.KEYWORD, info
assert info.payload_schema["city"].points == 4, info
client.delete_payload_index(collection_name=name, field_name="city")
assert client.get_collection(collection_name=name).payload_schema == {}
# Scroll in the order of an integer index, largest first.
client.create_payload_index(name, field_name="n", field_schema=models.PayloadSchemaType.INTEGER, wait=True)
everyone, _ = client.scroll(collection_name=name, limit=100, with_payload=True)
by_n = sorted((p.payload["n"], p.id) for p in everyone if "n" in (p.payload or {}))
page, next_offset = client.scroll(
    collection_name=name, limit=2, order_by=models.OrderBy(key="n", direction=models.Direction.DESC)
)
assert [p.id for p in page] == [i for _, i in reversed(by_n)][:2], (page, by_n)
assert [p.order_value for p in page] == [n for n, _ in reversed(by_n)][:2] and next_offset is None, page
client.delete_payload_index(collection_name=name, field_name="n")

# Aliases: created, listed, read through, dropped.
client.update_collection_aliases(
    change_aliases_operations=[
        models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=name, alias_name=name + "_live")
        )
    ]
)
assert [a.alias_name for a in client.get_aliases().aliases] == [name + "_live"]
assert [a.alias_name for a in client.get_collection_aliases(name).aliases] == [name + "_live"]
assert client.count(collection_name=name + "_live").count == 4
client.update_collection_aliases(
    change_aliases_operations=[
        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name + "_live"))
    ]
)
assert client.get_aliases().aliases == []

# Recommendation from examples (average_vector, best_score): the client's RecommendQuery,
# ranked as computed here, the example points left out.
reco = name + "_reco"
assert client.create_collection(
    collection_name=reco, vectors_config=models.VectorParams(size=2, distance=models.Distance.EUCLID)
)
grid = {i: [float(i % 5), float(i // 5)] for i in range(25)}
client.upsert(
    collection_name=reco, points=[models.PointStruct(id=i, vector=v) for i, v in grid.items()], wait=True
)
target = [2 * (grid[6][d] + grid[7][d]) / 2 - grid[24][d] for d in range(2)]
ranked = sorted(
    (i for i in grid if i not in (6, 7, 24)),
    key=lambda i: ((grid[i][0] - target[0]) ** 2 + (grid[i][1] - target[1]) ** 2, i),
)
hits = client.query_points(
    collection_name=reco,
    query=models.RecommendQuery(recommend=models.RecommendInput(positive=[6, 7], negative=[24])),
    limit=3,
    search_params=models.SearchParams(exact=True),
).points
assert [h.id for h in hits] == ranked[:3], ([h.id for h in hits], ranked[:3])
# best_score: each point's best (negated squared) distance to a positive, through Qdrant's
# sigmoid, negated when the negative is nearer.
def best_score(i):
    sq = lambda a, b: (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2
    p = max(-sq(grid[i], grid[j]) for j in (6, 7))
    n = -sq(grid[i], grid[24])
    return 0.5 * (p / (1 + abs(p)) + 1) if p > n else -0.5 * (n / (1 + abs(n)) + 1)


by_best = sorted((i for i in grid if i not in (6, 7, 24)), key=lambda i: (-best_score(i), i))
hits = client.query_points(
    collection_name=reco,
    query=models.RecommendQuery(
        recommend=models.RecommendInput(
            positive=[6, 7], negative=[24], strategy=models.RecommendStrategy.BEST_SCORE
        )
    ),
    limit=4,
    search_params=models.SearchParams(exact=True),
).points
assert [h.id for h in hits] == by_best[:4], ([h.id for h in hits], by_best[:4])
assert abs(hits[0].score - best_score(hits[0].id)) < 1e-5, hits[0]
# Discovery: near point 12 within the side of the pair (6, 24) nearer 6, as Qdrant scores it.
def discover_score(i):
    sim = lambda j: -((grid[i][0] - grid[j][0]) ** 2 + (grid[i][1] - grid[j][1]) ** 2)
    rank = 1 if sim(6) > sim(24) else -1
    t = sim(12)
    return rank + 0.5 * (t / (1 + abs(t)) + 1)


by_discovery = sorted((i for i in grid if i not in (12, 6, 24)), key=lambda i: (-discover_score(i), i))
hits = client.query_points(
    collection_name=reco,
    query=models.DiscoverQuery(
        discover=models.DiscoverInput(target=12, context=[models.ContextPair(positive=6, negative=24)])
    ),
    limit=4,
    search_params=models.SearchParams(exact=True),
).points
assert [h.id for h in hits] == by_discovery[:4], ([h.id for h in hits], by_discovery[:4])
hits = client.query_points(
    collection_name=reco,
    query=models.ContextQuery(context=models.ContextPair(positive=6, negative=24)),
    limit=3,
    search_params=models.SearchParams(exact=True),
).points
assert all(h.score == 0 for h in hits), hits

# Groups: the grid's rows (payload `row`), the nearest two rows with their two nearest points.
client.set_payload(
    collection_name=reco, payload={"row": 0}, points=[i for i in grid if i // 5 == 0], wait=True
)
for row in range(1, 5):
    client.set_payload(
        collection_name=reco, payload={"row": row}, points=[i for i in grid if i // 5 == row], wait=True
    )
near = [3.2, 0.9]
by_distance = sorted(grid, key=lambda i: ((grid[i][0] - near[0]) ** 2 + (grid[i][1] - near[1]) ** 2, i))
want = []
for i in by_distance:
    row = [g for g in want if g[0] == i // 5]
    if row and len(row[0][1]) < 2:
        row[0][1].append(i)
    elif not row and len(want) < 2:
        want.append((i // 5, [i]))
groups = client.query_points_groups(
    collection_name=reco, query=near, group_by="row", limit=2, group_size=2,
    search_params=models.SearchParams(exact=True),
).groups
assert [(g.id, [h.id for h in g.hits]) for g in groups] == want, (groups, want)

# Facet counts of an indexed key: five rows of five points.
client.create_payload_index(
    collection_name=reco, field_name="row", field_schema=models.PayloadSchemaType.INTEGER
)
facets = client.facet(collection_name=reco, key="row", limit=3)
assert [(h.value, h.count) for h in facets.hits] == [(0, 5), (1, 5), (2, 5)], facets
assert client.delete_collection(collection_name=reco)

# Datetime ranges (the client's DatetimeRange of Python datetimes) and geo conditions, counted
# as computed here, before and after their keys are indexed.
places = name + "_places"
assert client.create_collection(
    collection_name=places, vectors_config=models.VectorParams(size=2, distance=models.Distance.EUCLID)
)
start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
spot = {i: (-30.0 + (i * 7) % 60, -20.0 + (i * 11) % 40) for i in range(200)}
client.upsert(
    collection_name=places,
    points=[
        models.PointStruct(
            id=i,
            vector=[float(i), 0.0],
            payload={"when": (start + datetime.timedelta(hours=i)).isoformat(), "at": {"lon": lon, "lat": lat}},
        )
        for i, (lon, lat) in spot.items()
    ],
    wait=True,
)


def haversine(lon1, lat1, lon2, lat2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371008.8 * math.asin(math.sqrt(h))


def ring(west, south, east, north):
    corners = [(west, south), (east, south), (east, north), (west, north), (west, south)]
    return models.GeoLineString(points=[models.GeoPoint(lon=x, lat=y) for x, y in corners])


place_cases = [
    (
        models.FieldCondition(
            key="when",
            range=models.DatetimeRange(gte=start + datetime.timedelta(hours=20), lt=datetime.datetime(2024, 1, 4, 3)),
        ),
        sum(20 <= i < 75 for i in spot),
    ),
    (
        models.FieldCondition(
            key="at", geo_radius=models.GeoRadius(center=models.GeoPoint(lon=0.0, lat=0.0), radius=1_500_000.0)
        ),
        sum(haversine(0, 0, lon, lat) < 1_500_000 for lon, lat in spot.values()),
    ),
    (
        models.FieldCondition(
            key="at",
            geo_bounding_box=models.GeoBoundingBox(
                top_left=models.GeoPoint(lon=-10.0, lat=15.0), bottom_right=models.GeoPoint(lon=20.0, lat=-5.0)
            ),
        ),
        sum(-10 < lon < 20 and -5 < lat < 15 for lon, lat in spot.values()),
    ),
    (
        models.FieldCondition(
            key="at", geo_polygon=models.GeoPolygon(exterior=ring(-20, -15, 20, 15), interiors=[ring(-5, -5, 5, 5)])
        ),
        sum(
            -20 < lon < 20 and -15 < lat < 15 and not (-5 <= lon <= 5 and -5 <= lat <= 5)
            for lon, lat in spot.values()
        ),
    ),
]
for indexed in (False, True):
    if indexed:
        client.create_payload_index(places, field_name="when", field_schema=models.PayloadSchemaType.DATETIME, wait=True)
        client.create_payload_index(places, field_name="at", field_schema=models.PayloadSchemaType.GEO, wait=True)
    for condition, expected in place_cases:
        assert expected > 5, condition
        got = client.count(collection_name=places, count_filter=models.Filter(must=[condition]), exact=True).count
        assert got == expected, (indexed, condition, got, expected)
schema = client.get_collection(collection_name=places).payload_schema
assert schema["when"].data_type == models.PayloadSchemaType.DATETIME and schema["at"].points == 200, schema
assert client.delete_collection(collection_name=places)

# The server's version as the client reads it; a Cairn-quantized collection's info still
# validates against the client's models.
assert client.info().version.startswith("1."), client.info()
created = httpx.put(
    f"{url}/collections/{name}_neq",
    json={"vectors": {"size": 4, "distance": "Dot"}, "quantization_config": {"neq": {"m": 2}}},
    headers={"api-key": api_key} if api_key else {},
    verify=tls.get("verify", True),
)
assert created.status_code == 200, created.text
assert client.get_collection(collection_name=name + "_neq").config.quantization_config is None
assert client.delete_collection(collection_name=name + "_neq")

# Snapshots: taken, listed and downloaded; recovered over the changed collection by upload
# and (over plain HTTP, where the server can fetch its own URL) from a location; deleted. A
# full-storage snapshot: taken, listed, deleted.
keyed = {"api-key": api_key} if api_key else {}
snapshot = client.create_snapshot(collection_name=name, wait=True)
assert snapshot.name.endswith(".snapshot") and len(snapshot.checksum) == 64, snapshot
assert [s.name for s in client.list_snapshots(collection_name=name)] == [snapshot.name]
file = httpx.get(
    f"{url}/collections/{name}/snapshots/{snapshot.name}", headers=keyed, verify=tls.get("verify", True)
)
assert file.status_code == 200 and hashlib.sha256(file.content).hexdigest() == snapshot.checksum
client.delete(collection_name=name, points_selector=models.PointIdsList(points=[2]), wait=True)
assert client.count(collection_name=name, exact=True).count == 3
client.http.snapshots_api.recover_from_uploaded_snapshot(
    collection_name=name, wait=True, checksum=snapshot.checksum, snapshot=io.BytesIO(file.content)
)
assert client.count(collection_name=name, exact=True).count == 4
assert [str(r.id) for r in client.retrieve(collection_name=name, ids=[2])] == ["2"]
if not tls:
    assert client.recover_snapshot(
        collection_name=name + "_copy",
        location=f"{url}/collections/{name}/snapshots/{snapshot.name}",
        checksum=snapshot.checksum,
        api_key=api_key,
        wait=True,
    )
    assert client.count(collection_name=name + "_copy", exact=True).count == 4
    assert client.delete_collection(collection_name=name + "_copy")
assert client.delete_snapshot(collection_name=name, snapshot_name=snapshot.name, wait=True)
assert client.list_snapshots(collection_name=name) == []
full = client.create_full_snapshot(wait=True)
assert [s.name for s in client.list_full_snapshots()] == [full.name], full
assert client.delete_full_snapshot(snapshot_name=full.name, wait=True)
assert client.list_full_snapshots() == []

assert client.delete_collection(collection_name=name)
assert not client.collection_exists(name)

# Sparse vectors beside a named dense one, and hybrid queries: each ranking against one
# computed here from the same points.
hybrid = name + "_hybrid"
assert client.create_collection(
    collection_name=hybrid,
    vectors_config={"dense": models.VectorParams(size=2, distance=models.Distance.EUCLID)},
    sparse_vectors_config={
        "words": models.SparseVectorParams(),
        "bm25": models.SparseVectorParams(modifier=models.Modifier.IDF),
    },
)
docs = {
    1: ([0.0, 0.0], {3: 1.0, 7: 2.0}),
    2: ([1.0, 0.0], {3: 2.0}),
    3: ([0.0, 1.0], {7: 0.5, 9: 1.0}),
    4: ([3.0, 3.0], {9: 4.0}),
    5: ([0.2, 0.1], {1: 1.0}),
}
client.upsert(
    collection_name=hybrid,
    points=[
        models.PointStruct(
            id=i,
            vector={
                "dense": dense,
                "words": models.SparseVector(indices=list(words), values=list(words.values())),
                "bm25": models.SparseVector(indices=list(words), values=list(words.values())),
            },
        )
        for i, (dense, words) in docs.items()
    ],
    wait=True,
)
info = client.get_collection(hybrid)
assert set(info.config.params.sparse_vectors) == {"words", "bm25"}, info
assert info.config.params.sparse_vectors["bm25"].modifier == models.Modifier.IDF, info
sparse_query = models.SparseVector(indices=[7, 9], values=[1.0, 1.0])


def sparse_exact(query, idf=False):
    import math

    n = len(docs)
    scores = {}
    for i, (_, words) in docs.items():
        shared = [d for d in query if d in words]
        if not shared:
            continue
        total = 0.0
        for d in shared:
            df = sum(1 for _, w in docs.values() if d in w)
            weight = math.log((n - df + 0.5) / (df + 0.5) + 1) if idf else 1.0
            total += query[d] * weight * words[d]
        scores[i] = total
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


hits = client.query_points(hybrid, query=sparse_query, using="words", limit=10).points
assert [(h.id, round(h.score, 5)) for h in hits] == [
    (i, round(s, 5)) for i, s in sparse_exact({7: 1.0, 9: 1.0})
], hits
hits = client.query_points(hybrid, query=sparse_query, using="bm25", limit=10).points
assert [(h.id, round(h.score, 4)) for h in hits] == [
    (i, round(s, 4)) for i, s in sparse_exact({7: 1.0, 9: 1.0}, idf=True)
], hits
record = client.retrieve(hybrid, ids=[3], with_vectors=["words"])[0]
assert record.vector["words"].indices == [7, 9] and record.vector["words"].values == [0.5, 1.0]
assert "dense" not in record.vector, record

# RRF (k = 2) of a dense and a sparse prefetch.
dense_hits = client.query_points(hybrid, query=[0.1, 0.1], using="dense", limit=3).points
sparse_hits = client.query_points(hybrid, query=sparse_query, using="words", limit=3).points
rrf = {}
for hits in (dense_hits, sparse_hits):
    for rank, h in enumerate(hits):
        rrf[h.id] = rrf.get(h.id, 0.0) + 1.0 / (rank + 2)
fused = client.query_points(
    hybrid,
    prefetch=[
        models.Prefetch(query=[0.1, 0.1], using="dense", limit=3),
        models.Prefetch(query=sparse_query, using="words", limit=3),
    ],
    query=models.FusionQuery(fusion=models.Fusion.RRF),
    limit=4,
).points
want = sorted(rrf.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
assert [(h.id, round(h.score, 5)) for h in fused] == [(i, round(s, 5)) for i, s in want], fused
fused = client.query_points(
    hybrid,
    prefetch=[
        models.Prefetch(query=[0.1, 0.1], using="dense", limit=3),
        models.Prefetch(query=sparse_query, using="words", limit=3),
    ],
    query=models.FusionQuery(fusion=models.Fusion.DBSF),
    limit=4,
).points
assert {h.id for h in fused} <= {h.id for h in dense_hits + sparse_hits}, fused
# Re-scoring: the dense distance ranks only the sparse query's candidates (1, 3, 4).
rescored = client.query_points(
    hybrid,
    prefetch=models.Prefetch(query=sparse_query, using="words", limit=10),
    query=[3.0, 2.9],
    using="dense",
    limit=10,
).points
assert [h.id for h in rescored] == [4, 3, 1], rescored
assert client.delete_collection(collection_name=hybrid)

# Several named dense vectors per point, each with its own size and distance: written,
# searched by name (rankings computed here), returned by name, updated and deleted.
multi = name + "_named"
assert client.create_collection(
    collection_name=multi,
    vectors_config={
        "image": models.VectorParams(size=3, distance=models.Distance.EUCLID),
        "text": models.VectorParams(size=2, distance=models.Distance.DOT),
    },
)
images = {1: [0.0, 0.0, 0.0], 2: [1.0, 0.0, 0.0], 3: [0.0, 2.0, 0.0], 4: [3.0, 3.0, 3.0]}
texts = {1: [1.0, 0.0], 2: [0.0, 1.0], 4: [2.0, 2.0]}  # point 3 has no text vector
client.upsert(
    collection_name=multi,
    points=[
        models.PointStruct(
            id=i, vector={"image": images[i], **({"text": texts[i]} if i in texts else {})}
        )
        for i in images
    ],
    wait=True,
)
info = client.get_collection(multi)
assert info.config.params.vectors["text"].size == 2, info
assert info.config.params.vectors["image"].distance == models.Distance.EUCLID, info
with_text = models.Filter(must=[models.HasVectorCondition(has_vector="text")])
assert client.count(multi, count_filter=with_text).count == 3


def ranked(vectors, query, dot):
    score = lambda v: sum(a * b for a, b in zip(v, query)) if dot else -sum((a - b) ** 2 for a, b in zip(v, query))
    return [i for i, _ in sorted(vectors.items(), key=lambda kv: (-score(kv[1]), kv[0]))]


hits = client.query_points(multi, query=[0.9, 0.1, 0.0], using="image", limit=4).points
assert [h.id for h in hits] == ranked(images, [0.9, 0.1, 0.0], dot=False), hits
hits = client.query_points(multi, query=[1.0, 0.5], using="text", limit=4).points
assert [h.id for h in hits] == ranked(texts, [1.0, 0.5], dot=True), hits
record = client.retrieve(multi, ids=[4], with_vectors=["text"])[0]
assert record.vector == {"text": [2.0, 2.0]}, record
client.update_vectors(multi, points=[models.PointVectors(id=3, vector={"text": [5.0, 0.0]})], wait=True)
texts[3] = [5.0, 0.0]
hits = client.query_points(multi, query=[1.0, 0.5], using="text", limit=4).points
assert [h.id for h in hits] == ranked(texts, [1.0, 0.5], dot=True), hits
client.delete_vectors(multi, vectors=["text"], points=[4], wait=True)
del texts[4]
hits = client.query_points(multi, query=[1.0, 0.5], using="text", limit=4).points
assert [h.id for h in hits] == ranked(texts, [1.0, 0.5], dot=True), hits
assert "text" not in client.retrieve(multi, ids=[4], with_vectors=True)[0].vector
assert client.delete_collection(collection_name=multi)

# Qdrant's scalar and binary quantization, created with the client's models and reported in
# them; searches with rescoring and oversampling, checked against brute force. 2,000 points:
# codes are trained once a collection holds 1,024.
def point_vector(i, dim=16):
    return [math.sin(0.7 * i * (d + 1) + d) + 0.3 * math.cos(1.3 * d * i) for d in range(dim)]


vectors = {i: point_vector(i) for i in range(2000)}
queries = [point_vector(10_000 + j) for j in range(20)]
for label, config, distance in [
    ("scalar", models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99, always_ram=True)), models.Distance.EUCLID),
    ("binary", models.BinaryQuantization(binary=models.BinaryQuantizationConfig(always_ram=True)), models.Distance.COSINE),
]:
    coded = f"{name}_{label}"
    client.create_collection(coded, vectors_config=models.VectorParams(size=16, distance=distance), quantization_config=config)
    reported = client.get_collection(coded).config.quantization_config
    assert type(reported) is type(config), reported
    client.upsert(coded, points=[models.PointStruct(id=i, vector=v) for i, v in vectors.items()], wait=True)

    def key(v, q):
        if distance == models.Distance.EUCLID:
            return sum((a - b) ** 2 for a, b in zip(v, q))
        norm = lambda x: math.sqrt(sum(a * a for a in x))
        return -sum(a * b for a, b in zip(v, q)) / (norm(v) * norm(q))

    search = models.SearchParams(quantization=models.QuantizationSearchParams(rescore=True, oversampling=8.0))
    found = 0
    for q in queries:
        truth = sorted(vectors, key=lambda i: (key(vectors[i], q), i))[:10]
        hits = client.query_points(coded, query=q, limit=10, search_params=search).points
        found += len(set(h.id for h in hits) & set(truth))
    recall = found / (10 * len(queries))
    assert recall >= 0.9, (label, recall)
    assert client.delete_collection(collection_name=coded)
print("qdrant-client check passed")
