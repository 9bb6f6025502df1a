//! `sheaf verify --repo`'s ledger: what read back whole, and when, so that the next verify reads
//! only what is new or changed (pgBackRest's users asked for it, #2828 and #2668).
//!
//! One object, `verify.ledger`, written after each verify: per backup the name, size and tag
//! ([`Stored::tag`]: the store's ETag, a file's inode and modification time) of each of its
//! stripes with the frames and bytes they held and the chain that was checked whole on them; per
//! archived WAL file its name, size and tag. An object the listing shows with the same size and
//! tag as when it last read back whole is vouched for and not read again; anything else (new, of
//! another size, written again) is read. Only what read back whole goes in: a failure is read
//! again next time. An entry is trusted for `recheck_after` at most (what a disk can rot in place
//! keeps its tag: a periodic `--full` or that limit reads everything again).

use std::collections::BTreeMap;

use super::id::BackupId;
use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::codec::{CodecKind, CodecSpec};
use sheaf_core::storage::Stored;
use sheaf_core::{Error, Result};

/// Where the ledger lives in the repository. A locked repository writes it without a lock
/// ([`super::paths::UNLOCKED`]): it is rewritten at each verify and no restore needs it.
pub const LEDGER: &str = "verify.ledger";

/// One object as it was when it last read back whole.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Seen {
    /// Its size in the store.
    pub size: u64,
    /// Its tag in the store ([`Stored::tag`]).
    pub tag: String,
    /// When it read back whole (seconds since the epoch).
    pub at: i64,
    /// The raw bytes it held (WAL files).
    #[serde(default)]
    pub raw: u64,
}

impl Seen {
    /// What the listing says of an object now, read at `at`.
    pub fn now(o: &Stored, at: i64, raw: u64) -> Seen {
        Seen { size: o.size, tag: o.tag.clone(), at, raw }
    }

    /// Whether `listed` is the object seen, and it was seen at or after `fresh_after`.
    pub fn vouches(&self, listed: &Stored, fresh_after: i64) -> bool {
        !listed.tag.is_empty() && self.size == listed.size && self.tag == listed.tag && self.at >= fresh_after
    }
}

/// A backup whose stripes read back whole.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BackupSeen {
    /// Its stripes, by name.
    pub stripes: BTreeMap<String, Seen>,
    /// Frames read.
    pub frames: u64,
    /// Raw bytes they held.
    pub bytes: u64,
    /// For an incremental: the chain (its record's `chain`) found whole on these stripes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<BackupId>,
}

impl BackupSeen {
    /// Whether every stripe `listed` gives for `stripes` is the one seen (and none is missing).
    pub fn vouches(&self, stripes: &[String], listed: &BTreeMap<String, Stored>, fresh_after: i64) -> bool {
        stripes.len() == self.stripes.len() && stripes.iter().all(|n| matches!((self.stripes.get(n), listed.get(n)), (Some(s), Some(l)) if s.vouches(l, fresh_after)))
    }
}

/// What verify found whole, by backup and WAL file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ledger {
    /// Its format (1).
    pub format: u32,
    /// Backups by id.
    pub backups: BTreeMap<BackupId, BackupSeen>,
    /// Archived WAL files by name.
    pub wal: BTreeMap<String, Seen>,
}

impl Ledger {
    /// The repository's ledger; an empty one where there is none yet.
    ///
    /// # Errors
    /// When it cannot be read or is damaged (the caller reads everything then).
    pub fn read(repo: &Repo) -> Result<Ledger> {
        let bytes = match repo.get_bytes(LEDGER) {
            Ok(b) => b,
            Err(e) if e.kind() == sheaf_core::ErrorKind::Incomplete && !repo.exists(LEDGER)? => return Ok(Ledger::default()),
            Err(e) => return Err(e),
        };
        let l: Ledger = serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{}: not a verify ledger: {e}", repo.describe(LEDGER))))?;
        if l.format != 1 {
            return Err(Error::invalid(format!("{}: a verify ledger of format {}, which this sheaf does not know", repo.describe(LEDGER), l.format)));
        }
        Ok(l)
    }

    /// Store it in place of the last one (compressed, checksummed, encrypted as the repository is).
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn write(&self, repo: &Repo) -> Result<()> {
        let text = serde_json::to_vec(self).map_err(|e| Error::invalid(format!("{LEDGER}: {e}")))?;
        let spec = CodecSpec { kind: CodecKind::Zstd, level: 3, named: None };
        repo.put(LEDGER, &mut &text[..], spec, true, "the verify ledger").map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str, size: u64, tag: &str) -> Stored {
        Stored { name: name.into(), size, modified: 0, tag: tag.into() }
    }

    #[test]
    fn only_the_same_object_seen_recently_enough_is_vouched_for() {
        let seen = Seen { size: 10, tag: "a".into(), at: 100, raw: 0 };
        assert!(seen.vouches(&listed("x", 10, "a"), 50));
        assert!(!seen.vouches(&listed("x", 11, "a"), 50), "another size");
        assert!(!seen.vouches(&listed("x", 10, "b"), 50), "written again");
        assert!(!seen.vouches(&listed("x", 10, "a"), 101), "seen too long ago");
        let blank = Seen { tag: String::new(), ..seen.clone() };
        assert!(!blank.vouches(&listed("x", 10, ""), 0), "a store that gives no tag vouches for nothing");

        let backup = BackupSeen { stripes: [("s1".to_string(), seen.clone()), ("s2".to_string(), seen)].into(), frames: 1, bytes: 1, chain: Vec::new() };
        let both: BTreeMap<String, Stored> = [("s1".to_string(), listed("s1", 10, "a")), ("s2".to_string(), listed("s2", 10, "a"))].into();
        let names = vec!["s1".to_string(), "s2".to_string()];
        assert!(backup.vouches(&names, &both, 0));
        let mut one_gone = both.clone();
        one_gone.remove("s2");
        assert!(!backup.vouches(&names, &one_gone, 0), "a stripe missing");
        assert!(!backup.vouches(&names[..1], &both, 0), "the record names other stripes");
    }
}
