//! A repository's key ring, opened with the secret given: the records in `keys/` are tried, the
//! up-to-date ones first, and the first that opens with the secret gives the ring
//! ([`crate::keyring`]), whose master keys the secret then holds for every read.

use crate::crypto::{Keys, SecretKind};
use crate::error::{Error, ErrorKind, Result};
use crate::keyring::{KeyRecord, Ring};

/// A repository's key ring, opened.
#[derive(Debug)]
pub struct Unlocked {
    /// The ring.
    pub ring: Ring,
    /// The id of the record that opened it.
    pub opened_by: String,
    /// Every key's record, by id.
    pub records: Vec<KeyRecord>,
}

impl Unlocked {
    /// The newest generation any record wraps: more than this ring's after a rotation cut short.
    pub fn newest(&self) -> u32 {
        self.records.iter().map(|r| r.generations).max().unwrap_or(0)
    }

    /// Refuse to write with a ring a rotation left behind: what others write would not open
    /// with this key, nor this key's with theirs.
    ///
    /// # Errors
    /// [`ErrorKind::Key`], naming the keys that are up to date and the fix.
    pub fn check_current(&self) -> Result<()> {
        if self.newest() <= self.ring.generations() {
            return Ok(());
        }
        let ahead: Vec<&str> = self.records.iter().filter(|r| r.generations == self.newest()).map(|r| r.id.as_str()).collect();
        Err(Error::new(
            ErrorKind::Key,
            format!(
                "the key given (record {}) wraps key ring generation {}, and key {} generation {}: a `sheaf key rotate` was cut short; run it again with {} (reading is fine meanwhile)",
                self.opened_by,
                self.ring.generations(),
                ahead.join(", "),
                self.newest(),
                if ahead.len() == 1 { "that key" } else { "one of those keys" }
            ),
        ))
    }
}

/// Open the ring of `records` (the repository `shown`'s) with `keys`, which from then on hold its
/// master keys: `None` where there are no records (not encrypted, or encrypted before key rings).
///
/// # Errors
/// [`ErrorKind::Key`] when no record opens with the keys given, naming the keys there are.
pub fn open(records: Vec<KeyRecord>, keys: &Keys, shown: &str) -> Result<Option<Unlocked>> {
    if records.is_empty() {
        return Ok(None);
    }
    // Up-to-date records first, so that a key a rotation reached is the one that opens.
    let mut order: Vec<&KeyRecord> = records.iter().collect();
    order.sort_by_key(|r| std::cmp::Reverse(r.generations));
    for r in order {
        if let Some(ring) = r.open(keys)? {
            keys.install_ring(ring.entries());
            let opened_by = r.id.clone();
            return Ok(Some(Unlocked { ring, opened_by, records }));
        }
    }
    let kind = match keys.kind() {
        SecretKind::Key => "key",
        SecretKind::Passphrase => "passphrase",
    };
    let named = records.iter().map(crate::keyring::describe).collect::<Vec<_>>().join(", ");
    let e = Error::new(
        ErrorKind::Key,
        if !records.iter().any(|r| r.secret_kind() == keys.kind()) {
            format!("repository {shown}: none of its {} keys is a {kind} ({named}): give one of its keys (`sheaf key list` names them)", records.len())
        } else {
            format!("repository {shown}: wrong {kind}: it opens none of its keys ({named}); `sheaf key list` names them")
        },
    );
    keys.note_ring_failure(Error::new(e.kind(), e.message()));
    Err(e)
}
