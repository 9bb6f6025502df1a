//! The frame stage: one encoder and one decoder own a frame, so that backup, restore, verify and the
//! WAL archive all compress, check and expand a chunk the same way and nothing else does.
//!
//! ```text
//!  raw chunk ──FrameEncoder──► FrameHeader + payload      (all zero: a zero frame, no payload;
//!                                                          does not shrink: stored raw)
//!  FrameHeader + payload ──FrameDecoder──► raw chunk       (stored crc, then codec, then raw crc)
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::codec::{CodecKind, CodecSpec, Compressor, DecompressorSet};
use crate::crypto::{Cipher, FRAME_OVERHEAD, NONCE_FRAMES, TAG_LEN};
use crate::error::Result;
use crate::format::{FrameHeader, ZERO_FRAME};
use crate::pipeline::{is_zero, zero_crc};

/// Where an encoded frame's payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// An all-zero chunk: the header says it all.
    Zero,
    /// Stored as is: the payload is the raw chunk itself.
    Raw,
    /// Compressed (or sealed): the payload is the first `n` bytes of the output buffer handed in.
    Packed(usize),
}

/// Encryption of frames: one data key, and the counter that numbers every frame sealed under it
/// (shared by all of a backup's encoders, so no nonce repeats).
#[derive(Clone, Debug)]
pub struct Sealing {
    /// The data key's cipher.
    pub cipher: Arc<Cipher>,
    /// The next frame's number.
    pub counter: Arc<AtomicU64>,
}

impl Sealing {
    /// Sealing with `cipher`, frames numbered from 0.
    pub fn new(cipher: Arc<Cipher>) -> Sealing {
        Sealing { cipher, counter: Arc::new(AtomicU64::new(0)) }
    }
}

/// The bytes of a frame header that its sealed payload authenticates: everything but the
/// checksums, which are made after sealing (and the raw one is inside the payload).
fn sealed_aad(h: &FrameHeader) -> [u8; 28] {
    h.encode()[..28].try_into().expect("28 bytes")
}

/// Seal the `n` stored bytes at `out[12..]` in place: `out` becomes [number 8][raw crc 4][stored
/// bytes][tag 16], the middle two encrypted, and `header` says so (its raw crc moves inside).
pub(crate) fn seal_body(seal: &Sealing, header: &mut FrameHeader, raw_crc: u32, out: &mut [u8], n: usize) -> FrameHeader {
    let body_at = 12;
    let number = seal.counter.fetch_add(1, Ordering::Relaxed);
    header.stored_len = (n + FRAME_OVERHEAD) as u32;
    header.raw_crc = 0;
    out[0..8].copy_from_slice(&number.to_le_bytes());
    out[8..12].copy_from_slice(&raw_crc.to_le_bytes());
    let tag = seal.cipher.seal(NONCE_FRAMES, number, &sealed_aad(header), &mut out[8..body_at + n]);
    out[body_at + n..body_at + n + TAG_LEN].copy_from_slice(&tag);
    header.stored_crc = crc32c::crc32c(&out[..n + FRAME_OVERHEAD]);
    *header
}

/// Compresses chunks into frames. One per thread; it keeps the codec's state. The frame's payload
/// is written into a buffer the caller hands in (a pipeline's pool buffer, so that the compressed
/// bytes travel on in it without a copy).
pub struct FrameEncoder {
    compressor: Box<dyn Compressor>,
    kind: CodecKind,
    seal: Option<Sealing>,
}

impl FrameEncoder {
    /// An encoder for `spec`.
    ///
    /// # Errors
    /// When the codec cannot be set up.
    pub fn new(spec: CodecSpec) -> Result<Self> {
        Ok(FrameEncoder { compressor: spec.compressor()?, kind: spec.kind, seal: None })
    }

    /// This encoder, sealing every payload it makes (AES-256-GCM after compression): the payload
    /// becomes the frame's number, then the sealed raw checksum and stored bytes, then the tag.
    /// The frame header keeps no raw checksum in the clear.
    pub fn sealed(mut self, seal: Option<Sealing>) -> Self {
        self.seal = seal;
        self
    }

    /// How many bytes the output buffer needs for chunks of up to `chunk` bytes: the codec's
    /// worst case ([`CodecSpec::buffer_len`]), and when sealing [`FRAME_OVERHEAD`] more.
    pub fn out_len(spec: CodecSpec, chunk: usize, sealed: bool) -> usize {
        spec.buffer_len(chunk) + if sealed { FRAME_OVERHEAD } else { 0 }
    }

    /// Whether encoding ever writes into the output buffer (`none`, unsealed, never does: its
    /// payload is the raw chunk itself).
    pub fn writes_output(&self) -> bool {
        self.kind != CodecKind::None || self.seal.is_some()
    }

    /// Encode `raw`, the bytes at `offset` of file `file_id`, into `out` (of
    /// [`FrameEncoder::out_len`] bytes).
    ///
    /// # Errors
    /// A codec failure (not lack of room: a chunk that does not shrink is stored raw).
    pub fn encode(&mut self, file_id: u32, offset: u64, raw: &[u8], out: &mut [u8]) -> Result<(FrameHeader, Payload)> {
        self.encode_checked(file_id, offset, raw, crc32c::crc32c(raw), 0, out)
    }

    /// [`FrameEncoder::encode`] when the caller already has the crc32c of `raw` (a packed chunk,
    /// whose files' checksums combine to it), with the frame's `flags`.
    ///
    /// # Errors
    /// As [`FrameEncoder::encode`]; a sealed frame whose `out` has no room for the chunk stored
    /// raw is refused (a caller's sizing fault).
    pub fn encode_checked(&mut self, file_id: u32, offset: u64, raw: &[u8], raw_crc: u32, flags: u8, out: &mut [u8]) -> Result<(FrameHeader, Payload)> {
        let mut header = FrameHeader { file_id, offset, raw_len: raw.len() as u32, stored_len: 0, codec: ZERO_FRAME, flags, raw_crc, stored_crc: 0 };
        if is_zero(raw) {
            return Ok((header, Payload::Zero));
        }
        let Some(seal) = &self.seal else {
            if self.kind != CodecKind::None {
                let room = self.compressor.room(raw.len()).min(out.len());
                if let Some(n) = self.compressor.compress(raw, &mut out[..room])? {
                    header.codec = self.compressor.kind() as u8;
                    header.stored_len = n as u32;
                    header.stored_crc = crc32c::crc32c(&out[..n]);
                    return Ok((header, Payload::Packed(n)));
                }
            }
            header.codec = CodecKind::None as u8;
            header.stored_len = raw.len() as u32;
            header.stored_crc = raw_crc;
            return Ok((header, Payload::Raw));
        };
        // Sealed: [number 8][raw crc 4][stored bytes][tag 16], the middle two encrypted.
        let body_at = 12;
        let Some(room) = out.len().checked_sub(FRAME_OVERHEAD).filter(|&r| r >= raw.len()) else {
            return Err(crate::error::Error::invalid(format!(
                "internal: a sealed frame of {} bytes needs an output buffer of {} bytes, not {}",
                raw.len(),
                raw.len() + FRAME_OVERHEAD,
                out.len()
            )));
        };
        let mut packed = None;
        if self.kind != CodecKind::None {
            let room = self.compressor.room(raw.len()).min(room);
            packed = self.compressor.compress(raw, &mut out[body_at..body_at + room])?;
        }
        let n = match packed {
            Some(n) => {
                header.codec = self.compressor.kind() as u8;
                n
            }
            None => {
                out[body_at..body_at + raw.len()].copy_from_slice(raw);
                header.codec = CodecKind::None as u8;
                raw.len()
            }
        };
        Ok((seal_body(seal, &mut header, raw_crc, out, n), Payload::Packed(n + FRAME_OVERHEAD)))
    }

    /// The frame for a chunk compressed elsewhere (by the agent on the database host): `buf`'s
    /// first `n` bytes are the output of `header`'s codec for its `raw_len` raw bytes, whose
    /// crc32c is its `raw_crc` (its file, offset and flags are the frame's; its stored length and
    /// checksum are made here). Unsealed, the payload stays where it is, its first `n` bytes;
    /// sealed, it is sealed in place and grows by [`FRAME_OVERHEAD`], which `buf` must have room for.
    ///
    /// # Errors
    /// A sealed frame whose `buf` has no room (a caller's sizing fault).
    pub fn adopt(&self, mut header: FrameHeader, buf: &mut [u8], n: usize) -> Result<(FrameHeader, usize)> {
        header.stored_len = n as u32;
        let raw_crc = header.raw_crc;
        let Some(seal) = &self.seal else {
            header.stored_crc = crc32c::crc32c(&buf[..n]);
            return Ok((header, n));
        };
        if buf.len() < n + FRAME_OVERHEAD {
            return Err(crate::error::Error::invalid(format!("internal: sealing {n} stored bytes needs a buffer of {} bytes, not {}", n + FRAME_OVERHEAD, buf.len())));
        }
        buf.copy_within(..n, 12);
        Ok((seal_body(seal, &mut header, raw_crc, buf, n), n + FRAME_OVERHEAD))
    }

    /// The zero frame for `len` bytes of a hole (a sparse file's, read by its extents) at `offset`
    /// of file `file_id`: no payload, no bytes to read. `len` is at most [`crate::format::MAX_ZERO_FRAME`].
    pub fn hole(file_id: u32, offset: u64, len: u32) -> FrameHeader {
        FrameHeader { file_id, offset, raw_len: len, stored_len: 0, codec: ZERO_FRAME, flags: 0, raw_crc: zero_crc(len as usize), stored_crc: 0 }
    }

    /// Compress from now on at `level` (`auto` steers zstd's level chunk by chunk).
    ///
    /// # Errors
    /// A level the codec refuses.
    pub fn set_level(&mut self, level: i32) -> Result<()> {
        self.compressor.set_level(level)
    }

    /// Whether this encoder compresses at all (`none` does not).
    pub fn compresses(&self) -> bool {
        self.kind != CodecKind::None
    }
}

/// Checks and expands frames. One per thread; it keeps one decompressor per codec met.
#[derive(Default)]
pub struct FrameDecoder {
    decoders: DecompressorSet,
    cipher: Option<Arc<Cipher>>,
}

impl FrameDecoder {
    /// A decoder of frames sealed with `cipher`, or of plain ones.
    pub fn new(cipher: Option<Arc<Cipher>>) -> Self {
        FrameDecoder { decoders: DecompressorSet::default(), cipher }
    }

    /// Check and expand a frame whose header was already decoded: the stored bytes against their
    /// checksum, then (sealed) their authentication, then the codec, then the raw bytes against
    /// their checksum. `stored` is the payload (`None` for a zero frame), opened in place when
    /// sealed; `out` must hold at least `raw_len` bytes. Returns the raw chunk (`None` for a zero
    /// frame: the caller writes zeros or leaves a hole) and its crc32c, which a sealed frame keeps
    /// inside its payload.
    ///
    /// # Errors
    /// What does not match, as a short phrase for the caller to place (stripe, frame, file).
    pub fn decode<'a>(&mut self, h: &FrameHeader, stored: Option<&mut [u8]>, out: &'a mut [u8]) -> std::result::Result<(Option<&'a [u8]>, u32), String> {
        let raw_len = h.raw_len as usize;
        let kind = h.codec_kind().map_err(|e| e.message().to_string())?;
        match (kind, stored) {
            (None, Some(_)) => Err("zero frame carries a payload (the frame header is damaged)".into()),
            (None, None) => {
                if zero_crc(raw_len) != h.raw_crc {
                    return Err("zero frame's checksum is not that of zeros".into());
                }
                Ok((None, h.raw_crc))
            }
            (Some(kind), Some(stored)) => {
                if stored.len() != h.stored_len as usize {
                    return Err(format!("payload is {} bytes, the header says {}", stored.len(), h.stored_len));
                }
                if crc32c::crc32c(stored) != h.stored_crc {
                    return Err("payload checksum mismatch (the stored bytes are damaged)".into());
                }
                if out.len() < raw_len {
                    return Err(format!("frame of {raw_len} raw bytes is larger than the chunk size"));
                }
                let (body, raw_crc) = match &self.cipher {
                    None => (&*stored, h.raw_crc),
                    Some(cipher) => {
                        if stored.len() < FRAME_OVERHEAD || h.raw_crc != 0 {
                            return Err("not a sealed frame, in an encrypted backup (the frame is damaged or was replaced)".into());
                        }
                        let number = u64::from_le_bytes(stored[0..8].try_into().expect("8 bytes"));
                        let end = stored.len() - TAG_LEN;
                        let (sealed, tag) = stored[8..].split_at_mut(end - 8);
                        cipher.open(NONCE_FRAMES, number, &sealed_aad(h), sealed, tag)?;
                        (&sealed[4..], u32::from_le_bytes(sealed[0..4].try_into().expect("4 bytes")))
                    }
                };
                let raw = &mut out[..raw_len];
                self.decoders.decompress(kind, body, raw).map_err(|e| e.message().to_string())?;
                if crc32c::crc32c(raw) != raw_crc {
                    return Err("decompressed bytes do not match their checksum".into());
                }
                Ok((Some(raw), raw_crc))
            }
            (Some(_), None) => Err("frame has a codec but no payload".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(spec: &str, raw: &[u8]) -> Payload {
        round_trip_sealed(spec, raw, None)
    }

    fn round_trip_sealed(spec: &str, raw: &[u8], cipher: Option<Arc<Cipher>>) -> Payload {
        let spec = CodecSpec::parse(spec).unwrap();
        let mut buf = vec![0u8; FrameEncoder::out_len(spec, 1 << 16, cipher.is_some())];
        let mut enc = FrameEncoder::new(spec).unwrap().sealed(cipher.clone().map(Sealing::new));
        let (h, p) = enc.encode(3, 4096, raw, &mut buf).unwrap();
        let stored: Option<Vec<u8>> = match p {
            Payload::Zero => None,
            Payload::Raw => Some(raw.to_vec()),
            Payload::Packed(n) => Some(buf[..n].to_vec()),
        };
        let mut out = vec![0u8; 1 << 16];
        let mut dec = FrameDecoder::new(cipher.clone());
        let mut payload = stored.clone();
        let (got, crc) = dec.decode(&h, payload.as_deref_mut(), &mut out).unwrap();
        assert_eq!(crc, crc32c::crc32c(raw));
        match got {
            None => assert!(raw.iter().all(|&b| b == 0)),
            Some(r) => assert_eq!(r, raw),
        }
        if let Some(mut bad) = stored {
            if !bad.is_empty() {
                if cipher.is_some() {
                    assert!(!bad.windows(64.min(raw.len())).any(|w| raw.windows(w.len()).next() == Some(w)), "plaintext in the clear");
                    // Altered with its checksum made good again: the seal still catches it.
                    let mut forged = bad.clone();
                    forged[20] ^= 1;
                    let h2 = FrameHeader { stored_crc: crc32c::crc32c(&forged), ..h };
                    assert!(dec.decode(&h2, Some(&mut forged), &mut out).unwrap_err().contains("authentication"));
                    // A header moved to another offset: the seal covers it.
                    let mut same = bad.clone();
                    let moved = FrameHeader { offset: h.offset + 1, ..h };
                    assert!(dec.decode(&moved, Some(&mut same), &mut out).unwrap_err().contains("authentication"));
                }
                bad[0] ^= 1;
                assert!(dec.decode(&h, Some(&mut bad), &mut out).unwrap_err().contains("checksum"));
            }
        }
        p
    }

    #[test]
    fn frames_round_trip_and_damage_is_named() {
        let text: Vec<u8> = (0..60_000u32).map(|i| b"postgres pages "[(i % 15) as usize]).collect();
        let noise: Vec<u8> = crate::storage::conformance::payload(60_000);
        assert!(matches!(round_trip("zstd:low", &text), Payload::Packed(_)));
        assert!(matches!(round_trip("lz4", &text), Payload::Packed(_)));
        assert!(matches!(round_trip("deflate:1", &text), Payload::Packed(_)));
        assert_eq!(round_trip("none", &text), Payload::Raw);
        assert_eq!(round_trip("zstd:low", &noise), Payload::Raw, "noise does not shrink: stored raw");
        assert_eq!(round_trip("zstd:low", &[0u8; 8192]), Payload::Zero);
    }

    #[test]
    fn sealed_frames_round_trip_and_hide_their_bytes() {
        let keys = crate::crypto::Keys::from_passphrase(b"p".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap();
        let (_, cipher) = keys.seal(keys.fresh_kdf().unwrap()).unwrap();
        let text: Vec<u8> = (0..60_000u32).map(|i| b"postgres pages "[(i % 15) as usize]).collect();
        let noise: Vec<u8> = crate::storage::conformance::payload(60_000);
        for spec in ["zstd:low", "lz4", "deflate:1", "none"] {
            assert!(matches!(round_trip_sealed(spec, &text, Some(cipher.clone())), Payload::Packed(_)), "{spec}");
            assert!(matches!(round_trip_sealed(spec, &noise, Some(cipher.clone())), Payload::Packed(_)), "{spec}");
        }
        assert_eq!(round_trip_sealed("zstd:low", &[0u8; 8192], Some(cipher)), Payload::Zero);
    }

    #[test]
    fn chunks_compressed_elsewhere_are_framed_as_this_encoder_would() {
        let keys = crate::crypto::Keys::from_passphrase(b"p".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap();
        let (_, cipher) = keys.seal(keys.fresh_kdf().unwrap()).unwrap();
        let text: Vec<u8> = (0..60_000u32).map(|i| b"postgres pages "[(i % 15) as usize]).collect();
        let spec = CodecSpec::parse("zstd:low").unwrap();
        for cipher in [None, Some(cipher)] {
            // What the agent sends: the codec's output, and the raw bytes' checksum.
            let mut elsewhere = FrameEncoder::new(spec).unwrap();
            let mut buf = vec![0u8; FrameEncoder::out_len(spec, text.len(), true)];
            let (h, p) = elsewhere.encode(0, 0, &text, &mut buf).unwrap();
            let Payload::Packed(n) = p else { panic!("text compresses") };
            let here = FrameEncoder::new(spec).unwrap().sealed(cipher.clone().map(Sealing::new));
            let at =
                FrameHeader { file_id: 9, offset: 1 << 20, raw_len: text.len() as u32, stored_len: 0, codec: CodecKind::Zstd as u8, flags: 0, raw_crc: h.raw_crc, stored_crc: 0 };
            let (header, len) = here.adopt(at, &mut buf, n).unwrap();
            assert_eq!(len, n + if cipher.is_some() { FRAME_OVERHEAD } else { 0 });
            assert_eq!((header.file_id, header.offset, header.stored_len as usize), (9, 1 << 20, len));
            let mut out = vec![0u8; text.len()];
            let (raw, crc) = FrameDecoder::new(cipher.clone()).decode(&header, Some(&mut buf[..len]), &mut out).unwrap();
            assert_eq!((raw, crc), (Some(&text[..]), crc32c::crc32c(&text)));
            if cipher.is_some() {
                assert!(here.adopt(at, &mut buf[..n + 3], n).is_err(), "no room to seal");
            }
        }
    }
}
