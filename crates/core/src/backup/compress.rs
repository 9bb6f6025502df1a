//! The compressors, one per core: each takes the next chunk, runs the source's checks on it, and
//! encodes it into its spare pool buffer, which goes on to the writers as the frame's payload
//! while the chunk's own buffer becomes the next spare.

use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::auto::AutoLevel;
use super::check::{run_check, run_mend};
use super::job::{Job, Stored};
use crate::codec::{CodecKind, DecompressorSet};
use crate::error::{Error, Result};
use crate::format::{FrameHeader, FLAG_PACKED};
use crate::frame::{FrameEncoder, Payload};
use crate::pipeline::{PoolBuf, Shared};

/// A packed frame's chunk of one file, for the index.
pub(super) struct Part {
    pub(super) file_id: u32,
    /// Where its bytes belong in the file (0 for a whole small file).
    pub(super) offset: u64,
    pub(super) at: u32,
    pub(super) len: u32,
    pub(super) crc: u32,
    pub(super) hash: u128,
}

/// A frame on its way to the writers.
pub(super) struct Frame {
    pub(super) header: FrameHeader,
    /// The payload buffer (`header.stored_len` bytes of it are the payload); none for a zero frame.
    pub(super) buf: Option<PoolBuf>,
    /// A packed frame's chunks (empty otherwise).
    pub(super) parts: Vec<Part>,
    /// crc32c of the raw bytes (a sealed frame's header does not show it).
    pub(super) raw_crc: u32,
    /// The raw bytes' strong hash (0 for a zero chunk; packed frames have one per part).
    pub(super) hash: u128,
}

/// What one compressor did, for the report.
#[derive(Default)]
pub(super) struct CompressStats {
    pub(super) zero: u64,
    pub(super) raw: u64,
    /// Chunks framed as they came stored (not compressed here).
    pub(super) adopted: u64,
}

/// One compressor: `encoder` at `level` to start with, and its `spare` pool buffer to encode
/// into (none where the encoder never writes output: `none`, unsealed, sends the chunk as is).
pub(super) fn compress_loop(
    mut encoder: FrameEncoder,
    mut level: i32,
    mut spare: Option<PoolBuf>,
    auto: Option<&AutoLevel>,
    rx: &Receiver<Job>,
    tx: &Sender<Frame>,
    shared: &Shared,
) -> CompressStats {
    let mut stats = CompressStats::default();
    let mut decoders = DecompressorSet::default();
    loop {
        // How long this compressor waits for a chunk: `auto`'s measure of spare time.
        let waited = Instant::now();
        let Ok(mut job) = rx.recv() else { break };
        let idle = waited.elapsed();
        if shared.is_cancelled() {
            continue;
        }
        let Some(buf) = job.buf.take() else {
            stats.zero += 1;
            let header = FrameEncoder::hole(job.file_id, job.offset, job.len as u32);
            if tx.send(Frame { header, buf: None, parts: Vec::new(), raw_crc: header.raw_crc, hash: 0 }).is_err() {
                break;
            }
            continue;
        };
        if let Some(stored) = job.stored {
            let adopted = adopt(&encoder, &mut decoders, spare.as_deref_mut(), &job, buf, stored, shared);
            match adopted {
                Ok(frame) => {
                    stats.raw += u64::from(stored.codec == CodecKind::None);
                    stats.adopted += 1;
                    if tx.send(frame).is_err() {
                        break;
                    }
                }
                Err(e) => shared.fail(e),
            }
            continue;
        }
        let mut buf = buf;
        // Checked (and mended) before anything is summed: what is stored is what was checked.
        if let Some(c) = &job.check {
            run_mend(c, job.offset, &mut buf[..job.len], shared);
        }
        for m in job.members.iter().filter(|m| m.check.is_some()) {
            let c = m.check.as_ref().expect("filtered");
            run_mend(c, m.offset, &mut buf[m.at as usize..(m.at + m.len) as usize], shared);
        }
        let raw = &buf[..job.len];
        let mut parts = Vec::with_capacity(job.members.len());
        let mut raw_crc = if job.members.is_empty() { crc32c::crc32c(raw) } else { 0 };
        let mut hash = 0;
        if job.members.is_empty() {
            hash = crate::format::chunk_hash(raw);
        }
        for m in &job.members {
            let bytes = &raw[m.at as usize..(m.at + m.len) as usize];
            let crc = crc32c::crc32c(bytes);
            raw_crc = crate::crc::combine(raw_crc, crc, m.len.into());
            parts.push(Part { file_id: m.file_id, offset: m.offset, at: m.at, len: m.len, crc, hash: crate::format::chunk_hash(bytes) });
        }
        if let Some(auto) = auto {
            let want = auto.next(idle, tx.len());
            if want != level {
                if let Err(e) = encoder.set_level(want) {
                    shared.fail(e);
                    continue;
                }
                level = want;
            }
        }
        let flags = if parts.is_empty() { 0 } else { FLAG_PACKED };
        let out = spare.as_deref_mut().unwrap_or_default();
        let encoded = encoder.encode_checked(job.file_id, job.offset, raw, raw_crc, flags, out);
        let frame = match encoded {
            Ok((header, Payload::Zero)) => {
                stats.zero += 1;
                Frame { header, buf: None, parts, raw_crc, hash: 0 }
            }
            Ok((header, Payload::Raw)) => {
                stats.raw += u64::from(encoder.compresses());
                Frame { header, buf: Some(buf), parts, raw_crc, hash }
            }
            Ok((header, Payload::Packed(_))) => {
                // Sealed frames are all "packed" into the output, stored raw or not.
                stats.raw += u64::from(encoder.compresses() && header.codec == CodecKind::None as u8);
                // The spare carries the payload on; the chunk's buffer is the next spare.
                let payload = std::mem::replace(spare.as_mut().expect("an encoder that writes output has a spare"), buf);
                Frame { header, buf: Some(payload), parts, raw_crc, hash }
            }
            Err(e) => {
                shared.fail(e);
                continue;
            }
        };
        if tx.send(frame).is_err() {
            break;
        }
    }
    stats
}

/// The frame for a chunk its host compressed: expanded into `spare` (the raw bytes stored as
/// `none` are the buffer itself) to be checked against the host's checksum, to get its hash
/// and to run the source's checks on, then framed as it came (sealed when the backup is).
fn adopt(encoder: &FrameEncoder, decoders: &mut DecompressorSet, spare: Option<&mut [u8]>, job: &Job, mut buf: PoolBuf, stored: Stored, shared: &Shared) -> Result<Frame> {
    let raw: &[u8] = if stored.codec == CodecKind::None {
        &buf[..job.len]
    } else {
        let out = spare.filter(|s| s.len() >= job.len).ok_or_else(|| Error::invalid("internal: a compressor without room to expand a chunk compressed on the source's host"))?;
        decoders
            .decompress(stored.codec, &buf[..stored.len], &mut out[..job.len])
            .map_err(|e| e.context(format!("a chunk stored already (compressed on the source's host, or copied from another set: file {}, offset {})", job.file_id, job.offset)))?;
        &out[..job.len]
    };
    // A frame some of whose bytes are superseded goes as a packed frame: its members (which tile
    // it) each with their own checksums, which combine to the frame's, checked here, so that no
    // byte is summed twice.
    let mut parts = Vec::with_capacity(job.members.len());
    let mut raw_crc = if job.members.is_empty() { crc32c::crc32c(raw) } else { 0 };
    for m in &job.members {
        let bytes = &raw[m.at as usize..(m.at + m.len) as usize];
        let crc = crc32c::crc32c(bytes);
        raw_crc = crate::crc::combine(raw_crc, crc, m.len.into());
        let hash = if m.file_id == crate::format::SUPERSEDED { 0 } else { crate::format::chunk_hash(bytes) };
        parts.push(Part { file_id: m.file_id, offset: m.offset, at: m.at, len: m.len, crc, hash });
    }
    if raw_crc != stored.raw_crc {
        return Err(Error::corrupt(format!(
            "a chunk stored already (compressed on the source's host, or copied from another set: file {}, offset {}) does not expand to the bytes it was made from (crc32c {raw_crc:08x}, not {:08x})",
            job.file_id, job.offset, stored.raw_crc
        )));
    }
    if let Some(c) = &job.check {
        run_check(c, job.offset, raw, shared);
    }
    let (hash, flags) = if parts.is_empty() { (crate::format::chunk_hash(raw), 0) } else { (0, FLAG_PACKED) };
    let at = FrameHeader { file_id: job.file_id, offset: job.offset, raw_len: job.len as u32, stored_len: 0, codec: stored.codec as u8, flags, raw_crc, stored_crc: 0 };
    let (header, _) = encoder.adopt(at, &mut buf, stored.len)?;
    Ok(Frame { header, buf: Some(buf), parts, raw_crc, hash })
}
