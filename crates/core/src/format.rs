//! The stripe format, version 2 (version 1 is still read). Little-endian throughout; every region
//! has its own crc32c so a flipped byte is named by region. See `docs/format.md` for the prose
//! description.
//!
//! ```text
//! stripe := header frame* index manifest trailer
//! header  (64 B)  magic "SHEAF\0ST", version, header length, stripe k of N, backup id, codec,
//!         cipher, transfer size, crc; when encrypted, a 96-byte key block follows (crypto.rs)
//! frame   (40 B header + stored bytes)  file id, offset, raw len, stored len, codec, flags, crcs,
//!         header crc; a packed frame holds several small files' bytes back to back
//! index   (36 B per chunk; 32 in version 1)  file id, offset, frame position, raw len, stored len,
//!         raw crc, offset in the frame's raw bytes (the chunks of one packed frame share its position)
//! manifest  entries in zstd-compressed JSON pages, a head and a page index (v4; before, one
//!           zstd-compressed JSON), identical in every stripe of a set
//! trailer (80 B)  index and manifest offsets, lengths and crcs, frame count, backup id, crc, magic
//! ```

use crate::codec::CodecKind;
use crate::crypto::{KeyBlock, CIPHER_AES256GCM, CIPHER_NONE, KEY_BLOCK_LEN};
use crate::error::{Error, Result};

/// Current format version; readers refuse newer ones. Version 2 added packed frames (several
/// files' bytes in one frame) and the index's offset-in-frame field; 3 the chunk hash; 4 the
/// paged manifest; 5 seals an encrypted stripe's index in pieces of [`INDEX_PIECE`] entries, so
/// that it is written and read a piece at a time; 6 lets a packed frame hold superseded bytes
/// ([`SUPERSEDED`]), which readers of 5 would take for a file they do not know; 7 lets a
/// resumed set's frames name their file by the id it had in the attempt that wrote them (the index
/// names it by the set's own), which readers of 6 would take for damage.
pub const FORMAT_VERSION: u16 = 7;
/// The file id of index entries that no file uses: bytes of a frame a consolidation copied as it
/// was stored although a newer set had replaced them. They keep the frame's members tiling its
/// raw bytes (so its raw checksum still proves every member) and are never restored.
pub const SUPERSEDED: u32 = u32::MAX;
/// Entries per sealed piece of an encrypted stripe's index (format 5 on).
pub const INDEX_PIECE: usize = 4096;

/// The plaintext length of each sealed piece of an encrypted index of format 5 or later holding
/// `count` entries of `entry_len` bytes: full pieces, then the rest; one empty piece for an
/// empty index.
pub fn index_pieces(count: u64, entry_len: usize) -> impl Iterator<Item = usize> {
    let pieces = count.div_ceil(INDEX_PIECE as u64).max(1);
    (0..pieces).map(move |p| (count - p * INDEX_PIECE as u64).min(INDEX_PIECE as u64) as usize * entry_len)
}
/// Oldest format version this sheaf still reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
/// Frame flag: the frame packs chunks of several files; the index lists them.
pub const FLAG_PACKED: u8 = 1;
/// Header magic.
pub const HEADER_MAGIC: &[u8; 8] = b"SHEAF\0ST";
/// Trailer magic, the last 8 bytes of a complete stripe.
pub const TRAILER_MAGIC: &[u8; 8] = b"SHEAFEND";
/// Frame header magic.
pub const FRAME_MAGIC: &[u8; 4] = b"SFRM";
/// Header length in bytes.
pub const HEADER_LEN: usize = 64;
/// Frame header length in bytes.
pub const FRAME_HEADER_LEN: usize = 40;
/// Index entry length in bytes (version 3: with the chunk's XXH3-128).
pub const INDEX_ENTRY_LEN: usize = 52;
/// Index entry length in bytes in version 2, which had no strong hash.
pub const INDEX_ENTRY_LEN_V2: usize = 36;
/// Index entry length in bytes in version 1, which had no offset-in-frame field either.
pub const INDEX_ENTRY_LEN_V1: usize = 32;
/// Largest zero frame: a hole of a sparse file (or a run of zeros) needs no payload, so it is not
/// bound by the transfer size.
pub const MAX_ZERO_FRAME: u32 = 1 << 30;

/// Index entry length of format `version`.
pub fn index_entry_len(version: u16) -> usize {
    match version {
        3.. => INDEX_ENTRY_LEN,
        2 => INDEX_ENTRY_LEN_V2,
        _ => INDEX_ENTRY_LEN_V1,
    }
}
/// Trailer length in bytes.
pub const TRAILER_LEN: usize = 80;
/// Codec id of a frame that stands for an all-zero chunk and has no payload.
pub const ZERO_FRAME: u8 = 0xFF;

/// Smallest transfer size (chunk size) a set may have.
pub const MIN_TRANSFER_SIZE: u64 = 64 << 10;
/// Largest transfer size.
pub const MAX_TRANSFER_SIZE: u64 = 16 << 20;
/// Default transfer size (SQL Server's MAXTRANSFERSIZE default is 1 MiB too).
pub const DEFAULT_TRANSFER_SIZE: u64 = 1 << 20;
/// Most stripes in one set.
pub const MAX_STRIPES: usize = 64;
/// Files smaller than this are packed: several files' bytes share one chunk, so one compressor
/// call and one frame header serve many of them (and a restore knows such files are not aligned).
pub const PACK_LIMIT: u64 = 64 << 10;

/// A 128-bit random backup id shared by every stripe of a set.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackupId(pub [u8; 16]);

impl BackupId {
    /// A fresh random id.
    ///
    /// # Errors
    /// When the operating system's random source fails.
    pub fn random() -> Result<Self> {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).map_err(|e| Error::new(crate::error::ErrorKind::Io, format!("random backup id: {e}")))?;
        Ok(BackupId(b))
    }

    /// Lower-case hex, 32 characters.
    pub fn to_hex(&self) -> String {
        crate::text::hex(&self.0)
    }

    /// Parse 32 hex characters.
    pub fn from_hex(s: &str) -> Option<Self> {
        crate::text::unhex(s.as_bytes())?.try_into().ok().map(BackupId)
    }
}

impl std::fmt::Debug for BackupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Whether a frame's header agrees with its index entries (one for a plain frame, one per member
/// of a packed one, adjacent): a packed frame's entries tile its raw bytes in order, share its
/// stored length, start where its header says and combine to its raw checksum (`crc`, when shown
/// in the clear); a plain frame's entry repeats its header. In a resumed set (v7) a frame an
/// earlier attempt wrote names its file by that attempt's id: `resumed` lets the ids differ, as the
/// index's are the set's own.
pub fn frame_agrees(h: &FrameHeader, members: &[IndexEntry], crc: Option<u32>, resumed: bool) -> bool {
    let Some(e) = members.first() else { return false };
    let same_file = |id: u32| resumed || id == h.file_id;
    if h.flags & FLAG_PACKED != 0 {
        let mut at = 0u64;
        for m in members {
            if u64::from(m.frame_off) != at || m.stored_len != h.stored_len || m.raw_len == 0 {
                return false;
            }
            at += u64::from(m.raw_len);
        }
        let combined = members.iter().fold(0, |c, m| crate::crc::combine(c, m.raw_crc, m.raw_len.into()));
        return same_file(e.file_id) && e.offset == h.offset && at == u64::from(h.raw_len) && crc.is_none_or(|c| c == combined);
    }
    members.len() == 1
        && h.flags == 0
        && e.frame_off == 0
        && same_file(e.file_id)
        && e.offset == h.offset
        && e.raw_len == h.raw_len
        && e.stored_len == h.stored_len
        && crc.is_none_or(|c| c == e.raw_crc)
}

/// The fixed stripe header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeHeader {
    /// Format version the stripe was written with.
    pub version: u16,
    /// This stripe's position, 0-based.
    pub stripe_index: u16,
    /// Number of stripes in the set.
    pub stripe_count: u16,
    /// The set's id.
    pub backup_id: BackupId,
    /// Codec the backup asked for (frames may still be stored raw or as zero frames).
    pub codec: CodecKind,
    /// Codec level asked for.
    pub level: i8,
    /// Chunk size in bytes.
    pub transfer_size: u32,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: i64,
    /// How to make the key, when the stripe is encrypted (it follows the fixed header).
    pub key_block: Option<KeyBlock>,
}

impl StripeHeader {
    /// Bytes from the start of the stripe to its first frame: the header and any key block.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + if self.key_block.is_some() { KEY_BLOCK_LEN } else { 0 }
    }

    /// Whether the stripe is encrypted.
    pub fn encrypted(&self) -> bool {
        self.key_block.is_some()
    }

    /// How many bytes the whole header has, from its first [`HEADER_LEN`] bytes (which
    /// [`StripeHeader::decode`] still checks): read that many before decoding.
    pub fn len_from(first: &[u8]) -> usize {
        if first.len() > 34 && first[34] != CIPHER_NONE {
            HEADER_LEN + KEY_BLOCK_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Encode with checksum ([`StripeHeader::encoded_len`] bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        b[0..8].copy_from_slice(HEADER_MAGIC);
        b[8..10].copy_from_slice(&self.version.to_le_bytes());
        b[10..12].copy_from_slice(&(self.encoded_len() as u16).to_le_bytes());
        b[12..14].copy_from_slice(&self.stripe_index.to_le_bytes());
        b[14..16].copy_from_slice(&self.stripe_count.to_le_bytes());
        b[16..32].copy_from_slice(&self.backup_id.0);
        b[32] = self.codec as u8;
        b[33] = self.level as u8;
        b[34] = if self.key_block.is_some() { CIPHER_AES256GCM } else { CIPHER_NONE };
        b[36..40].copy_from_slice(&self.transfer_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        if let Some(k) = &self.key_block {
            b[HEADER_LEN..].copy_from_slice(&k.encode());
        }
        b
    }

    /// Decode and check magic, checksum and version; `b` holds [`StripeHeader::len_from`] bytes.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] naming what does not match.
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < HEADER_LEN || &b[0..8] != HEADER_MAGIC {
            return Err(Error::corrupt("header: not a sheaf stripe (bad magic)"));
        }
        if crc32c::crc32c(&b[..60]) != u32_at(b, 60) {
            return Err(Error::corrupt("header: checksum mismatch (the header is damaged)"));
        }
        let version = u16_at(b, 8);
        if version > FORMAT_VERSION {
            return Err(Error::invalid(format!("header: format version {version} is newer than this sheaf understands ({FORMAT_VERSION}); upgrade sheaf")));
        }
        if version < OLDEST_FORMAT_VERSION {
            return Err(Error::corrupt(format!("header: format version {version} does not exist (the header is damaged)")));
        }
        let key_block = match b[34] {
            CIPHER_NONE => None,
            CIPHER_AES256GCM if b.len() >= HEADER_LEN + KEY_BLOCK_LEN => Some(KeyBlock::decode(&b[HEADER_LEN..])?),
            CIPHER_AES256GCM => return Err(Error::corrupt("header: the key block is missing (truncated)")),
            c => return Err(Error::invalid(format!("header: cipher {c} is not supported by this sheaf: upgrade sheaf"))),
        };
        let len = HEADER_LEN + if key_block.is_some() { KEY_BLOCK_LEN } else { 0 };
        if usize::from(u16_at(b, 10)) != len {
            return Err(Error::corrupt(format!("header: length {} where {len} was expected (the header is damaged)", u16_at(b, 10))));
        }
        let codec = CodecKind::from_id(b[32]).ok_or_else(|| Error::corrupt(format!("header: unknown codec id {}", b[32])))?;
        // Readers size their buffers by it: a damaged value must not ask for gigabytes (found by
        // fuzzing: a transfer size of 2 GiB made verify allocate that per buffer).
        let transfer_size = u32_at(b, 36);
        if !(MIN_TRANSFER_SIZE..=MAX_TRANSFER_SIZE).contains(&u64::from(transfer_size)) {
            return Err(Error::corrupt(format!("header: transfer size {transfer_size} is outside 64 KiB .. 16 MiB (the header is damaged)")));
        }
        Ok(StripeHeader {
            version,
            stripe_index: u16_at(b, 12),
            stripe_count: u16_at(b, 14),
            backup_id: BackupId(b[16..32].try_into().expect("16 bytes")),
            codec,
            level: b[33] as i8,
            transfer_size,
            created_unix_ms: i64::from_le_bytes(b[40..48].try_into().expect("8 bytes")),
            key_block,
        })
    }
}

/// Recompute a whole stripe's own checksums in place: the header's, and, where the trailer places
/// them inside `stripe`, the index region's, the manifest region's and the trailer's. For fuzzing
/// and fault tests: damage made this way gets past those checks to the parsers behind them.
pub fn reseal(stripe: &mut [u8]) {
    if stripe.len() >= HEADER_LEN {
        let c = crc32c::crc32c(&stripe[..60]);
        stripe[60..64].copy_from_slice(&c.to_le_bytes());
    }
    if stripe.len() < HEADER_LEN + TRAILER_LEN {
        return;
    }
    let t = stripe.len() - TRAILER_LEN;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let region = |off: u64, len: u64| off.checked_add(len).filter(|&end| end <= t as u64).map(|end| off as usize..end as usize);
    // A paged manifest's own checksums first (version 4), then the regions'.
    if let Some(r) = region(u64_at(stripe, t + 16), u64_at(stripe, t + 24)) {
        crate::manifest::pages::reseal(&mut stripe[r]);
    }
    for (at, crc_at) in [(0, 40), (16, 44)] {
        if let Some(r) = region(u64_at(stripe, t + at), u64_at(stripe, t + at + 8)) {
            let c = crc32c::crc32c(&stripe[r]);
            stripe[t + crc_at..t + crc_at + 4].copy_from_slice(&c.to_le_bytes());
        }
    }
    let c = crc32c::crc32c(&stripe[t..t + 68]);
    stripe[t + 68..t + 72].copy_from_slice(&c.to_le_bytes());
}

/// What a frame header says about the chunk that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// File the chunk belongs to (index into the manifest's entries).
    pub file_id: u32,
    /// Byte offset of the chunk in that file.
    pub offset: u64,
    /// Raw (uncompressed) length.
    pub raw_len: u32,
    /// Stored length (0 for a zero frame).
    pub stored_len: u32,
    /// Codec id of the payload, or [`ZERO_FRAME`].
    pub codec: u8,
    /// [`FLAG_PACKED`] or 0 (version 1 frames have 0).
    pub flags: u8,
    /// crc32c of the raw bytes.
    pub raw_crc: u32,
    /// crc32c of the stored bytes.
    pub stored_crc: u32,
}

impl FrameHeader {
    /// Encode with checksum.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0..4].copy_from_slice(FRAME_MAGIC);
        b[4..8].copy_from_slice(&self.file_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.raw_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.stored_len.to_le_bytes());
        b[24] = self.codec;
        b[25] = self.flags;
        b[28..32].copy_from_slice(&self.raw_crc.to_le_bytes());
        b[32..36].copy_from_slice(&self.stored_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check magic and checksum.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < FRAME_HEADER_LEN || &b[0..4] != FRAME_MAGIC {
            return Err(Error::corrupt("frame header: bad magic"));
        }
        if crc32c::crc32c(&b[..36]) != u32_at(b, 36) {
            return Err(Error::corrupt("frame header: checksum mismatch (the frame header is damaged)"));
        }
        Ok(FrameHeader {
            file_id: u32_at(b, 4),
            offset: u64_at(b, 8),
            raw_len: u32_at(b, 16),
            stored_len: u32_at(b, 20),
            codec: b[24],
            flags: b[25],
            raw_crc: u32_at(b, 28),
            stored_crc: u32_at(b, 32),
        })
    }

    /// The codec of the payload, or `None` for a zero frame.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] for an unknown codec id.
    pub fn codec_kind(&self) -> Result<Option<CodecKind>> {
        if self.codec == ZERO_FRAME {
            return Ok(None);
        }
        CodecKind::from_id(self.codec).map(Some).ok_or_else(|| Error::corrupt(format!("frame header: unknown codec id {}", self.codec)))
    }
}

/// One index entry: where a chunk's frame sits in this stripe. A packed frame has one entry per
/// chunk it holds, adjacent in the index, sharing `frame_pos` and `stored_len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// File id.
    pub file_id: u32,
    /// Offset of the chunk in the file.
    pub offset: u64,
    /// Byte position of the frame header in the stripe.
    pub frame_pos: u64,
    /// Raw length.
    pub raw_len: u32,
    /// Stored length.
    pub stored_len: u32,
    /// crc32c of the raw bytes.
    pub raw_crc: u32,
    /// Where the chunk starts in its frame's raw bytes (0 unless the frame is packed).
    pub frame_off: u32,
    /// (v3) XXH3-128 of the raw bytes: strong enough to call a chunk on disk the same as this
    /// one (delta restore). 0 for an all-zero chunk, and in sets older than version 3.
    pub hash: u128,
}

/// The strong hash of a chunk's raw bytes that format 3 keeps in the index ([`IndexEntry::hash`]).
pub fn chunk_hash(raw: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(raw)
}

impl IndexEntry {
    /// Bytes no file uses ([`SUPERSEDED`]).
    pub fn is_superseded(&self) -> bool {
        self.file_id == SUPERSEDED
    }

    /// Append the (current version's) encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.file_id.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.frame_pos.to_le_bytes());
        out.extend_from_slice(&self.raw_len.to_le_bytes());
        out.extend_from_slice(&self.stored_len.to_le_bytes());
        out.extend_from_slice(&self.raw_crc.to_le_bytes());
        out.extend_from_slice(&self.frame_off.to_le_bytes());
        out.extend_from_slice(&self.hash.to_le_bytes());
    }

    /// Decode a whole index region of format `version` (its crc is checked by the caller against
    /// the trailer).
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] when the length is not a whole number of entries.
    pub fn decode_all(b: &[u8], version: u16) -> Result<Vec<IndexEntry>> {
        let len = index_entry_len(version);
        if b.len() % len != 0 {
            return Err(Error::corrupt(format!("index: length {} is not a multiple of {len}", b.len())));
        }
        Ok(b.chunks_exact(len).map(Self::decode_one).collect())
    }

    /// Decode one entry, of any version: its length says which (the caller cut it to one).
    pub fn decode_one(e: &[u8]) -> IndexEntry {
        let len = e.len();
        IndexEntry {
            file_id: u32_at(e, 0),
            offset: u64_at(e, 4),
            frame_pos: u64_at(e, 12),
            raw_len: u32_at(e, 20),
            stored_len: u32_at(e, 24),
            raw_crc: u32_at(e, 28),
            frame_off: if len > INDEX_ENTRY_LEN_V1 { u32_at(e, 32) } else { 0 },
            hash: if len > INDEX_ENTRY_LEN_V2 { u128::from_le_bytes(e[36..52].try_into().expect("16 bytes")) } else { 0 },
        }
    }
}

/// The fixed trailer: where the index and manifest are and their checksums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Offset of the index region.
    pub index_offset: u64,
    /// Length of the index region.
    pub index_len: u64,
    /// Offset of the manifest region.
    pub manifest_offset: u64,
    /// Length of the (compressed) manifest region.
    pub manifest_len: u64,
    /// Number of frames in this stripe.
    pub frame_count: u64,
    /// crc32c of the index region.
    pub index_crc: u32,
    /// crc32c of the manifest region.
    pub manifest_crc: u32,
    /// This stripe's position.
    pub stripe_index: u16,
    /// Stripes in the set.
    pub stripe_count: u16,
    /// The set's id.
    pub backup_id: BackupId,
}

impl Trailer {
    /// Encode with checksum and magic.
    pub fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut b = [0u8; TRAILER_LEN];
        b[0..8].copy_from_slice(&self.index_offset.to_le_bytes());
        b[8..16].copy_from_slice(&self.index_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.manifest_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.manifest_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.frame_count.to_le_bytes());
        b[40..44].copy_from_slice(&self.index_crc.to_le_bytes());
        b[44..48].copy_from_slice(&self.manifest_crc.to_le_bytes());
        b[48..50].copy_from_slice(&self.stripe_index.to_le_bytes());
        b[50..52].copy_from_slice(&self.stripe_count.to_le_bytes());
        b[52..68].copy_from_slice(&self.backup_id.0);
        let crc = crc32c::crc32c(&b[..68]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
        b[72..80].copy_from_slice(TRAILER_MAGIC);
        b
    }

    /// Decode and check magic and checksum.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Incomplete`] when the magic is missing (a truncated or unfinished stripe),
    /// [`crate::error::ErrorKind::Corrupt`] when the checksum does not match.
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() < TRAILER_LEN {
            return Err(Error::incomplete("trailer: missing (the stripe is truncated or its backup never finished)"));
        }
        if &b[72..80] != TRAILER_MAGIC {
            // A trailer whose checksum holds but whose magic does not was damaged, not cut short.
            if crc32c::crc32c(&b[..68]) == u32_at(b, 68) {
                return Err(Error::corrupt("trailer: bad magic (the trailer is damaged)"));
            }
            return Err(Error::incomplete("trailer: missing (the stripe is truncated or its backup never finished)"));
        }
        if crc32c::crc32c(&b[..68]) != u32_at(b, 68) {
            return Err(Error::corrupt("trailer: checksum mismatch (the trailer is damaged)"));
        }
        Ok(Trailer {
            index_offset: u64_at(b, 0),
            index_len: u64_at(b, 8),
            manifest_offset: u64_at(b, 16),
            manifest_len: u64_at(b, 24),
            frame_count: u64_at(b, 32),
            index_crc: u32_at(b, 40),
            manifest_crc: u32_at(b, 44),
            stripe_index: u16_at(b, 48),
            stripe_count: u16_at(b, 50),
            backup_id: BackupId(b[52..68].try_into().expect("16 bytes")),
        })
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> StripeHeader {
        StripeHeader {
            version: FORMAT_VERSION,
            stripe_index: 1,
            stripe_count: 3,
            backup_id: BackupId([7; 16]),
            codec: CodecKind::Zstd,
            level: -5,
            transfer_size: 1 << 20,
            created_unix_ms: 1_700_000_000_000,
            key_block: None,
        }
    }

    #[test]
    fn header_round_trip_and_every_flipped_byte_is_caught() {
        let keys = crate::crypto::Keys::from_passphrase(b"p".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap();
        let (block, _) = keys.seal(keys.fresh_kdf().unwrap()).unwrap();
        for h in [header(), StripeHeader { key_block: Some(block), ..header() }] {
            let b = h.encode();
            assert_eq!(b.len(), h.encoded_len());
            assert_eq!(StripeHeader::len_from(&b[..HEADER_LEN]), h.encoded_len());
            assert_eq!(StripeHeader::decode(&b).unwrap(), h);
            for i in 0..b.len() {
                let mut bad = b.clone();
                bad[i] ^= 0x10;
                assert!(StripeHeader::decode(&bad).is_err(), "flip at {i} not caught");
            }
            if h.encrypted() {
                assert!(StripeHeader::decode(&b[..HEADER_LEN]).unwrap_err().message().contains("key block"));
            }
        }
    }

    #[test]
    fn reseal_makes_damaged_regions_pass_their_checksums_again() {
        let t = Trailer {
            index_offset: 64,
            index_len: 8,
            manifest_offset: 72,
            manifest_len: 8,
            frame_count: 0,
            index_crc: 0,
            manifest_crc: 0,
            stripe_index: 0,
            stripe_count: 1,
            backup_id: BackupId([1; 16]),
        };
        let mut s = header().encode().to_vec();
        s.extend_from_slice(&[5u8; 16]);
        s.extend_from_slice(&t.encode());
        s[3] ^= 1; // the magic stays damaged: only checksums are resealed
        s[70] ^= 1; // index
        s[75] ^= 1; // manifest
        reseal(&mut s);
        assert!(crc32c::crc32c(&s[..60]) == u32_at(&s, 60));
        let tr = Trailer::decode(&s[s.len() - TRAILER_LEN..]).unwrap();
        assert_eq!((tr.index_crc, tr.manifest_crc), (crc32c::crc32c(&s[64..72]), crc32c::crc32c(&s[72..80])));
    }

    #[test]
    fn a_transfer_size_no_backup_can_have_is_refused() {
        for (ts, ok) in [(64 << 10, true), (16 << 20, true), ((64 << 10) - 1, false), ((16 << 20) + 1, false), (u32::MAX, false), (0, false)] {
            let b = StripeHeader { transfer_size: ts, ..header() }.encode();
            match StripeHeader::decode(&b) {
                Ok(h) => assert!(ok && h.transfer_size == ts, "{ts} accepted"),
                Err(e) => assert!(!ok && e.message().contains("transfer size"), "{ts}: {}", e.message()),
            }
        }
    }

    #[test]
    fn frame_header_round_trip_and_flips() {
        let f = FrameHeader { file_id: 9, offset: 1 << 33, raw_len: 65536, stored_len: 100, codec: 3, flags: FLAG_PACKED, raw_crc: 1, stored_crc: 2 };
        let b = f.encode();
        assert_eq!(FrameHeader::decode(&b).unwrap(), f);
        for i in 0..FRAME_HEADER_LEN {
            let mut bad = b;
            bad[i] ^= 1;
            assert!(FrameHeader::decode(&bad).is_err(), "flip at {i} not caught");
        }
    }

    #[test]
    fn trailer_round_trip_and_flips() {
        let t = Trailer {
            index_offset: 1,
            index_len: 2,
            manifest_offset: 3,
            manifest_len: 4,
            frame_count: 5,
            index_crc: 6,
            manifest_crc: 7,
            stripe_index: 0,
            stripe_count: 2,
            backup_id: BackupId([1; 16]),
        };
        let b = t.encode();
        assert_eq!(Trailer::decode(&b).unwrap(), t);
        for i in 0..TRAILER_LEN {
            let mut bad = b;
            bad[i] ^= 0x80;
            assert!(Trailer::decode(&bad).is_err(), "flip at {i} not caught");
        }
        let mut bad_magic = b;
        bad_magic[79] = 0;
        assert_eq!(Trailer::decode(&bad_magic).unwrap_err().kind(), crate::error::ErrorKind::Corrupt, "damaged, not cut");
        let mut tail_of_frames = [0x41u8; TRAILER_LEN];
        tail_of_frames[0] = 1;
        assert_eq!(Trailer::decode(&tail_of_frames).unwrap_err().kind(), crate::error::ErrorKind::Incomplete, "cut short");
    }

    #[test]
    fn index_round_trip() {
        let e = IndexEntry { file_id: 3, offset: 4096, frame_pos: 64, raw_len: 10, stored_len: 5, raw_crc: 77, frame_off: 9, hash: chunk_hash(b"0123456789") };
        let mut v = Vec::new();
        e.encode_into(&mut v);
        e.encode_into(&mut v);
        assert_eq!(v.len(), 2 * INDEX_ENTRY_LEN);
        assert_eq!(IndexEntry::decode_all(&v, FORMAT_VERSION).unwrap(), vec![e, e]);
        assert!(IndexEntry::decode_all(&v[..37], FORMAT_VERSION).is_err());
        // Version 2 entries are the first 36 bytes, with no hash; version 1's the first 32, with
        // no offset in the frame either.
        assert_eq!(IndexEntry::decode_all(&v[..36], 2).unwrap(), vec![IndexEntry { hash: 0, ..e }]);
        assert_eq!(IndexEntry::decode_all(&v[..32], 1).unwrap(), vec![IndexEntry { frame_off: 0, hash: 0, ..e }]);
    }

    #[test]
    fn backup_id_hex() {
        let id = BackupId::random().unwrap();
        assert_eq!(BackupId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(BackupId::from_hex("zz"), None);
    }
}
