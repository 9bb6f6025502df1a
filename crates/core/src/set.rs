//! Opening a backup set for reading, and the scan that verify and restore share.
//!
//! Opening reads each stripe's header, trailer, index and manifest, finds the stripes it was not
//! given (beside a given one, by the names in the manifest, then where the backup wrote them), and
//! refuses a set that is incomplete, mixed with another backup's stripes, or damaged, naming the
//! stripe and the region. The scan then reads every frame of every stripe (one reader per stripe),
//! checks each frame against the index and both checksums, decompresses in parallel and hands each
//! chunk to a sink.

use std::io::Read;
use std::sync::Arc;
use std::thread;

use crossbeam_channel::bounded;

use crate::backup::available_cores;
use crate::crypto::{Cipher, Keys, FRAME_OVERHEAD, NONCE_INDEX, NONCE_MANIFEST};
use crate::frame::FrameDecoder;
use crate::error::{Error, Result};
use crate::format::{FrameHeader, IndexEntry, StripeHeader, Trailer, FLAG_PACKED, FRAME_HEADER_LEN, HEADER_LEN, MAX_ZERO_FRAME, TRAILER_LEN};
use crate::manifest::{file_checksums, ChunkRef, Manifest, TileFault};
use crate::aligned::AlignedBuf;
use crate::pipeline::{Pool, PoolBuf, Progress, Shared};
use crate::storage::{from_io, Location, Schemes, StripeSource};

/// The frames of an index: runs of adjacent entries that share a frame position (a packed frame
/// has one entry per chunk it holds), as `(first entry, entries)`.
pub fn frames_of(index: &[IndexEntry]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= index.len() {
            return None;
        }
        let pos = index[i].frame_pos;
        let n = index[i..].iter().take_while(|e| e.frame_pos == pos).count();
        i += n;
        Some((i - n, n))
    })
}

/// One opened stripe.
pub struct OpenStripe {
    /// Where it is.
    pub location: Location,
    /// Its header.
    pub header: StripeHeader,
    /// Its trailer.
    pub trailer: Trailer,
    /// Its frame index.
    pub index: Vec<IndexEntry>,
    source: Box<dyn StripeSource>,
    cipher: Option<Arc<Cipher>>,
}

/// A complete, consistent backup set ready to read.
pub struct BackupSet {
    /// Stripes in stripe order.
    pub stripes: Vec<OpenStripe>,
    /// The manifest (identical in every stripe).
    pub manifest: Manifest,
    /// The data key, when the set is encrypted.
    cipher: Option<Arc<Cipher>>,
}

fn at(loc: &Location) -> impl Fn(Error) -> Error + '_ {
    move |e| e.context(format!("stripe {loc}"))
}

fn open_stripe(loc: &Location, keys: Option<&Keys>) -> Result<(OpenStripe, Vec<u8>)> {
    let src = loc.open()?;
    let len = src.len();
    if len < (HEADER_LEN + TRAILER_LEN) as u64 {
        return Err(Error::incomplete(format!(
            "stripe {}: {len} bytes is too short to be a stripe (truncated, or its backup never finished)",
            loc
        )));
    }
    let mut hb = vec![0u8; HEADER_LEN];
    src.read_exact_at(&mut hb, 0)?;
    let whole = StripeHeader::len_from(&hb);
    if whole > HEADER_LEN && len >= (whole + TRAILER_LEN) as u64 {
        hb.resize(whole, 0);
        src.read_exact_at(&mut hb[HEADER_LEN..], HEADER_LEN as u64)?;
    }
    let header = StripeHeader::decode(&hb).map_err(at(loc))?;
    let cipher = crate::crypto::cipher_for(header.key_block.as_ref(), keys, &format!("stripe {loc}"))?;
    let mut tb = [0u8; TRAILER_LEN];
    src.read_exact_at(&mut tb, len - TRAILER_LEN as u64)?;
    let trailer = Trailer::decode(&tb).map_err(at(loc))?;
    if trailer.backup_id != header.backup_id
        || trailer.stripe_index != header.stripe_index
        || trailer.stripe_count != header.stripe_count
    {
        return Err(Error::corrupt(format!("stripe {}: trailer and header disagree on backup id or stripe number", loc)));
    }
    let index_end = trailer.index_offset.checked_add(trailer.index_len);
    let manifest_end = trailer.manifest_offset.checked_add(trailer.manifest_len);
    if trailer.index_offset < header.encoded_len() as u64
        || index_end != Some(trailer.manifest_offset)
        || manifest_end != Some(len - TRAILER_LEN as u64)
    {
        return Err(Error::corrupt(format!("stripe {}: trailer: region offsets do not fit the file", loc)));
    }
    let mut ib = vec![0u8; trailer.index_len as usize];
    src.read_exact_at(&mut ib, trailer.index_offset)?;
    if crc32c::crc32c(&ib) != trailer.index_crc {
        return Err(Error::corrupt(format!("stripe {}: index: checksum mismatch (the frame index is damaged)", loc)));
    }
    if let Some(c) = &cipher {
        let n = c
            .open_region(NONCE_INDEX, u64::from(header.stripe_index), &mut ib)
            .map_err(|e| Error::corrupt(format!("stripe {loc}: index: {e}")))?;
        ib.truncate(n);
    }
    let index = IndexEntry::decode_all(&ib, header.version).map_err(at(loc))?;
    if index.len() as u64 != trailer.frame_count {
        return Err(Error::corrupt(format!("stripe {}: index: {} entries, trailer says {}", loc, index.len(), trailer.frame_count)));
    }
    let mut mb = vec![0u8; trailer.manifest_len as usize];
    src.read_exact_at(&mut mb, trailer.manifest_offset)?;
    if crc32c::crc32c(&mb) != trailer.manifest_crc {
        return Err(Error::corrupt(format!("stripe {}: manifest: checksum mismatch (the manifest is damaged)", loc)));
    }
    Ok((OpenStripe { location: loc.clone(), header, trailer, index, source: src, cipher }, mb))
}

impl BackupSet {
    /// Open the set that `given` stripes belong to; any one stripe is enough when the others are
    /// beside it or where the backup wrote them.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Incomplete`] for a missing, truncated or unfinished stripe; [`crate::ErrorKind::Corrupt`]
    /// for a damaged region (both also for stripes of different sets).
    pub fn open(given: &[Location], schemes: &dyn Schemes) -> Result<BackupSet> {
        Self::open_with(given, schemes, None)
    }

    /// [`BackupSet::open`] with the keys of an encrypted set (ignored for a set that is not).
    ///
    /// # Errors
    /// As [`BackupSet::open`]; [`ErrorKind::Key`] for an encrypted set without keys or with the
    /// wrong ones, before any frame is read.
    pub fn open_with(given: &[Location], schemes: &dyn Schemes, keys: Option<&Keys>) -> Result<BackupSet> {
        if given.is_empty() {
            return Err(Error::invalid("no stripe given: name at least one stripe file of the backup"));
        }
        let mut slots: Vec<Option<OpenStripe>> = Vec::new();
        let mut manifest: Option<(Manifest, Vec<u8>, Location)> = None;
        for p in given {
            let (s, mb) = open_stripe(p, keys)?;
            let (m, first_mb, first_path) = match &manifest {
                Some(x) => (&x.0, &x.1, &x.2),
                None => {
                    let m = open_manifest(&s, &mb)?;
                    slots.resize_with(m.stripes.len(), || None);
                    manifest = Some((m, mb.clone(), p.clone()));
                    let x = manifest.as_ref().expect("just set");
                    (&x.0, &x.1, &x.2)
                }
            };
            check_member(&s, m, &mb, first_mb, first_path)?;
            let k = s.header.stripe_index as usize;
            if slots[k].is_some() {
                return Err(Error::invalid(format!("stripe {} of the set is given twice (again as {p})", k + 1)));
            }
            slots[k] = Some(s);
        }
        let (manifest, first_mb, first_path) = manifest.expect("at least one stripe");
        let n = slots.len();
        // Indexing by k reads better than zipping three sequences here.
        #[allow(clippy::needless_range_loop)]
        for k in 0..n {
            if slots[k].is_some() {
                continue;
            }
            let r = &manifest.stripes[k];
            let mut looked: Vec<String> = Vec::new();
            // Beside each given stripe (same folder or prefix), then where the backup wrote it.
            let mut candidates: Vec<Location> = given.iter().map(|g| g.sibling(&r.name)).collect();
            if let Ok(original) = Location::parse(&r.path, schemes) {
                candidates.push(original);
            }
            for c in candidates {
                let shown = c.display();
                if looked.contains(&shown) {
                    continue;
                }
                looked.push(shown);
                if !c.exists()? {
                    continue;
                }
                let (s, mb) = open_stripe(&c, keys)?;
                check_member(&s, &manifest, &mb, &first_mb, &first_path)?;
                if s.header.stripe_index as usize == k {
                    slots[k] = Some(s);
                    break;
                }
            }
            if slots[k].is_none() {
                return Err(Error::incomplete(format!(
                    "backup {} has {n} stripes and stripe {} ({}) is missing: looked for {}; name it on the command line",
                    manifest.backup_id,
                    k + 1,
                    r.name,
                    looked.join(", ")
                )));
            }
        }
        let stripes: Vec<OpenStripe> = slots.into_iter().map(|s| s.expect("all found")).collect();
        if stripes.iter().any(|s| s.cipher.is_some() != stripes[0].cipher.is_some()) {
            return Err(Error::corrupt("some stripes of the set are encrypted and some are not (a header is damaged)"));
        }
        let cipher = stripes[0].cipher.clone();
        let set = BackupSet { stripes, manifest, cipher };
        set.check_coverage()?;
        Ok(set)
    }

    /// Every file's chunks, across all stripes, tile it exactly and combine to its crc.
    fn check_coverage(&self) -> Result<()> {
        let entries = &self.manifest.entries;
        let chunks = self
            .stripes
            .iter()
            .enumerate()
            .flat_map(|(k, s)| s.index.iter().map(move |e| ChunkRef { file_id: e.file_id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k }))
            .collect();
        let sums = file_checksums(entries, chunks).map_err(|f| match f {
            TileFault::Gap { entry, at, expected, stripe } => Error::corrupt(format!(
                "file {}: chunk at offset {at} (stripe {}) does not follow byte {expected}: the index is inconsistent",
                entries[entry].path,
                self.stripes[stripe].location
            )),
            TileFault::Coverage { entry, covered } => match entries.get(entry) {
                Some(e) => Error::corrupt(format!("file {}: its chunks cover {covered} of {} bytes: the set is inconsistent", e.path, e.size)),
                None => Error::corrupt(format!("an index names file id {entry}, which the manifest does not have")),
            },
        })?;
        for (e, sum) in entries.iter().zip(sums) {
            if e.crc32c.is_some() && e.crc32c != sum {
                return Err(Error::corrupt(format!("file {}: its chunks do not combine to its checksum: the set is inconsistent", e.path)));
            }
        }
        Ok(())
    }

    /// Whether the set is encrypted.
    pub fn encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    /// Raw bytes in all frames.
    pub fn raw_bytes(&self) -> u64 {
        self.stripes.iter().flat_map(|s| s.index.iter()).map(|e| e.raw_len as u64).sum()
    }

    /// Bytes of all stripes.
    pub fn stored_bytes(&self) -> u64 {
        self.stripes.iter().map(|s| s.source.len()).sum()
    }
}

/// One file of a set, read in parts from only the frames that hold them: what extracting a
/// relation or a single page needs, without a pass over the whole set. Every frame read is checked
/// as a full scan checks it (frame header against the index, stored checksum, seal, codec, raw
/// checksum against the index).
pub struct FileInSet<'a> {
    set: &'a BackupSet,
    file_id: u32,
    /// Its chunks in offset order: stripe and index entry.
    chunks: Vec<(usize, IndexEntry)>,
    decoder: FrameDecoder,
    frame: Vec<u8>,
    raw: Vec<u8>,
    /// Bytes read from the stripes so far (frame headers and payloads).
    pub bytes_read: u64,
}

impl BackupSet {
    /// The file at position `file_id` of the manifest's entries, for reading in parts.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidInput`] for an entry that is not a regular file.
    pub fn file(&self, file_id: u32) -> Result<FileInSet<'_>> {
        let entry = self.manifest.entries.get(file_id as usize).ok_or_else(|| Error::invalid(format!("the backup has no entry {file_id}")))?;
        if entry.kind != crate::manifest::EntryKind::File {
            return Err(Error::invalid(format!("{} is not a regular file in the backup", entry.path)));
        }
        let mut chunks: Vec<(usize, IndexEntry)> =
            self.stripes.iter().enumerate().flat_map(|(k, s)| s.index.iter().filter(|e| e.file_id == file_id).map(move |e| (k, *e))).collect();
        chunks.sort_by_key(|(_, e)| e.offset);
        let ts = self.stripes[0].header.transfer_size as usize;
        Ok(FileInSet {
            set: self,
            file_id,
            chunks,
            decoder: FrameDecoder::new(self.cipher.clone()),
            frame: vec![0u8; FRAME_HEADER_LEN + ts + FRAME_OVERHEAD],
            raw: vec![0u8; ts],
            bytes_read: 0,
        })
    }
}

impl FileInSet<'_> {
    /// The file's size in the backup.
    pub fn size(&self) -> u64 {
        self.set.manifest.entries[self.file_id as usize].size
    }

    /// Fill `out` with the file's bytes from `offset`.
    ///
    /// # Errors
    /// A range past the file's end ([`crate::ErrorKind::InvalidInput`]); a missing chunk or a
    /// damaged frame ([`crate::ErrorKind::Corrupt`], naming stripe and frame); read errors.
    pub fn read_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.size()).ok_or_else(|| {
            Error::invalid(format!("bytes {offset}..+{} are past the end of {} ({} bytes)", out.len(), self.set.manifest.entries[self.file_id as usize].path, self.size()))
        })?;
        let mut at = offset;
        while at < end {
            // The chunk holding byte `at`: the last one starting at or before it.
            let i = self.chunks.partition_point(|(_, e)| e.offset <= at);
            let (k, e) = match i.checked_sub(1).map(|i| self.chunks[i]) {
                Some(c) if at < c.1.offset + u64::from(c.1.raw_len) => c,
                _ => return Err(Error::corrupt(format!("{}: no chunk holds byte {at} (the index is inconsistent)", self.set.manifest.entries[self.file_id as usize].path))),
            };
            let take = (end.min(e.offset + u64::from(e.raw_len)) - at) as usize;
            let from = (at - e.offset) as usize;
            let dst = &mut out[(at - offset) as usize..(at - offset) as usize + take];
            match self.chunk(k, &e)? {
                Some(raw) => dst.copy_from_slice(&raw[from..from + take]),
                None => dst.fill(0),
            }
            at += take as u64;
        }
        Ok(())
    }

    /// The raw bytes of one chunk, checked; `None` for a zero chunk.
    fn chunk(&mut self, k: usize, e: &IndexEntry) -> Result<Option<&[u8]>> {
        let s = &self.set.stripes[k];
        let here = |what: &str| Error::corrupt(format!("stripe {}: frame at byte {}: {what}", s.location, e.frame_pos));
        let n = FRAME_HEADER_LEN + e.stored_len as usize;
        if n > self.frame.len() || e.frame_pos < s.header.encoded_len() as u64 || e.frame_pos + n as u64 > s.trailer.index_offset {
            return Err(here("the index places it where no frame can be (index inconsistent)"));
        }
        s.source.read_exact_at(&mut self.frame[..n], e.frame_pos)?;
        self.bytes_read += n as u64;
        let h = FrameHeader::decode(&self.frame[..FRAME_HEADER_LEN]).map_err(|err| here(err.message()))?;
        let agrees = if h.flags & FLAG_PACKED != 0 {
            h.stored_len == e.stored_len && u64::from(e.frame_off) + u64::from(e.raw_len) <= u64::from(h.raw_len)
        } else {
            h.flags == 0 && e.frame_off == 0 && h.file_id == e.file_id && h.offset == e.offset && h.raw_len == e.raw_len && h.stored_len == e.stored_len
        };
        if !agrees {
            return Err(here("frame header disagrees with the index"));
        }
        if h.stored_len == 0 {
            self.decoder.decode(&h, None, &mut []).map_err(|err| here(&err))?;
            return Ok(None);
        }
        if h.raw_len as usize > self.raw.len() {
            return Err(here("frame larger than the chunk size"));
        }
        let (raw, crc) = self.decoder.decode(&h, Some(&mut self.frame[FRAME_HEADER_LEN..n]), &mut self.raw).map_err(|err| here(&err))?;
        let raw = raw.expect("a frame with a payload");
        let (from, len) = (e.frame_off as usize, e.raw_len as usize);
        let ours = if h.flags & FLAG_PACKED != 0 { crc32c::crc32c(&raw[from..from + len]) } else { crc };
        if ours != e.raw_crc {
            return Err(here("frame disagrees with the index (the index or the frame was replaced)"));
        }
        Ok(Some(&raw[from..from + len]))
    }
}

fn open_manifest(s: &OpenStripe, mb: &[u8]) -> Result<Manifest> {
    let Some(c) = &s.cipher else { return Manifest::from_stored_bytes(mb).map_err(at(&s.location)) };
    let mut plain = mb.to_vec();
    let n = c.open_region(NONCE_MANIFEST, 0, &mut plain).map_err(|e| Error::corrupt(format!("stripe {}: manifest: {e}", s.location)))?;
    Manifest::from_stored_bytes(&plain[..n]).map_err(at(&s.location))
}

fn check_member(s: &OpenStripe, m: &Manifest, mb: &[u8], first_mb: &[u8], first: &Location) -> Result<()> {
    if s.header.backup_id.to_hex() != m.backup_id {
        return Err(Error::incomplete(format!(
            "stripe {} belongs to backup {}, not to backup {} of {first}: do not mix stripes of different backups",
            s.location,
            s.header.backup_id.to_hex(),
            m.backup_id
        )));
    }
    if s.header.stripe_count as usize != m.stripes.len() || s.header.stripe_index as usize >= m.stripes.len() {
        return Err(Error::corrupt(format!("stripe {}: stripe number does not fit the set", s.location)));
    }
    if mb != first_mb {
        return Err(Error::corrupt(format!("stripe {}: manifest differs from that of {first}", s.location)));
    }
    Ok(())
}

/// A decompressed chunk in an aligned buffer of its own, back in the pool when dropped.
pub(crate) type Decoded = PoolBuf<AlignedBuf>;

/// Receives each verified, decompressed chunk, through one [`Lane`] per decompressor thread.
pub(crate) trait ChunkSink: Sync {
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
}

/// What a scan did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Scanned {
    /// Frames read and handed on.
    pub frames: u64,
    /// Bytes read from the stripes (frame headers and payloads; the opening reads aside).
    pub bytes_read: u64,
}

/// One decompressor thread's way into a [`ChunkSink`].
pub(crate) trait Lane {
    /// `data` is the chunk's raw bytes, or `None` for an all-zero chunk of `len` bytes.
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()>;

    /// A whole frame's chunk in its own buffer (not one of a packed frame's): the lane may keep it
    /// (a write in flight) and return at once. By default, as [`Lane::chunk`].
    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        self.chunk(file_id, offset, data.len(), Some(&data))
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
    /// Its first index entry, and how many it has (more than one when packed).
    first: usize,
    parts: usize,
    header: FrameHeader,
    buf: Option<PoolBuf>,
}

/// Read, check and decompress every frame the sink wants; hand chunks to `sink`.
pub(crate) fn scan(set: &BackupSet, threads: Option<usize>, progress: Arc<dyn Progress>, sink: &dyn ChunkSink) -> Result<Scanned> {
    let ts = set.stripes[0].header.transfer_size as usize;
    let threads = threads.unwrap_or_else(available_cores).max(1);
    let buffers = set.stripes.len() * 4 + 2 * threads;
    let shared = Shared::new(progress);
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
                if let Err(e) = read_stripe(k, stripe, ts, &tx, shared, pool, sink, sent) {
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
                    shared.fail(Error::new(crate::ErrorKind::Io, "a decompressor thread panicked"));
                    0
                })
            })
            .sum::<u64>()
    });
    shared.progress.end();
    if let Some(e) = shared.take_error() {
        return Err(e);
    }
    let expected = sent.0.load(std::sync::atomic::Ordering::Relaxed);
    if frames != expected {
        return Err(Error::new(crate::ErrorKind::Io, format!("internal: {frames} of {expected} frames were processed")));
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
    for (i, (first, parts)) in frames_of(&s.index).enumerate() {
        if shared.is_cancelled() {
            return Ok(());
        }
        let e = &s.index[first];
        let members = &s.index[first..first + parts];
        let here = |what: &str| {
            Error::corrupt(format!("stripe {}: frame {} at byte {}: {what}", s.location, i + 1, e.frame_pos))
        };
        // A zero frame has no payload, so it is not bound by the chunk size (a sparse file's hole).
        let raw_max = if e.stored_len == 0 { MAX_ZERO_FRAME as usize } else { ts };
        if e.frame_pos != expect_pos || e.raw_len as usize > raw_max || e.stored_len as usize > stored_max {
            return Err(here("the index places it where no frame can be (index inconsistent)"));
        }
        let n = FRAME_HEADER_LEN + e.stored_len as usize;
        if e.frame_pos + n as u64 > s.trailer.index_offset {
            return Err(here("the index says it runs into the index itself (index inconsistent)"));
        }
        if !members.iter().any(|m| sink.wants(m.file_id)) {
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
        let agrees = if header.flags & FLAG_PACKED != 0 {
            packed_agrees(&header, members, crc_shown)
        } else {
            parts == 1
                && header.flags == 0
                && e.frame_off == 0
                && header.file_id == e.file_id
                && header.offset == e.offset
                && header.raw_len == e.raw_len
                && header.stored_len == e.stored_len
                && crc_shown.is_none_or(|c| c == e.raw_crc)
        };
        if !agrees {
            return Err(here("frame header disagrees with the index"));
        }
        expect_pos += n as u64;
        let buf = (header.stored_len != 0).then_some(buf);
        sent.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if tx.send(Encoded { stripe: k, frame: i, first, parts, header, buf }).is_err() {
            return Ok(());
        }
    }
    if expect_pos != s.trailer.index_offset {
        return Err(Error::corrupt(format!(
            "stripe {}: frames end at byte {expect_pos} but the index starts at {} (index inconsistent)",
            s.location,
            s.trailer.index_offset
        )));
    }
    Ok(())
}

/// A packed frame's index entries tile its raw bytes in order, start with the file its header
/// names, share its stored length and combine to its raw checksum: so once the frame's own
/// checksums hold, every chunk in it is proven without a pass of its own.
fn packed_agrees(h: &FrameHeader, members: &[IndexEntry], crc: Option<u32>) -> bool {
    let mut at = 0u64;
    for m in members {
        if u64::from(m.frame_off) != at || m.stored_len != h.stored_len || m.raw_len == 0 {
            return false;
        }
        at += u64::from(m.raw_len);
    }
    members.first().is_some_and(|m| m.file_id == h.file_id && m.offset == h.offset)
        && at == u64::from(h.raw_len)
        && crc.is_none_or(|c| c == index_crc(members))
}

/// The raw checksum a frame's index entries give it (its one entry's, or its members' combined).
fn index_crc(members: &[IndexEntry]) -> u32 {
    members.iter().fold(0, |crc, m| crate::crc::combine(crc, m.raw_crc, m.raw_len.into()))
}

fn decode_loop(
    set: &BackupSet,
    rx: &crossbeam_channel::Receiver<Encoded>,
    shared: &Shared,
    out: &Arc<Pool<AlignedBuf>>,
    sink: &dyn ChunkSink,
) -> u64 {
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
    let entry = &set.manifest.entries[h.file_id as usize];
    let here = |what: String| {
        let packed = if job.parts > 1 { format!(", packed with {} more files", job.parts - 1) } else { String::new() };
        Error::corrupt(format!(
            "stripe {}: frame {} at byte {} ({} bytes at offset {} of {}{packed}): {what}",
            s.location,
            job.frame + 1,
            s.index[job.first].frame_pos,
            h.raw_len,
            h.offset,
            entry.path
        ))
    };
    let stored = job.buf.as_mut().map(|b| &mut b[FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.stored_len as usize]);
    let (raw, crc) = decoder.decode(h, stored, &mut out).map_err(here)?;
    let members = &s.index[job.first..job.first + job.parts];
    if set.cipher.is_some() && crc != index_crc(members) {
        // Shown in the clear, the checksum was compared when the frame was read; sealed, now.
        return Err(here("frame disagrees with the index (the index or the frame was replaced)".into()));
    }
    if h.flags & FLAG_PACKED == 0 {
        if raw.is_none() {
            return sink.chunk(h.file_id, h.offset, h.raw_len as usize, None);
        }
        out.set_len(h.raw_len as usize);
        return sink.owned(h.file_id, h.offset, out);
    }
    for m in members {
        let (at, len) = (m.frame_off as usize, m.raw_len as usize);
        sink.chunk(m.file_id, m.offset, len, raw.map(|r| &r[at..at + len]))?;
    }
    Ok(())
}

/// What a verify reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VerifyReport {
    /// The set's id.
    pub backup_id: String,
    /// Stripes read.
    pub stripes: usize,
    /// Frames checked.
    pub frames: u64,
    /// Raw bytes those frames hold.
    pub bytes_raw: u64,
    /// Bytes of the stripes.
    pub bytes_stored: u64,
    /// Regular files in the manifest.
    pub files: usize,
    /// Wall time.
    pub seconds: f64,
}

struct Discard;
impl ChunkSink for Discard {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(Discard))
    }
}
impl Lane for Discard {
    fn chunk(&mut self, _: u32, _: u64, _: usize, _: Option<&[u8]>) -> Result<()> {
        Ok(())
    }
}

/// RESTORE VERIFYONLY: read every byte of every stripe, check every checksum, decompress, write
/// nothing.
///
/// # Errors
/// The first problem found, naming the stripe and region.
pub fn verify(set: &BackupSet, threads: Option<usize>, progress: Arc<dyn Progress>) -> Result<VerifyReport> {
    let t0 = std::time::Instant::now();
    let frames = scan(set, threads, progress, &Discard)?.frames;
    Ok(VerifyReport {
        backup_id: set.manifest.backup_id.clone(),
        stripes: set.stripes.len(),
        frames,
        bytes_raw: set.raw_bytes(),
        bytes_stored: set.stored_bytes(),
        files: set.manifest.file_count(),
        seconds: t0.elapsed().as_secs_f64(),
    })
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
            entries.push(IndexEntry { file_id: 5 + i as u32, offset: 0, frame_pos: 64, raw_len: f.len() as u32, stored_len: 20, raw_crc: c, frame_off: at });
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
        assert!(packed_agrees(&h, &e, Some(h.raw_crc)));
        assert_eq!(frames_of(&e).collect::<Vec<_>>(), vec![(0, 3)]);
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
            assert!(!packed_agrees(&h, &e, Some(h.raw_crc)), "{what} not caught");
        }
    }
}
