//! `none`: the chunk is stored as read.

use super::{wrong_length, CodecKind, Compressor, Decompressor};
use crate::error::Result;

pub(super) struct Stored;

impl Compressor for Stored {
    fn compress(&mut self, _src: &[u8], _dst: &mut [u8]) -> Result<Option<usize>> {
        // Never "compresses": the pipeline then stores the source buffer itself, without a copy.
        Ok(None)
    }
    fn kind(&self) -> CodecKind {
        CodecKind::None
    }
}

impl Decompressor for Stored {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        if src.len() != dst.len() {
            return Err(wrong_length("stored", src.len(), dst.len()));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}
