//! `global/pg_control`, read: the server's state when it last wrote it, its last checkpoint and
//! redo point, a standby's minimum recovery point, and the settings a delta restore must know
//! (page checksums, `wal_log_hints`). The layout read is that of control file versions 1300
//! (PostgreSQL 12 to 16), 1700 and 1800 (17, 18); the file's CRC is checked.

use std::path::{Path, PathBuf};

use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;

/// Where the control file lives in a data directory.
pub const CONTROL_FILE: &str = "global/pg_control";

/// Why a control file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Shorter than the fields read.
    #[error("it is too short")]
    TooShort,
    /// A control file version this sheaf does not know.
    #[error("its format (control file version {0}) is not one sheaf reads (PostgreSQL 12 to 18)")]
    Version(u32),
    /// The stored CRC does not match.
    #[error("its CRC does not match its contents")]
    Crc,
    /// A server built with another block size.
    #[error("its page size is {0} bytes, not 8192")]
    PageSize(u32),
}

/// What `pg_control` says of a data directory, as far as a delta restore needs it. The layout
/// read is that of control file versions 1300 (PostgreSQL 12 to 16), 1700 and 1800 (17, 18),
/// which agree on every field read here; the file's CRC is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    /// The cluster's system identifier.
    pub system_identifier: SystemId,
    /// `pg_control_version`.
    pub version: u32,
    /// The server's state when it last wrote the file.
    pub state: DbState,
    /// The last checkpoint record.
    pub checkpoint: Lsn,
    /// Its redo point: every page changed before it was on disk when the checkpoint ended.
    pub redo: Lsn,
    /// The checkpoint's timeline.
    pub timeline: u32,
    /// A standby's (or a recovering server's) minimum recovery point: no page on disk holds a
    /// change past it.
    pub min_recovery: Lsn,
    /// Its timeline.
    pub min_recovery_timeline: u32,
    /// Recovery from a backup that had not reached the backup's end: where that backup started
    /// and (when known) ended.
    pub backup_start: Lsn,
    /// See `backup_start`.
    pub backup_end: Lsn,
    /// `wal_log_hints`.
    pub wal_log_hints: bool,
    /// Page checksums are on.
    pub checksums: bool,
}

/// `DBState`: what the server was doing when it last wrote `pg_control`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbState {
    /// Shut down cleanly as a primary.
    ShutDown,
    /// Shut down cleanly while in recovery (a standby).
    ShutDownInRecovery,
    /// In archive recovery or streaming (a standby, or a restore recovering): stopped any way.
    InArchiveRecovery,
    /// Running as a primary, in crash recovery, starting or shutting down: stopped uncleanly.
    Other(u32),
}

impl std::fmt::Display for DbState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbState::ShutDown => f.write_str("shut down"),
            DbState::ShutDownInRecovery => f.write_str("shut down in recovery"),
            DbState::InArchiveRecovery => f.write_str("in archive recovery"),
            DbState::Other(3) => f.write_str("shutting down"),
            DbState::Other(4) => f.write_str("in crash recovery"),
            DbState::Other(6) => f.write_str("in production"),
            DbState::Other(n) => write!(f, "state {n}"),
        }
    }
}

impl Control {
    /// Parse the bytes of `global/pg_control`.
    ///
    /// # Errors
    /// Why it cannot be read: too short, a control file version not known here, a CRC that does
    /// not match, or a page size that is not 8 KiB.
    pub fn parse(b: &[u8]) -> Result<Control, ControlError> {
        let u32_at = |at: usize| b.get(at..at + 4).map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")));
        let u64_at = |at: usize| b.get(at..at + 8).map(|x| u64::from_le_bytes(x.try_into().expect("8 bytes")));
        let version = u32_at(8).ok_or(ControlError::TooShort)?;
        // Where the CRC sits: after the authentication nonce, which 1800 moved by a byte (the new
        // default_char_signedness before it), aligned to 4.
        let crc_at = match version {
            1300 | 1700 => 288,
            1800 => 292,
            v => return Err(ControlError::Version(v)),
        };
        let stored = u32_at(crc_at).ok_or(ControlError::TooShort)?;
        if crc32c::crc32c(&b[..crc_at]) != stored {
            return Err(ControlError::Crc);
        }
        let field = |at: usize| u64_at(at).ok_or(ControlError::TooShort);
        let word = |at: usize| u32_at(at).ok_or(ControlError::TooShort);
        if word(216)? != 8192 {
            return Err(ControlError::PageSize(word(216)?));
        }
        let state = match word(16)? {
            1 => DbState::ShutDown,
            2 => DbState::ShutDownInRecovery,
            5 => DbState::InArchiveRecovery,
            n => DbState::Other(n),
        };
        Ok(Control {
            system_identifier: SystemId(field(0)?),
            version,
            state,
            checkpoint: Lsn(field(32)?),
            redo: Lsn(field(40)?),
            timeline: word(48)?,
            min_recovery: Lsn(field(136)?),
            min_recovery_timeline: word(144)?,
            backup_start: Lsn(field(152)?),
            backup_end: Lsn(field(160)?),
            wal_log_hints: b.get(176).is_some_and(|&x| x != 0),
            checksums: word(252)? != 0,
        })
    }

    /// Read `data`'s `global/pg_control`.
    ///
    /// # Errors
    /// As [`Control::parse`], and a file that cannot be read.
    pub fn read(data: &Path) -> Result<Control, ControlError> {
        let path = data.join(CONTROL_FILE);
        let bytes = std::fs::read(&path).map_err(|source| ControlError::Io { path: path.clone(), source })?;
        Control::parse(&bytes)
    }

    /// The system identifier alone: the file's first 8 bytes in every control file version
    /// (also those this sheaf does not otherwise read).
    ///
    /// # Errors
    /// [`ControlError::TooShort`].
    pub fn system_identifier_of(b: &[u8]) -> Result<SystemId, ControlError> {
        let first: [u8; 8] = b.get(..8).and_then(|b| b.try_into().ok()).ok_or(ControlError::TooShort)?;
        Ok(SystemId(u64::from_le_bytes(first)))
    }
}

/// A control file of `version` with the fields set, its CRC made.
#[cfg(test)]
pub(crate) fn sample(version: u32, state: u32, checksums: bool) -> Vec<u8> {
    let mut b = vec![0u8; 8192];
    b[..8].copy_from_slice(&7u64.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[16..20].copy_from_slice(&state.to_le_bytes());
    b[32..40].copy_from_slice(&0x0300_0060u64.to_le_bytes());
    b[40..48].copy_from_slice(&0x0300_0028u64.to_le_bytes());
    b[48..52].copy_from_slice(&2u32.to_le_bytes());
    b[136..144].copy_from_slice(&0x0400_0000u64.to_le_bytes());
    b[144..148].copy_from_slice(&3u32.to_le_bytes());
    b[216..220].copy_from_slice(&8192u32.to_le_bytes());
    b[252..256].copy_from_slice(&u32::from(checksums).to_le_bytes());
    let at = if version == 1800 { 292 } else { 288 };
    let crc = crc32c::crc32c(&b[..at]);
    b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_files_are_read_and_damage_or_unknown_versions_refused() {
        for v in [1300, 1700, 1800] {
            let c = Control::parse(&sample(v, 2, true)).unwrap();
            assert_eq!((c.system_identifier.0, c.state, c.checkpoint, c.redo, c.timeline), (7, DbState::ShutDownInRecovery, Lsn(0x0300_0060), Lsn(0x0300_0028), 2));
            assert_eq!((c.min_recovery, c.min_recovery_timeline, c.checksums, c.wal_log_hints), (Lsn(0x0400_0000), 3, true, false));
        }
        let mut bad = sample(1800, 1, false);
        bad[40] ^= 1;
        assert!(matches!(Control::parse(&bad), Err(ControlError::Crc)));
        assert!(matches!(Control::parse(&sample(1201, 1, false)), Err(ControlError::Version(1201))));
        assert!(matches!(Control::parse(&sample(1800, 1, false)[..100]), Err(ControlError::TooShort)));
        assert_eq!(Control::system_identifier_of(&sample(1201, 1, false)).unwrap(), SystemId(7), "any version");
        assert_eq!(Control::parse(&sample(1300, 6, false)).unwrap().state.to_string(), "in production");
    }
}
