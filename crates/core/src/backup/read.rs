//! The readers: each takes a buffer from the pool, reads the next chunk of its files into it and
//! queues it for the compressors. Large files are read by their data extents (holes become zero
//! frames without a read), one reader per root and device by default; small files are packed back
//! to back into shared chunks by several readers at once.

use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::job::{open_source, outcome, read_full_at, Job, ReadOutcome, Stored, Work};
use super::pack::{read_changes, Packer};
use crate::codec::CodecKind;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{MAX_ZERO_FRAME, PACK_LIMIT, ZERO_FRAME};
use crate::pipeline::{Pool, Shared};
use crate::source::{Files, StoredChunk};
use crate::spill::{Outcome, Outcomes};

/// What a reader reports beyond each file's outcome: warnings.
#[derive(Default)]
pub(super) struct ReaderReport {
    pub(super) warnings: Vec<String>,
    /// Files it read (or found gone).
    pub(super) files: u64,
}

/// A reader: batches of files from `rx` until it closes, each file's outcome recorded in
/// `outcomes` (a thousand at a time, ids that follow each other in one write). Its pack is sent
/// before it waits long for more work, so that an idle reader never holds a buffer another needs.
/// `expected`: changes while read are normal (a live database): recorded in the outcomes, to be
/// listed by name, not warned of one by one.
#[allow(clippy::too_many_arguments)]
pub(super) fn reader_loop(
    rx: &Receiver<Vec<Work>>,
    files: &dyn Files,
    ts: usize,
    tx: &Sender<Job>,
    shared: &Arc<Shared>,
    pool: &Arc<Pool>,
    outcomes: &Outcomes,
    expected: bool,
) -> ReaderReport {
    let mut packer = Packer::new(ts, tx, shared, pool);
    let mut report = ReaderReport::default();
    let mut recs = Vec::new();
    loop {
        let batch = match rx.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Disconnected) => break,
            // The listing is behind: a moment's wait keeps packs full; a longer one sends the
            // pack first.
            Err(TryRecvError::Empty) => match rx.recv_timeout(std::time::Duration::from_millis(20)) {
                Ok(b) => b,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    if !packer.flush() {
                        break;
                    }
                    match rx.recv() {
                        Ok(b) => b,
                        Err(_) => break,
                    }
                }
            },
        };
        let done = read_files(&batch, files, ts, tx, shared, pool, &mut packer);
        report.files += done.len() as u64;
        for o in done {
            recs.push((o.file_id, Outcome { size: o.size, vanished: o.vanished, changed: o.changed }));
            if !(expected && (o.vanished || o.changed)) {
                report.warnings.extend(o.warning);
            }
        }
        if recs.len() >= 1024 {
            if let Err(e) = outcomes.write(&mut recs) {
                shared.fail(e);
            }
        }
        if shared.is_cancelled() {
            break;
        }
    }
    if let Err(e) = outcomes.write(&mut recs) {
        shared.fail(e);
    }
    if !shared.is_cancelled() {
        packer.flush();
    }
    report
}

fn read_one(w: &Work, files: &dyn Files, ts: usize, tx: &Sender<Job>, shared: &Shared, pool: &Arc<Pool>) -> Result<ReadOutcome> {
    let (file_id, path) = (w.file_id, w.path.as_path());
    let (mut file, before) = match open_source(w, files)? {
        Ok(x) => x,
        Err(gone) => return Ok(gone),
    };
    // The size at open is what we copy: a file that grows meanwhile is reported, not chased.
    let size = before.len;
    file.sequential();
    let stopped = |offset| Ok(ReadOutcome { file_id, size: offset, ..Default::default() });
    let send = |job: Job| {
        let ok = tx.send(job).is_ok();
        if !ok {
            shared.fail(Error::new(ErrorKind::Cancelled, "the compressors stopped before the source was read"));
        }
        ok
    };
    let mut offset = 0u64;
    let mut shrank = false;
    // Sparse files are read by their data extents; holes become zero frames without a read.
    let mut sparse = true;
    'file: while offset < size {
        let mut end = size;
        if sparse {
            match file.seek_data(offset) {
                Some(data) => {
                    let data = data.unwrap_or(size).min(size);
                    while offset < data {
                        if shared.is_cancelled() {
                            return stopped(offset);
                        }
                        let len = (data - offset).min(MAX_ZERO_FRAME as u64);
                        if !send(Job { file_id, offset, len: len as usize, buf: None, check: None, members: Vec::new(), stored: None }) {
                            break 'file;
                        }
                        shared.count(len);
                        offset += len;
                    }
                    if offset >= size {
                        break;
                    }
                    end = file.seek_hole(offset).flatten().unwrap_or(size).clamp(offset, size);
                    if end == offset {
                        // Data and hole at once: the file is changing under us. Read a chunk.
                        end = size.min(offset + ts as u64);
                    }
                }
                None => sparse = false,
            }
        }
        while offset < end {
            if shared.is_cancelled() {
                return stopped(offset);
            }
            let Some(mut buf) = pool.take(shared) else { return stopped(offset) };
            let want = (end - offset).min(ts as u64) as usize;
            let (got, stored, zero) = match file.read_stored_at(&mut buf, offset, want) {
                None => (read_full_at(file.as_mut(), &mut buf[..want], offset)?, None, false),
                Some(c) => stored_as(&c?, want, buf.len(), path)?,
            };
            if got == 0 {
                shrank = true;
                break 'file;
            }
            // A chunk its host found all zero comes as a zero frame, its buffer unused.
            let (buf, check) = if zero { (None, None) } else { (Some(buf), w.check.clone()) };
            if !send(Job { file_id, offset, len: got, buf, check, members: Vec::new(), stored }) {
                break 'file;
            }
            shared.count(got as u64);
            offset += got as u64;
            if got < want {
                shrank = true;
                break 'file;
            }
        }
    }
    outcome(w, file.as_mut(), &before, offset, shrank)
}

/// A chunk its host compressed, checked for sense: its raw length, how it is stored (none for
/// a zero chunk), and whether it is all zero.
fn stored_as(c: &StoredChunk, want: usize, room: usize, path: &std::path::Path) -> Result<(usize, Option<Stored>, bool)> {
    let bad = |what: String| Error::corrupt(format!("{}: the source's host sent {what}", path.display()));
    if c.raw_len > want {
        return Err(bad(format!("a chunk of {} bytes where at most {want} were asked", c.raw_len)));
    }
    if c.codec == ZERO_FRAME {
        return Ok((c.raw_len, None, true));
    }
    let codec = CodecKind::from_id(c.codec).ok_or_else(|| bad(format!("a chunk in an unknown codec ({})", c.codec)))?;
    if c.stored_len > room || (codec == CodecKind::None && c.stored_len != c.raw_len) {
        return Err(bad(format!("a chunk of {} stored bytes for {} raw", c.stored_len, c.raw_len)));
    }
    Ok((c.raw_len, Some(Stored { codec, len: c.stored_len, raw_crc: c.raw_crc }), false))
}

/// Read a batch of a reader's files: a file of [`PACK_LIMIT`] or more chunk by chunk on its own;
/// smaller files into shared chunks through `packer`, each file's bytes following the previous
/// file's in one pool buffer, a full buffer going to the compressors as one packed chunk. In an
/// incremental, a file held in part packs only its changed runs. What is still packed at the end
/// stays in `packer` for the next batch.
pub(super) fn read_files(work: &[Work], files: &dyn Files, ts: usize, tx: &Sender<Job>, shared: &Arc<Shared>, pool: &Arc<Pool>, packer: &mut Packer) -> Vec<ReadOutcome> {
    let mut out = Vec::with_capacity(work.len());
    for w in work {
        if shared.is_cancelled() {
            break;
        }
        let r = (|| -> Result<Option<ReadOutcome>> {
            if w.changes.is_some() {
                return read_changes(w, files, packer).map(Some);
            }
            let (mut file, before) = match open_source(w, files)? {
                Ok(x) => x,
                Err(gone) => return Ok(Some(gone)),
            };
            let size = before.len;
            if size >= PACK_LIMIT {
                // Read on its own. The pack goes first, so that this thread never holds a buffer
                // while it waits for another (a pool of one would deadlock).
                drop(file);
                if !packer.flush() {
                    return Ok(None);
                }
                return read_one(w, files, ts, tx, shared, pool).map(Some);
            }
            if size == 0 {
                return outcome(w, file.as_mut(), &before, 0, false).map(Some);
            }
            let size = size as usize;
            if packer.make_room(size).is_none() {
                return Ok(None);
            }
            let (free, at) = packer.free();
            let got = read_full_at(file.as_mut(), &mut free[..size], 0)?;
            packer.keep(w.file_id, 0, at, got, &w.check);
            shared.count(got as u64);
            outcome(w, file.as_mut(), &before, got as u64, got < size).map(Some)
        })();
        match r {
            Ok(Some(o)) => out.push(o),
            Ok(None) => break,
            Err(e) => {
                shared.fail(e);
                break;
            }
        }
    }
    out
}
