//! `/collections` endpoints.

use std::time::Instant;

use axum::extract::{Path, State as AxState};
use axum::response::IntoResponse;
use cairn_api::{
    ChangeAliases, ClusterOperation, CollectionConfig, CollectionDescription, CollectionExists,
    CollectionInfo, CollectionParams, CollectionsAliases, CollectionsList, CreateCollection,
    CreateFieldIndex, HnswConfig, OptimizersConfig, PayloadSchemaType, RefuseUnsupported,
    UpdateCollection, UpdateResult, UpdateStatus, WalConfig, WriteQuery,
};
use cairn_index::{IndexParams, RowCodes};

use super::json::{ApiJson, ApiQuery};
use super::{blocking, ok, State};
use crate::collection::{Collection, PartitionHealth};
use crate::error::{Result, ServerError};
use crate::node::placement::Move;
use crate::request::settings::{codes_json, index_config};

#[utoipa::path(get, path = "/collections", tag = "collections", responses((status = 200, description = "Every collection by name.", body = cairn_api::Response<CollectionsList>)))]
pub(super) async fn list(AxState(state): AxState<State>) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let collections = state
        .catalog()?
        .names()
        .into_iter()
        .map(|name| CollectionDescription { name })
        .collect();
    Ok(ok(CollectionsList { collections }, t))
}

#[utoipa::path(put, path = "/collections/{collection}", tag = "collections", params(("collection" = String, Path, description = "Collection name.")), request_body = CreateCollection, responses((status = 200, description = "Created.", body = cairn_api::Response<bool>)))]
pub(super) async fn create(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<CreateCollection>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let catalog = state.catalog()?.clone();
    blocking(move || catalog.create(&name, &request)).await?;
    Ok(ok(true, t))
}

#[utoipa::path(patch, path = "/collections/{collection}", operation_id = "update_collection", tag = "collections", params(("collection" = String, Path, description = "Collection name.")), request_body = UpdateCollection, responses((status = 200, description = "Accepted: every parameter given is the collection's already (Cairn rebuilds nothing on an update), or one of Qdrant's optimizer knobs, which change no answer.", body = cairn_api::Response<bool>)))]
pub(super) async fn update(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<UpdateCollection>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let collection = state.catalog()?.get(&name)?;
    collection.settings().check_update(&request)?;
    Ok(ok(true, t))
}

#[utoipa::path(delete, path = "/collections/{collection}", operation_id = "delete_collection", tag = "collections", params(("collection" = String, Path, description = "Collection name.")), responses((status = 200, description = "Dropped, with its data.", body = cairn_api::Response<bool>)))]
pub(super) async fn delete(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    blocking(move || catalog.delete(&name)).await?;
    Ok(ok(true, t))
}

#[utoipa::path(get, path = "/collections/{collection}/exists", tag = "collections", params(("collection" = String, Path, description = "Collection name.")), responses((status = 200, description = "Whether it exists.", body = cairn_api::Response<CollectionExists>)))]
pub(super) async fn exists(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let exists = state.catalog()?.get(&name).is_ok();
    Ok(ok(CollectionExists { exists }, t))
}

/// `POST /collections/aliases`: creates, deletes and renames aliases, all or none: in a file
/// of a standalone server, in the cluster's metadata on a node (each node reads them again
/// within a moment).
#[utoipa::path(post, path = "/collections/aliases", tag = "collections", request_body = ChangeAliases, responses((status = 200, description = "Every change made, and stored.", body = cairn_api::Response<bool>)))]
pub(super) async fn change_aliases(
    AxState(state): AxState<State>,
    ApiJson(request): ApiJson<ChangeAliases>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let catalog = state.catalog()?.clone();
    blocking(move || catalog.change_aliases(&request.actions)).await?;
    Ok(ok(true, t))
}

#[utoipa::path(get, path = "/aliases", tag = "collections", responses((status = 200, description = "Every alias and the collection it names.", body = cairn_api::Response<CollectionsAliases>)))]
pub(super) async fn list_aliases(AxState(state): AxState<State>) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let aliases = state.catalog()?.aliases(None)?;
    Ok(ok(CollectionsAliases { aliases }, t))
}

#[utoipa::path(get, path = "/collections/{collection}/aliases", tag = "collections", params(("collection" = String, Path, description = "Collection name (or one of its aliases).")), responses((status = 200, description = "The aliases of the collection.", body = cairn_api::Response<CollectionsAliases>)))]
pub(super) async fn collection_aliases(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let aliases = state.catalog()?.aliases(Some(&name))?;
    Ok(ok(CollectionsAliases { aliases }, t))
}

/// `PUT /collections/{c}/index`: indexes a payload key in every partition. The index is built
/// before the answer, whatever `wait` says, so the answer is always `completed`.
#[utoipa::path(put, path = "/collections/{collection}/index", tag = "collections", params(("collection" = String, Path, description = "Collection name."), WriteQuery), request_body = CreateFieldIndex, responses((status = 200, description = "Indexed: stored durably and built from the points already there.", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn create_index(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
    ApiJson(request): ApiJson<CreateFieldIndex>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    request.refuse_unsupported()?;
    let kind = field_index_kind(&request)?;
    let collection = state.catalog()?.get(&name)?;
    blocking(move || collection.set_payload_index(&request.field_name, Some(kind))).await?;
    Ok(ok(index_done(), t))
}

/// `DELETE /collections/{c}/index/{field_name}`: drops a payload index (filters on the key keep
/// working, by reading payloads).
#[utoipa::path(delete, path = "/collections/{collection}/index/{field_name}", tag = "collections", params(("collection" = String, Path, description = "Collection name."), ("field_name" = String, Path, description = "The indexed key."), WriteQuery), responses((status = 200, description = "Dropped (or there was none).", body = cairn_api::Response<UpdateResult>)))]
pub(super) async fn delete_index(
    AxState(state): AxState<State>,
    Path((name, field_name)): Path<(String, String)>,
    ApiQuery(_wait): ApiQuery<WriteQuery>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let collection = state.catalog()?.get(&name)?;
    blocking(move || collection.set_payload_index(&field_name, None)).await?;
    Ok(ok(index_done(), t))
}

/// What an index change answers: done (it is built or dropped before the answer). It is no
/// write to the points, so it has no operation id of its own.
fn index_done() -> UpdateResult {
    UpdateResult {
        operation_id: 0,
        status: UpdateStatus::Completed,
        read_token: None,
    }
}

/// Most bytes in an indexed key.
const MAX_INDEXED_KEY: usize = 1024;

/// The index type a request asks for.
fn field_index_kind(request: &CreateFieldIndex) -> Result<PayloadSchemaType> {
    if request.field_name.is_empty() || request.field_name.len() > MAX_INDEXED_KEY {
        return Err(ServerError::InvalidRequest(format!(
            "field_name must be 1-{MAX_INDEXED_KEY} bytes"
        )));
    }
    let Some(schema) = &request.field_schema else {
        return Err(ServerError::InvalidRequest(
            "field_schema is required: one of keyword, integer, float, bool, uuid, datetime, \
             geo, text"
                .into(),
        ));
    };
    Ok(schema.kind())
}

/// `GET /collections/{c}/cluster`: where each partition (Qdrant's shard) lives, in Qdrant's
/// shape (`peer_id`, `shard_count`, `local_shards`, `remote_shards`, `shard_transfers`), and,
/// a Cairn addition, every replica with its Raft role, term and applied index as this node
/// sees its group (`replicas`).
#[utoipa::path(get, path = "/collections/{collection}/cluster", tag = "cluster", params(("collection" = String, Path, description = "Collection name.")), responses((status = 200, description = "Where each partition's replicas are (Qdrant's shape), and each replica's Raft role, term and applied index.", body = cairn_api::Response<Object>)))]
pub(super) async fn cluster_info(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let collection = state.catalog()?.get(&name)?;
    let peer_id = state.node.as_ref().map_or(0, |n| n.id());
    let transfers = match &state.node {
        Some(node) => node.transfers(&name)?,
        None => Vec::new(),
    };
    let info = blocking(move || {
        let mut local = Vec::new();
        let mut remote = Vec::new();
        let mut replicas = Vec::new();
        for (shard_id, partition) in collection.partitions().iter().enumerate() {
            let Some(infos) = partition.replica_info() else {
                // One copy, in this process.
                local.push(serde_json::json!({
                    "shard_id": shard_id, "points_count": partition.points(), "state": "Active",
                }));
                continue;
            };
            for info in &infos {
                let active = if info.state == "lagging" {
                    "Partial"
                } else {
                    "Active"
                };
                match info.peer_id {
                    Some(peer) if peer == peer_id => local.push(serde_json::json!({
                        "shard_id": shard_id, "points_count": info.points, "state": active,
                    })),
                    peer => remote.push(serde_json::json!({
                        "shard_id": shard_id, "peer_id": peer, "node": info.node, "state": active,
                    })),
                }
            }
            replicas.push(serde_json::json!({ "shard_id": shard_id, "replicas": infos }));
        }
        Ok(serde_json::json!({
            "peer_id": peer_id,
            "shard_count": collection.partitions().len(),
            "local_shards": local,
            "remote_shards": remote,
            "shard_transfers": transfers,
            "replicas": replicas,
        }))
    })
    .await?;
    Ok(ok(info, t))
}

/// `POST /collections/{c}/cluster`: moves a partition's replica, adds one, drops one or calls
/// off a move (Qdrant's `move_shard`, `replicate_shard`, `drop_replica`, `abort_transfer`), on
/// a peer node. Answers once
/// the change is recorded in the cluster's metadata; it is carried out in the background.
#[utoipa::path(post, path = "/collections/{collection}/cluster", tag = "cluster", params(("collection" = String, Path, description = "Collection name.")), request_body = ClusterOperation, responses((status = 200, description = "The change is recorded and carried out in the background.", body = cairn_api::Response<bool>)))]
pub(super) async fn cluster_update(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
    ApiJson(operation): ApiJson<ClusterOperation>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let node = state.node.clone().ok_or_else(|| {
        ServerError::InvalidRequest(
            "cluster operations need a peer node (`cluster.role = \"node\"`)".into(),
        )
    })?;
    let collection = state.catalog()?.get(&name)?;
    let (shard, edit) = match operation {
        ClusterOperation::MoveShard(t) => (
            t.shard_id,
            Move::Move {
                from: t.from_peer_id,
                to: t.to_peer_id,
            },
        ),
        ClusterOperation::ReplicateShard(t) => (t.shard_id, Move::Replicate { to: t.to_peer_id }),
        ClusterOperation::DropReplica(d) => (d.shard_id, Move::Drop { node: d.peer_id }),
        ClusterOperation::AbortTransfer(a) => (
            a.shard_id,
            Move::Abort {
                from: a.from_peer_id,
                to: a.to_peer_id,
            },
        ),
    };
    let partition = shard as usize;
    if partition >= collection.partitions().len() {
        return Err(ServerError::InvalidRequest(format!(
            "collection `{name}` has no shard {shard} (it has {})",
            collection.partitions().len()
        )));
    }
    node.plan(&name, partition, edit).await?;
    Ok(ok(true, t))
}

#[utoipa::path(get, path = "/collections/{collection}", tag = "collections", params(("collection" = String, Path, description = "Collection name.")), responses((status = 200, description = "Configuration, counts, routing, and how the index came back at start-up (`load`, `slots`).", body = cairn_api::Response<CollectionInfo>)))]
pub(super) async fn info(
    AxState(state): AxState<State>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    let t = Instant::now();
    let collection = state.catalog()?.get(&name)?;
    // A clustered collection asks other nodes for its replicas' counters: off the async
    // workers.
    let info = blocking(move || {
        Ok(InfoWithLoad {
            info: describe(&collection),
            load: collection.load_report(),
            slots: collection.slot_stats(),
        })
    })
    .await?;
    Ok(ok(info, t))
}

/// Collection info plus Cairn's load report (how the index came back at start-up).
#[derive(serde::Serialize)]
struct InfoWithLoad {
    #[serde(flatten)]
    info: CollectionInfo,
    load: crate::partition::LoadReport,
    slots: crate::partition::SlotStats,
}

/// The effective `quantization_config` of a quantized collection, in the shape it was created
/// with and every default filled in.
fn quantization_json(p: &cairn_index::quant::QuantizedParams) -> serde_json::Value {
    use cairn_index::quant::Quantizer;
    match p.quantizer {
        Quantizer::Neq { kind, m } => serde_json::json!({
            "neq": {"codec": kind.name(), "m": m, "oversampling": p.oversampling,
                    "training": "directions"}
        }),
        Quantizer::NeqIp { kind, m } => serde_json::json!({
            "neq": {"codec": kind.name(), "m": m, "oversampling": p.oversampling,
                    "training": "inner_product"}
        }),
        Quantizer::Plain { m, .. } => serde_json::json!({
            "pq": {"m": m, "oversampling": p.oversampling}
        }),
    }
}

fn describe(collection: &Collection) -> CollectionInfo {
    let s = collection.settings();
    let points = collection.points() as u64;
    let quantization_config = match s.index {
        IndexParams::Quantized(p) => Some(quantization_json(&p)),
        IndexParams::Flat
        | IndexParams::Hnsw(_)
        | IndexParams::IpNsw(_)
        | IndexParams::IpNswPlus(_)
        | IndexParams::SimpleLsh(_)
        | IndexParams::RangeLsh(_)
        | IndexParams::MipsAuto(_)
        | IndexParams::NormScan(_) => None,
    };
    // Cairn's `rabitq` goes beside NEQ, out of the field Qdrant's clients parse by their kinds.
    let (qdrant_codes, cairn_codes) = match s.shared_codes {
        Some(RowCodes::Rabitq) => (None, Some(codes_json(RowCodes::Rabitq))),
        other => (other.map(codes_json), None),
    };
    let (index, hnsw) = index_config(&s.index);
    // Qdrant's colours: green serves fully, yellow serves with a partition under-replicated,
    // red has a partition that cannot serve at all.
    let status = match collection.health() {
        PartitionHealth::Healthy => "green",
        PartitionHealth::UnderReplicated => "yellow",
        PartitionHealth::Unavailable => "red",
    };
    CollectionInfo {
        status: status.into(),
        optimizer_status: "ok".into(),
        vectors_count: points,
        indexed_vectors_count: points,
        points_count: points,
        segments_count: 1,
        config: CollectionConfig {
            params: CollectionParams {
                vectors: s.vectors_config(),
                sparse_vectors: s.sparse_config(),
                shard_number: s.partitions() as u32,
                replication_factor: s.replication_factor as u32,
                write_consistency_factor: s.write_consistency_factor as u32,
                on_disk_payload: false,
            },
            hnsw_config: HnswConfig {
                m: hnsw.m,
                ef_construct: hnsw.ef_construction,
                full_scan_threshold: s.full_scan_threshold,
                ef_search: hnsw.ef_search,
                max_indexing_threads: 0,
                on_disk: false,
            },
            optimizer_config: OptimizersConfig {
                deleted_threshold: 0.2,
                vacuum_min_vector_number: 1000,
                default_segment_number: 1,
                max_segment_size: None,
                memmap_threshold: None,
                indexing_threshold: 0,
                flush_interval_sec: 30,
                max_optimization_threads: None,
            },
            wal_config: WalConfig {
                wal_capacity_mb: 32,
                wal_segments_ahead: 0,
            },
            quantization_config: qdrant_codes,
            cairn_quantization_config: quantization_config.or(cairn_codes),
            index,
            vector_indexes: s
                .extra_vectors
                .iter()
                .map(|(name, extra)| (name.clone(), index_config(&extra.index).0))
                .collect(),
        },
        payload_schema: collection.payload_schema(),
        routing: collection.routing_info(),
    }
}
