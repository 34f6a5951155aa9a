//! Rows in a mapped file ([`Placement::Mapped`]) through every index kind that can keep them
//! there: the same answers as rows in RAM, the RAM they no longer count, growth while
//! searches run, and the kinds that refuse.

use crate::dataset::{load_dataset, shared_data_dir, Dataset};
use crate::hnsw::HnswParams;
use crate::ipnsw::IpNswPlusParams;
use crate::lsh::LshParams;
use crate::norm_scan::NormScanParams;
use crate::{
    new_in_memory, new_index, read_index, IndexParams, Metric, Placement, RowCodes, SearchParams,
    Trainers, VectorIndex,
};

fn answers(index: &dyn VectorIndex, data: &Dataset) -> Vec<Vec<(u32, u32)>> {
    data.queries
        .rows()
        .map(|q| {
            let (hits, _) = index.search(q, 10, &SearchParams::default(), None).unwrap();
            hits.iter().map(|n| (n.slot, n.key.to_bits())).collect()
        })
        .collect()
}

/// An index read from the same bytes answers bit for bit alike with its rows in RAM or
/// mapped, for every kind that maps them, with and without row codes; the mapped copy's RAM
/// is smaller by at least the rows' bytes, and its scratch file has no name in the folder.
#[test]
fn mapped_rows_answer_bit_for_bit_as_rows_in_memory() {
    let hnsw = IndexParams::Hnsw(HnswParams::default());
    let int8 = Some(RowCodes::Int8 {
        quantile: RowCodes::DEFAULT_QUANTILE,
    });
    let cases = [
        ("siftsmall", Metric::L2, IndexParams::Flat, None),
        ("siftsmall", Metric::L2, hnsw, None),
        ("siftsmall", Metric::L2, hnsw, int8),
        ("siftsmall", Metric::L2, hnsw, Some(RowCodes::Rabitq)),
        (
            "glove50-5k-angular",
            Metric::Cosine,
            hnsw,
            Some(RowCodes::Binary),
        ),
        (
            "movielens-mips",
            Metric::InnerProduct,
            IndexParams::IpNsw(HnswParams::default()),
            None,
        ),
        (
            "movielens-mips",
            Metric::InnerProduct,
            IndexParams::IpNswPlus(IpNswPlusParams::default()),
            int8,
        ),
        (
            "glove50-5k-angular",
            Metric::InnerProduct,
            IndexParams::MipsAuto(IpNswPlusParams::default()),
            int8,
        ),
        (
            "movielens-mips",
            Metric::InnerProduct,
            IndexParams::NormScan(NormScanParams::default()),
            None,
        ),
    ];
    for (set, metric, params, codes) in cases {
        let data = load_dataset(&shared_data_dir().join(set)).unwrap();
        let built = new_in_memory(&params, metric, data.base.dim).unwrap();
        built.add(&data.base.data).unwrap();
        if matches!(params, IndexParams::MipsAuto(_)) {
            // Codes make `mips_auto`'s norm scan grow into a graph, built in parallel and so
            // not bit for bit alike twice: it is grown here, and the file holds it.
            built.set_codes(codes).unwrap();
        }
        let mut bytes = Vec::new();
        built.write_to(&mut bytes);
        let folder = tempfile::tempdir().unwrap();
        let mapped = Placement::Mapped(folder.path().to_path_buf());
        let read = |placement: &Placement| {
            let index = read_index(params.kind(), &bytes, &Trainers::default(), placement).unwrap();
            index.set_codes(codes).unwrap();
            index
        };
        let (in_ram, on_disk) = (read(&Placement::Memory), read(&mapped));
        assert_eq!(on_disk.store().placement(), mapped);
        let what = format!("{set} {:?} {codes:?}", params.kind());
        assert_eq!(
            answers(&*in_ram, &data),
            answers(&*on_disk, &data),
            "{what}"
        );
        let rows = data.base.data.len() * 4;
        assert!(
            on_disk.memory_bytes() + rows <= in_ram.memory_bytes(),
            "{what}: {} mapped against {} in RAM",
            on_disk.memory_bytes(),
            in_ram.memory_bytes()
        );
        assert!(on_disk.store().mapped_bytes() >= rows, "{what}");
        assert_eq!(
            std::fs::read_dir(folder.path()).unwrap().count(),
            0,
            "{what}"
        );
    }
}

/// A mapped graph grows batch by batch past several remaps while other threads search it, and
/// every row reads back as written; a missing folder is an error naming it.
#[test]
fn mapped_rows_grow_while_searched() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let dim = data.base.dim;
    let folder = tempfile::tempdir().unwrap();
    let index = new_index(
        &IndexParams::Hnsw(HnswParams::default()),
        Metric::L2,
        dim,
        &Trainers::default(),
        &Placement::Mapped(folder.path().to_path_buf()),
    )
    .unwrap();
    let batches: Vec<&[f32]> = data.base.data.chunks(1_000 * dim).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for batch in &batches {
                index.add(batch).unwrap();
            }
        });
        s.spawn(|| {
            while index.len() < data.base.len() {
                for q in data.queries.rows().take(10) {
                    index.search(q, 10, &SearchParams::default(), None).unwrap();
                }
            }
        });
    });
    for (slot, row) in data.base.rows().enumerate() {
        assert_eq!(index.vector(slot as u32).unwrap(), row, "slot {slot}");
    }
    let (hits, _) = index
        .search(data.base.row(4_321), 1, &SearchParams::default(), None)
        .unwrap();
    assert_eq!(hits[0].slot, 4_321);

    let err = new_index(
        &IndexParams::Flat,
        Metric::L2,
        dim,
        &Trainers::default(),
        &Placement::Mapped("/nonexistent/cairn".into()),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("/nonexistent/cairn"), "{err}");
}

/// An empty index with its rows on disk writes, reads back and takes rows (a named vector no
/// point has used yet is one, in every snapshot).
#[test]
fn an_empty_mapped_index_round_trips() {
    let folder = tempfile::tempdir().unwrap();
    let mapped = Placement::Mapped(folder.path().to_path_buf());
    for (params, metric) in [
        (IndexParams::Flat, Metric::L2),
        (IndexParams::Hnsw(HnswParams::default()), Metric::L2),
        (
            IndexParams::IpNswPlus(IpNswPlusParams::default()),
            Metric::InnerProduct,
        ),
        (
            IndexParams::MipsAuto(IpNswPlusParams::default()),
            Metric::InnerProduct,
        ),
        (
            IndexParams::NormScan(NormScanParams::default()),
            Metric::InnerProduct,
        ),
    ] {
        let empty = new_index(&params, metric, 4, &Trainers::default(), &mapped).unwrap();
        empty.add(&[]).unwrap();
        let mut bytes = Vec::new();
        empty.write_to(&mut bytes);
        let back = read_index(params.kind(), &bytes, &Trainers::default(), &mapped).unwrap();
        assert!(back.is_empty());
        assert_eq!(back.add(&[1.0, 2.0, 3.0, 4.0]).unwrap(), 0);
        assert_eq!(back.vector(0).unwrap(), [1.0, 2.0, 3.0, 4.0]);
    }
}

/// The LSH and quantized kinds keep their rows in memory and say so.
#[test]
fn kinds_that_keep_rows_in_memory_refuse_a_mapping() {
    let folder = tempfile::tempdir().unwrap();
    let mapped = Placement::Mapped(folder.path().to_path_buf());
    let lsh = IndexParams::SimpleLsh(LshParams {
        ranges: 1,
        ..LshParams::default()
    });
    let err = new_index(&lsh, Metric::InnerProduct, 8, &Trainers::default(), &mapped)
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("simple_lsh keeps its vectors in memory"),
        "{err}"
    );
    assert!(new_in_memory(&lsh, Metric::InnerProduct, 8).is_ok());
}
