//! `deflate`: raw deflate (RFC 1951), the format Intel QAT offloads (SQL Server's QAT_DEFLATE).
//! Levels 0–3 go through ISA-L's stateless igzip (the software path of QAT, several times faster than
//! zlib at level 1); levels 4–12 through libdeflate. Any deflate frame decodes with libdeflate.

use std::mem::MaybeUninit;

use isal_sys::igzip_lib as isal;

use super::{wrong_length, CodecKind, Compressor, Decompressor};
use crate::error::{Error, Result};

pub(super) fn compressor(level: i32) -> Result<Box<dyn Compressor>> {
    match level {
        0..=3 => Ok(Box::new(Igzip::new(level as u32))),
        4..=12 => Ok(Box::new(Libdeflate(libdeflater::Compressor::new(
            libdeflater::CompressionLvl::new(level).map_err(|_| Error::invalid(format!("deflate level {level} is out of range: use 0..12")))?,
        )))),
        _ => Err(Error::invalid(format!("deflate level {level} is out of range: use 0..12"))),
    }
}

/// ISA-L stateless deflate. The stream struct is large and holds pointers into `level_buf`, so both
/// live on the heap for the compressor's lifetime and are re-initialised per chunk.
struct Igzip {
    stream: Box<MaybeUninit<isal::isal_zstream>>,
    level: u32,
    level_buf: Vec<u8>,
}

// SAFETY: the raw pointers inside the stream point only into `level_buf` and the slices handed to
// `compress`; the compressor is used by one thread at a time.
unsafe impl Send for Igzip {}

impl Igzip {
    fn new(level: u32) -> Self {
        let buf_size = match level {
            0 => isal::ISAL_DEF_LVL0_DEFAULT,
            1 => isal::ISAL_DEF_LVL1_DEFAULT,
            2 => isal::ISAL_DEF_LVL2_DEFAULT,
            _ => isal::ISAL_DEF_LVL3_DEFAULT,
        };
        Igzip { stream: Box::new(MaybeUninit::zeroed()), level, level_buf: vec![0; buf_size as usize] }
    }
}

impl Compressor for Igzip {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
        let (Ok(avail_in), Ok(avail_out)) = (u32::try_from(src.len()), u32::try_from(dst.len())) else {
            return Err(Error::invalid("deflate chunk larger than 4 GiB"));
        };
        // SAFETY: stateless_init fully initialises the stream; the pointers we set stay valid for
        // the duration of the call because `src`, `dst` and `level_buf` are borrowed for it.
        let ret = unsafe {
            let s = self.stream.as_mut_ptr();
            isal::isal_deflate_stateless_init(s);
            let s = &mut *s;
            s.level = self.level;
            s.level_buf = if self.level_buf.is_empty() { std::ptr::null_mut() } else { self.level_buf.as_mut_ptr() };
            s.level_buf_size = self.level_buf.len() as u32;
            s.gzip_flag = isal::IGZIP_DEFLATE as _;
            s.flush = isal::NO_FLUSH as _;
            s.end_of_stream = 1;
            s.next_in = src.as_ptr() as *mut u8;
            s.avail_in = avail_in;
            s.next_out = dst.as_mut_ptr();
            s.avail_out = avail_out;
            isal::isal_deflate_stateless(s)
        };
        // SAFETY: initialised above.
        let s = unsafe { self.stream.assume_init_ref() };
        match ret {
            r if r == isal::COMP_OK as i32 && s.avail_in == 0 => Ok(Some(s.total_out as usize).filter(|&n| n < src.len())),
            r if r == isal::STATELESS_OVERFLOW => Ok(None),
            r => Err(Error::new(crate::error::ErrorKind::Io, format!("ISA-L deflate failed with code {r}"))),
        }
    }
    fn kind(&self) -> CodecKind {
        CodecKind::Deflate
    }
}

struct Libdeflate(libdeflater::Compressor);

impl Compressor for Libdeflate {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
        // libdeflate's only error is InsufficientSpace: the output does not fit, so store raw.
        match self.0.deflate_compress(src, dst) {
            Ok(n) => Ok(Some(n).filter(|&n| n < src.len())),
            Err(libdeflater::CompressionError::InsufficientSpace) => Ok(None),
        }
    }
    fn kind(&self) -> CodecKind {
        CodecKind::Deflate
    }
}

pub(super) struct Inflater(libdeflater::Decompressor);

impl Inflater {
    pub(super) fn new() -> Self {
        Inflater(libdeflater::Decompressor::new())
    }
}

impl Decompressor for Inflater {
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let n = self.0.deflate_decompress(src, dst).map_err(|e| Error::corrupt(format!("deflate payload does not decode: {e}")))?;
        if n != dst.len() {
            return Err(wrong_length("deflate", n, dst.len()));
        }
        Ok(())
    }
}
