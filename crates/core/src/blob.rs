//! One file as one object: how a repository stores WAL segments, history files and its own small
//! records. The same frames as a stripe (compressed chunk by chunk through [`crate::frame`], each
//! with checksums of its stored and raw bytes), between a header and a trailer that holds the
//! length and checksum of the whole content, so a truncated or damaged object is named as such.
//!
//! ```text
//! blob    := header frame* trailer
//! header  (64 B)  magic "SHEAF\0BL", version, header length, codec, level, cipher, chunk size,
//!                 created (ms since the epoch), crc32c of bytes 0..60; when encrypted, a 96-byte
//!                 key block follows (crypto.rs), every frame is sealed and the trailer's content
//!                 checksum is masked with a value of the object's own key
//! frame   (40 B header + stored bytes)  as in a stripe; file id 0, offsets contiguous from 0
//! trailer (48 B)  raw length, frame count, crc32c of the whole raw content, crc32c of bytes
//!                 0..36, magic "SHEAFBND"
//! ```
//!
//! A blob is written through a [`StripeSink`], so it appears under its name only when whole.

use std::io::{Read, Write};

use crate::codec::{CodecKind, CodecSpec};
use crate::crypto::{Encryption, KeyBlock, Keys, CIPHER_AES256GCM, CIPHER_NONE, FRAME_OVERHEAD, KEY_BLOCK_LEN};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{u32_at, u64_at, FrameHeader, FRAME_HEADER_LEN};
use crate::frame::{FrameDecoder, FrameEncoder, Payload, Sealing};
use crate::pipeline::read_full;
use crate::storage::{from_io, StripeSink, StripeSource};
use crate::time::now_ms;

/// Header magic.
pub const BLOB_MAGIC: &[u8; 8] = b"SHEAF\0BL";
/// Trailer magic, the last 8 bytes of a whole blob.
pub const BLOB_END: &[u8; 8] = b"SHEAFBND";
/// Header length.
pub const BLOB_HEADER_LEN: usize = 64;
/// Trailer length.
pub const BLOB_TRAILER_LEN: usize = 48;
/// Version of the blob layout (independent of the stripe format's version).
pub const BLOB_VERSION: u16 = 1;
/// Chunk size of blobs: WAL segments are 16 MiB by default, so 16 frames.
pub const BLOB_CHUNK: usize = 1 << 20;

/// What a blob's header and trailer say.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BlobInfo {
    /// Bytes of content.
    pub raw_len: u64,
    /// Bytes of the object.
    pub stored_len: u64,
    /// crc32c of the content.
    pub crc: u32,
    /// Codec asked for.
    pub codec: String,
    /// When it was written, milliseconds since the epoch.
    pub created_unix_ms: i64,
    /// Whether it is encrypted (its crc is then masked until it is read with its key).
    pub encrypted: bool,
    /// How to make its key, when encrypted.
    #[serde(skip)]
    pub key_block: Option<KeyBlock>,
}

/// Compress everything `content` yields into `sink` as a blob, make it durable and publish it.
/// Memory: one chunk in, one out.
///
/// # Errors
/// Reading `content` (as [`ErrorKind::Source`]), codec failures, and the sink's errors. Nothing is
/// published on error (the sink is discarded).
pub fn write_blob(mut sink: Box<dyn StripeSink>, content: &mut dyn Read, spec: CodecSpec, what: &str, enc: Option<&Encryption>) -> Result<BlobInfo> {
    let r = write_into(sink.as_mut(), content, spec, what, enc);
    if r.is_err() {
        sink.discard();
    }
    r
}

fn write_into(sink: &mut dyn StripeSink, content: &mut dyn Read, spec: CodecSpec, what: &str, enc: Option<&Encryption>) -> Result<BlobInfo> {
    let created = now_ms();
    let sealed = enc.map(|e| e.keys.seal(e.kdf)).transpose()?;
    let header_len = BLOB_HEADER_LEN + if sealed.is_some() { KEY_BLOCK_LEN } else { 0 };
    let mut h = [0u8; BLOB_HEADER_LEN];
    h[0..8].copy_from_slice(BLOB_MAGIC);
    h[8..10].copy_from_slice(&BLOB_VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(header_len as u16).to_le_bytes());
    h[12] = spec.kind as u8;
    h[13] = spec.level as i8 as u8;
    h[14] = if sealed.is_some() { CIPHER_AES256GCM } else { CIPHER_NONE };
    h[16..20].copy_from_slice(&(BLOB_CHUNK as u32).to_le_bytes());
    h[20..28].copy_from_slice(&created.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    sink.write_all(&h)?;
    if let Some((block, _)) = &sealed {
        sink.write_all(&block.encode())?;
    }
    let mut out = vec![0u8; FrameEncoder::out_len(spec, BLOB_CHUNK, sealed.is_some())];
    let mut encoder = FrameEncoder::new(spec)?.sealed(sealed.as_ref().map(|(_, c)| Sealing::new(c.clone())));
    let mut buf = vec![0u8; BLOB_CHUNK];
    let (mut offset, mut frames, mut whole) = (0u64, 0u64, 0u32);
    loop {
        let n = read_full(content, &mut buf).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {what}"), e))?;
        if n == 0 {
            break;
        }
        let raw = &buf[..n];
        whole = crc32c::crc32c_append(whole, raw);
        let (header, payload) = encoder.encode(0, offset, raw, &mut out)?;
        sink.write_all(&header.encode())?;
        match payload {
            Payload::Zero => {}
            Payload::Raw => sink.write_all(raw)?,
            Payload::Packed(k) => sink.write_all(&out[..k])?,
        }
        offset += n as u64;
        frames += 1;
        if n < buf.len() {
            break;
        }
    }
    let mut t = [0u8; BLOB_TRAILER_LEN];
    t[0..8].copy_from_slice(&offset.to_le_bytes());
    t[8..16].copy_from_slice(&frames.to_le_bytes());
    // Sealed, the content's checksum would fingerprint it in the clear: it is masked.
    let mask = sealed.as_ref().map_or(0, |(_, c)| c.crc_mask());
    t[16..20].copy_from_slice(&(whole ^ mask).to_le_bytes());
    let crc = crc32c::crc32c(&t[..36]);
    t[36..40].copy_from_slice(&crc.to_le_bytes());
    t[40..48].copy_from_slice(BLOB_END);
    sink.write_all(&t)?;
    let stored_len = sink.written();
    sink.sync()?;
    sink.publish()?;
    Ok(BlobInfo { raw_len: offset, stored_len, crc: whole, codec: spec.to_string(), created_unix_ms: created, encrypted: sealed.is_some(), key_block: sealed.map(|(b, _)| b) })
}

/// Read and check a blob's header and trailer (two small reads), without its frames.
///
/// # Errors
/// [`ErrorKind::Corrupt`] or [`ErrorKind::Incomplete`] naming what does not match.
pub fn blob_info(src: &dyn StripeSource) -> Result<BlobInfo> {
    let at = src.location();
    let len = src.len();
    if len < (BLOB_HEADER_LEN + BLOB_TRAILER_LEN) as u64 {
        return Err(Error::incomplete(format!("{at}: {len} bytes is too short for a sheaf object (truncated)")));
    }
    let mut h = [0u8; BLOB_HEADER_LEN];
    src.read_exact_at(&mut h, 0)?;
    if &h[0..8] != BLOB_MAGIC {
        return Err(Error::corrupt(format!("{at}: not a sheaf object (bad magic)")));
    }
    if crc32c::crc32c(&h[..60]) != u32_at(&h, 60) {
        return Err(Error::corrupt(format!("{at}: header checksum mismatch (the header is damaged)")));
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version > BLOB_VERSION {
        return Err(Error::invalid(format!("{at}: written by a newer sheaf (format {version}, this one reads up to {BLOB_VERSION}): upgrade sheaf")));
    }
    let kind = CodecKind::from_id(h[12]).ok_or_else(|| Error::corrupt(format!("{at}: unknown codec id {}", h[12])))?;
    let key_block = match h[14] {
        CIPHER_NONE => None,
        CIPHER_AES256GCM if len >= (BLOB_HEADER_LEN + KEY_BLOCK_LEN + BLOB_TRAILER_LEN) as u64 => {
            let mut k = [0u8; KEY_BLOCK_LEN];
            src.read_exact_at(&mut k, BLOB_HEADER_LEN as u64)?;
            Some(KeyBlock::decode(&k).map_err(|e| e.context(at.to_string()))?)
        }
        CIPHER_AES256GCM => return Err(Error::incomplete(format!("{at}: too short for an encrypted sheaf object (truncated)"))),
        c => return Err(Error::invalid(format!("{at}: cipher {c} is not known to this sheaf: upgrade sheaf"))),
    };
    let header_len = BLOB_HEADER_LEN + if key_block.is_some() { KEY_BLOCK_LEN } else { 0 };
    if usize::from(u16::from_le_bytes([h[10], h[11]])) != header_len {
        return Err(Error::corrupt(format!("{at}: header length does not match its cipher (the header is damaged)")));
    }
    let mut t = [0u8; BLOB_TRAILER_LEN];
    src.read_exact_at(&mut t, len - BLOB_TRAILER_LEN as u64)?;
    if &t[40..48] != BLOB_END {
        return Err(Error::incomplete(format!("{at}: no end marker (truncated, or not written to the end)")));
    }
    if crc32c::crc32c(&t[..36]) != u32_at(&t, 36) {
        return Err(Error::corrupt(format!("{at}: trailer checksum mismatch (the trailer is damaged)")));
    }
    let codec = match kind {
        CodecKind::None | CodecKind::Lz4 => kind.name().to_string(),
        _ => format!("{}:{}", kind.name(), h[13] as i8),
    };
    Ok(BlobInfo {
        raw_len: u64_at(&t, 0),
        stored_len: len,
        crc: u32_at(&t, 16),
        codec,
        created_unix_ms: i64::from_le_bytes(h[20..28].try_into().expect("8 bytes")),
        encrypted: key_block.is_some(),
        key_block,
    })
}

/// Read a blob whole, checking every frame and the content's checksum, and hand each chunk of its
/// content to `out` in order. Memory: one chunk in, one out.
///
/// # Errors
/// [`ErrorKind::Corrupt`] / [`ErrorKind::Incomplete`] naming the object and what does not match;
/// `out`'s errors as [`ErrorKind::Target`].
pub fn read_blob(src: &dyn StripeSource, keys: Option<&Keys>, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<BlobInfo> {
    let mut info = blob_info(src)?;
    let at = src.location().to_string();
    let cipher = crate::crypto::cipher_for(info.key_block.as_ref(), keys, &at)?;
    if let Some(c) = &cipher {
        info.crc ^= c.crc_mask();
    }
    let start = (BLOB_HEADER_LEN + if cipher.is_some() { KEY_BLOCK_LEN } else { 0 }) as u64;
    let end = src.len() - BLOB_TRAILER_LEN as u64;
    if start > end {
        return Err(Error::incomplete(format!("{at}: too short for its header (truncated)")));
    }
    let mut stream = src.stream(start, end)?;
    let mut pos = start;
    let (mut offset, mut whole) = (0u64, 0u32);
    let overhead = if cipher.is_some() { FRAME_OVERHEAD } else { 0 };
    let mut decoder = FrameDecoder::new(cipher);
    // Sized to the content: a small record costs no 1 MiB buffers.
    let cap = usize::try_from(info.raw_len).unwrap_or(BLOB_CHUNK).clamp(1, BLOB_CHUNK);
    let mut stored = vec![0u8; cap + overhead];
    let mut raw = vec![0u8; cap];
    while pos < end {
        let here = |what: &str| Error::corrupt(format!("{at}: frame at byte {pos}: {what}"));
        let mut hb = [0u8; FRAME_HEADER_LEN];
        stream.read_exact(&mut hb).map_err(|e| from_io(e, || format!("{at}: frame at byte {pos}")))?;
        let h = FrameHeader::decode(&hb).map_err(|e| here(e.message()))?;
        if h.offset != offset || h.file_id != 0 || h.raw_len as usize > cap || h.stored_len as usize > cap + overhead {
            return Err(here("frame out of place (the object is damaged)"));
        }
        let n = h.stored_len as usize;
        if pos + (FRAME_HEADER_LEN + n) as u64 > end {
            return Err(here("frame runs past the end of the content (the object is damaged)"));
        }
        let payload = if h.codec_kind().map_err(|e| here(e.message()))?.is_some() {
            stream.read_exact(&mut stored[..n]).map_err(|e| from_io(e, || format!("{at}: frame at byte {pos}")))?;
            Some(&mut stored[..n])
        } else if n != 0 {
            return Err(here("zero frame carries a payload (the object is damaged)"));
        } else {
            None
        };
        let chunk = match decoder.decode(&h, payload, &mut raw).map_err(|e| here(&e))?.0 {
            Some(c) => c,
            None => {
                raw[..h.raw_len as usize].fill(0);
                &raw[..h.raw_len as usize]
            }
        };
        whole = crc32c::crc32c_append(whole, chunk);
        out(chunk)?;
        offset += u64::from(h.raw_len);
        pos += (FRAME_HEADER_LEN + n) as u64;
    }
    if offset != info.raw_len || whole != info.crc {
        return Err(Error::corrupt(format!(
            "{at}: the frames hold {offset} bytes (crc {whole:08x}) but the trailer says {} (crc {:08x}): the object is damaged",
            info.raw_len, info.crc
        )));
    }
    Ok(info)
}

/// Read a blob into `dest` (any `Write`), checked as [`read_blob`] does.
///
/// # Errors
/// As [`read_blob`]; write errors as [`ErrorKind::Target`].
pub fn copy_blob(src: &dyn StripeSource, keys: Option<&Keys>, dest: &mut dyn Write, dest_name: &str) -> Result<BlobInfo> {
    read_blob(src, keys, &mut |chunk| dest.write_all(chunk).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {dest_name}"), e)))
}

/// Whether the blob's content equals what `content` yields, byte for byte (the blob is checked on
/// the way, so a damaged object is an error, not a difference).
///
/// # Errors
/// As [`read_blob`]; reading `content` as [`ErrorKind::Source`].
pub fn same_content(src: &dyn StripeSource, keys: Option<&Keys>, content: &mut dyn Read, what: &str) -> Result<bool> {
    let mut same = true;
    let mut mine = vec![0u8; BLOB_CHUNK];
    read_blob(src, keys, &mut |chunk| {
        if same {
            let n = read_full(content, &mut mine[..chunk.len()]).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {what}"), e))?;
            same = n == chunk.len() && &mine[..n] == chunk;
        }
        Ok(())
    })?;
    if same {
        // Nothing left over on our side.
        let n = read_full(content, &mut mine[..1]).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {what}"), e))?;
        same = n == 0;
    }
    Ok(same)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Location, MemoryStore};
    use std::sync::Arc;

    fn put(store: &Arc<MemoryStore>, name: &str, content: &[u8], codec: &str) -> BlobInfo {
        let loc = Location::new(store.clone(), name);
        write_blob(loc.create(false, 0).unwrap(), &mut &content[..], CodecSpec::parse(codec).unwrap(), name, None).unwrap()
    }

    fn get(store: &Arc<MemoryStore>, name: &str) -> Result<Vec<u8>> {
        let src = Location::new(store.clone(), name).open()?;
        let mut out = Vec::new();
        copy_blob(src.as_ref(), None, &mut out, "memory")?;
        Ok(out)
    }

    fn content(n: usize) -> Vec<u8> {
        let mut v = crate::storage::conformance::payload(n);
        for (i, b) in v.iter_mut().enumerate() {
            if (i / 5000) % 3 != 0 {
                *b = (i % 7) as u8;
            }
        }
        // A run of zeros across a chunk boundary: a zero frame.
        if n > BLOB_CHUNK {
            let z = BLOB_CHUNK..(2 * BLOB_CHUNK).min(n);
            v[z].fill(0);
        }
        v
    }

    #[test]
    fn blobs_round_trip_with_every_codec_and_size() {
        let store = Arc::new(MemoryStore::new());
        for (i, n) in [0usize, 1, 100, BLOB_CHUNK, 3 * BLOB_CHUNK + 17].into_iter().enumerate() {
            let data = content(n);
            for codec in ["none", "lz4", "zstd:low", "deflate:1"] {
                let name = format!("b{i}-{codec}");
                let info = put(&store, &name, &data, codec);
                assert_eq!(info.raw_len, n as u64);
                assert_eq!(get(&store, &name).unwrap(), data, "{name}");
                let src = Location::new(store.clone(), &name[..]).open().unwrap();
                assert!(same_content(src.as_ref(), None, &mut &data[..], "x").unwrap());
                let mut other = data.clone();
                other.push(1);
                assert!(!same_content(src.as_ref(), None, &mut &other[..], "x").unwrap(), "longer is not the same");
                if n > 0 {
                    other.truncate(n);
                    other[n / 2] ^= 0x40;
                    assert!(!same_content(src.as_ref(), None, &mut &other[..], "x").unwrap(), "a flipped byte is not the same");
                    assert!(!same_content(src.as_ref(), None, &mut &data[..n - 1], "x").unwrap(), "shorter is not the same");
                }
                let meta = blob_info(src.as_ref()).unwrap();
                assert_eq!(meta.raw_len, n as u64);
            }
        }
    }

    #[test]
    fn encrypted_blobs_open_with_their_key_only_and_hide_content_and_checksum() {
        let store = Arc::new(MemoryStore::new());
        let keys = Arc::new(Keys::from_passphrase(b"wal secret".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap());
        let enc = Encryption { kdf: keys.fresh_kdf().unwrap(), keys: keys.clone() };
        let data: Vec<u8> = b"segment ".iter().cycle().take(3 * BLOB_CHUNK + 99).copied().collect();
        for codec in ["none", "zstd:low"] {
            let name = format!("enc-{codec}");
            let loc = Location::new(store.clone(), &name[..]);
            let info = write_blob(loc.create(false, 0).unwrap(), &mut &data[..], CodecSpec::parse(codec).unwrap(), "x", Some(&enc)).unwrap();
            assert!(info.encrypted);
            let src = loc.open().unwrap();
            let mut raw = vec![0u8; src.len() as usize];
            src.read_exact_at(&mut raw, 0).unwrap();
            assert!(!raw.windows(16).any(|w| w == &data[..16]), "{codec}: content in the clear");
            let shown = blob_info(src.as_ref()).unwrap();
            assert_ne!(shown.crc, crc32c::crc32c(&data), "{codec}: the content's checksum in the clear");

            let mut out = Vec::new();
            let got = copy_blob(src.as_ref(), Some(&keys), &mut out, "x").unwrap();
            assert_eq!(out, data);
            assert_eq!(got.crc, crc32c::crc32c(&data));
            assert!(same_content(src.as_ref(), Some(&keys), &mut &data[..], "x").unwrap());

            let e = copy_blob(src.as_ref(), None, &mut Vec::new(), "x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Key, "{e}");
            let wrong = Keys::from_passphrase(b"wal secreT".to_vec()).unwrap();
            let e = copy_blob(src.as_ref(), Some(&wrong), &mut Vec::new(), "x").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Key, "{e}");

            // Every flipped byte is caught, as damage (never read back as content).
            for at in (0..raw.len()).step_by(raw.len() / 97) {
                let mut bad = raw.clone();
                bad[at] ^= 0x08;
                let bname = format!("bad-{codec}-{at}");
                let mut s = Location::new(store.clone(), &bname[..]).create(false, 0).unwrap();
                s.write_all(&bad).unwrap();
                s.publish().unwrap();
                drop(s);
                let src = Location::new(store.clone(), &bname[..]).open().unwrap();
                let e = copy_blob(src.as_ref(), Some(&keys), &mut Vec::new(), "x").expect_err("damage must be caught");
                assert!(matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Incomplete | ErrorKind::InvalidInput | ErrorKind::Key), "{at}: {e}");
            }
        }
    }

    #[test]
    fn every_damage_is_caught() {
        let store = Arc::new(MemoryStore::new());
        let data = content(2 * BLOB_CHUNK + 5000);
        put(&store, "good", &data, "zstd:low");
        let bytes = {
            let src = Location::new(store.clone(), "good").open().unwrap();
            let mut b = vec![0u8; src.len() as usize];
            src.read_exact_at(&mut b, 0).unwrap();
            b
        };
        let mut x: u64 = 7;
        for round in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut bad = bytes.clone();
            if round % 4 == 0 {
                bad.truncate((x % bytes.len() as u64) as usize);
            } else {
                let at = (x % bytes.len() as u64) as usize;
                bad[at] ^= 1 << (x % 8);
            }
            let name = format!("bad{round}");
            let mut s = Location::new(store.clone(), &name[..]).create(false, 0).unwrap();
            s.write_all(&bad).unwrap();
            s.publish().unwrap();
            drop(s);
            let e = get(&store, &name).expect_err("damage must be caught");
            assert!(matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Incomplete | ErrorKind::InvalidInput), "{e}");
        }
    }
}
