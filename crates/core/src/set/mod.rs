//! Opening a backup set for reading ([`BackupSet`]), and reading one file of it in parts
//! ([`FileInSet`]); the scan that reads all of it is restore's (`restore/scan.rs`).
//!
//! Opening reads each stripe's header, trailer, index and manifest, finds the stripes it was not
//! given (beside a given one, by the names in the manifest, then where the backup wrote them), and
//! refuses a set that is incomplete, mixed with another backup's stripes, or damaged, naming the
//! stripe and the region.
//!
//! A set opened lean ([`BackupSet::open_lean`], for a pass over every frame such as verify's)
//! holds neither its entries nor its index: the manifest's pages are read one at a time and each
//! stripe's index is streamed from the stripe, so a million files cost no more memory than a few.

use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::crypto::{index_piece_nonce, Cipher, Keys, NONCE_INDEX, NONCE_MANIFEST};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{IndexEntry, StripeHeader, Trailer, HEADER_LEN, INDEX_PIECE, TRAILER_LEN};
use crate::manifest::pages::{in_memory, PagedRegion};
use crate::manifest::{ChunkRef, Entry, EntryKind, Manifest, TileFault, Tiler};
use crate::spill::ChunkSorter;
use crate::storage::{Location, Schemes, StripeSource};

mod file;

pub use file::FileInSet;

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
    /// Its frame index (empty when the set was opened lean: [`OpenStripe::index_entries`] reads
    /// it from the stripe).
    pub index: Vec<IndexEntry>,
    /// The index is not held but read from the stripe when wanted.
    index_streamed: bool,
    pub(crate) source: Box<dyn StripeSource>,
    pub(crate) cipher: Option<Arc<Cipher>>,
}

/// A complete, consistent backup set ready to read.
pub struct BackupSet {
    /// Stripes in stripe order.
    pub stripes: Vec<OpenStripe>,
    /// The manifest (identical in every stripe); without its entries when opened lean.
    pub manifest: Manifest,
    /// The data key, when the set is encrypted.
    pub(crate) cipher: Option<Arc<Cipher>>,
    /// Opened lean: the manifest region, whose pages are read when wanted.
    paged: Option<(PagedRegion, Vec<u8>, Location)>,
    /// Raw bytes in all frames.
    raw_total: u64,
    /// Regular files.
    files: usize,
    /// Opened lean: the pages read last by [`BackupSet::with_entry`], the most recent last.
    recent: Mutex<Vec<(usize, Arc<Vec<Entry>>)>>,
}

/// Pages [`BackupSet::with_entry`] keeps decoded: a restore's writers ask for the entries of the
/// frames in flight, which lie in a few pages at a time per stripe (2048 entries each).
const RECENT_PAGES: usize = 16;

fn at(loc: &Location) -> impl Fn(Error) -> Error + '_ {
    move |e| e.context(format!("stripe {loc}"))
}

/// An opened stripe, its manifest region, and (opened lean) its chunks for the coverage check with
/// their raw bytes.
type Opened = (OpenStripe, Vec<u8>, Option<(ChunkSorter, u64)>);

fn open_stripe(loc: &Location, keys: Option<&Keys>, lean: bool) -> Result<Opened> {
    let src = loc.open()?;
    let len = src.len();
    if len < (HEADER_LEN + TRAILER_LEN) as u64 {
        return Err(Error::incomplete(format!("stripe {}: {len} bytes is too short to be a stripe (truncated, or its backup never finished)", loc)));
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
    if trailer.backup_id != header.backup_id || trailer.stripe_index != header.stripe_index || trailer.stripe_count != header.stripe_count {
        return Err(Error::corrupt(format!("stripe {}: trailer and header disagree on backup id or stripe number", loc)));
    }
    let index_end = trailer.index_offset.checked_add(trailer.index_len);
    let manifest_end = trailer.manifest_offset.checked_add(trailer.manifest_len);
    if trailer.index_offset < header.encoded_len() as u64 || index_end != Some(trailer.manifest_offset) || manifest_end != Some(len - TRAILER_LEN as u64) {
        return Err(Error::corrupt(format!("stripe {}: trailer: region offsets do not fit the file", loc)));
    }
    let k = usize::from(header.stripe_index);
    let count_wrong = |n: u64| Error::corrupt(format!("stripe {}: index: {} entries, trailer says {}", loc, n, trailer.frame_count));
    // Lean (and paged, format 4: older manifests are read whole anyway), the index is streamed:
    // its checksum and count checked and its chunks sorted for the coverage check, a piece at a
    // time. Sealed whole (before format 5), it opens only whole.
    let streamed = lean && header.version >= 4 && (cipher.is_none() || header.version >= 5);
    let mut pieces = IndexPieces::new(src.as_ref(), &header, &trailer, cipher.clone(), &loc.to_string())?;
    let (index, chunks) = if streamed {
        let (mut n, mut raw) = (0u64, 0u64);
        let mut sorter = ChunkSorter::default();
        while let Some(plain) = pieces.next_piece()? {
            for e in IndexEntry::decode_all(&plain, header.version).map_err(at(loc))? {
                raw += u64::from(e.raw_len);
                if !e.is_superseded() {
                    sorter.push(ChunkRef { file_id: e.file_id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k })?;
                }
                n += 1;
            }
        }
        if n != trailer.frame_count {
            return Err(count_wrong(n));
        }
        (Vec::new(), Some((sorter, raw)))
    } else {
        let mut ib = Vec::new();
        while let Some(plain) = pieces.next_piece()? {
            ib.extend_from_slice(&plain);
        }
        let index = IndexEntry::decode_all(&ib, header.version).map_err(at(loc))?;
        if index.len() as u64 != trailer.frame_count {
            return Err(count_wrong(index.len() as u64));
        }
        (index, None)
    };
    drop(pieces);
    let mut mb = vec![0u8; trailer.manifest_len as usize];
    src.read_exact_at(&mut mb, trailer.manifest_offset)?;
    if crc32c::crc32c(&mb) != trailer.manifest_crc {
        return Err(Error::corrupt(format!("stripe {}: manifest: checksum mismatch (the manifest is damaged)", loc)));
    }
    Ok((OpenStripe { location: loc.clone(), header, trailer, index, index_streamed: streamed, source: src, cipher }, mb, chunks))
}

/// A stripe's index region read a piece at a time: in the clear, pieces of [`INDEX_PIECE`]
/// entries; sealed in pieces (format 5), each piece opened; sealed whole (before 5), the region
/// as one piece. The region's checksum is checked as its last piece is read, and a piece that
/// does not open is reported as a checksum mismatch when the region's bytes were damaged, as the
/// region opened whole reports it.
struct IndexPieces<'a> {
    r: std::io::BufReader<Box<dyn Read + Send + 'a>>,
    /// Stored length of each piece.
    sizes: Vec<usize>,
    next: usize,
    crc: u32,
    want_crc: u32,
    cipher: Option<Arc<Cipher>>,
    /// Sealed piece by piece (format 5).
    pieced: bool,
    stripe: u16,
    loc: String,
}

impl<'a> IndexPieces<'a> {
    fn new(src: &'a dyn StripeSource, header: &StripeHeader, t: &Trailer, cipher: Option<Arc<Cipher>>, loc: &str) -> Result<Self> {
        let len = crate::format::index_entry_len(header.version);
        let pieced = cipher.is_some() && header.version >= 5;
        let sizes: Vec<usize> = if pieced {
            crate::format::index_pieces(t.frame_count, len).map(|n| n + crate::crypto::TAG_LEN).collect()
        } else if cipher.is_some() {
            vec![t.index_len as usize]
        } else {
            let piece = (INDEX_PIECE * len) as u64;
            (0..t.index_len.div_ceil(piece)).map(|i| (t.index_len - i * piece).min(piece) as usize).collect()
        };
        if sizes.iter().map(|&n| n as u64).sum::<u64>() != t.index_len {
            return Err(Error::corrupt(format!("stripe {loc}: index: {} bytes cannot hold the {} entries the trailer names", t.index_len, t.frame_count)));
        }
        let r = src.stream(t.index_offset, t.index_offset + t.index_len)?;
        Ok(IndexPieces {
            r: std::io::BufReader::with_capacity(1 << 16, r),
            sizes,
            next: 0,
            crc: 0,
            want_crc: t.index_crc,
            cipher,
            pieced,
            stripe: header.stripe_index,
            loc: loc.to_string(),
        })
    }

    fn damaged(&self) -> Error {
        Error::corrupt(format!("stripe {}: index: checksum mismatch (the frame index is damaged)", self.loc))
    }

    fn read(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.r.read_exact(&mut b).map_err(|e| crate::storage::from_io(e, || format!("stripe {}: index", self.loc)))?;
        self.crc = crc32c::crc32c_append(self.crc, &b);
        self.next += 1;
        Ok(b)
    }

    /// The next piece's plaintext; `None` after the last.
    fn next_piece(&mut self) -> Result<Option<Vec<u8>>> {
        let Some(&n) = self.sizes.get(self.next) else { return Ok(None) };
        let p = self.next as u64;
        let mut b = self.read(n)?;
        let last = self.next == self.sizes.len();
        if last && self.crc != self.want_crc {
            return Err(self.damaged());
        }
        if let Some(c) = self.cipher.clone() {
            let (counter, aad) = if self.pieced { index_piece_nonce(self.stripe, p, last) } else { (u64::from(self.stripe), &b""[..]) };
            match c.open_region_with(NONCE_INDEX, counter, aad, &mut b) {
                Ok(plain) => b.truncate(plain),
                Err(e) => {
                    while let Some(&n) = self.sizes.get(self.next) {
                        self.read(n)?;
                    }
                    return Err(if self.crc != self.want_crc { self.damaged() } else { Error::corrupt(format!("stripe {}: index: {e}", self.loc)) });
                }
            }
        }
        Ok(Some(b))
    }
}

impl OpenStripe {
    /// Its index entries in stripe order, held or read from the stripe a piece at a time: the
    /// chunks of files (bytes a consolidation kept but no file uses left out).
    ///
    /// # Errors
    /// The index cannot be read.
    pub(crate) fn index_entries(&self) -> Result<Box<dyn Iterator<Item = Result<IndexEntry>> + Send + '_>> {
        Ok(Box::new(self.all_entries()?.filter(|e| !e.as_ref().is_ok_and(IndexEntry::is_superseded))))
    }

    /// Every index entry in stripe order, superseded bytes too (they tile the frames).
    fn all_entries(&self) -> Result<Box<dyn Iterator<Item = Result<IndexEntry>> + Send + '_>> {
        if !self.index_streamed {
            return Ok(Box::new(self.index.iter().copied().map(Ok)));
        }
        let mut pieces = IndexPieces::new(self.source.as_ref(), &self.header, &self.trailer, self.cipher.clone(), &self.location.to_string())?;
        let version = self.header.version;
        let mut piece = Vec::new().into_iter();
        Ok(Box::new(std::iter::from_fn(move || loop {
            if let Some(e) = piece.next() {
                return Some(Ok(e));
            }
            match pieces.next_piece() {
                Ok(Some(plain)) => match IndexEntry::decode_all(&plain, version) {
                    Ok(v) => piece = v.into_iter(),
                    Err(e) => return Some(Err(e)),
                },
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            }
        })))
    }

    /// Its frames in stripe order, each as its index entries (several for a packed frame, with
    /// any superseded bytes among them).
    ///
    /// # Errors
    /// The index cannot be read.
    pub(crate) fn frames(&self) -> Result<impl Iterator<Item = Result<Vec<IndexEntry>>> + '_> {
        let mut entries = self.all_entries()?.peekable();
        Ok(std::iter::from_fn(move || {
            let first = match entries.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            let mut frame = vec![first];
            while let Some(Ok(e)) = entries.next_if(|e| e.as_ref().is_ok_and(|e| e.frame_pos == first.frame_pos)) {
                frame.push(e);
            }
            Some(Ok(frame))
        }))
    }
}

/// What [`rewrap`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Rewrapped {
    /// Stripes whose key block was written again.
    pub stripes: usize,
    /// Of those, how many had the older layout (a key made from the secret itself).
    pub from_layout_1: usize,
}

/// Give an encrypted set, opened with `keys`, a key block that `new` opens (the same secret with
/// a fresh salt, or another), written over each stripe's own in place: the set's data key is
/// unchanged, so nothing else is rewritten. A stripe of the older layout (its data key made from
/// the secret) gets the newer (a random data key sealed by the secret) on the way. The 96 bytes
/// lie in each stripe's first sector, which disks write whole (as PostgreSQL relies on for
/// pg_control); each stripe is synced before the next, and a set half done opens with either
/// secret stripe by stripe, so running it again finishes it.
///
/// # Errors
/// A set that is not encrypted, or is a repository's; a stripe that is not a file on this host
/// (an object cannot be changed in place); `keys` do not open it; writing.
pub fn rewrap(set: &BackupSet, keys: &Keys, new: &Keys) -> Result<Rewrapped> {
    use std::os::unix::fs::FileExt;
    let mut done = Rewrapped { stripes: 0, from_layout_1: 0 };
    for s in &set.stripes {
        let loc = &s.location;
        let block = s.header.key_block.ok_or_else(|| Error::invalid(format!("stripe {loc} is not encrypted: there is no key to change")))?;
        if !loc.capabilities().files {
            return Err(Error::invalid(format!(
                "stripe {loc} is an object: objects cannot be changed in place; copy the set to files (or restore it and back it up again with the new secret)"
            )));
        }
        let new_block = keys.rewrap(&block, new).map_err(at(loc))?;
        let f = std::fs::OpenOptions::new().write(true).open(loc.name()).map_err(|e| Error::io(ErrorKind::Target, format!("cannot open {loc} for writing"), e))?;
        f.write_all_at(&new_block.encode(), HEADER_LEN as u64).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {loc}'s key block"), e))?;
        f.sync_data().map_err(|e| Error::io(ErrorKind::Target, format!("cannot sync {loc}"), e))?;
        done.stripes += 1;
        done.from_layout_1 += usize::from(block.wrapped.is_none());
    }
    Ok(done)
}

impl BackupSet {
    /// Open the set that `given` stripes belong to; any one stripe is enough when the others are
    /// beside it or where the backup wrote them.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Incomplete`] for a missing, truncated or unfinished stripe; [`crate::error::ErrorKind::Corrupt`]
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
        Self::open_mode(given, schemes, keys, false)
    }

    /// [`BackupSet::open_with`] for a pass over every frame (verify): a set of format 4 or later
    /// keeps neither its entries nor its index in memory ([`BackupSet::manifest`] has no entries;
    /// [`BackupSet::entry`] reads one). Its coverage is checked as when opened whole, with the
    /// chunks sorted on disk and the entries read a page at a time. An encrypted stripe's index
    /// sealed whole (before format 5) is still read whole.
    ///
    /// # Errors
    /// As [`BackupSet::open_with`].
    pub fn open_lean(given: &[Location], schemes: &dyn Schemes, keys: Option<&Keys>) -> Result<BackupSet> {
        Self::open_mode(given, schemes, keys, true)
    }

    fn open_mode(given: &[Location], schemes: &dyn Schemes, keys: Option<&Keys>, lean: bool) -> Result<BackupSet> {
        if given.is_empty() {
            return Err(Error::invalid("no stripe given: name at least one stripe file of the backup"));
        }
        let mut slots: Vec<Option<OpenStripe>> = Vec::new();
        let mut chunks: Vec<(ChunkSorter, u64)> = Vec::new();
        let mut paged = None;
        let mut manifest: Option<(Manifest, Vec<u8>, Location)> = None;
        for p in given {
            let (s, mb, c) = open_stripe(p, keys, lean)?;
            chunks.extend(c);
            let (m, first_mb, first_path) = match &manifest {
                Some(x) => (&x.0, &x.1, &x.2),
                None => {
                    let m = if lean && s.header.version >= 4 {
                        let read = in_memory(&mb);
                        let region = PagedRegion::open(&read, mb.len() as u64, s.cipher.as_deref()).map_err(at(&s.location))?;
                        let head = region.head.clone();
                        paged = Some((region, mb.clone(), s.location.clone()));
                        head
                    } else {
                        open_manifest(&s, &mb)?
                    };
                    slots.resize_with(m.stripes.len(), || None);
                    manifest = Some((m, mb.clone(), p.clone()));
                    let x = manifest.as_ref().expect("just set");
                    (&x.0, &x.1, &x.2)
                }
            };
            check_member(&s, m, &mb, first_mb, first_path, &|| first_pages(&paged, cipher_of(&slots)))?;
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
                let (s, mb, c) = open_stripe(&c, keys, lean)?;
                check_member(&s, &manifest, &mb, &first_mb, &first_path, &|| first_pages(&paged, cipher_of(&slots)))?;
                if s.header.stripe_index as usize == k {
                    slots[k] = Some(s);
                    chunks.extend(c);
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
        let mut set = BackupSet { stripes, manifest, cipher, paged, raw_total: 0, files: 0, recent: Mutex::new(Vec::new()) };
        // Stripes whose index is held give their chunks from it.
        let mut raw_total: u64 = chunks.iter().map(|c| c.1).sum();
        let mut sorters: Vec<ChunkSorter> = chunks.into_iter().map(|c| c.0).collect();
        for (k, s) in set.stripes.iter().enumerate().filter(|(_, s)| !s.index_streamed) {
            // Held in memory already: sorted there (no temporary file, as a restore from a
            // read-only rescue system needs).
            let mut sorter = ChunkSorter::in_memory();
            for e in &s.index {
                raw_total += u64::from(e.raw_len);
                if !e.is_superseded() {
                    sorter.push(ChunkRef { file_id: e.file_id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k })?;
                }
            }
            sorters.push(sorter);
        }
        set.raw_total = raw_total;
        set.files = set.check_coverage(sorters)?;
        Ok(set)
    }

    /// Every file's chunks, across all stripes, tile it exactly and combine to its crc (a file an
    /// incremental holds in part: its chunks do not overlap and combine to the crc of the bytes
    /// held); the entries held, or read a page at a time. Returns how many regular files there are.
    fn check_coverage(&self, sorters: Vec<ChunkSorter>) -> Result<usize> {
        let mut merged = ChunkSorter::merge(sorters);
        let files = match &self.paged {
            None => self.check_entries(self.manifest.entries.iter().map(Ok), &mut merged),
            Some((region, mb, loc)) => {
                let read = in_memory(mb);
                let cipher = self.cipher.as_deref();
                let pages = (0..region.pages.len()).map(|k| region.page(k, &read, cipher).map_err(at(loc)));
                let entries = pages.flat_map(|p| match p {
                    Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>(),
                    Err(e) => vec![Err(e)],
                });
                self.check_entries(entries, &mut merged)
            }
        };
        // A temporary file that could not be read ends the merge early: that, not the set, is
        // what the tiling fault that follows is about.
        match merged.error() {
            Some(e) => Err(e),
            None => files,
        }
    }

    fn check_entries<E: std::borrow::Borrow<Entry>>(&self, entries: impl Iterator<Item = Result<E>>, chunks: &mut impl Iterator<Item = ChunkRef>) -> Result<usize> {
        let fault = |f: TileFault, e: Option<&Entry>| match (f, e) {
            (TileFault::Gap { at, expected, stripe, .. }, Some(e)) => Error::corrupt(format!(
                "file {}: chunk at offset {at} (stripe {}) does not follow byte {expected}: the index is inconsistent",
                e.path, self.stripes[stripe].location
            )),
            (TileFault::Coverage { covered, .. }, Some(e)) => Error::corrupt(format!("file {}: its chunks cover {covered} of {} bytes: the set is inconsistent", e.path, e.size)),
            (TileFault::Gap { entry, .. } | TileFault::Coverage { entry, .. }, None) => Error::corrupt(format!("an index names file id {entry}, which the manifest does not have")),
        };
        let roots = self.manifest.roots.len();
        let mut tiler = Tiler::new(chunks);
        let mut files = 0;
        for (id, e) in entries.enumerate() {
            let e = e?;
            let e = e.borrow();
            if self.paged.is_some() && e.root as usize >= roots {
                return Err(Error::corrupt(format!("manifest: entry '{}' names root {} but the backup has {roots} root(s); refusing it", e.path, e.root)));
            }
            let sum = tiler.next(id, e).map_err(|f| fault(f, Some(e)))?;
            if let (Some(d), Some((_, covered))) = (e.delta, sum) {
                if covered != d.bytes {
                    return Err(fault(TileFault::Coverage { entry: id, covered }, Some(e)));
                }
            }
            let want = e.delta.map(|d| d.crc32c).or(e.crc32c);
            if want.is_some() && want != sum.map(|s| s.0) {
                return Err(Error::corrupt(format!("file {}: its chunks do not combine to its checksum: the set is inconsistent", e.path)));
            }
            files += usize::from(e.kind == EntryKind::File);
        }
        tiler.finish().map_err(|f| fault(f, None))?;
        Ok(files)
    }

    /// Entry `file_id`: from the manifest held, or (opened lean) read from its page.
    ///
    /// # Errors
    /// No such entry; a page that does not check.
    pub fn entry(&self, file_id: u32) -> Result<Entry> {
        self.with_entry(file_id, Entry::clone)
    }

    /// `f` of entry `file_id`: from the manifest held, or (opened lean) from its page, kept among
    /// the last few pages read.
    ///
    /// # Errors
    /// No such entry; a page that does not check.
    pub fn with_entry<T>(&self, file_id: u32, f: impl FnOnce(&Entry) -> T) -> Result<T> {
        let missing = || Error::invalid(format!("the backup has no entry {file_id}"));
        let Some((region, mb, loc)) = &self.paged else {
            return self.manifest.entries.get(file_id as usize).map(f).ok_or_else(missing);
        };
        let k = region.pages.partition_point(|p| p.first_id <= u64::from(file_id)).checked_sub(1).ok_or_else(missing)?;
        let at_k = (u64::from(file_id) - region.pages[k].first_id) as usize;
        let cached = {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            let hit = recent.iter().position(|(c, _)| *c == k).map(|i| recent.remove(i));
            if let Some(hit) = &hit {
                recent.push(hit.clone());
            }
            hit.map(|(_, page)| page)
        };
        let page = match cached {
            Some(page) => page,
            None => {
                // Read outside the lock: two threads may read one page at once, and both are right.
                let page = Arc::new(region.page(k, &in_memory(mb), self.cipher.as_deref()).map_err(at(loc))?);
                let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
                if recent.len() == RECENT_PAGES {
                    recent.remove(0);
                }
                recent.push((k, page.clone()));
                page
            }
        };
        page.get(at_k).map(f).ok_or_else(missing)
    }

    /// Every entry in file-id order, with its id: from the manifest held, or (opened lean) read a
    /// page at a time. `f` may end the pass early with an error.
    ///
    /// # Errors
    /// A page that does not check; `f`'s.
    pub fn each_entry(&self, mut f: impl FnMut(u32, &Entry) -> Result<()>) -> Result<()> {
        if self.paged.is_none() {
            // Held: no clone per entry.
            for (i, e) in self.manifest.entries.iter().enumerate() {
                f(i as u32, e)?;
            }
            return Ok(());
        }
        for x in self.entries() {
            let (id, e) = x?;
            f(id, &e)?;
        }
        Ok(())
    }

    /// Every entry in file-id order, with its id: from the manifest held (cloned), or (opened
    /// lean) read a page at a time. What [`BackupSet::each_entry`] gives, as an iterator, for
    /// walking several sets side by side.
    pub(crate) fn entries(&self) -> Box<dyn Iterator<Item = Result<(u32, Entry)>> + '_> {
        match &self.paged {
            None => Box::new(self.manifest.entries.iter().enumerate().map(|(i, e)| Ok((i as u32, e.clone())))),
            Some((region, mb, loc)) => Box::new(region.pages.iter().enumerate().flat_map(move |(k, meta)| {
                let page: Vec<Result<(u32, Entry)>> = match region.page(k, &in_memory(mb), self.cipher.as_deref()) {
                    Ok(v) => v.into_iter().enumerate().map(|(i, e)| Ok(((meta.first_id + i as u64) as u32, e))).collect(),
                    Err(e) => vec![Err(at(loc)(e))],
                };
                page
            })),
        }
    }

    /// Opened lean from a manifest that says its entries are in key order (root, then path name
    /// by name): none is listed apart.
    pub(crate) fn in_key_order(&self) -> bool {
        self.paged.as_ref().is_some_and(|(region, _, _)| region.sorted)
    }

    /// Entries in the set (regular files and everything else).
    pub fn entry_count(&self) -> usize {
        match &self.paged {
            None => self.manifest.entries.len(),
            Some((region, _, _)) => region.entry_count as usize,
        }
    }

    /// Opened lean: entries and index are read when wanted, not held ([`BackupSet::open_lean`]).
    pub fn is_lean(&self) -> bool {
        self.paged.is_some() || self.stripes.iter().any(|s| s.index_streamed)
    }

    /// Regular files in the set.
    pub fn file_count(&self) -> usize {
        self.files
    }

    /// Whether the set is encrypted.
    pub fn encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    /// Raw bytes in all frames.
    pub fn raw_bytes(&self) -> u64 {
        self.raw_total
    }

    /// Bytes of all stripes.
    pub fn stored_bytes(&self) -> u64 {
        self.stripes.iter().map(|s| s.source.len()).sum()
    }
}

fn open_manifest(s: &OpenStripe, mb: &[u8]) -> Result<Manifest> {
    if s.header.version >= 4 {
        let read = crate::manifest::pages::in_memory(mb);
        let cipher = s.cipher.as_deref();
        return crate::manifest::pages::PagedRegion::open(&read, mb.len() as u64, cipher).and_then(|r| r.whole(&read, cipher)).map_err(at(&s.location));
    }
    let Some(c) = &s.cipher else { return Manifest::from_stored_bytes(mb).map_err(at(&s.location)) };
    let mut plain = mb.to_vec();
    let n = c.open_region(NONCE_MANIFEST, 0, &mut plain).map_err(|e| Error::corrupt(format!("stripe {}: manifest: {e}", s.location)))?;
    Manifest::from_stored_bytes(&plain[..n]).map_err(at(&s.location))
}

/// The cipher of the stripes opened so far (all share one, or none).
fn cipher_of(slots: &[Option<OpenStripe>]) -> Option<Arc<Cipher>> {
    slots.iter().flatten().next().and_then(|s| s.cipher.clone())
}

/// Every page of the first stripe's manifest, checked (a set opened lean reads them only later).
fn first_pages(paged: &Option<(PagedRegion, Vec<u8>, Location)>, cipher: Option<Arc<Cipher>>) -> Result<()> {
    if let Some((region, mb, loc)) = paged {
        for k in 0..region.pages.len() {
            region.page(k, &in_memory(mb), cipher.as_deref()).map_err(at(loc))?;
        }
    }
    Ok(())
}

fn check_member(s: &OpenStripe, m: &Manifest, mb: &[u8], first_mb: &[u8], first: &Location, first_ok: &dyn Fn() -> Result<()>) -> Result<()> {
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
        // Name damage to this stripe's own manifest (a failed checksum or seal) before calling
        // the two merely different: the first says which stripe to replace.
        open_manifest(s, mb)?;
        // Then the first's, whose pages a lean open has not read yet.
        first_ok()?;
        return Err(Error::corrupt(format!("stripe {}: manifest differs from that of {first}", s.location)));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::*;
    use crate::pipeline::NoProgress;
    use crate::storage::LocalOnly;

    /// A backup of a small tree (three files, one spanning several chunks) into `stripes` stripe
    /// files in `dir`; their locations.
    pub(crate) fn backed_up(dir: &Path, name: &str, stripes: usize) -> (PathBuf, Vec<Location>) {
        let src = dir.join(format!("{name}-src"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        crate::datagen::write_file(&src.join("big"), 300 << 10, 7, 0.5).unwrap();
        std::fs::write(src.join("small"), b"a small file").unwrap();
        std::fs::write(src.join("sub/zeros"), vec![0u8; 200 << 10]).unwrap();
        let locations: Vec<Location> = (1..=stripes).map(|k| Location::file(dir.join(format!("{name}_{k}.sheaf")))).collect();
        let mut opts = crate::backup::BackupOptions::new(locations.clone());
        opts.transfer_size = 64 << 10;
        crate::backup::backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
        (src, locations)
    }

    #[test]
    fn any_one_stripe_finds_the_others_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let (_, stripes) = backed_up(d.path(), "a", 3);
        let whole = BackupSet::open(&stripes, &LocalOnly).unwrap();
        let from_one = BackupSet::open(&stripes[1..2], &LocalOnly).unwrap();
        assert_eq!(from_one.manifest.backup_id, whole.manifest.backup_id);
        assert_eq!((from_one.stripes.len(), from_one.file_count(), from_one.raw_bytes()), (3, 3, whole.raw_bytes()));
        assert_eq!(whole.raw_bytes(), (300 << 10) + 12 + (200 << 10));
        let e = BackupSet::open(&[], &LocalOnly).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let e = BackupSet::open(&[stripes[0].clone(), stripes[0].clone()], &LocalOnly).err().expect("refused");
        assert!(e.to_string().contains("stripe 1 of the set is given twice"), "{e}");
    }

    #[test]
    fn a_missing_stripe_is_named_and_stripes_of_two_backups_do_not_mix() {
        let d = tempfile::tempdir().unwrap();
        let (_, a) = backed_up(d.path(), "a", 2);
        let (_, b) = backed_up(d.path(), "b", 2);
        let e = BackupSet::open(&[a[0].clone(), b[1].clone()], &LocalOnly).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::Incomplete);
        assert!(e.to_string().contains("do not mix stripes of different backups"), "{e}");
        std::fs::remove_file(d.path().join("a_2.sheaf")).unwrap();
        let e = BackupSet::open(&a[..1], &LocalOnly).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::Incomplete);
        assert!(e.to_string().contains("stripe 2 (a_2.sheaf) is missing"), "{e}");
    }

    #[test]
    fn a_damaged_index_is_corrupt_and_names_its_stripe() {
        let d = tempfile::tempdir().unwrap();
        let (_, stripes) = backed_up(d.path(), "a", 1);
        let path = d.path().join("a_1.sheaf");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - TRAILER_LEN - 8;
        bytes[at] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let e = BackupSet::open(&stripes, &LocalOnly).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
        assert!(e.to_string().contains("a_1.sheaf"), "{e}");
    }

    #[test]
    fn a_set_opened_lean_holds_no_entries_and_reads_each_on_asking() {
        let d = tempfile::tempdir().unwrap();
        let (_, stripes) = backed_up(d.path(), "a", 2);
        let whole = BackupSet::open(&stripes, &LocalOnly).unwrap();
        let lean = BackupSet::open_lean(&stripes, &LocalOnly, None).unwrap();
        assert!(lean.is_lean() && !whole.is_lean());
        assert!(lean.manifest.entries.is_empty() && !whole.manifest.entries.is_empty());
        assert_eq!(lean.entry_count(), whole.entry_count());
        let mut seen = Vec::new();
        lean.each_entry(|k, e| {
            assert_eq!(e.path, whole.entry(k).unwrap().path);
            seen.push(e.path.clone());
            Ok(())
        })
        .unwrap();
        assert!(seen.iter().any(|p| p == "sub/zeros"), "{seen:?}");
    }
}
