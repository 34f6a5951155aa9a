//! Distance kernels: simsimd against a plain scalar loop, same data, same group.
#![allow(missing_docs, clippy::unwrap_used)]

use cairn_index::distance::simd;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};

fn kernels(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for dim in [64usize, 128, 768] {
        let a: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut group = c.benchmark_group(format!("dot/dim{dim}"));
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::from_parameter("scalar"), |bench| {
            bench.iter(|| simd::scalar_dot(black_box(&a), black_box(&b)))
        });
        group.bench_function(BenchmarkId::from_parameter("simsimd"), |bench| {
            bench.iter(|| simd::dot(black_box(&a), black_box(&b)))
        });
        group.finish();
        let mut group = c.benchmark_group(format!("l2/dim{dim}"));
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::from_parameter("scalar"), |bench| {
            bench.iter(|| simd::scalar_l2_squared(black_box(&a), black_box(&b)))
        });
        group.bench_function(BenchmarkId::from_parameter("simsimd"), |bench| {
            bench.iter(|| simd::l2_squared(black_box(&a), black_box(&b)))
        });
        group.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
