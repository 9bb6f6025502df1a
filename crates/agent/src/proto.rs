//! The frames on the wire, inside TLS: a kind byte, a little-endian u32 length, the payload.
//! A client sends requests (JSON); the agent answers each, in order, with one reply, a run of
//! list or data frames closed by an end frame, or an error. A client may send several requests
//! before reading the answers: they are served in order.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use sheaf_core::manifest::Entry;

/// The protocol's version: an agent and a client of different versions refuse each other at hello.
pub const VERSION: u32 = 5;
/// The largest payload either side accepts: a data frame, or a chunk of the largest transfer
/// size with its header.
pub const MAX_FRAME: usize = (sheaf_core::format::MAX_TRANSFER_SIZE as usize) + 64;
/// The file bytes one data frame carries at most.
pub const DATA_CHUNK: usize = 1 << 20;
/// Entries one list frame carries at most.
pub const LIST_BATCH: usize = 1000;

/// A request (JSON).
pub const REQUEST: u8 = 1;
/// A reply to hello or stat (JSON).
pub const REPLY: u8 = 2;
/// File bytes.
pub const DATA: u8 = 3;
/// The end of a list or a read (JSON).
pub const END: u8 = 4;
/// A refusal or failure (JSON [`WireError`]); the connection stays usable.
pub const ERROR: u8 = 5;
/// Entries of a listing (JSON array of [`WireListed`]).
pub const LIST: u8 = 6;
/// One chunk of a file, compressed by the agent: a [`ChunkHead`] and the stored bytes.
pub const CHUNK: u8 = 7;

/// What a client asks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The first request: versions are compared, and the agent says what it serves.
    Hello {
        /// The client's [`VERSION`].
        version: u32,
    },
    /// Everything under an absolute path (itself the entry with path `""`), symlinks as links,
    /// in tree order, streamed as the agent walks it (from version 3: never held whole on either
    /// side).
    List {
        /// Absolute path.
        path: String,
    },
    /// The names in one directory (not recursive, no stats), in list frames of JSON strings; none
    /// when it is gone. From version 3.
    Names {
        /// Absolute path.
        path: String,
    },
    /// One entry.
    Stat {
        /// Absolute path.
        path: String,
    },
    /// `len` bytes of a regular file from `offset` (fewer at its end).
    Read {
        /// Absolute path.
        path: String,
        /// First byte.
        offset: u64,
        /// Bytes wanted.
        len: u64,
    },
    /// An object of a served repository (from version 4): a [`WireStored`] reply, or a
    /// `NotFound` refusal.
    RepoStat {
        /// The repository's name (`--serve-repo NAME=PATH`).
        repo: String,
        /// The object's name inside it (`wal/00000001/....wal`).
        name: String,
    },
    /// The objects of a served repository whose names start with `prefix` (at any depth),
    /// sorted, in list frames of [`WireStored`], then an end frame.
    RepoList {
        /// The repository's name.
        repo: String,
        /// What the names start with (relative to the repository).
        prefix: String,
    },
    /// `len` bytes of an object from `offset`, as [`Request::Read`] answers.
    RepoRead {
        /// The repository's name.
        repo: String,
        /// The object's name.
        name: String,
        /// First byte.
        offset: u64,
        /// Bytes wanted.
        len: u64,
    },
    /// Start writing an object under a temporary name: an empty reply, or the refusal (a grant
    /// the client lacks, a name taken). The object's bytes follow as [`DATA`] frames from the
    /// client, with [`Request::RepoCheck`]s among them, then one [`Request::RepoPublish`] or
    /// [`Request::RepoDiscard`]. A write that fails on the agent's host is told at the next check
    /// or at publish.
    RepoCreate {
        /// The repository's name.
        repo: String,
        /// The object's name.
        name: String,
        /// Replace an object already there.
        overwrite: bool,
        /// About how many bytes it will hold.
        expected: u64,
        /// A stripe or WAL (not a record).
        bulk: bool,
        /// Left under its temporary name, not removed, if the write never ends (the client
        /// killed, or its link lost): a resumable stripe a later [`Request::RepoResume`] takes
        /// over, ending this write if its connection went silent. From version 5.
        #[serde(default)]
        keep_unfinished: bool,
    },
    /// Take over what a stopped writer left unfinished of an object ([`Request::RepoCreate`] with
    /// `keep_unfinished`), from version 5: a reply `{"len": N}` with the bytes it holds, or a
    /// `NotFound` refusal when there is none. A write of it another connection still holds is
    /// waited for (10 s), and ended once that connection has sent nothing of it for 5 s. Held by this connection until one
    /// [`Request::RepoGoOn`] or [`Request::RepoAbandon`] (or the connection's end, which leaves it
    /// unfinished again); [`Request::RepoHeldRead`]s read it meanwhile.
    RepoResume {
        /// The repository's name.
        repo: String,
        /// The object's name.
        name: String,
        /// About how many bytes it will hold.
        expected: u64,
    },
    /// Bytes of the unfinished object this connection took over, answered as
    /// [`Request::RepoRead`] is.
    RepoHeldRead {
        /// First byte.
        offset: u64,
        /// Bytes wanted.
        len: u64,
    },
    /// Keep the first `keep` bytes of the object taken over and write on after them: an empty
    /// reply, then as after [`Request::RepoCreate`].
    RepoGoOn {
        /// Bytes kept.
        keep: u64,
    },
    /// Remove the object taken over (its backup is given up): an empty reply.
    RepoAbandon,
    /// How the write in progress stands: an empty reply, or its failure (so that a full disk on
    /// the agent's host stops a long stripe early).
    RepoCheck,
    /// Make what was written so far durable (fsync): an empty reply once it is, or the failure.
    RepoSync,
    /// Make the write in progress durable and give it its name: an empty reply once the agent's
    /// host has it on disk (data, name and folder synced), or the failure.
    RepoPublish,
    /// Drop the write in progress: an empty reply.
    RepoDiscard,
    /// Remove folder `dir` of a repository if it is empty: an empty reply.
    RepoPrune {
        /// The repository's name.
        repo: String,
        /// The folder, relative to the repository.
        dir: String,
    },
    /// Remove an object (missing is not an error): an empty reply, or a refusal.
    RepoDelete {
        /// The repository's name.
        repo: String,
        /// The object's name.
        name: String,
    },
    /// As `Read`, cut into chunks of `chunk` bytes (the backup's transfer size), each compressed
    /// with `codec` (a codec spec: `zstd:low`, `lz4`, ...) and sent as a [`CHUNK`] frame.
    ReadChunks {
        /// Absolute path.
        path: String,
        /// First byte.
        offset: u64,
        /// Bytes wanted.
        len: u64,
        /// Raw bytes per chunk.
        chunk: u32,
        /// How to compress them.
        codec: String,
    },
}

/// The head of a [`CHUNK`] frame; the stored bytes follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHead {
    /// A codec's id, or [`sheaf_core::format::ZERO_FRAME`] for an all-zero chunk (no bytes follow).
    pub codec: u8,
    /// The chunk's raw bytes.
    pub raw_len: u32,
    /// Their crc32c.
    pub raw_crc: u32,
}

impl ChunkHead {
    /// Its length on the wire.
    pub const LEN: usize = 9;

    /// Its bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.codec;
        b[1..5].copy_from_slice(&self.raw_len.to_le_bytes());
        b[5..9].copy_from_slice(&self.raw_crc.to_le_bytes());
        b
    }

    /// A frame's head and the stored bytes after it, or `None` when it is too short.
    pub fn decode(frame: &[u8]) -> Option<(ChunkHead, &[u8])> {
        let head = frame.get(..Self::LEN)?;
        let h = ChunkHead { codec: head[0], raw_len: u32::from_le_bytes(head[1..5].try_into().ok()?), raw_crc: u32::from_le_bytes(head[5..9].try_into().ok()?) };
        Some((h, &frame[Self::LEN..]))
    }
}

/// The reply to hello.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HelloReply {
    /// The agent's [`VERSION`].
    pub version: u32,
    /// The data directory it serves (as given to it).
    pub pgdata: String,
    /// The cluster's system identifier, from its pg_control.
    pub system_identifier: String,
    /// Every directory it serves reads under: the data directory, and where its pg_wal and
    /// tablespaces' links lead.
    pub roots: Vec<String>,
}

/// One listed entry with the stat fields the engine uses beside the manifest's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireListed {
    /// The entry (path relative to the listed directory).
    pub entry: Entry,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_nlink`.
    pub nlink: u64,
}

/// An object of a served repository, as [`sheaf_core::storage::Stored`] holds it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireStored {
    /// Its name, relative to the repository.
    pub name: String,
    /// Its length in bytes.
    pub size: u64,
    /// When it was last written, seconds since the epoch.
    pub modified: i64,
    /// What changes whenever it is written again.
    pub tag: String,
}

/// The end of a read.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReadEnd {
    /// Bytes sent.
    pub read: u64,
    /// The file's size when opened.
    pub size_at_open: u64,
    /// Whether size or mtime changed while it was read.
    pub changed: bool,
}

/// What kind of refusal or failure a [`WireError`] is; on the wire as its snake_case name.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WireErrorKind {
    /// Outside what the agent serves, or not a kind of file it reads.
    Denied,
    /// Nothing at the path (gone since it was listed).
    NotFound,
    /// The agent's file system failed.
    Io,
    /// A request this agent does not take (another version, a bad argument).
    Protocol,
    /// A kind a newer agent sent that this side does not know.
    #[serde(other)]
    Other,
}

/// A refusal or failure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireError {
    /// Its kind.
    pub kind: WireErrorKind,
    /// What happened, for the user.
    pub message: String,
    /// sheaf's own kind of the failure, where the agent's store gave one (a name taken, a disk
    /// full, an object cut short): the client's error is then of that kind (from version 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheaf: Option<sheaf_core::ErrorKind>,
    /// Worth asking again (the agent's store said so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transient: bool,
}

impl WireError {
    /// A refusal of `kind`.
    pub fn new(kind: WireErrorKind, message: impl Into<String>) -> WireError {
        WireError { kind, message: message.into(), sheaf: None, transient: false }
    }

    /// What the agent's store failed with, as a wire error that keeps sheaf's kind.
    pub fn from_error(e: &sheaf_core::Error) -> WireError {
        use sheaf_core::ErrorKind;
        let kind = match e.kind() {
            ErrorKind::NotFound => WireErrorKind::NotFound,
            ErrorKind::Denied => WireErrorKind::Denied,
            ErrorKind::InvalidInput => WireErrorKind::Protocol,
            _ => WireErrorKind::Io,
        };
        WireError { kind, message: e.to_string(), sheaf: Some(e.kind()), transient: e.is_transient() }
    }

    /// What the agent's host failed with, as a wire error: `NotFound` for a missing file,
    /// `Io` otherwise.
    pub fn from_io(what: &str, e: &std::io::Error) -> WireError {
        let kind = if e.kind() == std::io::ErrorKind::NotFound { WireErrorKind::NotFound } else { WireErrorKind::Io };
        WireError::new(kind, format!("{what}: {e}"))
    }

    /// sheaf's error for this refusal by the agent at `addr`: the one place wire kinds become
    /// [`sheaf_core::ErrorKind`]s. A refusal is never transient: asking again gets it again.
    pub fn into_error(self, addr: &str) -> sheaf_core::Error {
        use sheaf_core::ErrorKind;
        let kind = self.sheaf.unwrap_or(match self.kind {
            WireErrorKind::Denied => ErrorKind::Denied,
            WireErrorKind::Protocol => ErrorKind::InvalidInput,
            WireErrorKind::NotFound => ErrorKind::NotFound,
            WireErrorKind::Io | WireErrorKind::Other => ErrorKind::Source,
        });
        sheaf_core::Error::new(kind, format!("agent at {addr}: {}", self.message)).transient(self.transient)
    }
}

/// Write one frame.
///
/// # Errors
/// The stream's; a payload over [`MAX_FRAME`].
pub fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> std::io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("a frame of {} bytes is over the limit", payload.len())));
    }
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(payload)
}

/// Write a JSON frame.
///
/// # Errors
/// The stream's.
pub fn write_json(w: &mut impl Write, kind: u8, value: &impl Serialize) -> std::io::Result<()> {
    write_frame(w, kind, &serde_json::to_vec(value).expect("wire types serialise"))
}

/// Read one frame into `buf`; its kind, or `None` at a clean end of stream before a frame.
///
/// # Errors
/// The stream's; a frame over [`MAX_FRAME`] or cut short.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> std::io::Result<Option<u8>> {
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of {len} bytes is over the limit")));
    }
    // Read into the buffer's spare room (not zeroed first: a DATA frame is a MiB, each one).
    buf.clear();
    buf.reserve(len);
    r.take(len as u64).read_to_end(buf)?;
    if buf.len() < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(head[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_what_is_too_long() {
        let mut wire = Vec::new();
        write_json(&mut wire, REQUEST, &Request::Read { path: "/d/base/1/2".into(), offset: 8192, len: 16384 }).unwrap();
        write_frame(&mut wire, DATA, b"pages").unwrap();
        let mut r = wire.as_slice();
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), Some(REQUEST));
        assert_eq!(serde_json::from_slice::<Request>(&buf).unwrap(), Request::Read { path: "/d/base/1/2".into(), offset: 8192, len: 16384 });
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), Some(DATA));
        assert_eq!(buf, b"pages");
        assert_eq!(read_frame(&mut r, &mut buf).unwrap(), None);
        let mut huge = vec![DATA];
        huge.extend_from_slice(&((MAX_FRAME + 1) as u32).to_le_bytes());
        assert!(read_frame(&mut huge.as_slice(), &mut buf).is_err());
        assert!(read_frame(&mut &wire[..3], &mut buf).is_err(), "a cut header is an error, not an end");
        // The DATA frame is the last 10 bytes (kind, length 5, "pages"): cut after "pag".
        let cut = &wire[wire.len() - 10..wire.len() - 2];
        assert_eq!(read_frame(&mut &cut[..], &mut buf).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof, "5 bytes promised, 3 there");
    }

    #[test]
    fn chunk_heads_round_trip() {
        let h = ChunkHead { codec: 3, raw_len: 1 << 20, raw_crc: 0xdead_beef };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(b"zstd bytes");
        assert_eq!(ChunkHead::decode(&frame), Some((h, &b"zstd bytes"[..])));
        assert_eq!(ChunkHead::decode(&frame[..ChunkHead::LEN - 1]), None);
    }
}
