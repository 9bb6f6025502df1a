//! The stripe writers, one per stripe: each takes the next finished frame from the one shared
//! queue (so a faster stripe takes more), writes it and records it in the stripe's index; at the
//! end, each stripe's footer (index, manifest, trailer). The index waits on disk, not in memory
//! ([`IndexSpill`]), and so do the references from which the end of the backup computes each
//! file's checksum ([`ChunkSorter`]).

use crossbeam_channel::Receiver;

use super::compress::Frame;
use std::io::Read;

use super::resume::IndexLog;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{BackupId, IndexEntry, Trailer, FRAME_HEADER_LEN};
use crate::manifest::ChunkRef;
use crate::pipeline::Shared;
use crate::spill::{ChunkSorter, IndexSpill};
use crate::storage::StripeSink;

/// What a stripe holds before this attempt's first frame: where its frames begin, and (resumed)
/// the index entries of the frames kept of earlier attempts, each with its attempt.
pub(super) struct Kept {
    pub(super) start: u64,
    pub(super) entries: Vec<(u32, IndexEntry)>,
}

pub(super) struct WriterOut {
    pub(super) sink: Box<dyn StripeSink>,
    /// The kept entries first (ids of their attempts until the footer gives them the set's), then
    /// this attempt's.
    pub(super) index: IndexSpill,
    /// The kept entries, in index order, each with its attempt (and that attempt's id).
    pub(super) kept: Vec<(u32, IndexEntry)>,
    /// Stored bytes kept of earlier attempts.
    pub(super) kept_bytes: u64,
    /// Every chunk written, for the files' checksums.
    pub(super) chunks: ChunkSorter,
    pub(super) pos: u64,
    /// Frames written (a packed frame has several index entries).
    pub(super) frames: u64,
}

pub(super) fn write_loop(mut sink: Box<dyn StripeSink>, k: usize, kept: Kept, mut log: Option<IndexLog>, rx: &Receiver<Frame>, shared: &Shared) -> Option<WriterOut> {
    let Kept { start, entries: kept } = kept;
    let made = IndexSpill::new().and_then(|mut i| {
        for (_, e) in &kept {
            i.push(e)?;
        }
        Ok(i)
    });
    let mut index = match made {
        Ok(i) => i,
        Err(e) => {
            shared.fail(e);
            sink.discard();
            return None;
        }
    };
    let kept_bytes = start - kept.first().map_or(start, |(_, e)| e.frame_pos);
    let mut chunks = ChunkSorter::default();
    let mut record = |e: IndexEntry| -> Result<()> {
        // Superseded bytes tile their frame in the index but are no file's.
        if !e.is_superseded() {
            chunks.push(ChunkRef { file_id: e.file_id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k })?;
        }
        index.push(&e)
    };
    let mut pos = start;
    let mut frames = 0;
    for frame in rx {
        if shared.is_cancelled() {
            continue;
        }
        let h = frame.header;
        let mut result = sink.write_all(&h.encode());
        if let (Ok(()), Some(b)) = (&result, &frame.buf) {
            result = sink.write_all(&b[..h.stored_len as usize]);
        }
        let Frame { buf, parts, raw_crc, hash, .. } = frame;
        drop(buf);
        if let Err(e) = result {
            shared.fail(e);
            continue;
        }
        // One index entry for a whole frame, one per part of a packed one: no list per frame.
        let whole = parts.is_empty().then_some(IndexEntry {
            file_id: h.file_id,
            offset: h.offset,
            frame_pos: pos,
            raw_len: h.raw_len,
            stored_len: h.stored_len,
            raw_crc,
            frame_off: 0,
            hash,
        });
        let packed = parts.iter().map(|p| IndexEntry {
            file_id: p.file_id,
            offset: p.offset,
            frame_pos: pos,
            raw_len: p.len,
            stored_len: h.stored_len,
            raw_crc: p.crc,
            frame_off: p.at,
            hash: p.hash,
        });
        let mut failed = None;
        for e in whole.into_iter().chain(packed) {
            if let Err(err) = record(e) {
                failed = Some(err);
                break;
            }
            if let Some(l) = log.as_mut() {
                l.entry(&e);
            }
        }
        if let Some(e) = failed {
            shared.fail(e);
            continue;
        }
        // A stripe sent in parts ends one only after a frame; the journal then records every
        // frame up to that part's end, so that a later attempt can go on from it without reading
        // it back (a part in progress cannot be read).
        let cut = match sink.frame_end() {
            Ok(cut) => cut,
            Err(e) => {
                shared.fail(e);
                continue;
            }
        };
        if let Some(l) = log.as_mut() {
            // Recorded once its bytes are handed to the stripe: a later attempt checks them.
            let n = (FRAME_HEADER_LEN + h.stored_len as usize) as u64;
            if let Err(e) = if cut { l.flush() } else { l.frame_done(n) } {
                shared.fail(e);
            }
        }
        pos += (FRAME_HEADER_LEN + h.stored_len as usize) as u64;
        frames += 1;
    }
    if shared.is_cancelled() {
        // A resumable backup's stripe is left with what reached it, and its journal says what
        // that is, for the next attempt to go on from.
        sink.discard();
        if let Some(l) = log.as_mut() {
            let _ = l.flush();
        }
        return None;
    }
    if let Some(Err(e)) = log.as_mut().map(IndexLog::flush) {
        shared.fail(e);
        sink.discard();
        return None;
    }
    Some(WriterOut { sink, index, kept, kept_bytes, chunks, pos, frames })
}

/// Give the kept entries among `buf` (whole entries, the first being entry `first` of the index)
/// their ids in this set: `remap(attempt, id)`.
fn remap_kept(buf: &mut [u8], first: u64, attempts: &[u32], remap: &dyn Fn(u32, u32) -> u32) {
    let kept = attempts.len() as u64;
    for (i, e) in buf.chunks_mut(crate::format::INDEX_ENTRY_LEN).enumerate() {
        let at = first + i as u64;
        if at >= kept {
            break;
        }
        let mut entry = IndexEntry::decode_one(e);
        entry.file_id = remap(attempts[at as usize], entry.file_id);
        if entry.is_superseded() {
            entry.hash = 0;
        }
        let mut out = Vec::with_capacity(crate::format::INDEX_ENTRY_LEN);
        entry.encode_into(&mut out);
        e.copy_from_slice(&out);
    }
}

pub(super) fn write_footer(
    out: &mut WriterOut,
    k: u16,
    n: u16,
    id: BackupId,
    manifest: &[u8],
    cipher: Option<&crate::crypto::Cipher>,
    remap: &dyn Fn(u32, u32) -> u32,
) -> Result<()> {
    let frame_count = out.index.count;
    let attempts: Vec<u32> = out.kept.iter().map(|(a, _)| *a).collect();
    let (index_len, index_crc) = match cipher {
        Some(c) => {
            // The index holds every chunk's raw checksum, a fingerprint of the plaintext: sealed
            // a piece at a time, each under its own nonce.
            let (mut len, mut crc) = (0u64, 0u32);
            let pieces: Vec<usize> = crate::format::index_pieces(frame_count, crate::format::INDEX_ENTRY_LEN).collect();
            let mut r = out.index.reader()?;
            let mut plain = Vec::new();
            let mut at = 0u64;
            for (p, &n) in pieces.iter().enumerate() {
                plain.resize(n, 0);
                r.read_exact(&mut plain).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read a stripe's index back from its temporary file: {e}")))?;
                remap_kept(&mut plain, at, &attempts, remap);
                at += (n / crate::format::INDEX_ENTRY_LEN) as u64;
                let (counter, aad) = crate::crypto::index_piece_nonce(k, p as u64, p + 1 == pieces.len());
                let sealed = c.seal_region_with(crate::crypto::NONCE_INDEX, counter, aad, &plain);
                crc = crc32c::crc32c_append(crc, &sealed);
                len += sealed.len() as u64;
                out.sink.write_all(&sealed)?;
            }
            (len, crc)
        }
        None => {
            // Copied from its temporary file a piece at a time.
            let (mut len, mut crc) = (0u64, 0u32);
            // Whole entries at a time, so that the kept ones can be given their ids.
            let mut buf = vec![0u8; crate::format::INDEX_ENTRY_LEN * 20_000];
            let mut r = out.index.reader()?;
            let mut at = 0u64;
            loop {
                let n = crate::pipeline::read_full(&mut r, &mut buf)
                    .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read a stripe's index back from its temporary file: {e}")))?;
                if n == 0 {
                    break;
                }
                remap_kept(&mut buf[..n], at, &attempts, remap);
                at += (n / crate::format::INDEX_ENTRY_LEN) as u64;
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                len += n as u64;
                out.sink.write_all(&buf[..n])?;
            }
            (len, crc)
        }
    };
    let trailer = Trailer {
        index_offset: out.pos,
        index_len,
        manifest_offset: out.pos + index_len,
        manifest_len: manifest.len() as u64,
        frame_count,
        index_crc,
        manifest_crc: crc32c::crc32c(manifest),
        stripe_index: k,
        stripe_count: n,
        backup_id: id,
    };
    out.sink.write_all(manifest)?;
    out.sink.write_all(&trailer.encode())?;
    out.sink.sync()
}
