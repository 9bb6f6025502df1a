//! Packing chunks: a reader's pool buffer filled with the bytes of several small files, or with
//! the runs of changed pages an incremental keeps ([`read_changes`]: only the ranges it names, or
//! every page with only the changed ones kept), and the [`Feeder`] a consolidation hands pieces
//! through.

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::delta::FileChanges;
use super::job::{open_source, outcome, read_full_at, Job, Member, ReadOutcome, Work};
use crate::error::{Error, ErrorKind, Result};
use crate::pipeline::{Pool, PoolBuf, Shared};
use crate::source::Files;

/// One reader's pack: a pool buffer being filled with the bytes of several files (or several runs
/// of one), sent to the compressors as one packed chunk once full.
pub(crate) struct Packer {
    tx: Sender<Job>,
    pub(super) shared: Arc<Shared>,
    pool: Arc<Pool>,
    ts: usize,
    pack: Option<(PoolBuf, Vec<Member>, usize)>,
}

impl Packer {
    pub(super) fn new(ts: usize, tx: &Sender<Job>, shared: &Arc<Shared>, pool: &Arc<Pool>) -> Self {
        Packer { tx: tx.clone(), shared: shared.clone(), pool: pool.clone(), ts, pack: None }
    }

    /// Send what is packed. False when the compressors have stopped (the failure is recorded).
    pub(super) fn flush(&mut self) -> bool {
        let Some((buf, members, used)) = self.pack.take() else { return true };
        if members.is_empty() {
            return true;
        }
        let job = Job { file_id: members[0].file_id, offset: members[0].offset, len: used, buf: Some(buf), check: None, members, stored: None };
        if self.tx.send(job).is_err() {
            self.shared.fail(Error::new(ErrorKind::Cancelled, "the compressors stopped before the source was read"));
            return false;
        }
        true
    }

    /// Bytes still free in the current buffer (0 when none is held).
    pub(super) fn room(&self) -> usize {
        self.pack.as_ref().map_or(0, |p| self.ts - p.2)
    }

    /// Make at least `need` bytes free: flush a fuller buffer, take a new one. None when the
    /// backup is stopping.
    pub(super) fn make_room(&mut self, need: usize) -> Option<()> {
        if self.pack.is_some() && self.room() < need && !self.flush() {
            return None;
        }
        if self.pack.is_none() {
            self.pack = Some((self.pool.take(&self.shared)?, Vec::new(), 0));
        }
        Some(())
    }

    /// Send a chunk of its own (not packed): `data`, or a zero chunk of `len` bytes. The pack goes
    /// first, so that this never holds a buffer while it waits for another (a pool of one would
    /// deadlock). False when the backup is stopping.
    pub(super) fn send_alone(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> bool {
        self.send(file_id, offset, len, data, None, Vec::new())
    }

    /// Send a chunk stored already (`payload`, as `stored` says) alone. False when the backup is
    /// stopping. `members`: what of it is which file's (empty: all of it file `file_id`'s).
    pub(super) fn send_stored(&mut self, file_id: u32, offset: u64, len: usize, stored: super::job::Stored, payload: &[u8], members: Vec<Member>) -> bool {
        self.send(file_id, offset, len, Some(payload), Some(stored), members)
    }

    /// Send `data` (the raw chunk, or with `stored` its stored bytes; `None`: `len` zeros) alone.
    fn send(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>, stored: Option<super::job::Stored>, members: Vec<Member>) -> bool {
        if !self.flush() {
            return false;
        }
        let buf = match data {
            Some(d) => {
                let Some(mut buf) = self.pool.take(&self.shared) else { return false };
                buf[..d.len()].copy_from_slice(d);
                Some(buf)
            }
            None => None,
        };
        let job = Job { file_id, offset, len, buf, check: None, members, stored };
        if self.tx.send(job).is_err() {
            self.shared.fail(Error::new(ErrorKind::Cancelled, "the compressors stopped before the source was read"));
            return false;
        }
        true
    }

    /// Pack `data`, bytes of file `file_id` from `offset`. False when the backup is stopping.
    pub(super) fn pack_bytes(&mut self, file_id: u32, offset: u64, data: &[u8]) -> bool {
        if self.make_room(data.len()).is_none() {
            return false;
        }
        let (free, at) = self.free();
        free[..data.len()].copy_from_slice(data);
        self.keep(file_id, offset, at, data.len(), &None);
        true
    }

    /// The free part of the buffer, and where it starts.
    pub(super) fn free(&mut self) -> (&mut [u8], usize) {
        let (buf, _, used) = self.pack.as_mut().expect("make_room first");
        let at = *used;
        (&mut buf[at..self.ts], at)
    }

    /// The bytes at `at..at + len` of the buffer (written through [`Packer::free`]) are file
    /// `file_id`'s from `offset`: record them and mark them used.
    pub(super) fn keep(&mut self, file_id: u32, offset: u64, at: usize, len: usize, check: &Option<Arc<super::check::CheckCtx>>) {
        if len == 0 {
            return;
        }
        let (_, members, used) = self.pack.as_mut().expect("make_room first");
        debug_assert_eq!(at, *used);
        members.push(Member { file_id, offset, at: at as u32, len: len as u32, check: check.clone() });
        *used += len;
    }

    /// Move `len` bytes at `from` (after the used part) down to `to`, the used part's end.
    fn shift(&mut self, from: usize, to: usize, len: usize) {
        let (buf, _, _) = self.pack.as_mut().expect("make_room first");
        if from != to {
            buf.copy_within(from..from + len, to);
        }
    }
}

/// Bytes of a frame that a file uses: `len` bytes at `at` in the frame's raw bytes are file
/// `file_id`'s from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) file_id: u32,
    pub(crate) offset: u64,
    pub(crate) at: u32,
    pub(crate) len: u32,
}

/// Chunks handed to a backup from elsewhere than its readers (a consolidation's chain): pieces of
/// [`crate::format::PACK_LIMIT`] or more go as chunks of their own, smaller ones are packed.
pub(crate) struct Feeder(Packer);

impl Feeder {
    /// Piece `data` (or `len` zero bytes) of file `file_id` at `offset`. False when the backup is
    /// stopping (its error is recorded).
    pub(crate) fn piece(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> bool {
        let ok = match data {
            Some(d) if d.len() < crate::format::PACK_LIMIT as usize => self.0.pack_bytes(file_id, offset, d),
            _ => self.0.send_alone(file_id, offset, len, data),
        };
        if ok {
            self.0.shared.count(len as u64);
        }
        ok
    }

    /// A frame of `raw_len` raw bytes as another set stored it (`payload`, by `codec`; `raw_crc`
    /// its raw bytes' checksum), whose bytes `live` (sorted by `at`, disjoint) are files' and the
    /// rest superseded: framed as it is, after the compressor has expanded it to check it. False
    /// when the backup is stopping.
    pub(crate) fn stored(&mut self, raw_len: usize, codec: crate::codec::CodecKind, payload: &[u8], raw_crc: u32, live: &[Kept]) -> bool {
        let stored = super::job::Stored { codec, len: payload.len(), raw_crc };
        let used: u64 = live.iter().map(|k| u64::from(k.len)).sum();
        let ok = match live {
            [k] if k.at == 0 && k.len as usize == raw_len => self.0.send_stored(k.file_id, k.offset, raw_len, stored, payload, Vec::new()),
            _ => {
                // Every byte a member: the superseded between the live.
                let mut members = Vec::with_capacity(2 * live.len() + 1);
                let mut at = 0u32;
                let gap = |members: &mut Vec<Member>, from: u32, to: u32| {
                    if to > from {
                        members.push(Member { file_id: crate::format::SUPERSEDED, offset: u64::from(from), at: from, len: to - from, check: None });
                    }
                };
                for k in live {
                    gap(&mut members, at, k.at);
                    members.push(Member { file_id: k.file_id, offset: k.offset, at: k.at, len: k.len, check: None });
                    at = k.at + k.len;
                }
                gap(&mut members, at, raw_len as u32);
                self.0.send_stored(members[0].file_id, members[0].offset, raw_len, stored, payload, members)
            }
        };
        if ok {
            self.0.shared.count(used);
        }
        ok
    }

    /// Send what is still packed.
    pub(crate) fn finish(&mut self) -> bool {
        self.0.flush()
    }
}

impl Packer {
    /// A feeder over this backup's pipeline.
    pub(super) fn feeder(self) -> Feeder {
        Feeder(self)
    }
}

/// How far ahead of the run being read the runs of changed pages are announced to the kernel.
const ADVISE_AHEAD: u64 = 16 << 20;

/// Read what an incremental holds of file `w` (its [`Work::changes`] is a scan or ranges) into the
/// reader's pack.
pub(super) fn read_changes(w: &Work, files: &dyn Files, packer: &mut Packer) -> Result<ReadOutcome> {
    let (mut file, before) = match open_source(w, files)? {
        Ok(x) => x,
        Err(gone) => return Ok(gone),
    };
    let size = before.len;
    let stopped = |offset| Ok(ReadOutcome { file_id: w.file_id, size: offset, ..Default::default() });
    match w.changes.as_ref().expect("read_changes is for files with changes") {
        FileChanges::Whole => Err(Error::new(ErrorKind::Io, "internal: a whole file went to the incremental reader")),
        FileChanges::Ranges(ranges) => {
            // Scattered pages are read one run at a time: the kernel is told of the runs up to
            // [`ADVISE_AHEAD`] bytes ahead, so that it reads them in parallel (many requests in
            // the disk's queue) instead of one after the other. `advised`: runs told of so far;
            // `ahead`: their bytes from the one being read on.
            let (mut advised, mut ahead) = (0usize, 0u64);
            for (i, r) in ranges.iter().enumerate() {
                if advised <= i {
                    (advised, ahead) = (i, 0);
                }
                while advised < ranges.len() && ahead < ADVISE_AHEAD {
                    let a = &ranges[advised];
                    if a.start < size {
                        file.will_need(a.start, a.end.min(size) - a.start);
                    }
                    ahead += a.end - a.start;
                    advised += 1;
                }
                let (mut at, end) = (r.start.min(size), r.end.min(size));
                while at < end {
                    if packer.shared.is_cancelled() {
                        return stopped(at);
                    }
                    if packer.make_room(1).is_none() {
                        return stopped(at);
                    }
                    let (free, pos) = packer.free();
                    let want = ((end - at) as usize).min(free.len());
                    let got = read_full_at(file.as_mut(), &mut free[..want], at)?;
                    packer.keep(w.file_id, at, pos, got, &w.check);
                    packer.shared.count(got as u64);
                    at += got as u64;
                    if got < want {
                        // Shorter than at open: what is there now is what WAL replay starts from.
                        return outcome(w, file.as_mut(), &before, size, true);
                    }
                }
                ahead = ahead.saturating_sub(r.end - r.start);
            }
            outcome(w, file.as_mut(), &before, size, false)
        }
        FileChanges::Scan(filter) => {
            let unit = filter.unit().max(1);
            let mut offset = 0u64;
            while offset < size {
                if packer.shared.is_cancelled() {
                    return stopped(offset);
                }
                if packer.make_room(unit).is_none() {
                    return stopped(offset);
                }
                let (free, pos) = packer.free();
                // Whole units, as many as fit (the buffer holds at least one: make_room).
                let want = ((size - offset) as usize).min(free.len() / unit * unit);
                let got = read_full_at(file.as_mut(), &mut free[..want], offset)?;
                let data = &free[..got];
                // Runs of changed units, as (file offset, position in the read, length).
                let mut runs: Vec<(u64, usize, usize)> = Vec::new();
                for (i, u) in data.chunks(unit).enumerate() {
                    let n = offset / unit as u64 + i as u64;
                    if !filter.changed(n, u) {
                        continue;
                    }
                    let from = i * unit;
                    match runs.last_mut() {
                        Some(last) if last.1 + last.2 == from => last.2 += u.len(),
                        _ => runs.push((offset + from as u64, from, u.len())),
                    }
                }
                // Kept runs are moved down to follow each other; the rest of the read is dropped.
                let mut to = pos;
                for (file_off, from, len) in runs {
                    packer.shift(pos + from, to, len);
                    packer.keep(w.file_id, file_off, to, len, &w.check);
                    to += len;
                }
                packer.shared.count(got as u64);
                offset += got as u64;
                if got < want {
                    return outcome(w, file.as_mut(), &before, offset, true);
                }
            }
            outcome(w, file.as_mut(), &before, offset, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::delta::UnitFilter;

    /// A filter that calls a page changed when its first byte is odd.
    struct Odd;
    impl UnitFilter for Odd {
        fn unit(&self) -> usize {
            8
        }
        fn changed(&self, _n: u64, data: &[u8]) -> bool {
            data[0] % 2 == 1
        }
    }

    fn run(changes: FileChanges, content: &[u8], ts: usize) -> Vec<(u64, Vec<u8>)> {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("f");
        std::fs::write(&path, content).unwrap();
        let shared = Shared::new(Arc::new(crate::pipeline::NoProgress));
        let pool = Pool::new(4, ts);
        let (tx, rx) = crossbeam_channel::bounded(16);
        let w = Work { file_id: 7, path, dev: (0, 0), size: content.len() as u64, check: None, changes: Some(changes), rel: None };
        let mut p = Packer::new(ts, &tx, &shared, &pool);
        let o = read_changes(&w, &crate::source::LocalFiles, &mut p).unwrap();
        assert!(p.flush());
        drop((tx, p));
        assert_eq!(o.size, content.len() as u64);
        let mut held = Vec::new();
        for job in rx {
            let buf = job.buf.unwrap();
            assert_eq!((job.file_id, job.offset), (job.members[0].file_id, job.members[0].offset));
            for m in job.members {
                held.push((m.offset, buf[m.at as usize..(m.at + m.len) as usize].to_vec()));
            }
        }
        held
    }

    #[test]
    fn a_scan_keeps_runs_of_changed_units_at_their_offsets() {
        // Units of 8 bytes: 1 (odd) changed, 2 not, ... and a short odd tail.
        let mut content = Vec::new();
        for first in [1u8, 3, 2, 5, 4, 4, 7, 9] {
            content.extend_from_slice(&[first; 8]);
        }
        content.extend_from_slice(&[11, 11, 11]);
        // A buffer of 24 bytes: reads of 3 units, runs split where a buffer fills.
        let held = run(FileChanges::Scan(Arc::new(Odd)), &content, 24);
        let mut joined: Vec<(u64, Vec<u8>)> = Vec::new();
        for (off, b) in held {
            match joined.last_mut() {
                Some(l) if l.0 + l.1.len() as u64 == off => l.1.extend(b),
                _ => joined.push((off, b)),
            }
        }
        let want: Vec<(u64, Vec<u8>)> = vec![(0, content[0..16].to_vec()), (24, content[24..32].to_vec()), (48, content[48..].to_vec())];
        assert_eq!(joined, want);
    }

    #[test]
    fn ranges_read_only_what_they_name_and_stop_at_the_end() {
        let content: Vec<u8> = (0..100u8).collect();
        let held = run(FileChanges::Ranges(vec![5..15, 40..50, 90..200]), &content, 32);
        let bytes: Vec<u8> = held.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(bytes, [&content[5..15], &content[40..50], &content[90..]].concat());
        assert!(held.iter().all(|(off, b)| content[*off as usize..*off as usize + b.len()] == b[..]));
        assert!(run(FileChanges::Ranges(vec![]), &content, 32).is_empty(), "unchanged: nothing read");
    }
}
