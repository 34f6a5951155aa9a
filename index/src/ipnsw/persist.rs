//! ip-NSW+ serialisation: the parameters, the angular HNSW's own payload (length-prefixed,
//! see [`crate::hnsw`]), then the inner-product graph's vectors and lists.

use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::{IpNswPlus, IpNswPlusParams};
use crate::distance::Metric;
use crate::hnsw::{validate_lists, Graph, Hnsw};
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{Placement, VectorStore};
use crate::{IndexError, Result, VectorIndex};

/// Writes the parameters (also the head of a [`crate::mips_auto`] file).
pub(crate) fn write_params(p: &IpNswPlusParams, e: &mut Encoder<'_>) {
    for v in [p.m, p.ef_construction, p.ef_search, p.cos_m]
        .into_iter()
        .chain([p.cos_ef_construction, p.cos_ef_search])
    {
        e.u64(v as u64);
    }
    e.u64(p.seed);
}

/// Reads and validates what [`write_params`] wrote.
pub(crate) fn read_params(d: &mut Decoder<'_>) -> Result<IpNswPlusParams> {
    let params = IpNswPlusParams {
        m: d.usize()?,
        ef_construction: d.usize()?,
        ef_search: d.usize()?,
        cos_m: d.usize()?,
        cos_ef_construction: d.usize()?,
        cos_ef_search: d.usize()?,
        seed: d.u64()?,
    };
    params
        .validate()
        .map_err(|e| IndexError::corrupt(e.to_string()))?;
    Ok(params)
}

/// Writes the index; the caller holds the add lock so no batch is half-linked.
pub(super) fn write(index: &IpNswPlus, out: &mut dyn Sink) {
    let ip = index.ip.read();
    let mut e = Encoder::new(out);
    write_params(&index.params, &mut e);
    e.nested(|out| index.angular.write_to(out));
    e.u64(ip.store.dim() as u64);
    ip.store.write(&mut e);
    e.u32s(ip.links0.iter().map(|w| w.load(Ordering::Relaxed)));
}

impl IpNswPlus {
    /// Reads what [`VectorIndex::write_to`] wrote, validating both graphs and that they agree.
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        Self::read_placed(bytes, &Placement::Memory)
    }

    /// [`IpNswPlus::read_from`] with the rows (both graphs') placed by `placement`.
    pub fn read_placed(bytes: &[u8], placement: &Placement) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let params = read_params(&mut d)?;
        let angular = Hnsw::read_placed(d.bytes()?, placement)?;
        let dim = d.usize()?;
        let store = VectorStore::read(&mut d, Metric::InnerProduct, dim, placement)?;
        let links0 = d.u32s_map(std::sync::atomic::AtomicU32::new)?;
        d.finish()?;

        let n = angular.len();
        if angular.metric() != Metric::Cosine
            || *angular.params() != params.angular()
            || angular.dim() != dim
        {
            return Err(IndexError::corrupt(
                "angular graph does not match the index parameters",
            ));
        }
        let mut ip = Graph::new(store, params.m);
        if ip.store.len() != n || links0.len() != n * (1 + ip.m0) {
            return Err(IndexError::corrupt(
                "inner-product graph sizes do not match the node count",
            ));
        }
        ip.links0 = links0;
        ip.levels = vec![0; n];
        ip.locks = (0..n).map(|_| Mutex::new(())).collect();
        ip.relinked = (0..n)
            .map(|_| std::sync::atomic::AtomicBool::new(true))
            .collect();
        validate_lists(&ip)?;
        Ok(Self::from_parts(params, angular, ip))
    }
}
