//! The OpenAPI 3.1 document at `GET /openapi.json`, generated from the code: every route is
//! registered through [`utoipa_axum`] together with its `#[utoipa::path]` description, so
//! the router and the document are built from one list and cannot disagree; request and
//! response shapes are the wire types' own `ToSchema` derives in `cairn-api`.
//!
//! Qdrant fields Cairn refuses are left out of the schemas (they are not part of what Cairn
//! serves; sending one still gets a 400 naming it). Every operation lists the error answers
//! any request may get, each with the JSON error body ([`ErrorBody`]).

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::response::IntoResponse;
use cairn_api::ErrorBody;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

/// The document's fixed parts; the paths come from the router (`super::api_routes`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Cairn",
        description = "Nearest-neighbour search over dense vectors (Euclidean, cosine, inner \
                       product) in Qdrant's REST shape.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    security(("api-key" = []), ("bearer" = [])),
    tags(
        (name = "service", description = "Who answers, health, readiness, metrics."),
        (name = "collections", description = "Create, inspect and drop collections."),
        (name = "points", description = "Write, read, scroll and count points."),
        (name = "search", description = "Nearest-neighbour queries."),
        (name = "snapshots", description = "A collection, or the whole storage, in one checksummed file: take, list, download, delete, recover."),
        (name = "cluster", description = "Peer nodes and where partitions live.")
    )
)]
pub struct ApiDoc;

/// The whole document: `routes`' paths and schemas, with what every operation shares added
/// (the API-key schemes and the error answers). Applied after the routes are in, which a
/// `#[openapi(modifiers)]` would not be.
pub(super) fn complete(mut document: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    Shared.modify(&mut document);
    document
}

/// See [`complete`].
struct Shared;

/// The error answers any operation may give, by status.
const ERRORS: &[(&str, &str)] = &[
    (
        "400",
        "Malformed or invalid request; the message names the field.",
    ),
    (
        "401",
        "No API key, a wrong one, or an expired token (when keys are configured).",
    ),
    (
        "403",
        "The key or token does not allow this request (a write with a read-only key).",
    ),
    ("404", "No such collection, point or route."),
    ("408", "The request ran past its `timeout` query parameter."),
    ("413", "The body is larger than `http.max_body_bytes`."),
    ("415", "The body is not JSON."),
    ("429", "Overloaded: retry after the `Retry-After` header."),
    ("500", "A bug or an I/O failure on the server."),
    (
        "503",
        "Loading, shutting down, or a partition without a live replica.",
    ),
];

impl Modify for Shared {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api-key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("api-key"))),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let mut schemas = vec![(ErrorBody::name().into_owned(), ErrorBody::schema())];
        ErrorBody::schemas(&mut schemas);
        components.schemas.extend(schemas);
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorBody",
                            ))))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            let operations: [&mut Option<Operation>; 5] = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                for (status, description) in ERRORS {
                    operation
                        .responses
                        .responses
                        .entry((*status).to_owned())
                        .or_insert_with(|| error(description));
                }
            }
        }
    }
}

/// `GET /openapi.json`: this document.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API.", body = Object)))]
pub(super) async fn document() -> impl IntoResponse {
    static DOCUMENT: OnceLock<Bytes> = OnceLock::new();
    let body = DOCUMENT.get_or_init(|| {
        Bytes::from(
            serde_json::to_vec(&complete(super::api_routes().into_openapi()))
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}").into_bytes()),
        )
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.clone(),
    )
}
