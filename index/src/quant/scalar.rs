//! A 256-entry scalar codebook trained by 1-D k-means: NEQ's norm quantizer (the authors use
//! `scipy.cluster.vq.kmeans2` on the relative norms; `PAPERS.md` §3.2).

use super::additive::KS;

/// Sorted scalar centroids; a value's code is its nearest centroid.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarCodebook {
    centroids: Vec<f32>,
}

impl ScalarCodebook {
    /// Lloyd's k-means in one dimension: start from the values' quantiles, then alternate
    /// assignment (a binary search between centroid midpoints, since both are sorted) and
    /// update, for `iterations` rounds. Empty clusters keep their centroid.
    pub fn train(values: &[f32], iterations: usize) -> Self {
        let mut sorted: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_unstable_by(f32::total_cmp);
        if sorted.is_empty() {
            return Self {
                centroids: vec![0.0; KS],
            };
        }
        let n = sorted.len();
        let mut centroids: Vec<f32> = (0..KS)
            .map(|k| sorted[((2 * k + 1) * n / (2 * KS)).min(n - 1)])
            .collect();
        for _ in 0..iterations {
            let mut sums = vec![0f64; KS];
            let mut counts = vec![0usize; KS];
            let book = Self {
                centroids: centroids.clone(),
            };
            for &v in &sorted {
                let k = usize::from(book.encode(v));
                sums[k] += f64::from(v);
                counts[k] += 1;
            }
            let mut moved = false;
            for k in 0..KS {
                if counts[k] > 0 {
                    let c = (sums[k] / counts[k] as f64) as f32;
                    moved |= c != centroids[k];
                    centroids[k] = c;
                }
            }
            centroids.sort_unstable_by(f32::total_cmp);
            if !moved {
                break;
            }
        }
        Self { centroids }
    }

    /// The nearest centroid's index.
    pub fn encode(&self, v: f32) -> u8 {
        let c = &self.centroids;
        let above = c.partition_point(|&x| x < v);
        let k = if above == 0 {
            0
        } else if above == c.len() {
            c.len() - 1
        } else if v - c[above - 1] <= c[above] - v {
            above - 1
        } else {
            above
        };
        k as u8
    }

    /// The centroid of `code`.
    #[inline]
    pub fn decode(&self, code: u8) -> f32 {
        self.centroids[usize::from(code)]
    }

    pub(crate) fn write(&self, e: &mut crate::persist::codec::Encoder<'_>) {
        e.f32s(&self.centroids);
    }

    pub(crate) fn read(d: &mut crate::persist::codec::Decoder<'_>) -> crate::Result<Self> {
        let centroids = d.f32s()?;
        if centroids.len() != KS {
            return Err(crate::IndexError::corrupt(
                "scalar codebook is not 256 entries",
            ));
        }
        Ok(Self { centroids })
    }
}
