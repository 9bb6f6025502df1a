//! An object copied as stored ([`copy_checked`]): a stripe or a repository blob moved from one
//! store to another without decompressing or decrypting a byte, and every checksum the format
//! carries checked on the way. A frame's header and stored bytes are checked against their CRCs;
//! for a stripe, so are its header, index, manifest and trailer; for a blob, its header and
//! trailer. The copy is published only once all of it checked, so a damaged source never
//! becomes a copy that looks whole. Memory: the read-ahead of the source's stream and one frame.
//!
//! Into another encrypted repository ([`copy_rekeyed`]) only the object's key block changes: its
//! data key, sealed again for the target's keys. Every sealed byte after it stays as stored.

use std::io::Read;

use crate::blob::{blob_info, BLOB_HEADER_LEN, BLOB_MAGIC, BLOB_TRAILER_LEN};
use crate::crypto::{KeyBlock, KEY_BLOCK_LEN};
use crate::error::{Error, Result};
use crate::format::{FrameHeader, StripeHeader, Trailer, FRAME_HEADER_LEN, HEADER_LEN, HEADER_MAGIC, MAX_TRANSFER_SIZE, TRAILER_LEN};
use crate::stop::Stop;
use crate::storage::{from_io, StripeSink, StripeSource};

mod seal;
pub use seal::{copy_sealing, SealWith, OLDEST_SEALED};

/// What [`copy_checked`] copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transferred {
    /// Bytes copied (the object's whole length).
    pub bytes: u64,
    /// Frames checked.
    pub frames: u64,
}

/// What gives a copied object's key block for the place it goes to.
pub type Rekey<'a> = &'a dyn Fn(&KeyBlock) -> Result<KeyBlock>;

/// The regions of the object being copied, in order: `frames` between its header and its tail.
struct Shape {
    header_len: u64,
    frames_end: u64,
    /// After the frames, before the trailer: a stripe's index and manifest, with their CRCs.
    regions: Vec<(u64, u64, u32, &'static str)>,
    /// The header and the trailer as checked: the bytes copied must be these (an object
    /// rewritten while it is copied is refused, not published half old, half new).
    header: Vec<u8>,
    tail: Vec<u8>,
    /// Where its key block is in the header, when it is encrypted.
    key_at: Option<usize>,
}

/// Copy the stripe or blob `src` into `sink` as stored, checking every checksum on the way, then
/// publish it; on any failure, or when `stop` is asked (checked at every frame), the sink is
/// discarded.
///
/// # Errors
/// [`crate::error::ErrorKind::Cancelled`] when stopped;
/// [`crate::error::ErrorKind::Corrupt`] or [`crate::error::ErrorKind::Incomplete`] naming the source and the
/// region that does not check; read and write errors.
pub fn copy_checked(src: &dyn StripeSource, sink: Box<dyn StripeSink>, stop: &Stop) -> Result<Transferred> {
    copy_with(src, sink, stop, None)
}

/// [`copy_checked`] of an encrypted object into a place with other keys: its key block replaced
/// by `rekey`'s (the same data key sealed for them: [`crate::crypto::Keys::rekey`]).
///
/// # Errors
/// As [`copy_checked`]; [`crate::error::ErrorKind::InvalidInput`] for an object that is not
/// encrypted (it cannot be sealed by changing its header); `rekey`'s.
pub fn copy_rekeyed(src: &dyn StripeSource, sink: Box<dyn StripeSink>, stop: &Stop, rekey: Rekey<'_>) -> Result<Transferred> {
    copy_with(src, sink, stop, Some(rekey))
}

fn copy_with(src: &dyn StripeSource, sink: Box<dyn StripeSink>, stop: &Stop, rekey: Option<Rekey<'_>>) -> Result<Transferred> {
    publish_when(sink, |sink| copy_into(src, sink, stop, rekey))
}

/// What `write` put into `sink`, made durable and published once it succeeded; on its failure
/// the sink is discarded, and nothing appears.
fn publish_when(mut sink: Box<dyn StripeSink>, write: impl FnOnce(&mut dyn StripeSink) -> Result<Transferred>) -> Result<Transferred> {
    match write(sink.as_mut()) {
        Ok(t) => {
            sink.sync()?;
            sink.publish()?;
            Ok(t)
        }
        Err(e) => {
            sink.discard();
            Err(e)
        }
    }
}

fn shape(src: &dyn StripeSource) -> Result<Shape> {
    let at = src.location();
    let len = src.len();
    let mut first = [0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Err(Error::incomplete(format!("{at}: {len} bytes is too short for a sheaf object (truncated)")));
    }
    src.read_exact_at(&mut first, 0)?;
    if &first[..8] == BLOB_MAGIC {
        let info = blob_info(src)?;
        let header_len = BLOB_HEADER_LEN + if info.encrypted { KEY_BLOCK_LEN } else { 0 };
        let (mut header, mut tail) = (vec![0u8; header_len], vec![0u8; BLOB_TRAILER_LEN]);
        src.read_exact_at(&mut header, 0)?;
        src.read_exact_at(&mut tail, len - BLOB_TRAILER_LEN as u64)?;
        let key_at = info.encrypted.then_some(BLOB_HEADER_LEN);
        return Ok(Shape { header_len: header_len as u64, frames_end: len - BLOB_TRAILER_LEN as u64, regions: Vec::new(), header, tail, key_at });
    }
    if &first[..8] != HEADER_MAGIC {
        return Err(Error::corrupt(format!("{at}: not a sheaf stripe or object (bad magic)")));
    }
    let header_len = StripeHeader::len_from(&first);
    let mut h = vec![0u8; header_len];
    src.read_exact_at(&mut h, 0)?;
    let key_at = StripeHeader::decode(&h).map_err(|e| e.context(at.to_string()))?.key_block.is_some().then_some(HEADER_LEN);
    if len < (header_len + TRAILER_LEN) as u64 {
        return Err(Error::incomplete(format!("{at}: {len} bytes is too short for a stripe (truncated)")));
    }
    let mut t = [0u8; TRAILER_LEN];
    src.read_exact_at(&mut t, len - TRAILER_LEN as u64)?;
    let tr = Trailer::decode(&t).map_err(|e| e.context(at.to_string()))?;
    let tail = len - TRAILER_LEN as u64;
    let placed = tr.index_offset >= header_len as u64
        && tr.index_offset.checked_add(tr.index_len) == Some(tr.manifest_offset)
        && tr.manifest_offset.checked_add(tr.manifest_len) == Some(tail);
    if !placed {
        return Err(Error::corrupt(format!("{at}: the trailer places the index and manifest outside the stripe (the trailer is damaged)")));
    }
    Ok(Shape {
        header_len: header_len as u64,
        frames_end: tr.index_offset,
        regions: vec![(tr.index_offset, tr.index_len, tr.index_crc, "index"), (tr.manifest_offset, tr.manifest_len, tr.manifest_crc, "manifest")],
        header: h,
        tail: t.to_vec(),
        key_at,
    })
}

/// `at` (an object being copied) changed between its shape being read and its bytes.
fn changed(at: &str, what: &str) -> Error {
    Error::corrupt(format!("{at}: its {what} changed while it was copied (rewritten meanwhile?): copy it again"))
}

/// An object opened to be copied: where it is, its shape, one stream over the whole of it, and
/// its header, read from that stream and checked to be the one its shape was read from.
struct Opened<'a> {
    at: String,
    s: Shape,
    stream: Box<dyn Read + Send + 'a>,
    header: Vec<u8>,
}

impl<'a> Opened<'a> {
    fn new(src: &'a dyn StripeSource) -> Result<Opened<'a>> {
        let at = src.location().to_string();
        let s = shape(src)?;
        let stream = src.stream(0, src.len())?;
        let mut o = Opened { at, header: vec![0u8; s.header_len as usize], s, stream };
        let mut header = std::mem::take(&mut o.header);
        o.read(&mut header, 0)?;
        if header != o.s.header {
            return Err(changed(&o.at, "header"));
        }
        o.header = header;
        Ok(o)
    }

    /// The next `buf.len()` bytes, at `pos` (for messages).
    fn read(&mut self, buf: &mut [u8], pos: u64) -> Result<()> {
        let at = &self.at;
        self.stream.read_exact(buf).map_err(|e| from_io(e, || format!("{at}: byte {pos}")))
    }
}

fn copy_into(src: &dyn StripeSource, sink: &mut dyn StripeSink, stop: &Stop, rekey: Option<Rekey<'_>>) -> Result<Transferred> {
    let len = src.len();
    let Opened { at, s, mut stream, mut header } = Opened::new(src)?;
    let mut read = |buf: &mut [u8], pos: u64| stream.read_exact(buf).map_err(|e| from_io(e, || format!("{at}: byte {pos}")));
    if let Some(rekey) = rekey {
        let at_key = s.key_at.ok_or_else(|| Error::invalid(format!("{at} is not encrypted: its frames would have to be sealed one by one, which a copy as stored does not do")))?;
        let block = KeyBlock::decode(&header[at_key..at_key + KEY_BLOCK_LEN]).map_err(|e| e.context(at.clone()))?;
        header[at_key..at_key + KEY_BLOCK_LEN].copy_from_slice(&rekey(&block).map_err(|e| e.context(at.clone()))?.encode());
    }
    sink.write_all(&header)?;
    let frames = each_frame(&mut read, &at, &s, stop, &mut |hb, _, payload| {
        sink.write_all(hb)?;
        sink.write_all(payload)
    })?;
    let mut piece = vec![0u8; 1 << 20];
    for (start, n, crc, what) in &s.regions {
        let (mut done, mut sum) = (0u64, 0u32);
        while done < *n {
            let k = (*n - done).min(piece.len() as u64) as usize;
            read(&mut piece[..k], start + done)?;
            sum = crc32c::crc32c_append(sum, &piece[..k]);
            sink.write_all(&piece[..k])?;
            done += k as u64;
        }
        if sum != *crc {
            return Err(Error::corrupt(format!("{at}: {what} checksum mismatch (the {what} is damaged)")));
        }
    }
    // The trailer (and a blob's), checked when the shape was read.
    let tail_start = s.regions.last().map_or(s.frames_end, |(o, n, _, _)| o + n);
    let mut tail = vec![0u8; (len - tail_start) as usize];
    read(&mut tail, tail_start)?;
    if tail != s.tail {
        return Err(changed(&at, "trailer"));
    }
    sink.write_all(&tail)?;
    Ok(Transferred { bytes: len, frames })
}

/// What [`each_frame`] hands each frame to: its header as stored, decoded, and its payload.
type EachFrame<'a> = dyn FnMut(&[u8; FRAME_HEADER_LEN], &FrameHeader, &[u8]) -> Result<()> + 'a;

/// Read every frame of `s` in order from `read` (at the frames' start), check its header and
/// stored bytes against their CRCs, and hand each to `each` (header as stored, decoded, payload);
/// how many there were. `stop` is asked at every frame.
fn each_frame(read: &mut dyn FnMut(&mut [u8], u64) -> Result<()>, at: &str, s: &Shape, stop: &Stop, each: &mut EachFrame<'_>) -> Result<u64> {
    let mut pos = s.header_len;
    let mut frames = 0u64;
    let mut payload = Vec::new();
    // A frame's stored bytes are at most a transfer size (and the 28 bytes of sealing); a header
    // that says more is damaged, and must not make this allocate it.
    let most = MAX_TRANSFER_SIZE + 64;
    while pos < s.frames_end {
        if stop.asked() {
            return Err(Error::new(crate::error::ErrorKind::Cancelled, format!("{at}: copy stopped when asked")));
        }
        let here = |what: &str| Error::corrupt(format!("{at}: frame at byte {pos}: {what}"));
        let mut hb = [0u8; FRAME_HEADER_LEN];
        read(&mut hb, pos)?;
        let h = FrameHeader::decode(&hb).map_err(|e| here(e.message()))?;
        let n = u64::from(h.stored_len);
        if n > most || pos + FRAME_HEADER_LEN as u64 + n > s.frames_end {
            return Err(here("its stored length runs past the frames (the object is damaged)"));
        }
        payload.resize(n as usize, 0);
        read(&mut payload, pos)?;
        let stored = h.codec_kind().map_err(|e| here(e.message()))?.is_some();
        if stored && crc32c::crc32c(&payload) != h.stored_crc {
            return Err(here("stored bytes checksum mismatch (the object is damaged)"));
        }
        if !stored && n != 0 {
            return Err(here("a zero frame carries a payload (the object is damaged)"));
        }
        each(&hb, &h, &payload)?;
        pos += FRAME_HEADER_LEN as u64 + n;
        frames += 1;
    }
    if pos != s.frames_end {
        return Err(Error::corrupt(format!("{at}: the frames end at byte {pos}, not where the index starts ({}) (the object is damaged)", s.frames_end)));
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::BackupSet;
    use crate::storage::{Location, Store, WriteOptions};

    fn store(dir: &std::path::Path) -> std::sync::Arc<dyn Store> {
        Location::parse(dir.join("x").to_str().unwrap(), &crate::LocalOnly).unwrap().store().clone()
    }

    #[test]
    fn a_blob_and_a_stripe_copy_as_stored_and_damage_is_caught_before_anything_is_published() {
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path());
        let base = d.path().display().to_string();
        // A blob: 3 MiB of text, compressed.
        let content: Vec<u8> = (0..3u32 << 20).map(|i| b"sheaf copies frames as stored "[(i % 30) as usize]).collect();
        let sink = s.create(&format!("{base}/a.blob"), &WriteOptions::default()).unwrap();
        crate::blob::write_blob(sink, &mut &content[..], crate::CodecSpec::default(), "a", None).unwrap();
        let src = s.open(&format!("{base}/a.blob")).unwrap();
        let t = copy_checked(src.as_ref(), s.create(&format!("{base}/b.blob"), &WriteOptions::default()).unwrap(), &Stop::new()).unwrap();
        assert_eq!((t.bytes, t.frames), (src.len(), 3));
        assert_eq!(std::fs::read(d.path().join("a.blob")).unwrap(), std::fs::read(d.path().join("b.blob")).unwrap(), "byte for byte");

        // A stripe: a set of one stripe (three files, one over several chunks) backed up.
        let (_, stripes) = crate::set::tests::backed_up(d.path(), "set", 1);
        let stripe = d.path().join("set_1.sheaf");
        assert_eq!(stripes.len(), 1);
        let src = s.open(stripe.to_str().unwrap()).unwrap();
        let t = copy_checked(src.as_ref(), s.create(&format!("{base}/copy.sheaf"), &WriteOptions::default()).unwrap(), &Stop::new()).unwrap();
        assert!(t.frames >= 3 && t.bytes == src.len());
        assert_eq!(std::fs::read(&stripe).unwrap(), std::fs::read(d.path().join("copy.sheaf")).unwrap());

        // One flipped byte in a frame's payload, the index, or the manifest: refused, nothing published.
        let whole = std::fs::read(&stripe).unwrap();
        let tr = Trailer::decode(&whole[whole.len() - TRAILER_LEN..]).unwrap();
        for (at, what) in [(HEADER_LEN + FRAME_HEADER_LEN + 7, "stored bytes"), (tr.index_offset as usize + 3, "index"), (tr.manifest_offset as usize + 1, "manifest")] {
            let mut bad = whole.clone();
            bad[at] ^= 0x40;
            std::fs::write(d.path().join("bad.sheaf"), &bad).unwrap();
            let src = s.open(&format!("{base}/bad.sheaf")).unwrap();
            let e = copy_checked(src.as_ref(), s.create(&format!("{base}/out.sheaf"), &WriteOptions::default()).unwrap(), &Stop::new()).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{what}: {e}");
            assert!(e.to_string().contains(what), "{what}: {e}");
            assert!(!d.path().join("out.sheaf").exists(), "{what}: nothing published");
        }
        // Cut short: incomplete.
        std::fs::write(d.path().join("cut.sheaf"), &whole[..whole.len() - 100]).unwrap();
        let src = s.open(&format!("{base}/cut.sheaf")).unwrap();
        let e = copy_checked(src.as_ref(), s.create(&format!("{base}/out.sheaf"), &WriteOptions::default()).unwrap(), &Stop::new()).unwrap_err();
        assert!(matches!(e.kind(), crate::error::ErrorKind::Incomplete | crate::error::ErrorKind::Corrupt), "{e}");
        assert!(!d.path().join("out.sheaf").exists(), "nothing published");
    }

    #[test]
    fn a_set_and_a_blob_sealed_on_the_way_open_with_the_key_only_and_hold_the_same() {
        use crate::crypto::{Kdf, Keys};
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path());
        let base = d.path().display().to_string();
        let keys = Keys::from_key([7; 32]);
        // A set of three stripes, each sealed under the one data key of the copy.
        let (src, stripes) = crate::set::tests::backed_up(d.path(), "plain", 3);
        let (block, cipher) = keys.seal(Kdf::KeyFile).unwrap();
        let with = SealWith::new(block, cipher);
        std::fs::create_dir(d.path().join("sealed")).unwrap();
        let mut sealed = Vec::new();
        for k in 1..=3 {
            let from = s.open(&format!("{base}/plain_{k}.sheaf")).unwrap();
            let to = format!("{base}/sealed/plain_{k}.sheaf");
            let t = copy_sealing(from.as_ref(), s.create(&to, &WriteOptions::default()).unwrap(), &Stop::new(), &with).unwrap();
            assert!(t.bytes > from.len(), "stripe {k}: {t:?}");
            sealed.push(crate::storage::Location::file(d.path().join(format!("sealed/plain_{k}.sheaf"))));
        }
        // The key sealed these three stripes: not one of them again, nor anything else.
        let again = s.open(&format!("{base}/plain_2.sheaf")).unwrap();
        let e = copy_sealing(again.as_ref(), s.create(&format!("{base}/twice.sheaf"), &WriteOptions::default()).unwrap(), &Stop::new(), &with).unwrap_err();
        assert!(e.to_string().contains("each stripe of one set once"), "{e}");
        assert_eq!(BackupSet::open(&sealed, &crate::LocalOnly).err().expect("sealed").kind(), crate::error::ErrorKind::Key);
        let set = BackupSet::open_with(&sealed, &crate::LocalOnly, Some(&keys)).unwrap();
        let plain = BackupSet::open(&stripes, &crate::LocalOnly).unwrap();
        assert_eq!((set.manifest.backup_id.clone(), set.file_count()), (plain.manifest.backup_id.clone(), plain.file_count()));
        let v = crate::restore::verify(&set, None, std::sync::Arc::new(crate::pipeline::NoProgress), &Stop::new()).unwrap();
        assert_eq!(v.frames, crate::restore::verify(&plain, None, std::sync::Arc::new(crate::pipeline::NoProgress), &Stop::new()).unwrap().frames);
        let out = d.path().join("out");
        crate::restore::restore(&set, &crate::restore::RestoreOptions::new(&out), std::sync::Arc::new(crate::pipeline::NoProgress)).unwrap();
        for f in ["big", "small", "sub/zeros"] {
            assert_eq!(std::fs::read(out.join(f)).unwrap(), std::fs::read(src.join(f)).unwrap(), "{f}");
        }
        // Already sealed: refused.
        let again = s.open(&format!("{base}/sealed/plain_1.sheaf")).unwrap();
        let (block, cipher) = keys.seal(Kdf::KeyFile).unwrap();
        let e = copy_sealing(again.as_ref(), s.create(&format!("{base}/twice.sheaf"), &WriteOptions::default()).unwrap(), &Stop::new(), &SealWith::new(block, cipher)).unwrap_err();
        assert!(e.to_string().contains("encrypted already"), "{e}");

        // A blob: its own data key, its content checksum masked; it reads back with the key only.
        let content: Vec<u8> = (0..(2u32 << 20) + 5).map(|i| (i % 251) as u8).collect();
        crate::blob::write_blob(s.create(&format!("{base}/a.blob"), &WriteOptions::default()).unwrap(), &mut &content[..], crate::CodecSpec::default(), "a", None).unwrap();
        let (block, cipher) = keys.seal(Kdf::KeyFile).unwrap();
        let from = s.open(&format!("{base}/a.blob")).unwrap();
        copy_sealing(from.as_ref(), s.create(&format!("{base}/b.blob"), &WriteOptions::default()).unwrap(), &Stop::new(), &SealWith::new(block, cipher)).unwrap();
        let to = s.open(&format!("{base}/b.blob")).unwrap();
        assert!(crate::blob::read_blob(to.as_ref(), None, &mut |_| Ok(())).is_err(), "not without the key");
        let mut back = Vec::new();
        let info = crate::blob::read_blob(to.as_ref(), Some(&keys), &mut |b| {
            back.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert!(info.encrypted && back == content);
    }
}
