//! Incremental and differential sets on the read side: which bytes of each file a set holds
//! ([`Changes`], from the source). The reader that reads only those is `pack`'s.
//!
//! A file held in part gets a [`crate::manifest::Delta`] in the manifest; its chunks are runs of
//! changed units at their offsets (packed frames whose members carry an offset), and restore takes
//! every other byte from the parent down the chain.

use std::ops::Range;
use std::sync::Arc;

use crate::manifest::BackupType;

/// Where an incremental or differential set stands: its type and the sets it builds on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lineage {
    /// `diff` or `incr`.
    pub backup_type: BackupType,
    /// Backup ids (hex) of the sets it builds on: its full first, its parent last.
    pub chain: Vec<String>,
}

/// Decides, for an incremental, whether a unit (a database page) of a file changed since the
/// parent; see [`FileChanges::Scan`].
pub trait UnitFilter: Send + Sync {
    /// The unit's size in bytes (PostgreSQL's 8 KiB page).
    fn unit(&self) -> usize;
    /// Whether unit `n` of the file, whose bytes are `data` (a whole unit, or a short tail where
    /// the file ends mid-unit), changed since the parent. When unsure, say changed.
    fn changed(&self, n: u64, data: &[u8]) -> bool;
}

/// What an incremental set holds of one file.
#[derive(Clone)]
pub enum FileChanges {
    /// Every byte: a new file, or one whose changes are not tracked (stored as in a full set).
    Whole,
    /// Read every unit, keep those the filter calls changed (PostgreSQL's page scan by LSN).
    Scan(Arc<dyn UnitFilter>),
    /// Only these byte ranges, sorted and disjoint (from WAL block summaries); none: the file is
    /// unchanged and the set only names it. Ranges past the file's end at read time are cut.
    Ranges(Vec<Range<u64>>),
}

impl std::fmt::Debug for FileChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileChanges::Whole => f.write_str("Whole"),
            FileChanges::Scan(x) => write!(f, "Scan({} B units)", x.unit()),
            FileChanges::Ranges(r) => write!(f, "Ranges({} ranges)", r.len()),
        }
    }
}

/// The source's answer, per file, to "what does this incremental hold of it".
pub trait Changes: Send + Sync {
    /// For the file at `rel` under the root named `root`, `size` bytes when listed.
    fn of(&self, root: &str, rel: &str, size: u64) -> FileChanges;
}
