//! The frame stage: one encoder and one decoder own a frame, so that backup, restore, verify and the
//! WAL archive all compress, check and expand a chunk the same way and nothing else does.
//!
//! ```text
//!  raw chunk ──FrameEncoder──► FrameHeader + payload      (all zero: a zero frame, no payload;
//!                                                          does not shrink: stored raw)
//!  FrameHeader + payload ──FrameDecoder──► raw chunk       (stored crc, then codec, then raw crc)
//! ```

use crate::codec::{CodecKind, CodecSpec, Compressor, DecompressorSet};
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
    /// Compressed: the payload is [`FrameEncoder::output`]'s first `n` bytes.
    Packed(usize),
}

/// Compresses chunks into frames. One per thread; it keeps the codec's state and an output buffer.
pub struct FrameEncoder {
    compressor: Box<dyn Compressor>,
    kind: CodecKind,
    out: Vec<u8>,
}

impl FrameEncoder {
    /// An encoder whose output buffer has `out_len` bytes: `spec.buffer_len(chunk)` for chunks of
    /// up to `chunk` bytes (what a pipeline's pool buffers hold, so the two can be swapped).
    ///
    /// # Errors
    /// When the codec cannot be set up.
    pub fn new(spec: CodecSpec, out_len: usize) -> Result<Self> {
        let out = if spec.kind == CodecKind::None { Vec::new() } else { vec![0u8; out_len] };
        Ok(FrameEncoder { compressor: spec.compressor()?, kind: spec.kind, out })
    }

    /// Encode `raw`, the bytes at `offset` of file `file_id`.
    ///
    /// # Errors
    /// A codec failure (not lack of room: a chunk that does not shrink is stored raw).
    pub fn encode(&mut self, file_id: u32, offset: u64, raw: &[u8]) -> Result<(FrameHeader, Payload)> {
        self.encode_checked(file_id, offset, raw, crc32c::crc32c(raw))
    }

    /// [`FrameEncoder::encode`] when the caller already has the crc32c of `raw` (a packed chunk,
    /// whose files' checksums combine to it).
    ///
    /// # Errors
    /// As [`FrameEncoder::encode`].
    pub fn encode_checked(&mut self, file_id: u32, offset: u64, raw: &[u8], raw_crc: u32) -> Result<(FrameHeader, Payload)> {
        let mut header =
            FrameHeader { file_id, offset, raw_len: raw.len() as u32, stored_len: 0, codec: ZERO_FRAME, flags: 0, raw_crc, stored_crc: 0 };
        if is_zero(raw) {
            return Ok((header, Payload::Zero));
        }
        if self.kind != CodecKind::None {
            let room = self.compressor.room(raw.len()).min(self.out.len());
            if let Some(n) = self.compressor.compress(raw, &mut self.out[..room])? {
                header.codec = self.compressor.kind() as u8;
                header.stored_len = n as u32;
                header.stored_crc = crc32c::crc32c(&self.out[..n]);
                return Ok((header, Payload::Packed(n)));
            }
        }
        header.codec = CodecKind::None as u8;
        header.stored_len = raw.len() as u32;
        header.stored_crc = raw_crc;
        Ok((header, Payload::Raw))
    }

    /// The zero frame for `len` bytes of a hole (a sparse file's, read by its extents) at `offset`
    /// of file `file_id`: no payload, no bytes to read. `len` is at most [`crate::format::MAX_ZERO_FRAME`].
    pub fn hole(file_id: u32, offset: u64, len: u32) -> FrameHeader {
        FrameHeader { file_id, offset, raw_len: len, stored_len: 0, codec: ZERO_FRAME, flags: 0, raw_crc: zero_crc(len as usize), stored_crc: 0 }
    }

    /// The compressed bytes of the last [`Payload::Packed`] frame (its first `n` bytes).
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// Trade the output buffer for `other` (of at least the same length), so that a pipeline can
    /// pass the compressed bytes on without copying them.
    pub fn swap_output(&mut self, other: &mut Vec<u8>) {
        std::mem::swap(&mut self.out, other);
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
}

impl FrameDecoder {
    /// A decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Check and expand a frame whose header was already decoded: the stored bytes against their
    /// checksum, then the codec, then the raw bytes against theirs. `stored` is the payload
    /// (`None` for a zero frame); `out` must hold at least `raw_len` bytes. Returns the raw chunk,
    /// or `None` for a zero frame (the caller writes zeros or leaves a hole).
    ///
    /// # Errors
    /// What does not match, as a short phrase for the caller to place (stripe, frame, file).
    pub fn decode<'a>(&mut self, h: &FrameHeader, stored: Option<&[u8]>, out: &'a mut [u8]) -> std::result::Result<Option<&'a [u8]>, String> {
        let raw_len = h.raw_len as usize;
        let kind = h.codec_kind().map_err(|e| e.message().to_string())?;
        match (kind, stored) {
            (None, Some(_)) => Err("zero frame carries a payload (the frame header is damaged)".into()),
            (None, None) => {
                if zero_crc(raw_len) != h.raw_crc {
                    return Err("zero frame's checksum is not that of zeros".into());
                }
                Ok(None)
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
                let raw = &mut out[..raw_len];
                self.decoders.decompress(kind, stored, raw).map_err(|e| e.message().to_string())?;
                if crc32c::crc32c(raw) != h.raw_crc {
                    return Err("decompressed bytes do not match their checksum".into());
                }
                Ok(Some(raw))
            }
            (Some(_), None) => Err("frame has a codec but no payload".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(spec: &str, raw: &[u8]) -> Payload {
        let spec = CodecSpec::parse(spec).unwrap();
        let mut enc = FrameEncoder::new(spec, spec.buffer_len(1 << 16)).unwrap();
        let (h, p) = enc.encode(3, 4096, raw).unwrap();
        let stored: Option<Vec<u8>> = match p {
            Payload::Zero => None,
            Payload::Raw => Some(raw.to_vec()),
            Payload::Packed(n) => Some(enc.output()[..n].to_vec()),
        };
        let mut out = vec![0u8; 1 << 16];
        let mut dec = FrameDecoder::new();
        let got = dec.decode(&h, stored.as_deref(), &mut out).unwrap();
        match got {
            None => assert!(raw.iter().all(|&b| b == 0)),
            Some(r) => assert_eq!(r, raw),
        }
        if let Some(mut bad) = stored {
            if !bad.is_empty() {
                bad[0] ^= 1;
                assert!(dec.decode(&h, Some(&bad), &mut out).unwrap_err().contains("checksum"));
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
}
