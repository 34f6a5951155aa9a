//! HNSW serialisation. The layout is plain arrays in slot order; the file around it (magic,
//! version, checksum, atomic rename) is [`crate::persist`]'s job.
//!
//! Layout (format version 1): params (m, ef_construction, ef_search, seed), metric tag, dim,
//! entry point, vectors, levels, layer-0 words, then the upper-layer words of every node with
//! level > 0 in slot order (their sizes follow from the levels).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{Graph, Hnsw, HnswParams};
use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{Placement, VectorStore};
use crate::{IndexError, Result};

pub(super) fn write(index: &Hnsw, out: &mut dyn Sink) {
    // Hold the add lock so no batch is half-linked in the snapshot.
    let _no_adds = index.add_lock.lock();
    let graph = index.graph.read();
    let mut e = Encoder::new(out);
    let p = index.params;
    e.u64(p.m as u64);
    e.u64(p.ef_construction as u64);
    e.u64(p.ef_search as u64);
    e.u64(p.seed);
    e.u8(graph.store.metric().tag());
    e.u64(graph.store.dim() as u64);
    e.u64(graph.entry.load(Ordering::Acquire));
    graph.store.write(&mut e);
    e.bytes(&graph.levels);
    e.u32s(graph.links0.iter().map(|w| w.load(Ordering::Relaxed)));
    let upper_words = graph.upper.iter().map(|u| u.len()).sum::<usize>();
    e.u32s(ExactIter {
        inner: graph
            .upper
            .iter()
            .flat_map(|u| u.iter().map(|w| w.load(Ordering::Relaxed))),
        len: upper_words,
    });
}

/// An iterator with a known length, so the encoder can write the length prefix first.
struct ExactIter<I> {
    inner: I,
    len: usize,
}

impl<I: Iterator<Item = u32>> Iterator for ExactIter<I> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let item = self.inner.next();
        if item.is_some() {
            self.len -= 1;
        }
        item
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len, Some(self.len))
    }
}

impl<I: Iterator<Item = u32>> ExactSizeIterator for ExactIter<I> {}

impl Hnsw {
    /// Reads what [`crate::VectorIndex::write_to`] wrote, validating every array size and link.
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        Self::read_placed(bytes, &Placement::Memory)
    }

    /// [`Hnsw::read_from`] with the rows placed by `placement`.
    pub fn read_placed(bytes: &[u8], placement: &Placement) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let params = HnswParams {
            m: d.usize()?,
            ef_construction: d.usize()?,
            ef_search: d.usize()?,
            seed: d.u64()?,
        };
        params
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        let metric =
            Metric::from_tag(d.u8()?).ok_or_else(|| IndexError::corrupt("unknown metric"))?;
        let dim = d.usize()?;
        let entry = d.u64()?;
        let store = VectorStore::read(&mut d, metric, dim, placement)?;
        let levels = d.bytes()?.to_vec();
        let links0 = d.u32s_map(AtomicU32::new)?;
        let upper_flat = d.u32s_map(AtomicU32::new)?;
        d.finish()?;

        let mut graph = Graph::new(store, params.m);
        let n = levels.len();
        if graph.store.len() != n || links0.len() != n * (1 + graph.m0) {
            return Err(IndexError::corrupt(
                "array sizes do not match the node count",
            ));
        }
        let mut upper = Vec::with_capacity(n);
        let mut rest = upper_flat.into_iter();
        for &level in &levels {
            let words = level as usize * (1 + params.m);
            let list: Box<[AtomicU32]> = rest.by_ref().take(words).collect();
            if list.len() != words {
                return Err(IndexError::corrupt("upper-layer lists are truncated"));
            }
            upper.push(list);
        }
        if rest.next().is_some() {
            return Err(IndexError::corrupt("upper-layer lists are too long"));
        }
        graph.levels = levels;
        graph.links0 = links0;
        graph.upper = upper;
        graph.locks = (0..n).map(|_| Mutex::new(())).collect();
        graph.relinked = (0..n).map(|_| AtomicBool::new(true)).collect();
        graph.entry = AtomicU64::new(entry);
        validate_links(&graph)?;
        Ok(Hnsw::from_graph(params, graph))
    }
}

/// Every count within capacity, every link a real slot, the entry point real: a file that
/// passes cannot send a search out of bounds.
fn validate_links(graph: &Graph) -> Result<()> {
    validate_entry(graph)?;
    validate_lists(graph)
}

fn validate_entry(graph: &Graph) -> Result<()> {
    let n = graph.len();
    if let Some((slot, level)) = graph.entry() {
        if slot as usize >= n || level != graph.levels[slot as usize] as usize {
            return Err(IndexError::corrupt(
                "entry point is not a node at its level",
            ));
        }
    } else if n > 0 {
        return Err(IndexError::corrupt(
            "non-empty graph without an entry point",
        ));
    }
    Ok(())
}

/// Every count within capacity and every link a real slot (graphs without an entry point,
/// such as ip-NSW+'s single-layer inner-product graph, check only this).
pub(crate) fn validate_lists(graph: &Graph) -> Result<()> {
    let n = graph.len();
    for slot in 0..n as u32 {
        for layer in 0..=graph.levels[slot as usize] as usize {
            let list = graph.list(slot, layer);
            let count = list[0].load(Ordering::Relaxed) as usize;
            if count >= list.len() {
                return Err(IndexError::corrupt(format!(
                    "list of slot {slot} overflows"
                )));
            }
            if list[1..=count]
                .iter()
                .any(|w| w.load(Ordering::Relaxed) as usize >= n)
            {
                return Err(IndexError::corrupt(format!(
                    "slot {slot} links outside the graph"
                )));
            }
        }
    }
    Ok(())
}
