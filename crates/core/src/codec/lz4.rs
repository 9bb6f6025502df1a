//! `lz4`: the LZ4 block format through lz4_flex.

use super::{wrong_length, CodecKind, Compressor, Decompressor};
use crate::error::{Error, Result};

pub(super) struct Lz4;

/// lz4_flex refuses to start unless the output can hold the worst case.
pub(super) fn room(raw_len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(raw_len)
}

impl Compressor for Lz4 {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
        // Lack of room is lz4_flex's only error, and our "store raw"; a larger output stores raw too.
        match lz4_flex::block::compress_into(src, dst) {
            Ok(n) => Ok(Some(n).filter(|&n| n < src.len())),
            Err(lz4_flex::block::CompressError::OutputTooSmall) => Ok(None),
            // The enum is non-exhaustive: a failure lz4_flex may add later fails the backup.
            Err(e) => Err(Error::new(crate::error::ErrorKind::Io, format!("lz4 compression failed: {e}"))),
        }
    }
    fn kind(&self) -> CodecKind {
        CodecKind::Lz4
    }
    fn room(&self, raw_len: usize) -> usize {
        room(raw_len)
    }
}

impl Decompressor for Lz4 {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let n = lz4_flex::block::decompress_into(src, dst).map_err(|e| Error::corrupt(format!("lz4 payload does not decode: {e}")))?;
        if n != dst.len() {
            return Err(wrong_length("lz4", n, dst.len()));
        }
        Ok(())
    }
}
