//! Distance kernels: a plain scalar loop, simsimd, and the kernels Cairn chose for this CPU
//! (`simd::kernels()`), same data, same group. Each is called through a function pointer held
//! outside the loop, as the indexes call them.
#![allow(missing_docs, clippy::unwrap_used)]

use cairn_index::distance::simd::{self, Kernel};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};

fn kernels(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let chosen = simd::kernels();
    for dim in [64usize, 128, 768] {
        let a: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let groups: [(&str, [(&str, Kernel); 3]); 2] = [
            (
                "dot",
                [
                    ("scalar", simd::scalar_dot),
                    ("simsimd", simd::simsimd_dot),
                    (chosen.name, chosen.dot),
                ],
            ),
            (
                "l2",
                [
                    ("scalar", simd::scalar_l2_squared),
                    ("simsimd", simd::simsimd_l2_squared),
                    (chosen.name, chosen.l2_squared),
                ],
            ),
        ];
        for (metric, contestants) in groups {
            let mut group = c.benchmark_group(format!("{metric}/dim{dim}"));
            group.throughput(Throughput::Elements(1));
            for (name, kernel) in contestants {
                group.bench_function(BenchmarkId::from_parameter(name), |bench| {
                    bench.iter(|| kernel(black_box(&a), black_box(&b)))
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
