//! The entries as they are registered: about 60 bytes each plus the path ([`EntrySpill`], read back
//! by [`EntryReader`]).

use crate::error::{Error, Result};
use crate::manifest::{display_and_bytes, Delta, Entry, EntryKind};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use super::*;

/// The fixed part of an encoded entry: root, kind, flags, mode, mtime, uid, gid, size, link, crc,
/// delta bytes, delta crc.
const ENTRY_FIXED: usize = 2 + 1 + 1 + 4 + 8 + 4 + 4 + 8 + 4 + 4 + 8 + 4;

const VANISHED: u8 = 1;
const HAS_DELTA: u8 = 2;
const HAS_LINK: u8 = 4;
const HAS_TARGET: u8 = 8;
const HAS_CRC: u8 = 16;

pub(crate) fn kind_code(k: EntryKind) -> u8 {
    match k {
        EntryKind::File => 0,
        EntryKind::Dir => 1,
        EntryKind::Symlink => 2,
        EntryKind::Hardlink => 3,
        EntryKind::Fifo => 4,
    }
}

pub(crate) fn kind_of(code: u8) -> Option<EntryKind> {
    Some(match code {
        0 => EntryKind::File,
        1 => EntryKind::Dir,
        2 => EntryKind::Symlink,
        3 => EntryKind::Hardlink,
        4 => EntryKind::Fifo,
        _ => return None,
    })
}

/// Append `e` in the spill's binary form to `out`.
fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    let target = e.target_bytes();
    let flags = [(e.vanished, VANISHED), (e.delta.is_some(), HAS_DELTA), (e.link.is_some(), HAS_LINK), (target.is_some(), HAS_TARGET), (e.crc32c.is_some(), HAS_CRC)]
        .into_iter()
        .filter(|f| f.0)
        .fold(0, |acc, f| acc | f.1);
    let delta = e.delta.unwrap_or_default();
    out.extend_from_slice(&e.root.to_le_bytes());
    out.push(kind_code(e.kind));
    out.push(flags);
    out.extend_from_slice(&e.mode.to_le_bytes());
    out.extend_from_slice(&e.mtime_ns.to_le_bytes());
    out.extend_from_slice(&e.uid.to_le_bytes());
    out.extend_from_slice(&e.gid.to_le_bytes());
    out.extend_from_slice(&e.size.to_le_bytes());
    out.extend_from_slice(&e.link.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&e.crc32c.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&delta.bytes.to_le_bytes());
    out.extend_from_slice(&delta.crc32c.to_le_bytes());
    for b in [Some(e.path_bytes()), target].into_iter().flatten() {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
}

/// The entries of a backup, in id order, on disk.
pub(crate) struct EntrySpill {
    out: BufWriter<File>,
    buf: Vec<u8>,
    count: u64,
}

impl EntrySpill {
    /// An empty spill.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(EntrySpill { out: BufWriter::with_capacity(1 << 16, temp()?), buf: Vec::with_capacity(256), count: 0 })
    }

    /// Append `e`; it gets the next id.
    ///
    /// # Errors
    /// The temporary file cannot be written (a full `TMPDIR`).
    pub(crate) fn push(&mut self, e: &Entry) -> Result<()> {
        self.buf.clear();
        encode_entry(e, &mut self.buf);
        self.out.write_all(&self.buf).map_err(|e| io_err("cannot write the list of entries", e))?;
        self.count += 1;
        Ok(())
    }

    /// Entries pushed so far.
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// Read the entries back, in order.
    ///
    /// # Errors
    /// The temporary file cannot be written or rewound.
    pub(crate) fn into_reader(self) -> Result<EntryReader> {
        let mut f = self.out.into_inner().map_err(|e| io_err("cannot write the list of entries", e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err("cannot read the list of entries", e))?;
        Ok(EntryReader { r: BufReader::with_capacity(1 << 16, f), left: self.count, buf: Vec::with_capacity(256) })
    }
}

/// The entries of an [`EntrySpill`], read back in order.
pub(crate) struct EntryReader {
    r: BufReader<File>,
    left: u64,
    buf: Vec<u8>,
}

impl EntryReader {
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let mut n = [0u8; 4];
        self.r.read_exact(&mut n).map_err(|e| io_err("cannot read the list of entries", e))?;
        let mut b = vec![0u8; u32::from_le_bytes(n) as usize];
        self.r.read_exact(&mut b).map_err(|e| io_err("cannot read the list of entries", e))?;
        Ok(b)
    }

    fn read_one(&mut self) -> Result<Entry> {
        self.buf.resize(ENTRY_FIXED, 0);
        self.r.read_exact(&mut self.buf).map_err(|e| io_err("cannot read the list of entries", e))?;
        let b = &self.buf;
        let flags = b[3];
        let kind = kind_of(b[2]).ok_or_else(|| Error::corrupt("the temporary list of entries holds an unknown kind"))?;
        let mut e = Entry {
            root: u16::from_le_bytes(le(b, 0)),
            kind,
            mode: u32::from_le_bytes(le(b, 4)),
            mtime_ns: i64::from_le_bytes(le(b, 8)),
            uid: u32::from_le_bytes(le(b, 16)),
            gid: u32::from_le_bytes(le(b, 20)),
            size: u64::from_le_bytes(le(b, 24)),
            link: (flags & HAS_LINK != 0).then(|| u32::from_le_bytes(le(b, 32))),
            crc32c: (flags & HAS_CRC != 0).then(|| u32::from_le_bytes(le(b, 36))),
            delta: (flags & HAS_DELTA != 0).then(|| Delta { bytes: u64::from_le_bytes(le(b, 40)), crc32c: u32::from_le_bytes(le(b, 48)) }),
            vanished: flags & VANISHED != 0,
            ..Default::default()
        };
        let path = self.bytes()?;
        e.set_path_bytes(path);
        if flags & HAS_TARGET != 0 {
            let (shown, bytes) = display_and_bytes(self.bytes()?);
            (e.target, e.target_bytes) = (Some(shown), bytes);
        }
        Ok(e)
    }
}

impl Iterator for EntryReader {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.read_one())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_as_they_went_in() {
        let mut s = EntrySpill::new().unwrap();
        let mut odd = Entry { root: 3, path: "a/b".into(), kind: EntryKind::Symlink, target: Some("../t".into()), mode: 0o777, mtime_ns: -5, uid: 7, gid: 8, ..Default::default() };
        odd.set_path_bytes(b"x/\xff\xfe".to_vec());
        let sample = vec![
            Entry { path: String::new(), kind: EntryKind::Dir, mode: 0o700, ..Default::default() },
            Entry { path: "f".into(), size: 1 << 40, crc32c: Some(9), mtime_ns: 1_700_000_000_123_456_789, ..Default::default() },
            Entry { path: "g".into(), kind: EntryKind::Hardlink, link: Some(1), vanished: true, ..Default::default() },
            Entry { path: "h".into(), size: 100, delta: Some(Delta { bytes: 16, crc32c: 0xdead_beef }), ..Default::default() },
            Entry { path: "p".into(), kind: EntryKind::Fifo, ..Default::default() },
            odd,
        ];
        for e in &sample {
            s.push(e).unwrap();
        }
        assert_eq!(s.len(), sample.len() as u64);
        let back: Vec<Entry> = s.into_reader().unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(back, sample);
    }
}
