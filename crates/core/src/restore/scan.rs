//! The read side of restore and verify: every stripe read as one sequential stream (one reader
//! per stripe, stepping over runs of frames nobody wants), every frame checked against the index
//! and both checksums, decompressed on every core into aligned pool buffers, and each chunk
//! handed to a [`ChunkSink`] through one [`Lane`] per decompressor thread.

use std::io::Read;
use std::sync::Arc;
use std::thread;

use crossbeam_channel::bounded;

use crate::aligned::AlignedBuf;
pub(crate) use crate::backup::Kept;
use crate::codec::CodecKind;
use crate::crypto::FRAME_OVERHEAD;
use crate::error::{Error, Result};
use crate::format::{FrameHeader, IndexEntry, FLAG_PACKED, FRAME_HEADER_LEN, MAX_ZERO_FRAME};
use crate::frame::FrameDecoder;
use crate::pipeline::{Pool, PoolBuf, Progress, Shared};
use crate::set::{BackupSet, OpenStripe};
use crate::stop::Stop;
use crate::storage::from_io;

/// A decompressed chunk in an aligned buffer of its own, back in the pool when dropped.
pub(super) type Decoded = PoolBuf<AlignedBuf>;

/// Receives each verified, decompressed chunk, through one [`Lane`] per decompressor thread.
pub(super) trait ChunkSink: Sync {
    /// The calling decompressor thread's lane.
    ///
    /// # Errors
    /// What stops the sink from taking chunks at all.
    fn lane(&self) -> Result<Box<dyn Lane + '_>>;

    /// How many [`Decoded`] buffers one lane may hold at once (they are added to the pool).
    fn holds(&self) -> usize {
        0
    }

    /// Whether chunks of file `file_id` are wanted: a frame none of whose chunks is wanted is not
    /// read at all (restoring less than everything).
    fn wants(&self, _file_id: u32) -> bool {
        true
    }

    /// Whether the chunk an index entry names is wanted (a chain's older sets give only parts of
    /// their files); by default, whether its file is.
    fn wants_chunk(&self, e: &IndexEntry) -> bool {
        self.wants(e.file_id)
    }
}

/// What a scan did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Scanned {
    /// Frames read and handed on.
    pub frames: u64,
    /// Bytes read from the stripes (frame headers and payloads; the opening reads aside).
    pub bytes_read: u64,
}

/// A piece of a decompressed frame: its file, its offset there, and where it is in the frame.
pub(super) type Piece = (u32, u64, std::ops::Range<usize>);

/// One decompressor thread's way into a [`ChunkSink`].
pub(super) trait Lane {
    /// `data` is the chunk's raw bytes, or `None` for an all-zero chunk of `len` bytes.
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()>;

    /// A whole frame's chunk in its own buffer (not one of a packed frame's): the lane may keep it
    /// (a write in flight) and return at once. By default, as [`Lane::chunk`].
    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        self.chunk(file_id, offset, data.len(), Some(&data))
    }

    /// Pieces of a frame's raw bytes in their own buffer, each `(file, offset in the file, range
    /// of data)`: a packed frame's members, or a chunk that newer sets of a chain cut into. The
    /// lane may keep the buffer while the pieces are written. Each piece counts as one write. By
    /// default, each as [`Lane::chunk`].
    fn owned_pieces(&mut self, data: Decoded, pieces: &[Piece]) -> Result<()> {
        for (file_id, offset, r) in pieces {
            self.chunk(*file_id, *offset, r.len(), Some(&data[r.clone()]))?;
        }
        Ok(())
    }

    /// Whether the lane takes the frame whose file bytes are `live` (its members' ranges, of
    /// `raw_len` raw bytes stored by `codec`) as it is stored, not decompressed here: what
    /// consolidation does to copy frames. A lane that stands between may rewrite `live` (a chain
    /// keeps only the bytes a set gives, under the newest set's file ids). By default, no.
    fn takes_stored(&mut self, _raw_len: usize, _codec: CodecKind, _live: &mut Vec<Kept>) -> bool {
        false
    }

    /// The payload of a frame the lane said it takes stored ([`Lane::takes_stored`]), its stored
    /// checksum checked; `raw_crc` is its raw bytes' for the lane to check once expanded.
    fn stored(&mut self, _raw_len: usize, _codec: CodecKind, _payload: &[u8], _raw_crc: u32, _live: &[Kept]) -> Result<()> {
        Err(Error::invalid("internal: a stored frame handed to a lane that takes none"))
    }

    /// No more chunks: finish what the lane still holds.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

struct Encoded {
    stripe: usize,
    /// Frame number in the stripe (from 0), for messages.
    frame: usize,
    /// Its index entries (more than one when packed).
    members: Vec<IndexEntry>,
    header: FrameHeader,
    buf: Option<PoolBuf>,
}

/// Read, check and decompress every frame the sink wants; hand chunks to `sink`.
pub(super) fn scan(set: &BackupSet, threads: Option<usize>, progress: Arc<dyn Progress>, stop: &Stop, sink: &dyn ChunkSink) -> Result<Scanned> {
    let ts = set.stripes[0].header.transfer_size as usize;
    let resumed = set.manifest.resumed.is_some();
    let threads = threads.unwrap_or_else(crate::host::available_cores).max(1);
    let buffers = set.stripes.len() * 4 + 2 * threads;
    let shared = Shared::stoppable(progress, Some(stop.clone()));
    shared.progress.begin("read", set.raw_bytes());
    let pool = Pool::new(buffers, FRAME_HEADER_LEN + ts + FRAME_OVERHEAD);
    // Aligned, so that decompressed chunks go to disk with direct I/O as they are.
    let out = Pool::<AlignedBuf>::new(threads * (1 + sink.holds()), ts);
    let (tx, rx) = bounded::<Encoded>(buffers);
    // Frames sent on, and their bytes.
    let sent = &(std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0));
    let frames = thread::scope(|s| {
        for (k, stripe) in set.stripes.iter().enumerate() {
            let (tx, shared, pool) = (tx.clone(), &shared, &pool);
            s.spawn(move || {
                if let Err(e) = read_stripe(k, stripe, ts, &tx, shared, pool, sink, sent, resumed) {
                    shared.fail(e);
                }
            });
        }
        drop(tx);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (rx, shared, out) = (rx.clone(), &shared, &out);
                s.spawn(move || decode_loop(set, &rx, shared, out, sink))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    shared.fail(Error::new(crate::error::ErrorKind::Io, "a decompressor thread panicked"));
                    0
                })
            })
            .sum::<u64>()
    });
    shared.progress.end();
    if let Some(e) = shared.take_error() {
        return Err(e);
    }
    stop.check()?;
    let expected = sent.0.load(std::sync::atomic::Ordering::Relaxed);
    if frames != expected {
        return Err(Error::new(crate::error::ErrorKind::Io, format!("internal: {frames} of {expected} frames were processed")));
    }
    Ok(Scanned { frames, bytes_read: sent.1.load(std::sync::atomic::Ordering::Relaxed) })
}

#[allow(clippy::too_many_arguments)]
fn read_stripe(
    k: usize,
    s: &OpenStripe,
    ts: usize,
    tx: &crossbeam_channel::Sender<Encoded>,
    shared: &Shared,
    pool: &Arc<Pool>,
    sink: &dyn ChunkSink,
    sent: &(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
    resumed: bool,
) -> Result<()> {
    // Frames are contiguous from the header to the index: one sequential stream, which stores with
    // latency (objects) read ahead of us, bounded. A run of frames nobody wants is stepped over:
    // the stream starts again at the next wanted one.
    let start = s.header.encoded_len() as u64;
    let mut stream: Option<(Box<dyn Read + Send>, u64)> = None;
    let mut expect_pos = start;
    // A sealed frame adds its number, tag and raw checksum to the stored bytes, and keeps the raw
    // checksum out of its header: the decoder checks it against the index once opened.
    let sealed = s.cipher.is_some();
    let stored_max = ts + if sealed { FRAME_OVERHEAD } else { 0 };
    for (i, members) in s.frames()?.enumerate() {
        if shared.is_cancelled() {
            return Ok(());
        }
        let members = members?;
        let e = &members[0];
        let here = |what: &str| Error::corrupt(format!("stripe {}: frame {} at byte {}: {what}", s.location, i + 1, e.frame_pos));
        // A zero frame has no payload, so it is not bound by the chunk size (a sparse file's hole).
        let raw_max = if e.stored_len == 0 { MAX_ZERO_FRAME as usize } else { ts };
        if e.frame_pos != expect_pos || e.raw_len as usize > raw_max || e.stored_len as usize > stored_max {
            return Err(here("the index places it where no frame can be (index inconsistent)"));
        }
        let n = FRAME_HEADER_LEN + e.stored_len as usize;
        if e.frame_pos + n as u64 > s.trailer.index_offset {
            return Err(here("the index says it runs into the index itself (index inconsistent)"));
        }
        if !members.iter().any(|m| !m.is_superseded() && sink.wants_chunk(m)) {
            expect_pos += n as u64;
            continue;
        }
        let Some(mut buf) = pool.take(shared) else { return Ok(()) };
        let (reader, at) = match stream.take() {
            Some((r, at)) if at == e.frame_pos => (r, at),
            _ => (s.source.stream(e.frame_pos, s.trailer.index_offset)?, e.frame_pos),
        };
        let mut reader = reader;
        reader.read_exact(&mut buf[..n]).map_err(|err| from_io(err, || format!("stripe {}: frame {} at byte {}", s.location, i + 1, e.frame_pos)))?;
        stream = Some((reader, at + n as u64));
        sent.1.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        let header = FrameHeader::decode(&buf[..FRAME_HEADER_LEN]).map_err(|err| here(err.message()))?;
        let crc_shown = if sealed && header.stored_len != 0 { None } else { Some(header.raw_crc) };
        let agrees = crate::format::frame_agrees(&header, &members, crc_shown, resumed);
        if !agrees {
            return Err(here("frame header disagrees with the index"));
        }
        expect_pos += n as u64;
        let buf = (header.stored_len != 0).then_some(buf);
        sent.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if tx.send(Encoded { stripe: k, frame: i, members, header, buf }).is_err() {
            return Ok(());
        }
    }
    if expect_pos != s.trailer.index_offset {
        return Err(Error::corrupt(format!("stripe {}: frames end at byte {expect_pos} but the index starts at {} (index inconsistent)", s.location, s.trailer.index_offset)));
    }
    Ok(())
}

/// The raw checksum a frame's index entries give it (its one entry's, or its members' combined).
fn index_crc(members: &[IndexEntry]) -> u32 {
    members.iter().fold(0, |crc, m| crate::crc::combine(crc, m.raw_crc, m.raw_len.into()))
}

fn decode_loop(set: &BackupSet, rx: &crossbeam_channel::Receiver<Encoded>, shared: &Shared, out: &Arc<Pool<AlignedBuf>>, sink: &dyn ChunkSink) -> u64 {
    let mut lane = match sink.lane() {
        Ok(l) => l,
        Err(e) => {
            shared.fail(e);
            return 0;
        }
    };
    let mut decoder = FrameDecoder::new(set.cipher.clone());
    let mut frames = 0;
    for mut job in rx {
        if shared.is_cancelled() {
            continue;
        }
        // Waits while the sink holds every other buffer (writes queued behind a slow disk).
        let Some(out) = out.take(shared) else { continue };
        let r = decode_one(set, &mut job, &mut decoder, out, lane.as_mut());
        drop(job.buf);
        match r {
            Ok(()) => {
                frames += 1;
                shared.count(job.header.raw_len as u64);
            }
            Err(e) => shared.fail(e),
        }
    }
    // Writes still in flight count as done only once they are.
    if let Err(e) = lane.finish() {
        shared.fail(e);
    }
    frames
}

fn decode_one(set: &BackupSet, job: &mut Encoded, decoder: &mut FrameDecoder, mut out: Decoded, sink: &mut dyn Lane) -> Result<()> {
    let h = &job.header;
    let s = &set.stripes[job.stripe];
    let members = &job.members;
    let here = |what: String| {
        let parts = members.len();
        let packed = if parts > 1 { format!(", packed with {} more files", parts - 1) } else { String::new() };
        // Only a failure needs the file's name: a set opened lean reads it from its page.
        let id = members[0].file_id;
        let path = set.entry(id).map_or_else(|_| format!("file id {id}"), |e| e.path);
        Error::corrupt(format!(
            "stripe {}: frame {} at byte {} ({} bytes at offset {} of {path}{packed}): {what}",
            s.location,
            job.frame + 1,
            members[0].frame_pos,
            h.raw_len,
            h.offset,
        ))
    };
    // A frame in the clear that the sink takes as it is stored: its stored checksum checked here,
    // its raw one where the sink expands it.
    let codec = CodecKind::from_id(h.codec).filter(|_| set.cipher.is_none() && h.stored_len != 0);
    if let (Some(codec), Some(buf)) = (codec, job.buf.as_ref()) {
        let mut live: Vec<Kept> = members.iter().filter(|m| !m.is_superseded()).map(|m| Kept { file_id: m.file_id, offset: m.offset, at: m.frame_off, len: m.raw_len }).collect();
        if sink.takes_stored(h.raw_len as usize, codec, &mut live) {
            let payload = &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.stored_len as usize];
            if crc32c::crc32c(payload) != h.stored_crc {
                return Err(here("payload checksum mismatch (the stored bytes are damaged)".into()));
            }
            return sink.stored(h.raw_len as usize, codec, payload, h.raw_crc, &live);
        }
    }
    let stored = job.buf.as_mut().map(|b| &mut b[FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.stored_len as usize]);
    let (raw, crc) = decoder.decode(h, stored, &mut out).map_err(here)?;
    if set.cipher.is_some() && crc != index_crc(members) {
        // Shown in the clear, the checksum was compared when the frame was read; sealed, now.
        return Err(here("frame disagrees with the index (the index or the frame was replaced)".into()));
    }
    if h.flags & FLAG_PACKED == 0 {
        // The index names the file: in a resumed set, the header may name it by an earlier
        // attempt's id.
        let id = members[0].file_id;
        if raw.is_none() {
            return sink.chunk(id, h.offset, h.raw_len as usize, None);
        }
        out.set_len(h.raw_len as usize);
        return sink.owned(id, h.offset, out);
    }
    let live = members.iter().filter(|m| !m.is_superseded());
    // Its members in the frame's own buffer, so that the large ones (runs of pages, a copied
    // frame's ranges) go to the disk directly while the thread goes on.
    if raw.is_some() {
        let pieces: Vec<Piece> = live.map(|m| (m.file_id, m.offset, m.frame_off as usize..(m.frame_off + m.raw_len) as usize)).collect();
        out.set_len(h.raw_len as usize);
        return sink.owned_pieces(out, &pieces);
    }
    for m in live {
        let (at, len) = (m.frame_off as usize, m.raw_len as usize);
        sink.chunk(m.file_id, m.offset, len, raw.map(|r| &r[at..at + len]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed frame of three files and its index entries, as a backup writes them.
    fn packed() -> (FrameHeader, Vec<IndexEntry>) {
        let files: [&[u8]; 3] = [b"first file", b"second", b"third and last"];
        let mut entries = Vec::new();
        let (mut at, mut crc) = (0u32, 0u32);
        for (i, f) in files.iter().enumerate() {
            let c = crc32c::crc32c(f);
            entries.push(IndexEntry { file_id: 5 + i as u32, offset: 0, frame_pos: 64, raw_len: f.len() as u32, stored_len: 20, raw_crc: c, frame_off: at, hash: 0 });
            at += f.len() as u32;
            crc = crate::crc::combine(crc, c, f.len() as u64);
        }
        assert_eq!(crc, crc32c::crc32c(&files.concat()));
        let h = FrameHeader { file_id: 5, offset: 0, raw_len: at, stored_len: 20, codec: 3, flags: FLAG_PACKED, raw_crc: crc, stored_crc: 0 };
        (h, entries)
    }

    #[test]
    fn a_packed_frames_index_entries_must_tile_it_and_combine_to_its_checksum() {
        let (h, e) = packed();
        assert!(crate::format::frame_agrees(&h, &e, Some(h.raw_crc), false));
        // A resumed set's frame may name its first file by an earlier attempt's id; nothing else
        // may differ.
        let other = FrameHeader { file_id: 6, ..h };
        assert!(crate::format::frame_agrees(&other, &e, Some(h.raw_crc), true));
        assert!(!crate::format::frame_agrees(&FrameHeader { offset: 1, ..other }, &e, Some(h.raw_crc), true));
        assert_eq!(crate::set::frames_of(&e).collect::<Vec<_>>(), vec![(0, 3)]);
        type Damage = fn(&mut FrameHeader, &mut Vec<IndexEntry>);
        let broken: [(&str, Damage); 7] = [
            ("a gap", |_, e| e[1].frame_off += 1),
            ("a member missing", |_, e| e.truncate(2)),
            ("another member's checksum", |_, e| e[2].raw_crc ^= 1),
            ("members swapped", |_, e| e.swap(0, 1)),
            ("a different first file", |h, _| h.file_id = 6),
            ("another stored length", |_, e| e[1].stored_len = 21),
            ("an empty member", |_, e| e.push(IndexEntry { raw_len: 0, frame_off: 30, ..e[0] })),
        ];
        for (what, damage) in broken {
            let (mut h, mut e) = packed();
            damage(&mut h, &mut e);
            assert!(!crate::format::frame_agrees(&h, &e, Some(h.raw_crc), false), "{what} not caught");
        }
    }
}
