//! Where a store's floats live: in RAM (`aligned.rs`) or in a mapped scratch file
//! (`mapped.rs`), chosen per index by a [`Placement`].

use std::path::{Path, PathBuf};

use super::aligned::AlignedFloats;
use super::mapped::MappedFloats;
use crate::Result;

/// Where an index keeps its rows (Qdrant's `on_disk` for vectors).
///
/// `Mapped` rows live in a nameless scratch file in the folder, mapped into memory: the kernel
/// pages them in when read and may page them out under memory pressure, so an index whose
/// search traverses by row codes keeps only the codes and the links resident. Index files are
/// the same either way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Placement {
    /// Rows in anonymous memory: always resident.
    #[default]
    Memory,
    /// Rows in a memory-mapped scratch file in this folder.
    Mapped(PathBuf),
}

/// A store's floats under either placement.
pub(crate) enum Floats {
    Ram(AlignedFloats),
    Mapped(MappedFloats),
}

impl Floats {
    /// An empty buffer with room for `floats` (in RAM; a mapping grows on its own).
    pub(crate) fn new(placement: &Placement, floats: usize) -> Result<Self> {
        Ok(match placement {
            Placement::Memory => Floats::Ram(AlignedFloats::on_huge_pages(floats)),
            Placement::Mapped(dir) => Floats::Mapped(MappedFloats::new(dir)?),
        })
    }

    /// Where the floats live.
    pub(crate) fn placement(&self) -> Placement {
        match self {
            Floats::Ram(_) => Placement::Memory,
            Floats::Mapped(m) => Placement::Mapped(m.dir().to_path_buf()),
        }
    }

    /// Floats in use.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Floats::Ram(f) => f.len(),
            Floats::Mapped(f) => f.len(),
        }
    }

    /// The floats in use.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[f32] {
        match self {
            Floats::Ram(f) => f.as_slice(),
            Floats::Mapped(f) => f.as_slice(),
        }
    }

    /// Makes sure `count` more floats fit: after this succeeds a [`Floats::grow`] of up to
    /// `count` cannot fail. A mapped buffer fails, changing nothing, when its file cannot
    /// grow (a full disk); RAM cannot fail here (an allocation failure aborts).
    pub(crate) fn reserve(&mut self, count: usize) -> Result<()> {
        match self {
            Floats::Ram(_) => Ok(()),
            Floats::Mapped(f) => f.reserve(count),
        }
    }

    /// Makes room for `count` more floats (zero) and returns them; a mapped buffer fails,
    /// changing nothing, when its file cannot grow (a full disk).
    pub(crate) fn grow(&mut self, count: usize) -> Result<&mut [f32]> {
        match self {
            Floats::Ram(f) => Ok(f.grow(count)),
            Floats::Mapped(f) => f.grow(count),
        }
    }

    /// Appends what an exact-size iterator yields (a file decoder's floats) with no
    /// intermediate vector.
    pub(crate) fn extend_exact(
        &mut self,
        floats: impl ExactSizeIterator<Item = f32>,
    ) -> Result<()> {
        for (to, x) in self.grow(floats.len())?.iter_mut().zip(floats) {
            *to = x;
        }
        Ok(())
    }

    /// A copy under the same placement (a mapped copy gets its own scratch file).
    pub(crate) fn try_clone(&self) -> Result<Self> {
        Ok(match self {
            Floats::Ram(f) => Floats::Ram(f.clone()),
            Floats::Mapped(f) => {
                let mut copy = MappedFloats::new(f.dir())?;
                copy.grow(f.len())?.copy_from_slice(f.as_slice());
                Floats::Mapped(copy)
            }
        })
    }

    /// Bytes of anonymous memory held: what stays resident whatever the kernel does.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Floats::Ram(f) => f.capacity_bytes(),
            Floats::Mapped(_) => 0,
        }
    }

    /// Bytes of file mapped (resident only while in the page cache).
    pub(crate) fn mapped_bytes(&self) -> usize {
        match self {
            Floats::Ram(_) => 0,
            Floats::Mapped(f) => f.mapped_bytes(),
        }
    }
}

impl Placement {
    /// The folder of a mapped placement.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Placement::Memory => None,
            Placement::Mapped(dir) => Some(dir),
        }
    }
}
