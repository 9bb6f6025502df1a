//! What the readers hand on and the file operations they share: a chunk on its way to the
//! compressors ([`Job`], packed ones with their [`Member`]s), a file to read ([`Work`]) and what
//! reading it came to ([`ReadOutcome`]); opening a listed file, judging what happened to it while
//! read, and reading it in full.

use std::path::PathBuf;
use std::sync::Arc;

use super::check::CheckCtx;
use super::delta::FileChanges;
use crate::error::{Error, ErrorKind, Result};
use crate::pipeline::PoolBuf;
pub(super) use crate::source::read_full_at;
use crate::source::{FileStat, Files, SourceFile};

/// A chunk on its way to the compressors.
pub(super) struct Job {
    pub(super) file_id: u32,
    pub(super) offset: u64,
    pub(super) len: usize,
    /// The chunk's bytes; none for a hole of a sparse file (`len` zeros, never read).
    pub(super) buf: Option<PoolBuf>,
    pub(super) check: Option<Arc<CheckCtx>>,
    /// A packed chunk: the files whose bytes lie back to back in `buf` (empty otherwise).
    pub(super) members: Vec<Member>,
    /// A chunk the source's host compressed already: how `buf` holds it.
    pub(super) stored: Option<Stored>,
}

/// A chunk compressed on the source's host (the agent's `--compress-on agent`): `buf`'s first
/// `len` bytes are `codec`'s output (`none`: the raw bytes) for the job's `len` raw bytes.
#[derive(Clone, Copy)]
pub(super) struct Stored {
    pub(super) codec: crate::codec::CodecKind,
    pub(super) len: usize,
    /// crc32c of the raw bytes, as the host computed it.
    pub(super) raw_crc: u32,
}

/// One small file in a packed chunk.
pub(super) struct Member {
    pub(super) file_id: u32,
    /// Where its bytes belong in the file: 0 for a whole small file, the offset of a run of
    /// changed pages in an incremental.
    pub(super) offset: u64,
    /// Where its bytes start in the chunk.
    pub(super) at: u32,
    pub(super) len: u32,
    pub(super) check: Option<Arc<CheckCtx>>,
}

/// A file to read.
pub(super) struct Work {
    pub(super) file_id: u32,
    pub(super) path: PathBuf,
    /// Root and device: the unit that gets its own reader by default.
    pub(super) dev: (u16, u64),
    pub(super) size: u64,
    pub(super) check: Option<Arc<CheckCtx>>,
    /// In an incremental, what of the file to read when not all of it ([`FileChanges::Whole`]
    /// never appears here: such a file is read as in a full backup).
    pub(super) changes: Option<FileChanges>,
    /// The entry's path in its root, for a file read by a scan ([`FileChanges::Scan`]): its
    /// filter is asked for again from it when the work waits on disk ([`super::park`]).
    pub(super) rel: Option<String>,
}

#[derive(Default)]
pub(super) struct ReadOutcome {
    pub(super) file_id: u32,
    pub(super) size: u64,
    pub(super) vanished: bool,
    /// It changed (size or mtime) or shrank while read.
    pub(super) changed: bool,
    pub(super) warning: Option<String>,
}

/// A source file open, with its stat at open.
pub(super) type Opened = (Box<dyn SourceFile>, FileStat);

/// Open a listed file for reading and stat it, or say what happened to it instead.
pub(super) fn open_source(w: &Work, files: &dyn Files) -> Result<std::result::Result<Opened, ReadOutcome>> {
    let (file_id, path) = (w.file_id, w.path.as_path());
    let mut file = match files.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(Err(ReadOutcome {
                file_id,
                vanished: true,
                warning: Some(format!("{} vanished before it was read; it is not in the backup", path.display())),
                ..Default::default()
            }))
        }
        Err(e) => return Err(e),
    };
    let before = file.stat()?;
    if !before.is_file {
        return Err(Error::new(ErrorKind::Source, format!("{} is no longer a regular file (it changed while the backup ran)", path.display())));
    }
    Ok(Ok((file, before)))
}

/// What reading a file came to, from its stat at open and the bytes read: changed (size or mtime)
/// or shrank while read, with a warning saying so.
pub(super) fn outcome(w: &Work, file: &mut dyn SourceFile, before: &FileStat, read: u64, shrank: bool) -> Result<ReadOutcome> {
    let after = file.stat()?;
    let changed = after.len != before.len || after.mtime != before.mtime || after.mtime_nsec != before.mtime_nsec;
    let warning =
        (changed || shrank).then(|| format!("{} changed while being read (size {} at open, {} after; {} bytes backed up)", w.path.display(), before.len, after.len, read));
    Ok(ReadOutcome { file_id: w.file_id, size: read, vanished: false, changed: changed || shrank, warning })
}
