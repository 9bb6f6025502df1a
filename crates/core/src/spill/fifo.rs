//! Records waiting their turn ([`Fifo`]): a queue that grows in `TMPDIR`, not in memory.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::*;

/// Records waiting on disk, first in, first out: a queue that grows in `TMPDIR`, not in memory.
/// Its file is made when the first record comes and cut back to nothing whenever the queue
/// empties, so it holds only the backlog.
#[derive(Default)]
pub(crate) struct Fifo {
    file: Option<File>,
    read: u64,
    write: u64,
    records: u64,
}

impl Fifo {
    /// Nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Append `record`.
    ///
    /// # Errors
    /// No temporary file can be made or written (a full `TMPDIR`).
    pub(crate) fn push(&mut self, record: &[u8]) -> Result<()> {
        let len = u32::try_from(record.len()).map_err(|_| Error::invalid("internal: a queued record over 4 GiB"))?;
        if self.file.is_none() {
            self.file = Some(temp()?);
        }
        let f = self.file.as_ref().expect("made above");
        let mut head = [0u8; 4];
        head.copy_from_slice(&len.to_le_bytes());
        let fail = |e| io_err("cannot write the work waiting for the readers", e);
        f.write_all_at(&head, self.write).map_err(fail)?;
        f.write_all_at(record, self.write + 4).map_err(fail)?;
        self.write += 4 + u64::from(len);
        self.records += 1;
        Ok(())
    }

    /// The oldest record into `buf` (replacing what it held); false when none waits.
    ///
    /// # Errors
    /// The temporary file cannot be read or cut back.
    pub(crate) fn pop(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        let Some(f) = self.file.as_ref().filter(|_| self.records > 0) else {
            return Ok(false);
        };
        let fail = |e| io_err("cannot read the work waiting for the readers", e);
        let mut head = [0u8; 4];
        f.read_exact_at(&mut head, self.read).map_err(fail)?;
        let len = u32::from_le_bytes(head) as usize;
        buf.clear();
        buf.resize(len, 0);
        f.read_exact_at(buf, self.read + 4).map_err(fail)?;
        self.read += 4 + len as u64;
        self.records -= 1;
        if self.records == 0 {
            f.set_len(0).map_err(fail)?;
            (self.read, self.write) = (0, 0);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_gives_records_back_in_order_and_holds_only_its_backlog() {
        let mut q = Fifo::default();
        let mut buf = Vec::new();
        assert!(!q.pop(&mut buf).unwrap(), "an empty queue gives nothing");
        let rec = |i: usize| vec![i as u8; i * 7];
        for i in 0..10 {
            q.push(&rec(i)).unwrap();
        }
        for i in 0..4 {
            assert!(q.pop(&mut buf).unwrap());
            assert_eq!(buf, rec(i));
        }
        // Pushes while it drains go behind what waits.
        q.push(&rec(20)).unwrap();
        for i in (4..10).chain([20]) {
            assert!(q.pop(&mut buf).unwrap());
            assert_eq!(buf, rec(i), "record {i}");
        }
        assert!(q.is_empty() && !q.pop(&mut buf).unwrap());
        assert_eq!(q.file.as_ref().unwrap().metadata().unwrap().len(), 0, "an emptied queue keeps no bytes on disk");
        q.push(b"again").unwrap();
        assert!(q.pop(&mut buf).unwrap());
        assert_eq!(buf, b"again");
    }
}
