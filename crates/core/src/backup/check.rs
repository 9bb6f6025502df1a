//! The hook a source plugs into the compressors: [`ChunkCheck`] looks at the chunks of the files
//! it chooses while they are in memory anyway (PostgreSQL's page checksums), on every compressor
//! thread, and its findings are kept, bounded, for [`super::Backup::finish_with`] to judge.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::pipeline::Shared;
use crate::source::Listed;

/// Most check findings recorded in one backup.
pub const MAX_FINDINGS: usize = 1000;

/// Checks the chunks of chosen files while they pass through the compressors, in parallel and on
/// bytes already in memory (PostgreSQL's page checksums). Findings go to
/// [`Backup::finish_with`], which decides what they mean.
pub trait ChunkCheck: Send + Sync {
    /// Whether the file at `rel` under root `root` is to be checked.
    fn wants(&self, root: u16, rel: &str) -> bool;
    /// Check the chunk at `offset` of that file; return findings, empty when all is well.
    fn check(&self, root: u16, rel: &str, abs: &Path, offset: u64, data: &[u8]) -> Vec<String>;
    /// As [`ChunkCheck::check`], and mend what can be mended in `data` before it is stored: a
    /// page torn by a write in progress read again from the file (InnoDB, whose redo log cannot
    /// repair a torn page as PostgreSQL's full-page writes do). Chunks a source's host compressed
    /// are only checked.
    fn mend(&self, root: u16, rel: &str, abs: &Path, offset: u64, data: &mut [u8]) -> Vec<String> {
        self.check(root, rel, abs, offset, data)
    }
}

/// What [`Backup::read_listed`] reads: entries for a root, and the check their chunks get, if any.
pub type Batch = (u16, Vec<Listed>, Option<Arc<dyn ChunkCheck>>);

/// The file a checked chunk belongs to.
pub(super) struct CheckCtx {
    pub(super) check: Arc<dyn ChunkCheck>,
    pub(super) root: u16,
    pub(super) rel: String,
    pub(super) abs: PathBuf,
    /// A resumable backup's record of files with findings, and this file's root's name.
    pub(super) suspects: Option<(Arc<super::resume::Suspects>, String)>,
}

pub(super) fn run_check(c: &CheckCtx, offset: u64, raw: &[u8], shared: &Shared) {
    keep_findings(c, c.check.check(c.root, &c.rel, &c.abs, offset, raw), shared);
}

/// [`run_check`], on bytes the check may mend ([`ChunkCheck::mend`]).
pub(super) fn run_mend(c: &CheckCtx, offset: u64, raw: &mut [u8], shared: &Shared) {
    keep_findings(c, c.check.mend(c.root, &c.rel, &c.abs, offset, raw), shared);
}

fn keep_findings(c: &CheckCtx, findings: Vec<String>, shared: &Shared) {
    if findings.is_empty() {
        return;
    }
    // Recorded before the chunk is written: a later attempt never takes this file as it is.
    if let Some((s, root)) = &c.suspects {
        if let Err(e) = s.record(root, &c.rel) {
            shared.fail(e);
        }
    }
    let mut all = shared.findings.lock().unwrap_or_else(|p| p.into_inner());
    for f in findings {
        // Keep the record bounded; the count past the cap is still reported.
        if all.len() < MAX_FINDINGS {
            all.push(f);
        } else if all.len() == MAX_FINDINGS {
            all.push("... and more findings past the first 1000".into());
        }
    }
}
