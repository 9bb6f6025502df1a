//! The null target: counts bytes and keeps none.

use super::{Capabilities, Store, StripeSink, StripeSource};
use crate::error::{Error, Result};

/// SQL Server's `DISK='NUL'`: every stripe is counted and discarded; nothing can be read back.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullStore;

impl Store for NullStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: false, atomic_publish: true, list: false, files: false }
    }
    fn describe(&self, _: &str) -> String {
        "nul".into()
    }
    fn create(&self, _: &str, _: &super::WriteOptions) -> Result<Box<dyn StripeSink>> {
        Ok(Box::new(NullSink::default()))
    }
    fn open(&self, _: &str) -> Result<Box<dyn StripeSource>> {
        Err(Error::invalid("a backup to nul wrote nothing: there is nothing to read back"))
    }
    fn exists(&self, _: &str) -> Result<bool> {
        Ok(false)
    }
    fn list(&self, _: &str) -> Result<Vec<super::Stored>> {
        Ok(Vec::new())
    }
    fn delete(&self, _: &str) -> Result<()> {
        Ok(())
    }
}

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
