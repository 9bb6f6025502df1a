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
        // lz4_flex reports lack of room as an error; that is our "store raw".
        Ok(lz4_flex::block::compress_into(src, dst).ok().filter(|&n| n < src.len()))
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
        let n = lz4_flex::block::decompress_into(src, dst)
            .map_err(|e| Error::corrupt(format!("lz4 payload does not decode: {e}")))?;
        if n != dst.len() {
            return Err(wrong_length("lz4", n, dst.len()));
        }
        Ok(())
    }
}
