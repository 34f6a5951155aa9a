use super::*;

fn write_vecs(path: &Path, rows: &[Vec<i32>]) {
    let mut bytes = Vec::new();
    for r in rows {
        bytes.extend_from_slice(&(r.len() as i32).to_le_bytes());
        for x in r {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn reads_ivecs_and_rejects_ragged_files() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("g.ivecs");
    write_vecs(&good, &[vec![1, 2], vec![3, 4]]);
    assert_eq!(read_ivecs(&good).unwrap(), vec![vec![1, 2], vec![3, 4]]);
    let ragged = dir.path().join("r.ivecs");
    write_vecs(&ragged, &[vec![1, 2], vec![3]]);
    assert!(read_ivecs(&ragged).is_err());
    let mut truncated = std::fs::read(&good).unwrap();
    truncated.pop();
    std::fs::write(&good, truncated).unwrap();
    assert!(read_ivecs(&good).is_err());
}

#[test]
fn recall_counts_shared_ids() {
    let truth = vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]];
    let got = vec![vec![1, 9, 3], vec![8, 7, 6]];
    assert!((recall_at_k(&got, &truth, 3) - 4.0 / 6.0).abs() < 1e-12);
}

#[test]
fn generators_are_deterministic() {
    let spec = ClusterSpec {
        n: 50,
        dim: 8,
        clusters: 4,
        spread: 0.5,
        intrinsic_dim: None,
        seed: 7,
    };
    assert_eq!(clustered_gaussian(spec), clustered_gaussian(spec));
    assert_ne!(
        clustered_gaussian(spec),
        clustered_gaussian(ClusterSpec { seed: 8, ..spec })
    );
    let a = long_tailed_norms(20, 4, 1.0, 3);
    assert_eq!(a, long_tailed_norms(20, 4, 1.0, 3));
}

/// The shipped siftsmall ground truth agrees with our brute force (a check of the readers,
/// the L2 kernel and the data at once).
#[test]
fn siftsmall_ground_truth_matches_brute_force() {
    let dir = shared_data_dir().join("siftsmall");
    let data = load_dataset(&dir).expect("../shared/data/siftsmall is present beside the checkout");
    assert_eq!(
        (data.base.len(), data.base.dim, data.queries.len()),
        (10_000, 128, 100)
    );
    let ours = ground_truth(&data.base, &data.queries, Metric::L2, 10);
    assert!(recall_at_k(&ours, &data.ground_truth, 10) > 0.999);
}

#[test]
fn load_dataset_reads_bvecs_when_present() {
    let dir = tempfile::tempdir().unwrap();
    // Two 3-byte records: dim 3 as i32, then the components as u8.
    let mut bvecs = Vec::new();
    for row in [[1u8, 2, 3], [250, 0, 7]] {
        bvecs.extend_from_slice(&3i32.to_le_bytes());
        bvecs.extend_from_slice(&row);
    }
    std::fs::write(dir.path().join("base.bvecs"), &bvecs).unwrap();
    std::fs::write(dir.path().join("query.bvecs"), &bvecs[..7]).unwrap();
    write_vecs(&dir.path().join("groundtruth.ivecs"), &[vec![0, 1]]);
    let d = load_dataset(dir.path()).unwrap();
    assert_eq!(d.base.dim, 3);
    assert_eq!(d.base.data, vec![1.0, 2.0, 3.0, 250.0, 0.0, 7.0]);
    assert_eq!(d.queries.len(), 1);
    assert_eq!(d.ground_truth, vec![vec![0, 1]]);
}

/// The norm-bias knob: σ moves the statistic from norms that hardly matter to norms that
/// decide every answer, and the bisection lands near the target it is given.
#[test]
fn long_tailed_sets_are_made_for_a_norm_bias() {
    let queries = long_tailed_norms(60, 16, 0.0, 2);
    let bias_at = |sigma: f32| {
        let base = long_tailed_norms(4_000, 16, sigma, 1);
        norm_bias(
            &base,
            &ground_truth(&base, &queries, Metric::InnerProduct, 10),
        )
    };
    let (flat, steep) = (bias_at(0.01), bias_at(1.5));
    assert!(flat < 0.3, "σ 0.01: bias {flat}");
    assert!(steep > 0.95, "σ 1.5: bias {steep}");
    for target in [0.6, 0.8] {
        let set = long_tailed_with_bias(4_000, 16, 1, &queries, target);
        assert!(
            (set.bias - target).abs() < 0.05,
            "target {target}: σ {} gave {}",
            set.sigma,
            set.bias
        );
        assert_eq!(set.base, long_tailed_norms(4_000, 16, set.sigma, 1));
    }
}
