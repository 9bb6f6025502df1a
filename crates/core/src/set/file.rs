//! One file of a set read in parts ([`FileInSet`]): its chunks found in the stripes' indexes,
//! each frame read, checked against the index and decoded on its own (what extract and a delta
//! restore read, without a pass over the whole set).

use crate::crypto::FRAME_OVERHEAD;
use crate::error::{Error, Result};
use crate::format::{FrameHeader, IndexEntry, FLAG_PACKED, FRAME_HEADER_LEN};
use crate::frame::FrameDecoder;

use super::BackupSet;

/// One file of a set, read in parts from only the frames that hold them: what extracting a
/// relation or a single page needs, without a pass over the whole set. Every frame read is checked
/// as a full scan checks it (frame header against the index, stored checksum, seal, codec, raw
/// checksum against the index).
pub struct FileInSet<'a> {
    set: &'a BackupSet,
    file_id: u32,
    /// Its chunks in offset order: stripe and index entry.
    chunks: Vec<(usize, IndexEntry)>,
    decoder: FrameDecoder,
    frame: Vec<u8>,
    raw: Vec<u8>,
    /// Bytes read from the stripes so far (frame headers and payloads).
    pub bytes_read: u64,
}

impl BackupSet {
    /// The file at position `file_id` of the manifest's entries, for reading in parts.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::InvalidInput`] for an entry that is not a regular file.
    pub fn file(&self, file_id: u32) -> Result<FileInSet<'_>> {
        let entry = self.manifest.entries.get(file_id as usize).ok_or_else(|| Error::invalid(format!("the backup has no entry {file_id}")))?;
        if entry.kind != crate::manifest::EntryKind::File {
            return Err(Error::invalid(format!("{} is not a regular file in the backup", entry.path)));
        }
        let mut chunks: Vec<(usize, IndexEntry)> =
            self.stripes.iter().enumerate().flat_map(|(k, s)| s.index.iter().filter(|e| e.file_id == file_id).map(move |e| (k, *e))).collect();
        chunks.sort_by_key(|(_, e)| e.offset);
        let ts = self.stripes[0].header.transfer_size as usize;
        Ok(FileInSet {
            set: self,
            file_id,
            chunks,
            decoder: FrameDecoder::new(self.cipher.clone()),
            frame: vec![0u8; FRAME_HEADER_LEN + ts + FRAME_OVERHEAD],
            raw: vec![0u8; ts],
            bytes_read: 0,
        })
    }
}

impl FileInSet<'_> {
    /// The file's size in the backup.
    pub fn size(&self) -> u64 {
        self.set.manifest.entries[self.file_id as usize].size
    }

    /// Fill `out` with the file's bytes from `offset`.
    ///
    /// # Errors
    /// A range past the file's end ([`crate::error::ErrorKind::InvalidInput`]); a missing chunk or a
    /// damaged frame ([`crate::error::ErrorKind::Corrupt`], naming stripe and frame); read errors.
    pub fn read_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.size()).ok_or_else(|| {
            Error::invalid(format!("bytes {offset}..+{} are past the end of {} ({} bytes)", out.len(), self.set.manifest.entries[self.file_id as usize].path, self.size()))
        })?;
        let mut at = offset;
        while at < end {
            // The chunk holding byte `at`: the last one starting at or before it.
            let i = self.chunks.partition_point(|(_, e)| e.offset <= at);
            let (k, e) = match i.checked_sub(1).map(|i| self.chunks[i]) {
                Some(c) if at < c.1.offset + u64::from(c.1.raw_len) => c,
                _ => return Err(Error::corrupt(format!("{}: no chunk holds byte {at} (the index is inconsistent)", self.set.manifest.entries[self.file_id as usize].path))),
            };
            let take = (end.min(e.offset + u64::from(e.raw_len)) - at) as usize;
            let from = (at - e.offset) as usize;
            let dst = &mut out[(at - offset) as usize..(at - offset) as usize + take];
            match self.chunk(k, &e)? {
                Some(raw) => dst.copy_from_slice(&raw[from..from + take]),
                None => dst.fill(0),
            }
            at += take as u64;
        }
        Ok(())
    }

    /// The raw bytes of one chunk, checked; `None` for a zero chunk.
    fn chunk(&mut self, k: usize, e: &IndexEntry) -> Result<Option<&[u8]>> {
        let s = &self.set.stripes[k];
        let here = |what: &str| Error::corrupt(format!("stripe {}: frame at byte {}: {what}", s.location, e.frame_pos));
        let n = FRAME_HEADER_LEN + e.stored_len as usize;
        if n > self.frame.len() || e.frame_pos < s.header.encoded_len() as u64 || e.frame_pos + n as u64 > s.trailer.index_offset {
            return Err(here("the index places it where no frame can be (index inconsistent)"));
        }
        s.source.read_exact_at(&mut self.frame[..n], e.frame_pos)?;
        self.bytes_read += n as u64;
        let h = FrameHeader::decode(&self.frame[..FRAME_HEADER_LEN]).map_err(|err| here(err.message()))?;
        let agrees = if h.flags & FLAG_PACKED != 0 {
            h.stored_len == e.stored_len && u64::from(e.frame_off) + u64::from(e.raw_len) <= u64::from(h.raw_len)
        } else {
            // A resumed set's frame may name its file by an earlier attempt's id (v7).
            h.flags == 0
                && e.frame_off == 0
                && (h.file_id == e.file_id || self.set.manifest.resumed.is_some())
                && h.offset == e.offset
                && h.raw_len == e.raw_len
                && h.stored_len == e.stored_len
        };
        if !agrees {
            return Err(here("frame header disagrees with the index"));
        }
        if h.stored_len == 0 {
            self.decoder.decode(&h, None, &mut []).map_err(|err| here(&err))?;
            return Ok(None);
        }
        if h.raw_len as usize > self.raw.len() {
            return Err(here("frame larger than the chunk size"));
        }
        let (raw, crc) = self.decoder.decode(&h, Some(&mut self.frame[FRAME_HEADER_LEN..n]), &mut self.raw).map_err(|err| here(&err))?;
        let raw = raw.expect("a frame with a payload");
        let (from, len) = (e.frame_off as usize, e.raw_len as usize);
        let ours = if h.flags & FLAG_PACKED != 0 { crc32c::crc32c(&raw[from..from + len]) } else { crc };
        if ours != e.raw_crc {
            return Err(here("frame disagrees with the index (the index or the frame was replaced)"));
        }
        Ok(Some(&raw[from..from + len]))
    }
}

#[cfg(test)]
mod tests {
    use crate::manifest::EntryKind;
    use crate::set::tests::backed_up;
    use crate::set::BackupSet;
    use crate::storage::LocalOnly;

    #[test]
    fn a_file_reads_back_in_parts_across_chunks_and_stripes() {
        let d = tempfile::tempdir().unwrap();
        let (src, stripes) = backed_up(d.path(), "a", 2);
        let set = BackupSet::open(&stripes, &LocalOnly).unwrap();
        let id = |path: &str| set.manifest.entries.iter().position(|e| e.path == path).unwrap() as u32;
        let want = std::fs::read(src.join("big")).unwrap();
        let mut f = set.file(id("big")).unwrap();
        assert_eq!(f.size(), want.len() as u64);
        // A range across the boundary of two 64 KiB chunks, and the last byte.
        let mut out = vec![0u8; 1000];
        f.read_at((64 << 10) - 500, &mut out).unwrap();
        assert_eq!(out, want[(64 << 10) - 500..(64 << 10) + 500]);
        let mut last = [0u8; 1];
        f.read_at(want.len() as u64 - 1, &mut last).unwrap();
        assert_eq!(last[0], want[want.len() - 1]);
        assert!(f.bytes_read > 0);
        // Zeros, and a small file packed with others.
        let mut zeros = vec![1u8; 4096];
        set.file(id("sub/zeros")).unwrap().read_at(100 << 10, &mut zeros).unwrap();
        assert!(zeros.iter().all(|&b| b == 0));
        let mut small = vec![0u8; 12];
        set.file(id("small")).unwrap().read_at(0, &mut small).unwrap();
        assert_eq!(&small, b"a small file");
    }

    #[test]
    fn a_range_past_the_end_or_a_folder_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (_, stripes) = backed_up(d.path(), "a", 1);
        let set = BackupSet::open(&stripes, &LocalOnly).unwrap();
        let small = set.manifest.entries.iter().position(|e| e.path == "small").unwrap() as u32;
        let e = set.file(small).unwrap().read_at(10, &mut [0u8; 3]).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("past the end of small"), "{e}");
        let dir = set.manifest.entries.iter().position(|e| e.kind == EntryKind::Dir).unwrap() as u32;
        assert_eq!(set.file(dir).err().expect("refused").kind(), crate::error::ErrorKind::InvalidInput);
    }
}
