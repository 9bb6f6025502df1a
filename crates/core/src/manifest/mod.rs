//! The backup manifest: what was backed up (every entry with size, mode, times, owner and whole-file
//! checksum), how (options), from where (source roots and facts), and which stripes make the set.
//! Serialised as JSON, compressed with zstd, and stored in every stripe's footer: whole in sets of
//! format 1 to 3, in pages from format 4 ([`pages`]).

pub mod pages;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The kind of a manifest entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file; its bytes are in the frames.
    #[default]
    File,
    /// A directory (kept even when empty).
    Dir,
    /// A symbolic link; `target` holds where it points.
    Symlink,
    /// Another name of a regular file backed up earlier in the list (`link` is its position): its
    /// bytes are stored once, and a restore makes a hard link.
    Hardlink,
    /// A named pipe (FIFO): recreated empty.
    Fifo,
}

/// Optional byte strings stored as lower-case hex (names that are not UTF-8).
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&crate::text::hex(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(t) = Option::<String>::deserialize(d)? else { return Ok(None) };
        crate::text::unhex(t.as_bytes()).map(Some).ok_or_else(|| serde::de::Error::custom("not hex bytes"))
    }
}

/// One file, directory, symlink, hard link or FIFO, relative to one of the backup's roots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Index into [`Manifest::roots`].
    pub root: u16,
    /// Path relative to the root, `/`-separated; `""` is the root itself. For a name that is not
    /// UTF-8 this is for display only (invalid bytes replaced) and `path_bytes` holds the name.
    pub path: String,
    /// The path's bytes when they are not UTF-8 (Linux allows any byte but `/` and NUL in a name).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
    pub path_bytes: Option<Vec<u8>>,
    /// Kind.
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes backed up (files only): what was read, which is the size at read time.
    #[serde(default)]
    pub size: u64,
    /// crc32c of the whole file content (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<u32>,
    /// Link target (symlinks only); for display only when `target_bytes` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The link target's bytes when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
    pub target_bytes: Option<Vec<u8>>,
    /// Hard links only: the position in the entries of the regular file this is another name of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<u32>,
    /// The file disappeared between listing and reading; it is not restored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vanished: bool,
    /// (v3) In an incremental or differential set, a file held in part: only the byte ranges
    /// that changed since the parent are in this set's chunks, every other byte is the parent's
    /// (found down the chain by root and path). `None`: the whole file is in this set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<Delta>,
}

/// What an incremental set holds of a file it holds in part ([`Entry::delta`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Bytes of the file in this set's chunks (its changed pages): 0 for a file unchanged since
    /// the parent, which the set only names.
    pub bytes: u64,
    /// crc32c of those bytes, chunk after chunk in offset order: with `bytes`, what proves the
    /// set's index holds every changed range it wrote.
    pub crc32c: u32,
}

/// A backup's type, in pgBackRest's words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackupType {
    /// Every byte of every file.
    #[default]
    Full,
    /// What changed since the last full backup.
    #[cfg_attr(feature = "clap", value(alias = "differential"))]
    Diff,
    /// What changed since the last backup of any type.
    #[cfg_attr(feature = "clap", value(alias = "incremental"))]
    Incr,
}

impl BackupType {
    /// Its name: `full`, `diff` or `incr`.
    pub fn name(self) -> &'static str {
        match self {
            BackupType::Full => "full",
            BackupType::Diff => "diff",
            BackupType::Incr => "incr",
        }
    }

    /// Parse `full`, `diff` or `incr`.
    ///
    /// # Errors
    /// Anything else, with the choices.
    pub fn parse(s: &str) -> Result<BackupType> {
        match s.trim().to_ascii_lowercase().as_str() {
            "full" => Ok(BackupType::Full),
            "diff" | "differential" => Ok(BackupType::Diff),
            "incr" | "incremental" => Ok(BackupType::Incr),
            other => {
                Err(Error::invalid(format!("backup type '{other}' is not one of full, diff (what changed since the last full) and incr (what changed since the last backup)")))
            }
        }
    }
}

impl std::fmt::Display for BackupType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Entry {
    /// The path's bytes, relative to its root.
    pub fn path_bytes(&self) -> &[u8] {
        self.path_bytes.as_deref().unwrap_or(self.path.as_bytes())
    }

    /// Set the path from bytes: as is when UTF-8, else a display form plus the bytes.
    pub fn set_path_bytes(&mut self, b: Vec<u8>) {
        (self.path, self.path_bytes) = display_and_bytes(b);
    }

    /// The symlink target's bytes.
    pub fn target_bytes(&self) -> Option<&[u8]> {
        self.target_bytes.as_deref().or(self.target.as_deref().map(str::as_bytes))
    }
}

/// A string for `b` (invalid UTF-8 replaced), and `b` itself when that string is not exactly it.
pub fn display_and_bytes(b: Vec<u8>) -> (String, Option<Vec<u8>>) {
    match String::from_utf8(b) {
        Ok(s) => (s, None),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(e.into_bytes())),
    }
}

/// A source root: a directory whose tree was backed up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Short name (`""` for the main root; later e.g. a tablespace OID).
    pub name: String,
    /// Absolute path at backup time.
    pub path: String,
}

/// One stripe of the set as the backup wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeRef {
    /// File name (no folder); restore looks for it beside any stripe it was given.
    pub name: String,
    /// Where the backup wrote it.
    pub path: String,
}

/// The options a backup ran with, recorded so a restore and `sheaf show` can tell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionsUsed {
    /// Codec spec as given, e.g. `zstd:low`.
    pub compression: String,
    /// Codec family.
    pub codec: String,
    /// Numeric level.
    pub level: i32,
    /// Chunk size in bytes.
    pub transfer_size: u64,
    /// Buffers in the pool.
    pub buffer_count: u64,
    /// Reader threads that read files in one pass: the pool that reads small files and each
    /// device's (or tablespace's) reader of large ones; `--readers` when nothing was read.
    pub readers: u64,
    /// Compressor threads.
    pub threads: u64,
}

/// The whole manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version of the stripes.
    pub format_version: u16,
    /// The set's id, hex.
    pub backup_id: String,
    /// User label.
    #[serde(default)]
    pub label: Option<String>,
    /// Program and version that wrote it.
    pub tool: String,
    /// Start, milliseconds since the epoch.
    pub started_unix_ms: i64,
    /// End of reading, milliseconds since the epoch.
    pub finished_unix_ms: i64,
    /// Source roots.
    pub roots: Vec<Root>,
    /// Stripes of the set, in stripe order.
    pub stripes: Vec<StripeRef>,
    /// Options used.
    pub options: OptionsUsed,
    /// Every entry; a frame's file id is an index into this list.
    pub entries: Vec<Entry>,
    /// Bytes read from the source.
    pub bytes_read: u64,
    /// Things a DBA should know: files that changed while being read, skipped special files.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What checks found while reading (e.g. PostgreSQL page checksum failures, with file and block).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_failures: Vec<String>,
    /// From a source that expects it (a running database, whose WAL makes them consistent): files
    /// that changed while being read, named once here instead of one warning each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<String>,
    /// Likewise, files that vanished between listing and reading (dropped tables and databases).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vanished_files: Vec<String>,
    /// Facts about the source (e.g. PostgreSQL's system identifier and LSNs); free-form.
    #[serde(default)]
    pub source: serde_json::Value,
    /// (v3) `full`, `diff` or `incr`; sets older than version 3 are all full.
    #[serde(default)]
    pub backup_type: BackupType,
    /// (v3) For a diff or incr: the backup ids of the sets it builds on, its full first and its
    /// parent last. Empty for a full backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    /// (v7) A full backup that went on from where earlier attempts stopped: what it kept of
    /// them. Its frames written by an earlier attempt name their file by that attempt's id; the
    /// index names it by this manifest's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
}

/// What a resumed backup kept of the attempts before it ([`Manifest::resumed`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    /// This attempt's number: 1 for the first resumption (the first attempt is 0).
    pub attempt: u32,
    /// When the first attempt began, ms since the Unix epoch.
    pub first_started_unix_ms: i64,
    /// Files taken whole from earlier attempts, not read again.
    pub files: u64,
    /// Bytes taken from earlier attempts: those files', and the parts earlier attempts held of
    /// files of which only the rest was read.
    pub bytes: u64,
    /// Stored bytes of earlier attempts kept in the stripes (frames of files read again included).
    pub kept_stored_bytes: u64,
}

impl Manifest {
    /// Serialise and compress for storage in a footer.
    ///
    /// # Errors
    /// Only on an internal serialisation failure.
    pub fn to_stored_bytes(&self) -> Result<Vec<u8>> {
        // Serialised straight into the compressor: the JSON of a million entries is never held
        // whole, only its compressed form.
        let io = |e: std::io::Error| Error::new(crate::error::ErrorKind::Io, format!("manifest: {e}"));
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).map_err(io)?;
        {
            let mut w = std::io::BufWriter::with_capacity(256 << 10, &mut z);
            serde_json::to_writer(&mut w, self).map_err(|e| Error::invalid(format!("manifest: {e}")))?;
            std::io::Write::flush(&mut w).map_err(io)?;
        }
        z.finish().map_err(io)
    }

    /// Decompress and parse a footer's manifest region.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] when it does not decode.
    pub fn from_stored_bytes(b: &[u8]) -> Result<Self> {
        let mut d = zstd::stream::read::Decoder::new(b).map_err(|e| Error::corrupt(format!("manifest: does not decompress: {e}")))?;
        let m: Manifest = serde_json::from_reader(std::io::BufReader::with_capacity(64 << 10, &mut d)).map_err(|e| Error::corrupt(format!("manifest: does not parse: {e}")))?;
        m.check_references()?;
        Ok(m)
    }

    /// Every reference inside the manifest points at something it has: each entry's root exists,
    /// and the set has at least one stripe. Readers index by these numbers.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] naming the first entry that refers to nothing.
    pub fn check_references(&self) -> Result<()> {
        if self.stripes.is_empty() {
            return Err(Error::corrupt("manifest: the set lists no stripe"));
        }
        if let Some(e) = self.entries.iter().find(|e| e.root as usize >= self.roots.len()) {
            return Err(Error::corrupt(format!("manifest: entry '{}' names root {} but the backup has {} root(s); refusing it", e.path, e.root, self.roots.len())));
        }
        Ok(())
    }

    /// Number of regular files.
    pub fn file_count(&self) -> usize {
        self.entries.iter().filter(|e| e.kind == EntryKind::File).count()
    }

    /// Total bytes of regular files.
    pub fn total_file_bytes(&self) -> u64 {
        self.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size).sum()
    }
}

/// One chunk as an index records it, for [`file_checksums`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChunkRef {
    /// File id (position in the manifest's entries).
    pub file_id: u32,
    /// Offset in the file.
    pub offset: u64,
    /// Raw length.
    pub len: u32,
    /// crc32c of the raw bytes.
    pub crc: u32,
    /// Which stripe holds it.
    pub stripe: usize,
}

/// Why chunks do not tile their files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TileFault {
    /// A chunk of `entry` starts at `at` where byte `expected` was due.
    Gap {
        /// Entry position.
        entry: usize,
        /// Where the chunk starts.
        at: u64,
        /// Where it should have started.
        expected: u64,
        /// Stripe of the chunk.
        stripe: usize,
    },
    /// The chunks of `entry` cover `covered` bytes, not its size (or name a non-file entry).
    Coverage {
        /// Entry position.
        entry: usize,
        /// Bytes covered.
        covered: u64,
    },
}

/// The crc32c of each regular file's content, combined from its chunks' crcs, after checking that
/// the chunks tile each file exactly (no gap, no overlap, nothing past the end). For a file held in
/// part ([`Entry::delta`]), the crc32c of the bytes held, after checking that its chunks do not
/// overlap, end within the file and cover [`Delta::bytes`]. Entries that are not regular files
/// get `None`.
///
/// # Errors
/// The first [`TileFault`].
pub fn file_checksums(entries: &[Entry], mut chunks: Vec<ChunkRef>) -> Result<Vec<Option<u32>>, TileFault> {
    chunks.sort_unstable();
    let mut tiler = Tiler::new(chunks.into_iter());
    let mut out = Vec::with_capacity(entries.len());
    for (id, entry) in entries.iter().enumerate() {
        let got = tiler.next(id, entry)?;
        if let (Some(d), Some((_, covered))) = (entry.delta, got) {
            if covered != d.bytes {
                return Err(TileFault::Coverage { entry: id, covered });
            }
        }
        out.push(got.map(|g| g.0));
    }
    tiler.finish()?;
    Ok(out)
}

/// [`file_checksums`] one entry at a time, over chunks that come in (file, offset) order: what a
/// backup of millions of files uses, its chunks merged from sorted runs on disk.
pub struct Tiler<I: Iterator<Item = ChunkRef>> {
    it: std::iter::Peekable<I>,
}

impl<I: Iterator<Item = ChunkRef>> Tiler<I> {
    /// Tile `chunks`, sorted by (file, offset).
    pub fn new(chunks: I) -> Self {
        Tiler { it: chunks.peekable() }
    }

    /// Entry `id`'s chunks: for a regular file, the crc32c of its bytes held and how many there
    /// are, checked to tile the file (a whole file exactly; one held in part without overlap and
    /// within its size); `None` for any other entry, which must have no chunks. Entries are given
    /// in id order, every one.
    ///
    /// # Errors
    /// The first [`TileFault`].
    pub fn next(&mut self, id: usize, entry: &Entry) -> Result<Option<(u32, u64)>, TileFault> {
        if entry.kind != EntryKind::File {
            if self.it.peek().is_some_and(|c| c.file_id as usize == id) {
                return Err(TileFault::Coverage { entry: id, covered: 0 });
            }
            return Ok(None);
        }
        // Bytes covered, and where the last chunk ended: the same for a whole file, whose chunks
        // follow each other; a file held in part has gaps (the parent's bytes) but no overlap.
        let (mut crc, mut covered, mut end) = (0u32, 0u64, 0u64);
        while let Some(c) = self.it.next_if(|c| c.file_id as usize == id) {
            let gap = if entry.delta.is_some() { c.offset < end } else { c.offset != end };
            if gap || c.offset.saturating_add(c.len.into()) > entry.size {
                return Err(TileFault::Gap { entry: id, at: c.offset, expected: end, stripe: c.stripe });
            }
            crc = if covered == 0 { c.crc } else { crate::crc::combine(crc, c.crc, c.len.into()) };
            covered += u64::from(c.len);
            end = c.offset + u64::from(c.len);
        }
        if entry.delta.is_none() && covered != entry.size {
            return Err(TileFault::Coverage { entry: id, covered });
        }
        Ok(Some((crc, covered)))
    }

    /// Every chunk was some entry's.
    ///
    /// # Errors
    /// A chunk of an entry past the last one (or out of order).
    pub fn finish(mut self) -> Result<(), TileFault> {
        match self.it.next() {
            Some(c) => Err(TileFault::Coverage { entry: c.file_id as usize, covered: 0 }),
            None => Ok(()),
        }
    }
}

/// A manifest with no entries, for tests.
#[cfg(test)]
pub(crate) fn sample_head() -> Manifest {
    Manifest {
        format_version: 4,
        backup_id: "00".repeat(16),
        label: Some("nightly".into()),
        tool: "sheaf test".into(),
        started_unix_ms: 1,
        finished_unix_ms: 2,
        roots: vec![Root { name: String::new(), path: "/data".into() }, Root { name: "tblspc".into(), path: "/t".into() }],
        stripes: vec![StripeRef { name: "a.sheaf".into(), path: "/b/a.sheaf".into() }],
        options: OptionsUsed { compression: "zstd:low".into(), codec: "zstd".into(), level: 1, transfer_size: 1 << 20, buffer_count: 8, readers: 1, threads: 2 },
        entries: Vec::new(),
        bytes_read: 3,
        warnings: vec!["a warning".into()],
        check_failures: vec![],
        changed_files: vec![],
        vanished_files: vec![],
        source: serde_json::json!({"kind": "directory"}),
        backup_type: Default::default(),
        chain: vec![],
        resumed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64) -> Entry {
        Entry { root: 0, path: "f".into(), kind: EntryKind::File, mode: 0, mtime_ns: 0, uid: 0, gid: 0, size, crc32c: None, target: None, vanished: false, ..Default::default() }
    }

    fn chunk(file_id: u32, offset: u64, data: &[u8]) -> ChunkRef {
        ChunkRef { file_id, offset, len: data.len() as u32, crc: crc32c::crc32c(data), stripe: 0 }
    }

    #[test]
    fn file_checksums_combine_chunks_in_any_order() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let entries = vec![file(1000), file(0)];
        let chunks = vec![chunk(0, 600, &data[600..]), chunk(0, 0, &data[..300]), chunk(0, 300, &data[300..600])];
        let sums = file_checksums(&entries, chunks).unwrap();
        assert_eq!(sums, vec![Some(crc32c::crc32c(&data)), Some(0)]);
    }

    #[test]
    fn file_checksums_find_gaps_and_short_files() {
        let data = [7u8; 100];
        let entries = vec![file(100)];
        assert!(matches!(file_checksums(&entries, vec![chunk(0, 50, &data[50..])]), Err(TileFault::Gap { at: 50, expected: 0, .. })));
        assert_eq!(file_checksums(&entries, vec![chunk(0, 0, &data[..50])]), Err(TileFault::Coverage { entry: 0, covered: 50 }));
        assert!(file_checksums(&entries, vec![chunk(0, 0, &data), chunk(3, 0, &data)]).is_err(), "a chunk of an unknown file");
    }

    #[test]
    fn a_file_held_in_part_may_have_gaps_but_no_overlap() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let part = |bytes| Entry { delta: Some(Delta { bytes, crc32c: 0 }), ..file(1000) };
        let held = [chunk(0, 100, &data[100..200]), chunk(0, 700, &data[700..800])];
        let want = crate::crc::combine(crc32c::crc32c(&data[100..200]), crc32c::crc32c(&data[700..800]), 100);
        assert_eq!(file_checksums(&[part(200)], held.to_vec()).unwrap(), vec![Some(want)]);
        // Held nothing: the parent's file as it was.
        assert_eq!(file_checksums(&[part(0)], vec![]).unwrap(), vec![Some(0)]);
        // A chunk missing from the index is caught by the bytes held.
        assert_eq!(file_checksums(&[part(200)], held[..1].to_vec()), Err(TileFault::Coverage { entry: 0, covered: 100 }));
        assert!(matches!(file_checksums(&[part(200)], vec![chunk(0, 100, &data[100..200]), chunk(0, 150, &data[150..250])]), Err(TileFault::Gap { .. })), "overlap");
        assert!(matches!(file_checksums(&[part(100)], vec![chunk(0, 950, &data[..100])]), Err(TileFault::Gap { .. })), "past the end");
        // A whole file still needs its chunks to follow each other.
        assert!(matches!(file_checksums(&[file(1000)], held.to_vec()), Err(TileFault::Gap { .. })));
    }

    #[test]
    fn backup_types_parse_and_default_to_full() {
        assert_eq!(BackupType::parse("INCR").unwrap(), BackupType::Incr);
        assert_eq!(BackupType::parse("differential").unwrap(), BackupType::Diff);
        let e = BackupType::parse("weekly").unwrap_err();
        assert!(e.to_string().contains("full, diff"), "{e}");
        let old: Manifest = serde_json::from_str(r#"{"format_version":2,"backup_id":"00","tool":"t","started_unix_ms":0,"finished_unix_ms":0,"roots":[],"stripes":[],"options":{"compression":"none","codec":"none","level":0,"transfer_size":1,"buffer_count":1,"readers":1,"threads":1},"entries":[],"bytes_read":0}"#).unwrap();
        assert_eq!((old.backup_type, old.chain.len()), (BackupType::Full, 0));
    }

    #[test]
    fn stored_round_trip() {
        let mut m = sample_head();
        m.format_version = 1;
        m.roots.truncate(1);
        m.entries = vec![Entry { root: 0, path: "x".into(), kind: EntryKind::File, mode: 0o600, mtime_ns: 5, size: 3, crc32c: Some(9), ..Default::default() }];
        let b = m.to_stored_bytes().unwrap();
        assert_eq!(Manifest::from_stored_bytes(&b).unwrap(), m);
        assert_eq!(Manifest::from_stored_bytes(&b[..b.len() / 2]).unwrap_err().kind(), crate::error::ErrorKind::Corrupt);

        // An entry that names a root the manifest lacks is refused, not indexed out of bounds.
        let mut bad = m.clone();
        bad.entries[0].root = 3;
        let e = Manifest::from_stored_bytes(&bad.to_stored_bytes().unwrap()).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt);
        assert!(e.message().contains("names root 3") && e.message().contains("1 root"), "{e}");
        let mut bad = m;
        bad.stripes.clear();
        assert_eq!(Manifest::from_stored_bytes(&bad.to_stored_bytes().unwrap()).unwrap_err().kind(), crate::error::ErrorKind::Corrupt);
    }
}
