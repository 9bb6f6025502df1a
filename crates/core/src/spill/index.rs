//! A stripe's index as it grows ([`IndexSpill`]).

use crate::error::Result;
use crate::format::IndexEntry;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use super::*;

/// A stripe's index entries, encoded, on disk until its footer is written.
pub(crate) struct IndexSpill {
    out: BufWriter<File>,
    buf: Vec<u8>,
    /// Entries written.
    pub(crate) count: u64,
    /// Their raw bytes that files use.
    pub(crate) raw_bytes: u64,
    /// Their raw bytes that no file uses ([`crate::format::SUPERSEDED`]).
    pub(crate) superseded_bytes: u64,
}

impl IndexSpill {
    /// An empty index.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(IndexSpill { out: BufWriter::with_capacity(1 << 16, temp()?), buf: Vec::with_capacity(64), count: 0, raw_bytes: 0, superseded_bytes: 0 })
    }

    /// Append an entry.
    ///
    /// # Errors
    /// The temporary file cannot be written.
    pub(crate) fn push(&mut self, e: &IndexEntry) -> Result<()> {
        self.buf.clear();
        e.encode_into(&mut self.buf);
        self.out.write_all(&self.buf).map_err(|e| io_err("cannot write a stripe's index", e))?;
        self.count += 1;
        if e.is_superseded() {
            self.superseded_bytes += u64::from(e.raw_len);
        } else {
            self.raw_bytes += u64::from(e.raw_len);
        }
        Ok(())
    }

    /// The encoded index from its start, for copying into the footer.
    ///
    /// # Errors
    /// The temporary file cannot be written or rewound.
    pub(crate) fn reader(&mut self) -> Result<impl Read + '_> {
        self.out.flush().map_err(|e| io_err("cannot write a stripe's index", e))?;
        let f = self.out.get_mut();
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err("cannot read a stripe's index", e))?;
        Ok(BufReader::with_capacity(1 << 16, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_reads_back_as_written() {
        let mut s = IndexSpill::new().unwrap();
        let e = IndexEntry { file_id: 1, offset: 2, frame_pos: 3, raw_len: 4, stored_len: 5, raw_crc: 6, frame_off: 7, hash: 8 };
        s.push(&e).unwrap();
        s.push(&IndexEntry { raw_len: 10, ..e }).unwrap();
        s.push(&IndexEntry { file_id: crate::format::SUPERSEDED, raw_len: 3, ..e }).unwrap();
        assert_eq!((s.count, s.raw_bytes, s.superseded_bytes), (3, 14, 3));
        let mut bytes = Vec::new();
        s.reader().unwrap().read_to_end(&mut bytes).unwrap();
        let back = IndexEntry::decode_all(&bytes, crate::format::FORMAT_VERSION).unwrap();
        assert_eq!(back, vec![e, IndexEntry { raw_len: 10, ..e }, IndexEntry { file_id: crate::format::SUPERSEDED, raw_len: 3, ..e }]);
    }
}
