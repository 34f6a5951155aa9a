//! Latency histograms, recall and error counts of a run or of one phase of it.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_client::api::{PointId, QueryResponse};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Accumulates one phase's outcomes.
pub struct PhaseStats {
    /// Latencies in microseconds (3 significant digits, up to 1 hour).
    latency: Histogram<u64>,
    /// How late the load generator issued each query, in microseconds (open loop only).
    send_lag: Histogram<u64>,
    /// Errors by kind (`timeout`, `connection`, `unavailable`, `overload`, …).
    errors: BTreeMap<String, u64>,
    /// How long the server took to refuse a query with a 429, in microseconds.
    refused: Histogram<u64>,
    /// Sum of per-query recall over successful queries.
    recall_sum: f64,
    ok: u64,
}

impl Default for PhaseStats {
    fn default() -> Self {
        Self {
            latency: micros_histogram(),
            send_lag: micros_histogram(),
            errors: BTreeMap::new(),
            refused: micros_histogram(),
            recall_sum: 0.0,
            ok: 0,
        }
    }
}

/// Microseconds, 3 significant digits, up to an hour.
fn micros_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| unreachable!("bounds are valid"))
}

fn micros(d: Duration) -> u64 {
    d.as_micros().clamp(1, u128::from(u64::MAX)) as u64
}

impl PhaseStats {
    /// A query issued `lag` after it was due (the generator's own lateness, which the
    /// query's latency includes).
    pub fn sent(&mut self, lag: Duration) {
        self.send_lag.saturating_record(micros(lag));
    }

    /// A successful query: its latency and its recall against ground truth.
    pub fn ok(&mut self, latency: Duration, recall: f64) {
        self.latency.saturating_record(micros(latency));
        self.recall_sum += recall;
        self.ok += 1;
    }

    /// A failed query, by kind.
    pub fn error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_owned()).or_default() += 1;
    }

    /// A query the server refused with a 429 (`rate_limited`) after `latency`.
    pub fn refused(&mut self, latency: Duration) {
        self.refused.saturating_record(micros(latency));
        self.error("rate_limited");
    }

    /// Successful queries so far.
    pub fn ok_count(&self) -> u64 {
        self.ok
    }

    /// Failed queries so far.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The phase's summary over `secs` seconds of wall time.
    pub fn summary(&self, secs: f64) -> Summary {
        let ms = |q: f64| {
            if self.ok == 0 {
                0.0
            } else {
                self.latency.value_at_quantile(q) as f64 / 1_000.0
            }
        };
        Summary {
            queries: self.ok + self.error_count(),
            succeeded: self.ok,
            failed: self.error_count(),
            errors: self.errors.clone(),
            throughput_qps: self.ok as f64 / secs.max(1e-9),
            recall: if self.ok == 0 {
                0.0
            } else {
                self.recall_sum / self.ok as f64
            },
            p50_ms: ms(0.50),
            p95_ms: ms(0.95),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: if self.ok == 0 {
                0.0
            } else {
                self.latency.max() as f64 / 1_000.0
            },
            mean_ms: if self.ok == 0 {
                0.0
            } else {
                self.latency.mean() / 1_000.0
            },
            send_lag_p99_ms: if self.send_lag.is_empty() {
                0.0
            } else {
                self.send_lag.value_at_quantile(0.99) as f64 / 1_000.0
            },
            refused_p99_ms: if self.refused.is_empty() {
                0.0
            } else {
                self.refused.value_at_quantile(0.99) as f64 / 1_000.0
            },
        }
    }
}

/// What a run or phase measured; serialised as is into the JSON summaries.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Queries issued.
    pub queries: u64,
    /// Queries answered.
    pub succeeded: u64,
    /// Queries failed.
    pub failed: u64,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Answered queries per second of wall time.
    pub throughput_qps: f64,
    /// Mean recall@k of answered queries against exact ground truth.
    pub recall: f64,
    /// Median latency.
    pub p50_ms: f64,
    /// 95th percentile latency.
    pub p95_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// 99.9th percentile latency.
    pub p999_ms: f64,
    /// Slowest answered query.
    pub max_ms: f64,
    /// Mean latency.
    pub mean_ms: f64,
    /// 99th percentile of how late the load generator issued queries (open loop); the
    /// latencies include it, so a large value means the generator, not the server, was
    /// behind.
    pub send_lag_p99_ms: f64,
    /// 99th percentile of how long a refusal (429) took to come back, from when the query
    /// was due; 0 without refusals.
    pub refused_p99_ms: f64,
}

/// Prints a report as pretty JSON, and writes it to `path` when given.
pub fn emit_json<T: Serialize>(report: &T, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    println!("{json}");
    if let Some(path) = path {
        std::fs::write(path, &json)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The `q`-quantile of sorted values (the nearest rank; NaN when there are none).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// The median of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(&values, 0.5)
}

/// The numeric ids of a query's hits, best first (the loadtest loads point i as id i).
pub fn answer_ids(answer: &QueryResponse) -> Vec<u32> {
    answer
        .points
        .iter()
        .filter_map(|p| match p.id {
            PointId::Num(n) => u32::try_from(n).ok(),
            PointId::Uuid(_) => None,
        })
        .collect()
}

/// Recall@k of one answer: the share of the first `k` true ids among the first `k` returned.
pub fn recall_of(ids: &[u32], truth: &[u32], k: usize) -> f64 {
    let want = &truth[..k.min(truth.len())];
    if want.is_empty() {
        return 1.0;
    }
    ids.iter().take(k).filter(|id| want.contains(id)).count() as f64 / want.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_report_percentiles_errors_and_recall() {
        let mut s = PhaseStats::default();
        for ms in 1..=100u64 {
            s.ok(Duration::from_millis(ms), 0.5);
        }
        s.error("timeout");
        s.error("timeout");
        let sum = s.summary(10.0);
        assert_eq!((sum.queries, sum.succeeded, sum.failed), (102, 100, 2));
        assert_eq!(sum.errors["timeout"], 2);
        assert!((sum.p50_ms - 50.0).abs() < 0.1, "{}", sum.p50_ms);
        assert!((sum.p99_ms - 99.0).abs() < 0.1, "{}", sum.p99_ms);
        assert!((sum.recall - 0.5).abs() < 1e-12);
        assert!((sum.throughput_qps - 10.0).abs() < 1e-9);
    }

    #[test]
    fn recall_counts_true_ids_in_the_first_k() {
        assert_eq!(recall_of(&[1, 2, 9, 4], &[1, 2, 3, 4, 5], 4), 0.75);
        assert_eq!(recall_of(&[5], &[5, 6], 1), 1.0);
    }
}
