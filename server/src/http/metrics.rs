//! Prometheus text metrics: request counts and latency sums per route and status, plus
//! per-collection gauges. Hand-rolled: a handful of counters does not need a metrics crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State as AxState};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::Mutex;

use super::State;
use crate::catalog::Catalog;
use crate::collection::PartitionHealth;

/// (method, route template, status).
type RequestKey = (String, String, u16);

/// Counters keyed by (method, route, status): request count and total seconds.
///
/// A plain vector searched by borrowed names: a server has a few dozen series, so the scan is
/// a few hundred nanoseconds and a request allocates nothing once its series exists (a map
/// keyed by owned strings would allocate two per request just to look up).
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<Vec<(RequestKey, (u64, f64))>>,
}

impl Metrics {
    fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut series = self.requests.lock();
        let found = series
            .iter_mut()
            .find(|((m, r, s), _)| *s == status && m == method && r == route);
        let counts = match found {
            Some((_, counts)) => counts,
            None => {
                series.push(((method.to_owned(), route.to_owned(), status), (0, 0.0)));
                let last = series.len() - 1;
                &mut series[last].1
            }
        };
        counts.0 += 1;
        counts.1 += seconds;
    }

    /// The exposition text.
    pub fn render(&self, catalog: Option<&Catalog>, searches: [u64; 3]) -> String {
        let mut out = String::new();
        out.push_str("# HELP cairn_searches_total Searches by where they ran: on the async worker that read the request (in_place), on the search threads (pool), or refused with a 429 because the search threads' line was full (refused).\n# TYPE cairn_searches_total counter\n");
        for (place, count) in ["in_place", "pool", "refused"].iter().zip(searches) {
            let _ = writeln!(out, "cairn_searches_total{{where=\"{place}\"}} {count}");
        }
        out.push_str("# HELP cairn_http_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE cairn_http_requests_total counter\n");
        let map: BTreeMap<RequestKey, (u64, f64)> = self.requests.lock().iter().cloned().collect();
        for ((method, route, status), (count, _)) in map.iter() {
            let _ = writeln!(out, "cairn_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {count}");
        }
        out.push_str(
            "# HELP cairn_http_request_seconds_sum Total seconds spent per route and status.\n",
        );
        out.push_str("# TYPE cairn_http_request_seconds_sum counter\n");
        for ((method, route, status), (_, seconds)) in map.iter() {
            let _ = writeln!(out, "cairn_http_request_seconds_sum{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {seconds}");
        }
        if let Some(catalog) = catalog {
            out.push_str("# HELP cairn_collection_points Live points per collection.\n# TYPE cairn_collection_points gauge\n");
            for c in catalog.all() {
                let _ = writeln!(
                    out,
                    "cairn_collection_points{{collection=\"{}\"}} {}",
                    c.name(),
                    c.points()
                );
            }
            out.push_str("# HELP cairn_collection_status 0 green (every partition fully served), 1 yellow (a partition under-replicated), 2 red (a partition with no serving copy).\n# TYPE cairn_collection_status gauge\n");
            for c in catalog.all() {
                let status = match c.health() {
                    PartitionHealth::Healthy => 0,
                    PartitionHealth::UnderReplicated => 1,
                    PartitionHealth::Unavailable => 2,
                };
                let _ = writeln!(
                    out,
                    "cairn_collection_status{{collection=\"{}\"}} {status}",
                    c.name()
                );
            }
            out.push_str("# HELP cairn_collection_applied_seq Last op applied to the index.\n# TYPE cairn_collection_applied_seq gauge\n");
            for c in catalog.all() {
                let _ = writeln!(
                    out,
                    "cairn_collection_applied_seq{{collection=\"{}\"}} {}",
                    c.name(),
                    c.applied_seq()
                );
            }
            // Prometheus wants each family's samples in one group: two passes.
            let searches: Vec<(String, (u64, f64))> = catalog
                .all()
                .iter()
                .map(|c| (c.name().to_owned(), c.index_search_time()))
                .collect();
            out.push_str("# HELP cairn_index_searches_total Queries answered by this process's partitions of each collection, counted once per partition searched (a filtered query's exact fallback is part of its search).\n# TYPE cairn_index_searches_total counter\n");
            for (name, (count, _)) in &searches {
                let _ = writeln!(
                    out,
                    "cairn_index_searches_total{{collection=\"{name}\"}} {count}"
                );
            }
            out.push_str("# HELP cairn_index_search_seconds_sum Seconds the index spent on those searches (a query's route time minus this is its REST, JSON and result-building cost).\n# TYPE cairn_index_search_seconds_sum counter\n");
            for (name, (_, seconds)) in &searches {
                let _ = writeln!(
                    out,
                    "cairn_index_search_seconds_sum{{collection=\"{name}\"}} {seconds}"
                );
            }
            out.push_str("# HELP cairn_index_memory_bytes Bytes of RAM held by each collection's index (vectors on disk are mapped, in the page cache, and not counted).\n# TYPE cairn_index_memory_bytes gauge\n");
            for c in catalog.all() {
                let _ = writeln!(
                    out,
                    "cairn_index_memory_bytes{{collection=\"{}\"}} {}",
                    c.name(),
                    c.index_memory_bytes()
                );
            }
        }
        out
    }
}

/// Middleware recording every request under its route template (not its raw path, which
/// would make one series per point id).
pub async fn track(AxState(state): AxState<State>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    state.metrics.record(
        method.as_str(),
        route.as_ref().map_or("unmatched", MatchedPath::as_str),
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}
