//! API keys on the public port, in Qdrant's shape so its clients work: a key in the `api-key`
//! header or as `Authorization: Bearer <key>`. With `http.api_key` (read and write) or
//! `http.read_only_api_key` configured, every route but `/healthz` and `/readyz` needs one:
//! no key or an unknown one is a 401, a write with the read-only key a 403, both with the JSON
//! error body. `/metrics` needs a key too (either): it names every collection.
//!
//! **Scoped tokens** (`http.jwt_rbac`, Qdrant's RBAC): a JWT signed with the read-write key
//! (HS256), presented like a key. Its `access` claim is `"m"` (everything), `"r"` (every read)
//! or a list of `{"collection": name, "access": "r" | "rw"}`; a list-scoped token reaches only
//! the routes under `/collections/{name}/` of its collections (not the list of collections,
//! which would name the others). An optional `exp` (seconds since the epoch) is enforced: an
//! expired token is a 401; a token that does not reach the collection, or only reads it, a
//! 403. A token lets the signer hand out access without sharing the key, and every request
//! is checked against it anew.
//!
//! Keys are compared in constant time (`subtle`) and never logged. A request is a *read* when
//! it is a `GET`, or a `POST` to one of the read routes of [`SEARCH_POSTS`] and
//! [`OTHER_READ_POSTS`]; everything else is a write, so a route added later is refused to
//! read-only keys until it is listed here.

use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use cairn_api::ErrorCode;
use subtle::ConstantTimeEq;

use super::error::error_response;
use super::State;
use crate::config::HttpConfig;

/// The header Qdrant's clients send the key in.
pub const API_KEY_HEADER: &str = "api-key";

/// Routes anyone may call: a load balancer's or an orchestrator's probes carry no key.
const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// The `POST` routes under `/collections/{collection}/` whose work is a search.
const SEARCH_POSTS: &[&str] = &[
    "points/query",
    "points/query/batch",
    "points/query/groups",
    "points/search",
    "points/search/batch",
];

/// The other `POST` routes under `/collections/{collection}/` that only read.
const OTHER_READ_POSTS: &[&str] = &["points", "points/scroll", "points/count", "facet"];

/// The keys a server accepts.
#[derive(Clone)]
pub struct ApiKeys {
    read_write: Option<Vec<u8>>,
    read_only: Option<Vec<u8>>,
    /// Accept JWTs signed with the read-write key.
    tokens: bool,
}

/// What a presented key or token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Access {
    ReadWrite,
    ReadOnly,
    /// These collections only: (name, may write).
    Collections(Vec<(String, bool)>),
}

/// The collections a request's key or token may read, for a handler whose body names another
/// collection than its path (`with_lookup`): put in the request's extensions by
/// [`require_key`]; absent when the API is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach(Option<Vec<String>>);

impl Reach {
    fn of(access: &Access) -> Self {
        match access {
            Access::ReadWrite | Access::ReadOnly => Reach(None),
            Access::Collections(list) => Reach(Some(list.iter().map(|(c, _)| c.clone()).collect())),
        }
    }

    /// Whether `collection` may be read.
    pub fn reads(&self, collection: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|list| list.iter().any(|c| c == collection))
    }
}

/// Why a presented credential lets nothing through (a 401).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Invalid {
    /// Neither key, nor a token this server signed.
    Unknown,
    /// A token past its `exp`.
    Expired,
    /// A token whose `access` claim is not one this server grants.
    BadClaims(String),
}

/// A scoped token's claims (Qdrant's RBAC shape, the parts Cairn grants).
#[derive(serde::Deserialize)]
struct Claims {
    /// Seconds since the epoch after which the token is refused.
    #[serde(default)]
    exp: Option<u64>,
    access: AccessClaim,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum AccessClaim {
    /// `"m"` or `"r"`.
    Global(String),
    /// Per collection.
    Collections(Vec<CollectionClaim>),
}

#[derive(serde::Deserialize)]
struct CollectionClaim {
    collection: String,
    access: String,
}

impl ApiKeys {
    /// The keys of `http`; `None` when neither is set (the API is open).
    pub fn from_config(http: &HttpConfig) -> Option<Self> {
        let key = |secret: &crate::config::Secret| {
            let bytes = secret.expose().as_bytes();
            (!bytes.is_empty()).then(|| bytes.to_vec())
        };
        let keys = Self {
            read_write: key(&http.api_key),
            read_only: key(&http.read_only_api_key),
            tokens: http.jwt_rbac,
        };
        (keys.read_write.is_some() || keys.read_only.is_some()).then_some(keys)
    }

    /// What `presented` may do at `now` (seconds since the epoch): a key of this server, or
    /// a token it signed. Both keys are compared every time, so the answer's timing does not
    /// tell which one nearly matched.
    fn access(&self, presented: &[u8], now: u64) -> Result<Access, Invalid> {
        let matches = |key: &Option<Vec<u8>>| {
            key.as_deref()
                .is_some_and(|key| bool::from(key.ct_eq(presented)))
        };
        let (read_write, read_only) = (matches(&self.read_write), matches(&self.read_only));
        if read_write {
            return Ok(Access::ReadWrite);
        }
        if read_only {
            return Ok(Access::ReadOnly);
        }
        match (&self.read_write, self.tokens) {
            (Some(secret), true) => token_access(secret, presented, now),
            _ => Err(Invalid::Unknown),
        }
    }
}

/// The access a JWT signed with `secret` grants at `now`.
fn token_access(secret: &[u8], token: &[u8], now: u64) -> Result<Access, Invalid> {
    let token = std::str::from_utf8(token).map_err(|_| Invalid::Unknown)?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    // `exp` is optional, and checked below without leeway.
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    let claims = jsonwebtoken::decode::<Claims>(
        token,
        &jsonwebtoken::DecodingKey::from_secret(secret),
        &validation,
    )
    .map_err(|e| {
        // Signed by this server but not in Cairn's claim shape: say so. Anything else (a bad
        // signature, not a JWT at all) is simply not a credential of this server.
        if let jsonwebtoken::errors::ErrorKind::Json(problem) = e.kind() {
            Invalid::BadClaims(format!("its claims do not parse: {problem}"))
        } else {
            Invalid::Unknown
        }
    })?
    .claims;
    if claims.exp.is_some_and(|exp| exp <= now) {
        return Err(Invalid::Expired);
    }
    match claims.access {
        AccessClaim::Global(level) => match level.as_str() {
            "m" => Ok(Access::ReadWrite),
            "r" => Ok(Access::ReadOnly),
            other => Err(Invalid::BadClaims(format!(
                "access {other:?} is none of \"m\", \"r\" or a list of collections"
            ))),
        },
        AccessClaim::Collections(list) => list
            .into_iter()
            .map(|claim| match claim.access.as_str() {
                "r" => Ok((claim.collection, false)),
                "rw" => Ok((claim.collection, true)),
                other => Err(Invalid::BadClaims(format!(
                    "access {other:?} to collection `{}` is neither \"r\" nor \"rw\"",
                    claim.collection
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Access::Collections),
    }
}

/// Whether `path` is a health or readiness probe, which needs no key and is never queued.
pub fn is_probe(path: &str) -> bool {
    OPEN_PATHS.contains(&path)
}

/// The key a request presents: the `api-key` header, else a bearer token.
fn presented(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(key) = headers.get(API_KEY_HEADER) {
        return Some(key.as_bytes());
    }
    let authorization = headers.get(header::AUTHORIZATION)?.as_bytes();
    let scheme = b"bearer ";
    (authorization.len() > scheme.len()
        && authorization[..scheme.len()].eq_ignore_ascii_case(scheme))
    .then(|| authorization[scheme.len()..].trim_ascii())
}

/// Whether `method` on `path` only reads (see the module docs).
pub(super) fn reads_only(method: &Method, path: &str) -> bool {
    if method == Method::GET || method == Method::HEAD {
        return true;
    }
    post_below_collection(method, path)
        .is_some_and(|route| SEARCH_POSTS.contains(&route) || OTHER_READ_POSTS.contains(&route))
}

/// Whether `method` on `path` is a query or search (the admission layer refuses one unread
/// while the search threads' line is full).
pub(super) fn is_search(method: &Method, path: &str) -> bool {
    post_below_collection(method, path).is_some_and(|route| SEARCH_POSTS.contains(&route))
}

/// For a `POST` to `/collections/{collection}/…`, the route below the collection (`…`).
fn post_below_collection<'a>(method: &Method, path: &'a str) -> Option<&'a str> {
    if method != Method::POST {
        return None;
    }
    let (_, route) = path
        .trim_matches('/')
        .strip_prefix("collections/")?
        .split_once('/')?;
    Some(route)
}

/// The collection a request is about: `/collections/{name}` and the routes below it; not
/// `/collections/aliases` (alias changes span collections, so a token scoped to some cannot
/// make them).
fn collection_of(path: &str) -> Option<&str> {
    let mut segments = path.trim_matches('/').split('/');
    match (segments.next(), segments.next(), segments.next()) {
        (Some("collections"), Some("aliases"), None) => None,
        (Some("collections"), Some(name), _) if !name.is_empty() => Some(name),
        _ => None,
    }
}

/// Why `access` does not allow `method` on `path` (a 403), if it does not.
fn refusal(access: &Access, method: &Method, path: &str) -> Option<String> {
    let read = reads_only(method, path);
    match access {
        Access::ReadWrite => None,
        Access::ReadOnly if read => None,
        Access::ReadOnly => Some(format!(
            "this key or token may only read: not {method} {path}"
        )),
        Access::Collections(_) if path.trim_end_matches('/').ends_with("/snapshots/recover") => {
            Some(format!(
                "recovering from a location reads the server's files or fetches a URL: it needs \
                 a key or a token for everything, not {method} {path} (a collection's token \
                 may upload its snapshot instead)"
            ))
        }
        Access::Collections(list) => {
            let Some(name) = collection_of(path) else {
                return Some(format!(
                    "this token reaches only its collections' routes, not {method} {path}"
                ));
            };
            match list.iter().find(|(c, _)| c == name) {
                None => Some(format!(
                    "this token grants no access to collection `{name}`"
                )),
                Some((_, false)) if !read => Some(format!(
                    "this token may only read collection `{name}`: not {method} {path}"
                )),
                Some(_) => None,
            }
        }
    }
}

/// The middleware: passes a request with a key that may make it, answers 401 or 403 to any
/// other, before any handler runs.
pub async fn require_key(AxState(state): AxState<State>, request: Request, next: Next) -> Response {
    let Some(keys) = &state.api_keys else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if is_probe(path) {
        return next.run(request).await;
    }
    let Some(presented) = presented(request.headers()) else {
        return error_response(
            ErrorCode::Unauthorized,
            format!(
                "this server needs an API key: send it in the `{API_KEY_HEADER}` header or as \
                 `Authorization: Bearer <key>`"
            ),
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match keys.access(presented, now) {
        Ok(access) => match refusal(&access, request.method(), path) {
            None => match &state.key_rates {
                Some(rates) if !rates.admit(presented) => error_response(
                    ErrorCode::RateLimited,
                    "this key has used its requests for now (http.rate_limit_per_key); retry \
                     later"
                        .into(),
                ),
                _ => {
                    let mut request = request;
                    request.extensions_mut().insert(Reach::of(&access));
                    next.run(request).await
                }
            },
            Some(why) => error_response(ErrorCode::Forbidden, why),
        },
        Err(Invalid::Unknown) => error_response(
            ErrorCode::Unauthorized,
            "the API key or token is not valid".into(),
        ),
        Err(Invalid::Expired) => {
            error_response(ErrorCode::Unauthorized, "the token has expired".into())
        }
        Err(Invalid::BadClaims(why)) => error_response(
            ErrorCode::Unauthorized,
            format!("the token is refused: {why}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_token_reaches_only_its_collections_in_a_body_too() {
        let scoped = Reach::of(&Access::Collections(vec![("a".into(), false)]));
        assert!(scoped.reads("a") && !scoped.reads("b"));
        assert!(Reach::of(&Access::ReadOnly).reads("b"));
    }

    #[test]
    fn searches_are_the_query_and_search_posts() {
        assert!(is_search(&Method::POST, "/collections/c/points/query"));
        assert!(is_search(
            &Method::POST,
            "/collections/c/points/search/batch/"
        ));
        assert!(!is_search(&Method::GET, "/collections/c/points/query"));
        assert!(!is_search(&Method::POST, "/collections/c/points/scroll"));
        assert!(!is_search(&Method::POST, "/collections/points/search"));
        assert!(!is_search(&Method::POST, "/points/query"));
    }

    #[test]
    fn reads_are_gets_and_the_listed_posts() {
        assert!(reads_only(&Method::GET, "/collections/c"));
        assert!(reads_only(
            &Method::POST,
            "/collections/c/points/search/batch"
        ));
        assert!(reads_only(&Method::POST, "/collections/c/points"));
        assert!(!reads_only(&Method::PUT, "/collections/c/points"));
        assert!(!reads_only(&Method::POST, "/collections/c/points/delete"));
        assert!(!reads_only(&Method::POST, "/collections/c/cluster"));
        assert!(!reads_only(&Method::DELETE, "/collections/c"));
        assert!(!reads_only(&Method::POST, "/collections/points/search"));
        // Alias changes span collections: no collection-scoped token reaches them.
        assert_eq!(collection_of("/collections/aliases"), None);
        assert_eq!(collection_of("/collections/a/aliases"), Some("a"));
    }

    #[test]
    fn a_key_is_taken_from_either_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer  s3cret ".parse().unwrap());
        assert_eq!(presented(&headers), Some(&b"s3cret"[..]));
        headers.insert(header::AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert_eq!(presented(&headers), None);
        headers.insert(API_KEY_HEADER, "other".parse().unwrap());
        assert_eq!(presented(&headers), Some(&b"other"[..]));
    }

    #[test]
    fn each_key_grants_its_own_access() {
        let keys = ApiKeys {
            read_write: Some(b"rw".to_vec()),
            read_only: Some(b"ro".to_vec()),
            tokens: false,
        };
        assert_eq!(keys.access(b"rw", 0), Ok(Access::ReadWrite));
        assert_eq!(keys.access(b"ro", 0), Ok(Access::ReadOnly));
        assert_eq!(keys.access(b"r", 0), Err(Invalid::Unknown));
        assert_eq!(keys.access(b"", 0), Err(Invalid::Unknown));
    }

    fn token(secret: &[u8], claims: serde_json::Value) -> Vec<u8> {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret),
        )
        .unwrap()
        .into_bytes()
    }

    #[test]
    fn tokens_grant_what_their_claims_say_until_they_expire() {
        let keys = ApiKeys {
            read_write: Some(b"rw".to_vec()),
            read_only: None,
            tokens: true,
        };
        let scoped = token(
            b"rw",
            serde_json::json!({"exp": 100, "access": [
                {"collection": "a", "access": "r"}, {"collection": "b", "access": "rw"}]}),
        );
        let access = keys.access(&scoped, 99).unwrap();
        assert_eq!(
            refusal(&access, &Method::POST, "/collections/a/points/query"),
            None
        );
        assert_eq!(
            refusal(&access, &Method::PUT, "/collections/b/points"),
            None
        );
        let write_a = refusal(&access, &Method::PUT, "/collections/a/points").unwrap();
        assert!(write_a.contains("only read collection `a`"), "{write_a}");
        let other = refusal(&access, &Method::GET, "/collections/c").unwrap();
        assert!(other.contains("no access to collection `c`"), "{other}");
        assert!(refusal(&access, &Method::GET, "/collections").is_some());
        assert_eq!(keys.access(&scoped, 100), Err(Invalid::Expired));

        let manage = token(b"rw", serde_json::json!({"access": "m"}));
        assert_eq!(keys.access(&manage, u64::MAX), Ok(Access::ReadWrite));
        let forged = token(b"not the key", serde_json::json!({"access": "m"}));
        assert_eq!(keys.access(&forged, 0), Err(Invalid::Unknown));
        let odd = token(b"rw", serde_json::json!({"access": "x"}));
        assert!(matches!(keys.access(&odd, 0), Err(Invalid::BadClaims(_))));
        let untokened = ApiKeys {
            tokens: false,
            ..keys
        };
        assert_eq!(untokened.access(&manage, 0), Err(Invalid::Unknown));
    }
}
