//! Block summaries of archived WAL: `wal-push` makes one for each segment it archives (and `sheaf
//! wal-summarize` for segments that lack one), stored beside the segment as `NAME.sum`; an
//! incremental backup merges them from its parent's start to its own.
//!
//! A segment's summary holds the records that end in it. Its span starts where the previous
//! segment's summary ended (at the record that was still incomplete there, read back from the
//! repository), so consecutive summaries follow each other exactly: a gap (a segment never
//! summarized, WAL dropped by `--queue-max`, WAL that ends early) shows as one summary not starting
//! where the last one ended, and the incremental then reads every page instead.

use std::path::Path;

use crate::repo::Repo;
use sheaf_core::{CodecSpec, Error, ErrorKind, Result};

use crate::cluster::walname::{segment_name, WalFile, WalKind};
use crate::repo::paths;
use crate::wal::blocksum::BlockSummary;
use crate::wal::read::{Decoder, PAGE};

/// The summary stored for segment `name`, if there is one.
///
/// # Errors
/// A summary that is there but damaged; the store's errors.
pub fn read_summary(repo: &Repo, name: &str) -> Result<Option<BlockSummary>> {
    let bytes = match repo.get_bytes(&paths::summary_object(name)) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::Incomplete => return Ok(None),
        Err(e) => return Err(e),
    };
    BlockSummary::from_bytes(&bytes).map(Some).map_err(|e| e.context(format!("WAL summary of {name}")))
}

/// Store `summary` as segment `name`'s (replacing one there: a summary is made again the same way).
///
/// # Errors
/// The store's errors.
pub fn write_summary(repo: &Repo, name: &str, summary: &BlockSummary) -> Result<()> {
    let bytes = summary.to_bytes();
    let object = paths::summary_object(name);
    // Another process may be writing the same summary (wal-summarize beside the archiver's
    // wal-push, or two look-aheads): it is the same bytes, made from the same segment. Wait for
    // it a little; once it is there, this one is done.
    const OTHER_WRITER: sheaf_core::retry::Backoff = sheaf_core::retry::Backoff::new(8, std::time::Duration::from_millis(20), std::time::Duration::from_secs(1));
    OTHER_WRITER.run(|n| {
        if n > 0 && repo.exists(&object)? {
            return Ok(());
        }
        repo.put(&object, &mut bytes.as_slice(), CodecSpec::default(), true, &format!("summary of {name}")).map(|_| ())
    })
}

/// Pages of WAL fed in order to a decoder, and its records to a summary.
struct Summarizer {
    seg_size: u64,
    decoder: Decoder,
    summary: BlockSummary,
    /// Bytes of a page not yet whole (objects come in chunks of any length).
    page: Vec<u8>,
    /// Where the next page starts.
    lsn: u64,
}

impl Summarizer {
    fn bytes(&mut self, mut b: &[u8], from: u64) -> Result<()> {
        while !b.is_empty() {
            // Whole pages straight from what was read; only a page split between two reads is
            // put together, in a buffer kept from page to page.
            if self.page.is_empty() && b.len() >= PAGE {
                let (page, rest) = b.split_at(PAGE);
                self.page_done(page, from)?;
                b = rest;
                continue;
            }
            let take = (PAGE - self.page.len()).min(b.len());
            self.page.extend_from_slice(&b[..take]);
            b = &b[take..];
            if self.page.len() == PAGE {
                let mut page = std::mem::take(&mut self.page);
                let fed = self.page_done(&page, from);
                page.clear();
                self.page = page;
                fed?;
            }
        }
        Ok(())
    }

    /// A whole page: fed when it is at or past `from`, and the position moved past it.
    fn page_done(&mut self, page: &[u8], from: u64) -> Result<()> {
        if self.lsn >= from {
            self.feed(self.lsn, page)?;
        }
        self.lsn += PAGE as u64;
        Ok(())
    }

    fn feed(&mut self, lsn: u64, page: &[u8]) -> Result<()> {
        let summary = &mut self.summary;
        self.decoder.feed(lsn, page, &mut |r| {
            summary.add(r, r.version);
            Ok(())
        })
    }

    /// Feed segment `segno` of `timeline` from `from` on: its local file when given, else its
    /// archived object.
    fn segment(&mut self, repo: &Repo, timeline: u32, segno: u64, local: Option<&Path>, from: u64) -> Result<()> {
        self.lsn = segno * self.seg_size;
        self.page.clear();
        let name = segment_name(timeline, segno, self.seg_size);
        match local {
            Some(path) => {
                use std::io::Read;
                let mut f = std::fs::File::open(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?;
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = f.read(&mut buf).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?;
                    if n == 0 {
                        break;
                    }
                    self.bytes(&buf[..n], from)?;
                }
            }
            None => {
                let src = repo.open(&paths::wal_object(&name))?;
                let mut fed: Result<()> = Ok(());
                sheaf_core::blob::read_blob(src.as_ref(), repo.keys(), &mut |b| {
                    if fed.is_ok() {
                        fed = self.bytes(b, from);
                    }
                    Ok(())
                })?;
                fed?;
            }
        }
        Ok(())
    }
}

/// Summarize segment `name`, read from `local` (the file just archived, or one still being
/// written in pg_wal) or from the repository: from where the previous segment's summary ended
/// (its unfinished record read back from the repository), through the last record that ends in
/// this segment. A `complete` segment (archived) must hold WAL to its end.
///
/// # Errors
/// A name that is not a segment, WAL of another cluster or of a version sheaf does not read, and
/// the store's errors. WAL that ends early is not an error: the summary ends there, and a complete
/// segment's says so (which makes it unusable).
pub fn summarize(repo: &Repo, name: &str, local: Option<&Path>, complete: bool) -> Result<BlockSummary> {
    summarize_from(repo, name, local, complete, None, &|_| Ok(None))
}

/// [`summarize`], starting from `after` when given (the timeline and end of the summary of the WAL
/// before this segment, as the caller merged it) instead of from the previous segment's stored
/// summary: an incremental backup summarizes segments not archived yet on the spot, and their
/// summaries are not stored. The unfinished record's bytes in earlier segments come from the
/// repository, or from `unarchived` (pg_wal) for a segment not archived yet.
///
/// # Errors
/// As [`summarize`].
pub fn summarize_from(
    repo: &Repo,
    name: &str,
    local: Option<&Path>,
    complete: bool,
    after: Option<(u32, u64)>,
    unarchived: &dyn Fn(&str) -> Result<Option<std::path::PathBuf>>,
) -> Result<BlockSummary> {
    let meta = repo.meta();
    let seg = meta.wal_segment_size;
    let wal = WalFile::parse(name, seg).filter(|w| w.kind == WalKind::Segment).ok_or_else(|| Error::invalid(format!("{name} is not a WAL segment")))?;
    let sysid = Some(meta.system_identifier);
    let mut s = Summarizer {
        seg_size: seg,
        decoder: Decoder::new(seg, sysid),
        summary: BlockSummary { timeline: wal.timeline, ..Default::default() },
        page: Vec::with_capacity(PAGE),
        lsn: 0,
    };
    let here = wal.segno * seg;
    // Where the previous segment's summary ended: the first record this one owns. The previous
    // segment is on this timeline, or, for the first segment of a timeline, on the one it
    // branched from (whose WAL up to the branch the new timeline's first segment holds a copy of).
    let before = match (after, wal.segno.checked_sub(1)) {
        (Some(after), _) => Some(after),
        (None, Some(p)) => match read_summary(repo, &segment_name(wal.timeline, p, seg))? {
            Some(prev) => Some((wal.timeline, prev.end)),
            None => branched_from(repo, wal.timeline, wal.segno, seg)?,
        },
        (None, None) => None,
    };
    let start = before.map(|(_, end)| end);
    if let Some((timeline, start)) = before {
        s.decoder.start_at(start);
        s.summary.start = start;
        s.summary.end = start;
        // The unfinished record's bytes in earlier segments: from the folder the segment being
        // summarized is read from (pg_wal, when archive_command pushes it: the segment before it
        // is still there, complete, named as it was archived), else read back from the
        // repository (decompressed whole, and through the network for a remote one).
        let first = start / seg;
        for earlier in first..wal.segno {
            let unfinished = segment_name(timeline, earlier, seg);
            let beside = local.and_then(Path::parent).map(|d| d.join(&unfinished)).filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() == seg));
            let path = if beside.is_some() {
                beside
            } else if after.is_some() && !repo.exists(&paths::wal_object(&unfinished))? {
                unarchived(&unfinished)?
            } else {
                None
            };
            s.segment(repo, timeline, earlier, path.as_deref(), start - start % PAGE as u64)?;
        }
    }
    s.segment(repo, wal.timeline, wal.segno, local, here)?;
    if start.is_none() {
        // No summary before: the span starts at the first record read here.
        s.summary.start = if s.summary.end == 0 { s.decoder.next_record().unwrap_or(here) } else { s.summary.start };
    }
    s.summary.end = s.decoder.next_record().unwrap_or(s.summary.end).max(s.summary.start);
    if let Some(end) = s.decoder.end().filter(|_| complete) {
        // An archived segment is whole: valid WAL that ends inside it is damage, or a segment
        // switched in a way this reader does not know. The summary is kept, marked unusable.
        if end.at < here + seg {
            s.summary.unknown.push(format!("WAL in {name} ends early at {:X}: {}", end.at, end.why));
        }
    }
    Ok(s.summary)
}

/// For segment `segno`, the first of `timeline` (its predecessor on it has no summary): the
/// timeline it branched from and where that one's summary of the previous segment ends, when the
/// branch lies in this segment or at its start (the history archived, the summary there).
///
/// # Errors
/// The store's errors.
fn branched_from(repo: &Repo, timeline: u32, segno: u64, seg: u64) -> Result<Option<(u32, u64)>> {
    if timeline < 2 || segno == 0 {
        return Ok(None);
    }
    let Some(&(parent, switch)) = crate::wal::history::archived_history(repo, timeline)?.as_deref().and_then(<[_]>::last) else { return Ok(None) };
    if switch.segment_number(seg) != segno {
        return Ok(None);
    }
    Ok(read_summary(repo, &segment_name(parent, segno - 1, seg))?.map(|p| (parent, p.end)))
}

/// Summarize segment `name` and store the summary.
///
/// # Errors
/// As [`summarize`] and [`write_summary`].
pub fn summarize_and_store(repo: &Repo, name: &str, local: Option<&Path>) -> Result<BlockSummary> {
    let s = summarize(repo, name, local, true)?;
    write_summary(repo, name, &s)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sheaf_core::storage::{LocalSink, StripeSink};

    #[test]
    fn a_summary_another_process_is_writing_is_waited_for_not_failed() {
        let d = tempfile::tempdir().unwrap();
        let repo = crate::repo::meta::test_repo(&d.path().join("r"));
        let name = "000000010000000000000003";
        let object = paths::summary_object(name);
        repo.prepare(&object).unwrap();
        let summary = BlockSummary::default();
        // The other writer holds the summary's .partial (locked) and publishes it a moment later.
        let mut other = LocalSink::create(Path::new(&repo.place().full_name(&object)), true).unwrap();
        let later = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            other.write_all(&BlockSummary::default().to_bytes()).unwrap();
            other.publish().unwrap();
        });
        write_summary(&repo, name, &summary).unwrap();
        later.join().unwrap();
        assert!(repo.exists(&object).unwrap());
        // One that never finishes: refused as transient (another run makes it), not hung.
        let held = LocalSink::create(Path::new(&repo.place().full_name(&paths::summary_object("000000010000000000000004"))), true).unwrap();
        let e = write_summary(&repo, "000000010000000000000004", &summary).unwrap_err();
        assert!(e.is_transient() && e.to_string().contains("being written by another process"), "{e}");
        drop(held);
    }
}
