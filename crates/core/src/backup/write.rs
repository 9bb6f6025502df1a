//! The stripe writers, one per stripe: each takes the next finished frame from the one shared
//! queue (so a faster stripe takes more), writes it and records it in the stripe's index; at the
//! end, each stripe's footer (index, manifest, trailer).

use crossbeam_channel::Receiver;

use super::compress::Frame;
use crate::error::Result;
use crate::format::{BackupId, IndexEntry, Trailer, FRAME_HEADER_LEN};
use crate::pipeline::Shared;
use crate::storage::StripeSink;

pub(super) struct WriterOut {
    pub(super) sink: Box<dyn StripeSink>,
    pub(super) index: Vec<IndexEntry>,
    pub(super) pos: u64,
    /// Frames written (a packed frame has several index entries).
    pub(super) frames: u64,
}

pub(super) fn write_loop(mut sink: Box<dyn StripeSink>, start: u64, rx: &Receiver<Frame>, shared: &Shared) -> Option<WriterOut> {
    let mut index = Vec::new();
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
        if parts.is_empty() {
            index.push(IndexEntry {
                file_id: h.file_id,
                offset: h.offset,
                frame_pos: pos,
                raw_len: h.raw_len,
                stored_len: h.stored_len,
                raw_crc,
                frame_off: 0,
                hash,
            });
        }
        for p in &parts {
            index.push(IndexEntry {
                file_id: p.file_id,
                offset: p.offset,
                frame_pos: pos,
                raw_len: p.len,
                stored_len: h.stored_len,
                raw_crc: p.crc,
                frame_off: p.at,
                hash: p.hash,
            });
        }
        pos += (FRAME_HEADER_LEN + h.stored_len as usize) as u64;
        frames += 1;
    }
    if shared.is_cancelled() {
        sink.discard();
        return None;
    }
    Some(WriterOut { sink, index, pos, frames })
}

pub(super) fn write_footer(out: &mut WriterOut, k: u16, n: u16, id: BackupId, manifest: &[u8], cipher: Option<&crate::crypto::Cipher>) -> Result<()> {
    let mut index = Vec::with_capacity(out.index.len() * crate::format::INDEX_ENTRY_LEN);
    for e in &out.index {
        e.encode_into(&mut index);
    }
    if let Some(c) = cipher {
        // The index holds every chunk's raw checksum, a fingerprint of the plaintext.
        index = c.seal_region(crate::crypto::NONCE_INDEX, u64::from(k), &index);
    }
    let trailer = Trailer {
        index_offset: out.pos,
        index_len: index.len() as u64,
        manifest_offset: out.pos + index.len() as u64,
        manifest_len: manifest.len() as u64,
        frame_count: out.index.len() as u64,
        index_crc: crc32c::crc32c(&index),
        manifest_crc: crc32c::crc32c(manifest),
        stripe_index: k,
        stripe_count: n,
        backup_id: id,
    };
    out.sink.write_all(&index)?;
    out.sink.write_all(manifest)?;
    out.sink.write_all(&trailer.encode())?;
    out.sink.sync()
}
