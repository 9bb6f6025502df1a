//! The null target: counts bytes and keeps none.

use super::StripeSink;
use crate::error::Result;

/// Discards everything written; `written()` still counts.
#[derive(Default)]
pub struct NullSink {
    written: u64,
}

impl StripeSink for NullSink {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        self.written += buf.len() as u64;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn publish(&mut self) -> Result<()> {
        Ok(())
    }
    fn discard(&mut self) {}
    fn written(&self) -> u64 {
        self.written
    }
}
