//! `zstd`: Zstandard through libzstd, one context per thread, reused across chunks.

use super::{wrong_length, CodecKind, Compressor, Decompressor};
use crate::error::{Error, Result};

pub(super) struct ZstdCompressor(zstd::bulk::Compressor<'static>);

impl ZstdCompressor {
    pub(super) fn new(level: i32) -> Result<Self> {
        let mut c = zstd::bulk::Compressor::new(level)
            .map_err(|e| Error::invalid(format!("zstd level {level}: {e}")))?;
        // Frames carry their own crc32c; zstd's checksum and the content size are redundant.
        let _ = c.include_checksum(false);
        let _ = c.include_contentsize(false);
        Ok(ZstdCompressor(c))
    }
}

impl Compressor for ZstdCompressor {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
        // libzstd fails with "destination too small" when the output does not fit: store raw.
        Ok(self.0.compress_to_buffer(src, dst).ok().filter(|&n| n < src.len()))
    }
    fn kind(&self) -> CodecKind {
        CodecKind::Zstd
    }
}

pub(super) struct ZstdDecompressor(zstd::bulk::Decompressor<'static>);

impl ZstdDecompressor {
    pub(super) fn new() -> Result<Self> {
        zstd::bulk::Decompressor::new()
            .map(ZstdDecompressor)
            .map_err(|e| Error::new(crate::ErrorKind::Io, format!("zstd decompressor: {e}")))
    }
}

impl Decompressor for ZstdDecompressor {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let n = self
            .0
            .decompress_to_buffer(src, dst)
            .map_err(|e| Error::corrupt(format!("zstd payload does not decode: {e}")))?;
        if n != dst.len() {
            return Err(wrong_length("zstd", n, dst.len()));
        }
        Ok(())
    }
}
