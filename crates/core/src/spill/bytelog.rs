//! Byte strings kept aside ([`ByteLog`]): paths appended and read back by their place.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::*;

/// Bytes a [`ByteLog`] keeps in memory before they go to its temporary file.
const LOG_MEM: usize = 8 << 20;

/// Byte strings (paths) appended and read back by their place: the newest [`LOG_MEM`] bytes in
/// memory, the rest in a temporary file, made only when they outgrow that.
#[derive(Default)]
pub(crate) struct ByteLog {
    /// The bytes from `flushed` on.
    tail: Vec<u8>,
    file: Option<File>,
    flushed: u64,
}

impl ByteLog {
    /// Append `b`; its place.
    ///
    /// # Errors
    /// The temporary file cannot be made or written.
    pub(crate) fn push(&mut self, b: &[u8]) -> Result<u64> {
        let at = self.flushed + self.tail.len() as u64;
        self.tail.extend_from_slice(b);
        if self.tail.len() >= LOG_MEM {
            if self.file.is_none() {
                self.file = Some(temp()?);
            }
            let f = self.file.as_ref().expect("made above");
            f.write_all_at(&self.tail, self.flushed).map_err(|e| io_err("cannot write a list of paths", e))?;
            self.flushed += self.tail.len() as u64;
            self.tail.clear();
        }
        Ok(at)
    }

    /// The `len` bytes pushed at `at`, into `out` (replacing what it held).
    ///
    /// # Errors
    /// The temporary file cannot be read; a place never given.
    pub(crate) fn get(&self, at: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        if at >= self.flushed {
            let from = (at - self.flushed) as usize;
            let b = self.tail.get(from..from + len).ok_or_else(|| Error::invalid("internal: a path's place past the list's end"))?;
            out.extend_from_slice(b);
            return Ok(());
        }
        out.resize(len, 0);
        let f = self.file.as_ref().ok_or_else(|| Error::invalid("internal: a path's place in no file"))?;
        f.read_exact_at(out, at).map_err(|e| io_err("cannot read a list of paths", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_log_gives_each_string_back_by_its_place_from_memory_or_disk() {
        let mut log = ByteLog::default();
        let s = |i: usize| format!("/restore/base/16384/{i}_{}", "x".repeat(i % 50)).into_bytes();
        let mut places = Vec::new();
        let mut i = 0;
        while log.file.is_none() || places.len() < 2 * (LOG_MEM / 40) {
            places.push((log.push(&s(i)).unwrap(), s(i).len()));
            i += 1;
        }
        assert!(log.flushed > 0 && !log.tail.is_empty(), "some on disk, some in memory");
        let mut out = Vec::new();
        for (k, (at, len)) in places.iter().enumerate().rev() {
            log.get(*at, *len, &mut out).unwrap();
            assert_eq!(out, s(k), "string {k}");
        }
        assert!(log.get(log.flushed + log.tail.len() as u64, 1, &mut out).is_err());
    }
}
