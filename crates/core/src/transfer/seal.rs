//! An object copied into an encrypted place from one that is not ([`copy_sealing`]): each frame's
//! stored bytes sealed as they are (nothing decompressed or compressed again), and what locates
//! and describes them written again to match. A blob's header takes a key block and its trailer's
//! content checksum is masked; a stripe's header takes the set's key block, its index is written
//! again with each frame's new place and length and sealed piece by piece, its manifest region
//! written again sealed, page by page, and its trailer made for them. Every checksum of the
//! source is checked on the way, as [`super::copy_checked`] checks them.
//!
//! Where a frame lands is known without a table: frames stay in order, each sealed one grows by
//! [`FRAME_OVERHEAD`] and the header by [`KEY_BLOCK_LEN`], so a frame's new place is its old one
//! plus the key block and the overhead of the sealed frames before it. Memory: the read-ahead of
//! the source's stream, one frame, one index piece and one manifest page.

use std::io::Read;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::{changed, each_frame, Opened, Transferred};
use crate::blob::BLOB_MAGIC;
use crate::crypto::{index_piece_nonce, Cipher, KeyBlock, CIPHER_AES256GCM, FRAME_OVERHEAD, KEY_BLOCK_LEN, NONCE_INDEX};
use crate::error::{Error, Result};
use crate::format::{index_pieces, BackupId, IndexEntry, StripeHeader, Trailer, FORMAT_VERSION, FRAME_HEADER_LEN, INDEX_ENTRY_LEN, TRAILER_LEN};
use crate::frame::{seal_body, Sealing};
use crate::manifest::pages::{PagedRegion, RegionWriter};
use crate::stop::Stop;
use crate::storage::{from_io, StripeSink, StripeSource};

/// The oldest stripe format [`copy_sealing`] seals: a paged manifest (4) and an index sealed in
/// pieces (5).
pub const OLDEST_SEALED: u16 = 5;

/// A data key to seal a copy under: a blob's own, or one set's, shared by its stripes (a set
/// opens with one key block), each stripe numbering its frames from `stripe << 40`.
pub struct SealWith {
    /// Its key block, for the headers.
    pub block: KeyBlock,
    /// Its cipher.
    pub cipher: Arc<Cipher>,
    /// What it sealed: one object, or the stripes of one set (its id and manifest's checksum),
    /// each once. Anything else would seal other bytes under nonces already used.
    sealed: Mutex<Sealed>,
}

#[derive(Default)]
struct Sealed {
    set: Option<(BackupId, u32)>,
    stripes: Vec<u16>,
    blob: bool,
}

impl SealWith {
    /// Seal under the data key `block` holds, whose cipher is `cipher`.
    pub fn new(block: KeyBlock, cipher: Arc<Cipher>) -> SealWith {
        SealWith { block, cipher, sealed: Mutex::new(Sealed::default()) }
    }

    /// Take stripe `k` of set `id` (whose manifest region's checksum is `manifest_crc`), or a
    /// blob (`None`), to seal: refused when the key sealed anything but other stripes of that set.
    fn take(&self, what: Option<(BackupId, u32, u16)>, at: &str) -> Result<()> {
        let mut s = self.sealed.lock().unwrap_or_else(|p| p.into_inner());
        let ok = match what {
            None => !s.blob && s.set.is_none(),
            Some((id, crc, k)) => !s.blob && s.set.is_none_or(|x| x == (id, crc)) && !s.stripes.contains(&k),
        };
        if !ok {
            return Err(Error::invalid(format!("internal: {at}: a data key seals one object, or each stripe of one set once")));
        }
        match what {
            None => s.blob = true,
            Some((id, crc, k)) => {
                s.set = Some((id, crc));
                s.stripes.push(k);
            }
        }
        Ok(())
    }
}

/// Copy the stripe or blob `src`, not encrypted, into `sink` sealed with `with`, checking every
/// checksum of the source on the way, then publish it; on any failure, or when `stop` is asked,
/// the sink is discarded.
///
/// # Errors
/// As [`super::copy_checked`]; [`crate::error::ErrorKind::InvalidInput`] for an object that is
/// encrypted already, or a stripe older than format 5.
pub fn copy_sealing(src: &dyn StripeSource, sink: Box<dyn StripeSink>, stop: &Stop, with: &SealWith) -> Result<Transferred> {
    super::publish_when(sink, |sink| seal_into(src, sink, stop, with))
}

/// Counts and checksums what goes through it to a sink, as a [`std::io::Write`] for the manifest's
/// writer.
struct Counted<'a> {
    sink: &'a mut dyn StripeSink,
    len: u64,
    crc: u32,
    /// The sink's error when written as a [`std::io::Write`] (kept whole: the writer's own words
    /// would lose its kind).
    failed: Option<Error>,
}

impl Counted<'_> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.sink.write_all(b)?;
        self.len += b.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, b);
        Ok(())
    }
}

impl std::io::Write for Counted<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Err(e) = self.put(b) {
            let io = std::io::Error::other(e.message().to_string());
            self.failed = Some(e);
            return Err(io);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn seal_into(src: &dyn StripeSource, sink: &mut dyn StripeSink, stop: &Stop, with: &SealWith) -> Result<Transferred> {
    let len = src.len();
    let Opened { at, s, mut stream, header } = Opened::new(src)?;
    if s.key_at.is_some() {
        return Err(Error::invalid(format!("{at} is encrypted already: copy it as stored, its key sealed for the target")));
    }
    let mut read = |buf: &mut [u8], pos: u64| stream.read_exact(buf).map_err(|e| from_io(e, || format!("{at}: byte {pos}")));
    let changed = |what: &str| changed(&at, what);
    let blob = &header[..8] == BLOB_MAGIC;
    // The header with the key block; a stripe numbers its frames from its own range.
    let (first, stripe) = if blob {
        let mut h = header.clone();
        h[10..12].copy_from_slice(&((header.len() + KEY_BLOCK_LEN) as u16).to_le_bytes());
        h[14] = CIPHER_AES256GCM;
        let crc = crc32c::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h.extend_from_slice(&with.block.encode());
        (h, None)
    } else {
        let mut sh = StripeHeader::decode(&header).map_err(|e| e.context(at.clone()))?;
        if !(OLDEST_SEALED..=FORMAT_VERSION).contains(&sh.version) {
            return Err(Error::invalid(format!(
                "{at} is a stripe of format {}: a copy seals stripes of format {OLDEST_SEALED} and later; restore it and back it up into the encrypted repository instead",
                sh.version
            )));
        }
        sh.key_block = Some(with.block);
        (sh.encode(), Some(sh))
    };
    match &stripe {
        None => with.take(None, &at)?,
        Some(h) => {
            let tr = Trailer::decode(&s.tail).map_err(|e| e.context(at.clone()))?;
            with.take(Some((h.backup_id, tr.manifest_crc, h.stripe_index)), &at)?;
        }
    }
    let mut out = Counted { sink, len: 0, crc: 0, failed: None };
    out.put(&first)?;
    let base = stripe.as_ref().map_or(0, |h| u64::from(h.stripe_index) << 40);
    let seal = Sealing { cipher: with.cipher.clone(), counter: Arc::new(AtomicU64::new(base)) };
    let mut body = Vec::new();
    let frames = each_frame(&mut read, &at, &s, stop, &mut |hb, h, payload| {
        // A zero frame has nothing to seal, and keeps its raw checksum in the clear.
        if h.stored_len == 0 {
            return out.put(hb);
        }
        let n = payload.len();
        body.resize(n + FRAME_OVERHEAD, 0);
        body[12..12 + n].copy_from_slice(payload);
        let mut sealed = *h;
        let sealed = seal_body(&seal, &mut sealed, h.raw_crc, &mut body, n);
        out.put(&sealed.encode())?;
        out.put(&body)
    })?;
    let frames_end = out.len;
    let Some(stripe) = stripe else {
        // A blob's trailer: its content checksum masked, as a sealed blob's is.
        let mut t = vec![0u8; (len - s.frames_end) as usize];
        read(&mut t, s.frames_end)?;
        if t != s.tail {
            return Err(changed("trailer"));
        }
        let whole = u32::from_le_bytes(t[16..20].try_into().expect("4 bytes"));
        t[16..20].copy_from_slice(&(whole ^ with.cipher.crc_mask()).to_le_bytes());
        let crc = crc32c::crc32c(&t[..36]);
        t[36..40].copy_from_slice(&crc.to_le_bytes());
        out.put(&t)?;
        return Ok(Transferred { bytes: out.len, frames });
    };
    let tr = Trailer::decode(&s.tail).map_err(|e| e.context(at.clone()))?;

    // The index: each entry at its frame's new place, with its sealed length, sealed in pieces.
    let (k, grow) = (stripe.stripe_index, FRAME_OVERHEAD as u64);
    let mut plain = Vec::new();
    let (mut sum, mut index_crc, mut index_len) = (0u32, 0u32, 0u64);
    // The frame before: its place in the source, and how many sealed frames came before it; how
    // many frames, and where the last one is placed now and how long it is.
    let (mut frame, mut sealed_before, mut was_sealed) = (None::<u64>, 0u64, false);
    let (mut groups, mut last) = (0u64, (0u64, 0u32));
    let pieces: Vec<usize> = index_pieces(tr.frame_count, INDEX_ENTRY_LEN).collect();
    let mut start = tr.index_offset;
    for (p, &n) in pieces.iter().enumerate() {
        plain.resize(n, 0);
        read(&mut plain, start)?;
        start += n as u64;
        sum = crc32c::crc32c_append(sum, &plain);
        let mut moved = Vec::with_capacity(n);
        for e in plain.chunks(INDEX_ENTRY_LEN) {
            let mut e = IndexEntry::decode_one(e);
            let first_of_frame = frame != Some(e.frame_pos);
            if first_of_frame {
                if frame.is_some() && was_sealed {
                    sealed_before += 1;
                }
                (frame, was_sealed) = (Some(e.frame_pos), e.stored_len != 0);
                groups += 1;
            }
            e.frame_pos += KEY_BLOCK_LEN as u64 + sealed_before * grow;
            if e.stored_len != 0 {
                e.stored_len += FRAME_OVERHEAD as u32;
            }
            if first_of_frame {
                last = (e.frame_pos, e.stored_len);
            }
            e.encode_into(&mut moved);
        }
        let (counter, aad) = index_piece_nonce(k, p as u64, p + 1 == pieces.len());
        let sealed = with.cipher.seal_region_with(NONCE_INDEX, counter, aad, &moved);
        index_crc = crc32c::crc32c_append(index_crc, &sealed);
        index_len += sealed.len() as u64;
        out.put(&sealed)?;
    }
    if sum != tr.index_crc || start != tr.manifest_offset {
        return Err(Error::corrupt(format!("{at}: index checksum mismatch (the index is damaged)")));
    }
    // The index placed every frame streamed, the last where the frames end.
    let last_end = if groups == 0 { first.len() as u64 } else { last.0 + FRAME_HEADER_LEN as u64 + u64::from(last.1) };
    if groups != frames || last_end != frames_end {
        return Err(Error::corrupt(format!("{at}: the index does not place the {frames} frames the stripe holds (index inconsistent)")));
    }

    // The manifest region: checked whole, then written again sealed, page by page.
    let mut piece = vec![0u8; 1 << 20];
    let (mut done, mut msum) = (0u64, 0u32);
    while done < tr.manifest_len {
        let n = (tr.manifest_len - done).min(piece.len() as u64) as usize;
        read(&mut piece[..n], tr.manifest_offset + done)?;
        msum = crc32c::crc32c_append(msum, &piece[..n]);
        done += n as u64;
    }
    if msum != tr.manifest_crc {
        return Err(Error::corrupt(format!("{at}: manifest checksum mismatch (the manifest is damaged)")));
    }
    let mut tail = vec![0u8; TRAILER_LEN];
    read(&mut tail, tr.manifest_offset + tr.manifest_len)?;
    if tail != s.tail {
        return Err(changed("trailer"));
    }
    let read_at = |off: u64, buf: &mut [u8]| src.read_exact_at(buf, tr.manifest_offset + off);
    let region = PagedRegion::open(&read_at, tr.manifest_len, None).map_err(|e| e.context(at.clone()))?;
    let manifest_offset = out.len;
    out.crc = 0;
    let mut w = RegionWriter::new(&mut out, Some(&with.cipher));
    let mut written = || -> Result<()> {
        for p in 0..region.pages.len() {
            for e in region.page(p, &read_at, None).map_err(|e| e.context(at.clone()))? {
                w.push(e)?;
            }
        }
        Ok(())
    };
    let pushed = written();
    let finished = pushed.and_then(|()| w.finish(&region.head).map(drop));
    if let Err(e) = finished {
        return Err(out.failed.take().unwrap_or(e));
    }
    let (manifest_len, manifest_crc) = (out.len - manifest_offset, out.crc);
    let trailer = Trailer {
        index_offset: frames_end,
        index_len,
        manifest_offset,
        manifest_len,
        frame_count: tr.frame_count,
        index_crc,
        manifest_crc,
        stripe_index: tr.stripe_index,
        stripe_count: tr.stripe_count,
        backup_id: tr.backup_id,
    };
    out.put(&trailer.encode())?;
    Ok(Transferred { bytes: out.len, frames })
}
