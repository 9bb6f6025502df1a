//! `sheaf wal-summarize`: the archive's segments that lack a block summary, or whose summary does
//! not follow its predecessor's, summarized in order ([`fill_in`]).

use crate::repo::Repo;
use sheaf_core::stop::Stop;
use sheaf_core::Result;

use crate::cluster::walname::{WalFile, WalKind};
use crate::repo::inventory::archived;
use crate::wal::blocksum::BlockSummary;
use crate::wal::summarize::{read_summary, summarize_and_store};

/// What [`fill_in`] did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FillReport {
    /// Segments summarized now (none before, one that did not follow its predecessor's, or one
    /// that could not be followed).
    pub made: Vec<String>,
    /// Segments whose summary was there and followed on.
    pub kept: usize,
    /// Segments whose WAL cannot be summarized (damaged, or of a format sheaf does not read).
    pub failed: Vec<String>,
}

/// `sheaf wal-summarize`: a summary for every archived segment that lacks one, whose summary
/// does not start where its predecessor's ends (made while that one was missing), or whose summary
/// says its WAL could not be followed to the end, in order.
///
/// # Errors
/// The store's errors; a segment that cannot be summarized is reported in [`FillReport::failed`];
/// [`sheaf_core::error::ErrorKind::Cancelled`] when `stop` is asked (each summary is stored whole,
/// so those made before stay).
pub fn fill_in(repo: &Repo, stop: &Stop) -> Result<FillReport> {
    crate::repo::meta::postgres_only(repo, "summarizing WAL")?;
    let mut report = FillReport::default();
    let mut segments: Vec<WalFile> = archived(repo)?.into_iter().map(|(w, _)| w).filter(|w| w.kind == WalKind::Segment).collect();
    segments.sort_by_key(|w| (w.timeline, w.segno));
    let mut prev: Option<(u32, u64, u64)> = None;
    for w in segments {
        stop.check()?;
        let follows = |s: &BlockSummary| prev.is_none_or(|(tl, segno, end)| tl != w.timeline || segno + 1 != w.segno || s.start == end);
        let summary = match read_summary(repo, &w.name)? {
            // One that says its WAL held what this reader could not follow (an earlier sheaf's
            // decoder stopped at a WAL switch split across pages) is made again.
            Some(s) if follows(&s) && s.unknown.is_empty() => {
                report.kept += 1;
                Some(s)
            }
            _ => match summarize_and_store(repo, &w.name, None) {
                Ok(s) => {
                    report.made.push(w.name.clone());
                    Some(s)
                }
                Err(e) => {
                    report.failed.push(format!("{}: {e}", w.name));
                    None
                }
            },
        };
        prev = summary.map(|s| (w.timeline, w.segno, s.end));
    }
    Ok(report)
}
