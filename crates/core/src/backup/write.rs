//! The stripe writers, one per stripe: each takes the next finished frame from the one shared
//! queue (so a faster stripe takes more), writes it and records it in the stripe's index; at the
//! end, each stripe's footer (index, manifest, trailer). The index waits on disk, not in memory
//! ([`IndexSpill`]), and so do the references from which the end of the backup computes each
//! file's checksum ([`ChunkSorter`]).

use crossbeam_channel::Receiver;

use super::compress::Frame;
use std::io::Read;

use crate::error::{Error, ErrorKind, Result};
use crate::format::{BackupId, IndexEntry, Trailer, FRAME_HEADER_LEN};
use crate::manifest::ChunkRef;
use crate::pipeline::Shared;
use crate::spill::{ChunkSorter, IndexSpill};
use crate::storage::StripeSink;

pub(super) struct WriterOut {
    pub(super) sink: Box<dyn StripeSink>,
    pub(super) index: IndexSpill,
    /// Every chunk written, for the files' checksums.
    pub(super) chunks: ChunkSorter,
    pub(super) pos: u64,
    /// Frames written (a packed frame has several index entries).
    pub(super) frames: u64,
}

pub(super) fn write_loop(mut sink: Box<dyn StripeSink>, k: usize, start: u64, rx: &Receiver<Frame>, shared: &Shared) -> Option<WriterOut> {
    let mut index = match IndexSpill::new() {
        Ok(i) => i,
        Err(e) => {
            shared.fail(e);
            sink.discard();
            return None;
        }
    };
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
        if let Err(e) = whole.into_iter().chain(packed).try_for_each(&mut record) {
            shared.fail(e);
            continue;
        }
        pos += (FRAME_HEADER_LEN + h.stored_len as usize) as u64;
        frames += 1;
    }
    if shared.is_cancelled() {
        sink.discard();
        return None;
    }
    Some(WriterOut { sink, index, chunks, pos, frames })
}

pub(super) fn write_footer(out: &mut WriterOut, k: u16, n: u16, id: BackupId, manifest: &[u8], cipher: Option<&crate::crypto::Cipher>) -> Result<()> {
    let frame_count = out.index.count;
    let (index_len, index_crc) = match cipher {
        Some(c) => {
            // The index holds every chunk's raw checksum, a fingerprint of the plaintext: sealed
            // a piece at a time, each under its own nonce.
            let (mut len, mut crc) = (0u64, 0u32);
            let pieces: Vec<usize> = crate::format::index_pieces(frame_count, crate::format::INDEX_ENTRY_LEN).collect();
            let mut r = out.index.reader()?;
            let mut plain = Vec::new();
            for (p, &n) in pieces.iter().enumerate() {
                plain.resize(n, 0);
                r.read_exact(&mut plain).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read a stripe's index back from its temporary file: {e}")))?;
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
            let mut buf = vec![0u8; 1 << 20];
            let mut r = out.index.reader()?;
            loop {
                let n = r.read(&mut buf).map_err(|e| Error::new(ErrorKind::Io, format!("cannot read a stripe's index back from its temporary file: {e}")))?;
                if n == 0 {
                    break;
                }
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
