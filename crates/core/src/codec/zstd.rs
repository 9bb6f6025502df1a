//! `zstd`: Zstandard through libzstd, one context per thread, reused across chunks.

use super::{wrong_length, CodecKind, Compressor, Decompressor};
use crate::error::{Error, Result};

pub(super) struct ZstdCompressor(zstd::bulk::Compressor<'static>);

impl ZstdCompressor {
    pub(super) fn new(level: i32) -> Result<Self> {
        let mut c = zstd::bulk::Compressor::new(level).map_err(|e| Error::invalid(format!("zstd level {level}: {e}")))?;
        // Frames carry their own crc32c; zstd's checksum and the content size are redundant.
        let _ = c.include_checksum(false);
        let _ = c.include_contentsize(false);
        Ok(ZstdCompressor(c))
    }
}

impl Compressor for ZstdCompressor {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
        // libzstd fails with "destination too small" when the output does not fit: store raw. Any
        // other failure is a real one and fails the backup.
        match self.0.context_mut().compress2(dst, src) {
            Ok(n) => Ok(Some(n).filter(|&n| n < src.len())),
            Err(code) if is_dst_too_small(code) => Ok(None),
            Err(code) => Err(Error::new(crate::error::ErrorKind::Io, format!("zstd compression failed: {}", zstd::zstd_safe::get_error_name(code)))),
        }
    }
    fn kind(&self) -> CodecKind {
        CodecKind::Zstd
    }
    fn set_level(&mut self, level: i32) -> Result<()> {
        self.0.set_compression_level(level).map_err(|e| Error::invalid(format!("zstd level {level}: {e}")))
    }
}

fn is_dst_too_small(code: usize) -> bool {
    use zstd::zstd_safe::zstd_sys::{ZSTD_ErrorCode, ZSTD_getErrorCode};
    // SAFETY: ZSTD_getErrorCode only inspects the integer it is given.
    unsafe { ZSTD_getErrorCode(code) == ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall }
}

pub(super) struct ZstdDecompressor(zstd::bulk::Decompressor<'static>);

impl ZstdDecompressor {
    pub(super) fn new() -> Result<Self> {
        zstd::bulk::Decompressor::new().map(ZstdDecompressor).map_err(|e| Error::new(crate::error::ErrorKind::Io, format!("zstd decompressor: {e}")))
    }
}

impl Decompressor for ZstdDecompressor {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let n = self.0.decompress_to_buffer(src, dst).map_err(|e| Error::corrupt(format!("zstd payload does not decode: {e}")))?;
        if n != dst.len() {
            return Err(wrong_length("zstd", n, dst.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lack_of_room_means_store_raw() {
        let mut c = ZstdCompressor::new(1).unwrap();
        let src: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let mut tiny = [0u8; 16];
        assert_eq!(c.compress(&src, &mut tiny).unwrap(), None, "no room: stored raw");
        let code = c.0.context_mut().compress2(&mut tiny[..], &src[..]).unwrap_err();
        assert!(is_dst_too_small(code));
        // Any other libzstd failure (here: garbage given to the decoder) is not "no room".
        let mut d = zstd::zstd_safe::DCtx::create();
        let other = d.decompress(&mut [0u8; 64][..], &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4][..]).unwrap_err();
        assert!(!is_dst_too_small(other), "{}", zstd::zstd_safe::get_error_name(other));
    }
}
