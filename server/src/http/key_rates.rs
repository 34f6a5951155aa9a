//! Per-key rate limits (`http.rate_limit_per_key`): each API key, and each scoped token, gets
//! a token bucket of that many requests per second, holding one second's worth, so a client
//! may burst up to the rate and then goes at it. One more request is refused with a 429 and
//! `Retry-After` before any work, as back-pressure refuses ([`super::admission`]); a noisy
//! client then cannot take the whole node from the others. Checked after the key is
//! (`auth.rs`), so an unknown key costs no bucket.
//!
//! Buckets are found by a keyed hash of the credential (SipHash with a random key per
//! process), so the table holds no secret. Tokens are minted by whoever holds the read-write
//! key and each is a bucket of its own; the table keeps at most [`MAX_BUCKETS`], dropping full
//! (idle) ones first when it grows past that.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::time::Instant;

use parking_lot::Mutex;

/// Buckets kept at most.
const MAX_BUCKETS: usize = 10_000;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets (module docs).
pub struct KeyRates {
    per_second: f64,
    hasher: RandomState,
    buckets: Mutex<HashMap<u64, Bucket>>,
}

impl KeyRates {
    /// `per_second` requests per key; `None` for 0 (no limit).
    pub fn new(per_second: f64) -> Option<Self> {
        (per_second > 0.0).then(|| Self {
            per_second,
            hasher: RandomState::new(),
            buckets: Mutex::default(),
        })
    }

    /// Takes one request from `credential`'s bucket; `false` when it is empty.
    pub fn admit(&self, credential: &[u8]) -> bool {
        self.admit_at(credential, Instant::now())
    }

    fn admit_at(&self, credential: &[u8], now: Instant) -> bool {
        let burst = self.per_second.max(1.0);
        let id = self.hasher.hash_one(credential);
        let mut buckets = self.buckets.lock();
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&id) {
            let per_second = self.per_second;
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.at).as_secs_f64() * per_second < burst
            });
        }
        let bucket = buckets.entry(id).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_key_may_burst_one_second_then_goes_at_the_rate() {
        let rates = KeyRates::new(5.0).unwrap();
        let start = Instant::now();
        let admitted = (0..20).filter(|_| rates.admit_at(b"key-a", start)).count();
        assert_eq!(admitted, 5);
        // Another key has its own bucket.
        assert!(rates.admit_at(b"key-b", start));
        // A fifth of a second later, one more.
        let later = start + Duration::from_millis(200);
        assert!(rates.admit_at(b"key-a", later));
        assert!(!rates.admit_at(b"key-a", later));
        assert!(KeyRates::new(0.0).is_none());
    }
}
