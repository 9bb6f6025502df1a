//! A repository: a folder or an object prefix where sheaf lays out backups and archived files
//! itself, written only through the [`Store`] (so the same code runs on disks and buckets).
//!
//! ```text
//!  REPO/repo.json            what it holds (kind, system identifier, ...), written once at init
//!  REPO/backups/ID.json      a finished backup's record; published after every stripe is
//!  REPO/backups/ID.lock      a backup being written (host, pid, start), removed when it ends
//!  REPO/backups/ID/ID_k.sheaf  its stripes
//!  REPO/wal/TTTTTTTT/NAME.wal  archived WAL files by timeline (segments, .history, .backup, .partial)
//! ```
//! Everything but stripes is a [`crate::blob`]: checksummed, published whole. What a record means
//! is the caller's business (PostgreSQL's lives in sheaf-pg); this module knows places and bytes.
//!
//! An encrypted repository is one whose `repo.json` is encrypted. Its keys are in `keys/ID.key`
//! ([`crate::keyring`]): any one of them opens the key ring, whose newest generation every object
//! and backup written from then on uses, each with a data key of its own. So a passphrase is
//! stretched once per process, and a wrong one is refused before anything is written. A
//! repository made before key rings has no `keys/`: `repo.json`'s key block names its one KDF
//! (a passphrase's salt and cost, or a key file), which everything in it used, until
//! `sheaf key migrate` adopts it.

use std::io::Read;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::blob::{read_blob, write_blob, BlobInfo};
use crate::codec::{CodecKind, CodecSpec};
use crate::crypto::{Encryption, Kdf, Keys};
use crate::error::{Error, ErrorKind, Result};
use crate::keyring::{KeyRecord, Ring, KEYS_DIR, KEY_SUFFIX};
use crate::storage::{retention_of, Location, ObjectLock, ObjectVersion, Retention, Schemes, Store, Stored, WriteLock, WriteOptions};

/// The repository's description, `repo.json`.
pub const META: &str = "repo.json";

/// A repository at a place. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Repo {
    store: Arc<dyn Store>,
    /// Names inside the store start with `root/` (empty for a bucket's top).
    root: String,
    shown: String,
    keys: Option<Arc<Keys>>,
    /// The repository's KDF once read from `repo.json` (`None`: not encrypted).
    kdf: Arc<OnceLock<Option<Kdf>>>,
    /// The lock its new objects carry, once set ([`Repo::lock_writes`]).
    lock: Arc<OnceLock<WriteLock>>,
    /// Why this process may not write here, once asked ([`Repo::check_writer`]); `None`: it may.
    refusal: Arc<OnceLock<Option<String>>>,
    /// The key ring the keys opened, once asked ([`Repo::unlock`]).
    unlocked: Arc<OnceLock<Unlocking>>,
}

/// What opening the key ring gave, kept for the process: the ring (none without keys or key
/// records), or why it did not open.
type Unlocking = std::result::Result<Option<Arc<Unlocked>>, (ErrorKind, String)>;

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

impl Repo {
    /// The repository at `text`: a folder, or `s3://BUCKET/PREFIX` (through `schemes`). Nothing is
    /// read yet.
    ///
    /// # Errors
    /// An empty or unusable location, `nul`.
    pub fn at(text: &str, schemes: &dyn Schemes) -> Result<Repo> {
        let trimmed = text.trim_end_matches('/');
        if trimmed.is_empty() {
            return Err(Error::invalid(
                "an empty repository location: give a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX or gs://BUCKET/PREFIX (--repo, SHEAF_REPO or repo in the config file)",
            ));
        }
        let meta = Location::parse(&format!("{trimmed}/{META}"), schemes)?;
        if meta.is_null() {
            return Err(Error::invalid("nul cannot hold a repository: give a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX or gs://BUCKET/PREFIX"));
        }
        let name = meta.name();
        let root = name.strip_suffix(META).unwrap_or(name).trim_end_matches('/').to_string();
        let shown = meta.display().strip_suffix(&format!("/{META}")).map(str::to_string).unwrap_or_else(|| trimmed.to_string());
        Ok(Repo {
            store: meta.store().clone(),
            root,
            shown,
            keys: None,
            kdf: Arc::new(OnceLock::new()),
            lock: Arc::new(OnceLock::new()),
            refusal: Arc::new(OnceLock::new()),
            unlocked: Arc::new(OnceLock::new()),
        })
    }

    /// This repository, read and written with `keys` (its key file or passphrase), if any.
    pub fn with_keys(mut self, keys: Option<Arc<Keys>>) -> Repo {
        self.keys = keys;
        self
    }

    /// The keys given, with the repository's key ring opened into them (if it has one and they
    /// open it; if not, what then cannot be read says why).
    pub fn keys(&self) -> Option<&Keys> {
        if self.keys.is_some() {
            let _ = self.unlock();
        }
        self.keys.as_deref()
    }

    /// The key records, as stored (no secret needed: they hold only public values).
    ///
    /// # Errors
    /// When the store cannot be listed or a record read; a damaged record.
    pub fn key_records(&self) -> Result<Vec<KeyRecord>> {
        let mut out = Vec::new();
        for o in self.list(KEYS_DIR)?.into_iter().filter(|o| o.name.ends_with(KEY_SUFFIX)) {
            let src = self.store.open(&self.name(&o.name))?;
            let mut text = Vec::new();
            read_blob(src.as_ref(), None, &mut |c| {
                text.extend_from_slice(c);
                if text.len() > 1 << 20 {
                    return Err(Error::corrupt(format!("{}: a key record over 1 MiB (damaged, or not a key record)", self.describe(&o.name))));
                }
                Ok(())
            })?;
            let r: KeyRecord = serde_json::from_slice(&text).map_err(|e| Error::corrupt(format!("{}: not a key record: {e}", self.describe(&o.name))))?;
            if r.name() != o.name {
                return Err(Error::corrupt(format!("{}: the record of key {} under another name (moved by hand?)", self.describe(&o.name), r.id)));
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Write a key record (whole, never locked: a removal or rotation replaces it).
    ///
    /// # Errors
    /// Write errors; [`ErrorKind::Target`] when it exists and `overwrite` is false.
    pub fn put_key_record(&self, r: &KeyRecord, overwrite: bool) -> Result<()> {
        let rel = r.name();
        self.prepare(&rel)?;
        let text = serde_json::to_vec_pretty(r).map_err(|e| Error::invalid(format!("{rel}: {e}")))?;
        let opts = WriteOptions { overwrite, expected_bytes: 0, lock: None };
        let sink = self.store.create(&self.name(&rel), &opts).map_err(|e| self.writable_hint(&rel, e))?;
        write_blob(sink, &mut &text[..], CodecSpec { kind: CodecKind::None, level: 0, named: None }, &rel, None).map(drop).map_err(|e| self.writable_hint(&rel, e))
    }

    /// Open the key ring with the keys given, once per process: `None` without keys or for a
    /// repository without key records (not encrypted, or encrypted before key rings).
    ///
    /// # Errors
    /// [`ErrorKind::Key`] when no record opens with the keys given; reading the records.
    pub fn unlock(&self) -> Result<Option<Arc<Unlocked>>> {
        let Some(keys) = self.keys.as_deref() else { return Ok(None) };
        let r = self.unlocked.get_or_init(|| {
            let opened = self.open_ring(keys);
            if let Err(e) = &opened {
                keys.note_ring_failure(Error::new(e.kind(), e.message()));
            }
            opened.map_err(|e| (e.kind(), e.message().to_string()))
        });
        r.clone().map_err(|(kind, message)| Error::new(kind, message))
    }

    fn open_ring(&self, keys: &Keys) -> Result<Option<Arc<Unlocked>>> {
        let records = self.key_records()?;
        if records.is_empty() {
            return Ok(None);
        }
        // Up-to-date records first, so that a key a rotation reached is the one that opens.
        let mut order: Vec<&KeyRecord> = records.iter().collect();
        order.sort_by_key(|r| std::cmp::Reverse(r.generations));
        for r in order {
            if let Some(ring) = r.open(keys)? {
                keys.install_ring(ring.entries());
                return Ok(Some(Arc::new(Unlocked { ring, opened_by: r.id.clone(), records: records.clone() })));
            }
        }
        let kind = match keys.kind() {
            crate::crypto::SecretKind::Key => "key",
            crate::crypto::SecretKind::Passphrase => "passphrase",
        };
        let same: Vec<&str> = records.iter().filter(|r| r.secret_kind() == keys.kind()).map(|r| r.id.as_str()).collect();
        Err(Error::new(
            ErrorKind::Key,
            if same.is_empty() {
                format!(
                    "repository {}: none of its {} keys is a {kind} ({}): give one of its keys (`sheaf key list` names them)",
                    self.shown,
                    records.len(),
                    records.iter().map(crate::keyring::describe).collect::<Vec<_>>().join(", ")
                )
            } else {
                format!(
                    "repository {}: wrong {kind}: it opens none of its keys ({}); `sheaf key list` names them",
                    self.shown,
                    records.iter().map(crate::keyring::describe).collect::<Vec<_>>().join(", ")
                )
            },
        ))
    }

    /// Set what [`Repo::unlock`] gives, after a key operation changed the ring or the records.
    fn set_unlocked(&self, u: Unlocked) {
        if let Some(keys) = self.keys.as_deref() {
            keys.install_ring(u.ring.entries());
        }
        let _ = self.unlocked.set(Ok(Some(Arc::new(u))));
    }

    /// What new objects and backups are encrypted with: `None` for a repository that is not
    /// encrypted. Reads (and checks the keys against) `repo.json` once.
    ///
    /// # Errors
    /// [`ErrorKind::Key`] for an encrypted repository and no keys or the wrong ones, and for keys
    /// given to one that is not encrypted (nothing would be); reading `repo.json`.
    pub fn encryption(&self) -> Result<Option<Encryption>> {
        let kdf = match self.kdf.get() {
            Some(k) => *k,
            None => {
                let src = self.store.open(&self.name(META))?;
                let info = crate::blob::blob_info(src.as_ref())?;
                if let (Some(block), Some(keys)) = (&info.key_block, self.keys()) {
                    if matches!(block.kdf, Kdf::Ring { .. }) {
                        self.unlock()?;
                    }
                    keys.open(block).map_err(|e| e.context(format!("repository {}", self.shown)))?;
                }
                *self.kdf.get_or_init(|| info.key_block.map(|b| b.kdf))
            }
        };
        match (kdf, &self.keys) {
            (Some(kdf), Some(keys)) => match self.unlock()? {
                Some(u) => {
                    u.check_current()?;
                    Ok(Some(Encryption { keys: keys.clone(), kdf: u.ring.current() }))
                }
                None if matches!(kdf, Kdf::Ring { .. }) => Err(Error::new(
                    ErrorKind::Key,
                    format!("the repository {} is encrypted with a key ring, and its key records ({KEYS_DIR}) are gone: restore them from a copy (or a bucket's versions: `sheaf undelete`)", self.shown),
                )),
                None => Ok(Some(Encryption { keys: keys.clone(), kdf })),
            },
            (None, None) => Ok(None),
            (Some(kdf), None) => Err(Error::new(
                ErrorKind::Key,
                format!("the repository {} is encrypted: give {}", self.shown, kdf.needs()),
            )),
            (None, Some(_)) => Err(Error::new(
                ErrorKind::Key,
                format!(
                    "the repository {} is not encrypted, and a key or passphrase was given: nothing would be encrypted; drop it (--encryption-key-file, --passphrase-file, SHEAF_PASSPHRASE), or make an encrypted repository with `sheaf init` and one of them",
                    self.shown
                ),
            )),
        }
    }

    /// This repository with every byte written to it or read from it held to `limit`
    /// (`--max-rate`).
    pub fn throttled(mut self, limit: &Arc<crate::storage::RateLimit>) -> Repo {
        self.store = Arc::new(crate::storage::Throttled::new(self.store, limit.clone()));
        self
    }

    /// Where it is, for messages (a path made absolute, or a URL; never a secret).
    pub fn display(&self) -> &str {
        &self.shown
    }

    /// The store's name of `rel`.
    pub fn name(&self, rel: &str) -> String {
        if self.root.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.root)
        }
    }

    /// `rel` as a [`Location`] (for stripes), written with the repository's lock, if any.
    pub fn location(&self, rel: &str) -> Location {
        Location::new(self.store.clone(), self.name(rel)).with_lock(self.object_lock(rel))
    }

    /// The lock an object `rel` is written with: the repository's ([`Repo::lock_writes`]), but
    /// for the names it spares.
    fn object_lock(&self, rel: &str) -> Option<ObjectLock> {
        self.lock.get().and_then(|l| l.for_name(rel))
    }

    /// The store's retention, or the refusal of a store that has none.
    fn retention(&self, rel: &str) -> Result<&dyn Retention> {
        retention_of(self.store.as_ref(), &self.name(rel))
    }

    /// Make sure `rel` can be created (its folders, on a filesystem).
    ///
    /// # Errors
    /// When a folder cannot be made.
    pub fn prepare(&self, rel: &str) -> Result<()> {
        // Only `init` (writing repo.json) may make the repository's own folder.
        let below = (rel != META && !self.root.is_empty()).then_some(self.root.as_str());
        self.check_writer()?;
        self.store.prepare(&self.name(rel), below).map_err(|e| self.writable_hint(rel, e))
    }

    /// Refuse to change a repository on this host's filesystem that belongs to another user than
    /// the one sheaf runs as, naming both, before anything is written: what one user writes into
    /// another's folders the owner cannot remove later (an `expire` that fails, and running it
    /// again does not mend), and root writing into a folder another user controls can be led by
    /// a link to write anywhere. Asked once per process; buckets have no owner to compare.
    ///
    /// # Errors
    /// [`ErrorKind::Denied`], naming the repository, its owner, this user and the fix.
    pub fn check_writer(&self) -> Result<()> {
        let refusal = self.refusal.get_or_init(|| {
            if !self.store.capabilities().files {
                return None;
            }
            let root = std::path::Path::new(if self.root.is_empty() { "." } else { &self.root });
            // Not made yet (init makes it, as ours), or gone: nothing to compare.
            let (owner, at) = crate::host::owner_of(root)?;
            let me = crate::host::effective_ids().0;
            if at != root || owner == me {
                return None;
            }
            let (owner_name, my_name) = (crate::host::user_name(owner), crate::host::user_name(me));
            let hazard = if me == 0 {
                format!("files root writes there {owner_name} could not remove later (expire would fail), and a link {owner_name} left in it could lead root to write anywhere")
            } else {
                format!("files {my_name} writes there {owner_name} could not remove later (expire would fail)")
            };
            Some(format!(
                "the repository {} belongs to {owner_name} (uid {owner}), and sheaf runs as {my_name} (uid {me}): {hazard}. Run sheaf as {owner_name} (sudo -u {owner_name} sheaf ...), the user PostgreSQL's archive_command runs as; or, if {my_name} is to own it, chown -R {my_name} {}",
                self.shown,
                crate::text::shell_quote(&self.shown),
            ))
        });
        match refusal {
            Some(why) => Err(Error::new(ErrorKind::Denied, why.clone())),
            None => Ok(()),
        }
    }

    /// A permission error on `rel`, naming the file, its owner, who sheaf runs as, and the fix.
    fn writable_hint(&self, rel: &str, e: Error) -> Error {
        let denied = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>()).is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied);
        if !denied {
            return e;
        }
        let me = crate::host::effective_ids().0;
        let my_name = crate::host::user_name(me);
        let name = self.name(rel);
        let hint = match crate::host::owner_of(std::path::Path::new(&name)) {
            Some((uid, at)) if uid != me => {
                let owner = crate::host::user_name(uid);
                format!(
                    "{} belongs to {owner} (uid {uid}), not to {my_name} (uid {me}), who runs sheaf: run sheaf as {owner} (sudo -u {owner} sheaf ...), so that every file in the repository is {owner}'s; for archive_command that is the user PostgreSQL runs as",
                    at.display()
                )
            }
            Some((_, at)) => format!(
                "{} is {my_name}'s (uid {me}), but the repository {} is not writable by this user; for archive_command that is the user PostgreSQL runs as: give it write access (chmod u+w, or a group with write permission)",
                at.display(),
                self.shown
            ),
            None => format!("the repository {} is not writable by this user ({my_name}, uid {me}); for archive_command that is the user PostgreSQL runs as: give it write access (chown -R, or a group with write permission)", self.shown),
        };
        Error::new(e.kind(), format!("{}: {hint}", e.message()))
    }

    /// Whether `rel` exists.
    ///
    /// # Errors
    /// When the store cannot be asked.
    pub fn exists(&self, rel: &str) -> Result<bool> {
        self.store.exists(&self.name(rel))
    }

    /// Store what `content` yields as `rel`, compressed with `spec`, checksummed, published whole.
    ///
    /// # Errors
    /// [`ErrorKind::Target`] when it exists and `overwrite` is false; write errors.
    pub fn put(&self, rel: &str, content: &mut dyn Read, spec: CodecSpec, overwrite: bool, what: &str) -> Result<BlobInfo> {
        self.prepare(rel)?;
        let enc = self.encryption()?;
        let opts = WriteOptions { overwrite, expected_bytes: 0, lock: self.object_lock(rel) };
        let sink = self.store.create(&self.name(rel), &opts).map_err(|e| self.writable_hint(rel, e))?;
        write_blob(sink, content, spec, what, enc.as_ref()).map_err(|e| self.writable_hint(rel, e))
    }

    /// Store `value` as JSON at `rel`.
    ///
    /// # Errors
    /// As [`Repo::put`].
    pub fn put_json<T: Serialize>(&self, rel: &str, value: &T, overwrite: bool) -> Result<()> {
        let text = serde_json::to_vec_pretty(value).map_err(|e| Error::invalid(format!("{rel}: {e}")))?;
        let plain = CodecSpec { kind: CodecKind::None, level: 0, named: None };
        self.put(rel, &mut &text[..], plain, overwrite, rel).map(drop)
    }

    /// Read the JSON at `rel`, checked.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when missing; [`ErrorKind::Corrupt`] when damaged or not what was
    /// expected.
    pub fn get_json<T: DeserializeOwned>(&self, rel: &str) -> Result<T> {
        let (text, info) = self.read_small(rel)?;
        if rel == META {
            // Read (and its key checked) already: what `encryption` would read again.
            let _ = self.kdf.set(info.key_block.map(|b| b.kdf));
        }
        serde_json::from_slice(&text).map_err(|e| Error::corrupt(format!("{}: not the record expected: {e}", self.describe(rel))))
    }

    /// The content of `rel`, a small object (a record, a summary, a timeline history), checked.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when missing; [`ErrorKind::Corrupt`] when damaged or over 64 MiB.
    pub fn get_bytes(&self, rel: &str) -> Result<Vec<u8>> {
        self.read_small(rel).map(|(bytes, _)| bytes)
    }

    fn read_small(&self, rel: &str) -> Result<(Vec<u8>, crate::blob::BlobInfo)> {
        let src = self.store.open(&self.name(rel))?;
        let mut bytes = Vec::new();
        let info = read_blob(src.as_ref(), self.keys(), &mut |c| {
            bytes.extend_from_slice(c);
            if bytes.len() > 64 << 20 {
                return Err(Error::corrupt(format!("{}: a small object over 64 MiB (damaged?)", self.describe(rel))));
            }
            Ok(())
        })?;
        Ok((bytes, info))
    }

    /// Open `rel` for reading.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when missing.
    pub fn open(&self, rel: &str) -> Result<Box<dyn crate::storage::StripeSource>> {
        self.store.open(&self.name(rel))
    }

    /// Published objects under `rel_prefix`, names relative to the repository, sorted.
    ///
    /// # Errors
    /// When the store cannot be listed.
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<Stored>> {
        let skip = if self.root.is_empty() { 0 } else { self.root.len() + 1 };
        Ok(self
            .store
            .list(&self.name(rel_prefix))?
            .into_iter()
            .filter_map(|o| Some(Stored { name: o.name.get(skip..)?.to_string(), size: o.size, modified: o.modified, tag: o.tag }))
            .collect())
    }

    /// Remove `rel` (missing is fine).
    ///
    /// # Errors
    /// When it exists and cannot be removed.
    pub fn delete(&self, rel: &str) -> Result<()> {
        self.check_writer()?;
        self.store.delete(&self.name(rel))
    }

    /// Remove the folder `rel` if empty (filesystems).
    pub fn prune(&self, rel: &str) {
        self.store.prune(&self.name(rel));
    }

    /// `rel` as the user reads it.
    pub fn describe(&self, rel: &str) -> String {
        self.store.describe(&self.name(rel))
    }

    /// Whether the place keeps objects from being deleted (S3 Object Lock on the bucket).
    ///
    /// # Errors
    /// A store that has no such thing (naming what to use); when it cannot be asked.
    pub fn lock_enabled(&self) -> Result<bool> {
        self.retention("")?.lock_enabled()
    }

    /// From now on every object written here carries `lock` (but for the names it spares).
    ///
    /// # Errors
    /// A store that cannot lock objects.
    pub fn lock_writes(&self, lock: WriteLock) -> Result<()> {
        self.retention("")?;
        let _ = self.lock.set(lock);
        Ok(())
    }

    /// The lock new objects carry, if any.
    pub fn write_lock(&self) -> Option<&WriteLock> {
        self.lock.get()
    }

    /// Keep `rel` locked until `until` (seconds since the epoch).
    ///
    /// # Errors
    /// A store that cannot lock objects; the server's refusal.
    pub fn extend_lock(&self, rel: &str, mode: crate::storage::LockMode, until: i64) -> Result<()> {
        self.retention(rel)?.extend_lock(&self.name(rel), mode, until)
    }

    /// The lock `rel` carries, if any.
    ///
    /// # Errors
    /// A store that cannot lock objects; when it cannot be asked.
    pub fn lock_of(&self, rel: &str) -> Result<Option<(crate::storage::LockMode, i64)>> {
        self.retention(rel)?.lock_of(&self.name(rel))
    }

    /// Every version of the objects under `rel` (names relative to the repository).
    ///
    /// # Errors
    /// A store that keeps no versions; when it cannot be listed.
    pub fn versions(&self, rel: &str) -> Result<Vec<ObjectVersion>> {
        let strip = if self.root.is_empty() { 0 } else { self.root.len() + 1 };
        Ok(self
            .retention(rel)?
            .versions(&self.name(rel))?
            .into_iter()
            .filter_map(|v| {
                let name = v.name.get(strip..).filter(|n| !n.is_empty())?.to_string();
                Some(ObjectVersion { name, ..v })
            })
            .collect())
    }

    /// Remove version `version` of `rel` for good.
    ///
    /// # Errors
    /// A store that keeps no versions; the server's refusal (a locked version).
    pub fn delete_version(&self, rel: &str, version: &str) -> Result<()> {
        self.retention(rel)?.delete_version(&self.name(rel), version)
    }

    /// Read `repo.json`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when there is no repository here, naming how to make one.
    pub fn meta<T: DeserializeOwned>(&self) -> Result<T> {
        match self.get_json(META) {
            Err(e) if e.kind() == ErrorKind::Incomplete && !self.exists(META).unwrap_or(true) => Err(Error::invalid(format!(
                "there is no sheaf repository at {}: create one with `sheaf init --repo {} postgres://...`, or check --repo (or SHEAF_REPO, or repo in the config file)",
                self.shown, self.shown
            ))),
            r => r,
        }
    }

    /// Create the repository: write `repo.json`, refusing a place that already holds one.
    ///
    /// # Errors
    /// [`ErrorKind::TargetNotEmpty`] when a repository (or anything else) is there already; write
    /// errors, naming the place.
    pub fn init<T: Serialize>(&self, meta: &T) -> Result<()> {
        if self.exists(META)? {
            return Err(Error::new(ErrorKind::TargetNotEmpty, format!("{} already holds a sheaf repository: use it as it is, or choose another place", self.shown)));
        }
        let other = self.list("")?;
        if let Some(o) = other.first() {
            return Err(Error::new(
                ErrorKind::TargetNotEmpty,
                format!("{} is not empty (it holds {}, and {} more): a repository needs a place of its own", self.shown, o.name, other.len() - 1),
            ));
        }
        // With keys, the first key's record is written first, then repo.json under the ring's
        // first generation.
        let kdf = match self.keys.as_deref() {
            None => None,
            Some(keys) => {
                // The repository's own folder is made as for repo.json (only init makes it).
                self.prepare(META)?;
                let ring = Ring::new()?;
                let record = KeyRecord::seal(keys, &ring, crate::time::now_ms() / 1000, &crate::host::who())?;
                self.put_key_record(&record, false).map_err(|e| e.context(format!("cannot create a repository at {}", self.shown)))?;
                let kdf = ring.current();
                self.set_unlocked(Unlocked { ring, opened_by: record.id.clone(), records: vec![record] });
                Some(kdf)
            }
        };
        let _ = self.kdf.set(kdf);
        let written = self.put_json(META, meta, false).map_err(|e| e.context(format!("cannot create a repository at {}", self.shown)));
        if written.is_err() {
            if let Some(Ok(Some(u))) = self.unlocked.get() {
                let _ = self.delete(&u.records[0].name());
            }
        }
        written
    }

    /// Create a repository as sheaf did before key rings: everything under one KDF of the
    /// secret's. For tests of `sheaf key migrate`.
    ///
    /// # Errors
    /// As [`Repo::init`].
    #[doc(hidden)]
    pub fn init_without_ring<T: Serialize>(&self, meta: &T) -> Result<()> {
        let kdf = self.keys.as_ref().map(|k| k.fresh_kdf()).transpose()?;
        let _ = self.kdf.set(kdf);
        let _ = self.unlocked.set(Ok(None));
        self.put_json(META, meta, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalOnly;

    #[test]
    fn another_user_s_repository_is_refused_before_anything_is_written() {
        if !crate::host::is_root() {
            crate::testing::missing("root, to give a folder to another user");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let place = d.path().join("repo");
        Repo::at(place.to_str().unwrap(), &LocalOnly).unwrap().init(&serde_json::json!({"system_identifier": "7"})).unwrap();
        std::os::unix::fs::chown(&place, Some(65534), Some(65534)).unwrap();
        let repo = Repo::at(place.to_str().unwrap(), &LocalOnly).unwrap();
        let e = repo.put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Denied);
        let owner = crate::host::user_name(65534);
        for part in [format!("belongs to {owner} (uid 65534)"), "sheaf runs as root (uid 0)".into(), format!("sudo -u {owner} sheaf"), "chown -R root".into()] {
            assert!(e.to_string().contains(&part), "{part}: {e}");
        }
        assert_eq!(repo.delete(META).unwrap_err().kind(), ErrorKind::Denied);
        assert!(place.join(META).exists() && !place.join("wal").exists(), "nothing written, nothing removed");
        // Reading is no hazard.
        assert_eq!(repo.meta::<serde_json::Value>().unwrap()["system_identifier"], "7");
        // Given back to us, it is writable again (a new process asks again).
        std::os::unix::fs::chown(&place, Some(0), Some(0)).unwrap();
        Repo::at(place.to_str().unwrap(), &LocalOnly).unwrap().put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap();
    }

    #[test]
    fn a_repository_is_made_once_and_keeps_records() {
        let d = tempfile::tempdir().unwrap();
        let place = d.path().join("repo");
        let repo = Repo::at(place.to_str().unwrap(), &LocalOnly).unwrap();
        let e = repo.meta::<serde_json::Value>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("sheaf init"), "{e}");
        repo.init(&serde_json::json!({"system_identifier": "7"})).unwrap();
        let again = repo.init(&serde_json::json!({})).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::TargetNotEmpty);
        let m: serde_json::Value = repo.meta().unwrap();
        assert_eq!(m["system_identifier"], "7");
        repo.put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap();
        repo.put_json("backups/x.json", &serde_json::json!({"id": "x"}), false).unwrap();
        let names: Vec<String> = repo.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(names, vec!["backups/x.json", "repo.json", "wal/00000001/a.wal"]);
        assert!(repo.put("wal/00000001/a.wal", &mut &b"abd"[..], CodecSpec::default(), false, "a").is_err(), "no silent replace");
        repo.delete("wal/00000001/a.wal").unwrap();
        repo.prune("wal/00000001");
        assert!(!place.join("wal/00000001").exists());

        // A repository moved away while open is not made again where it was.
        let moved = d.path().join("moved");
        std::fs::rename(&place, &moved).unwrap();
        let e = repo.put("wal/00000002/b.wal", &mut &b"abc"[..], CodecSpec::default(), false, "b").unwrap_err();
        assert!(e.to_string().contains("is gone"), "{e}");
        assert!(!place.exists(), "the old place stays empty");

        // Another place with something in it is not taken for a repository.
        let busy = d.path().join("busy");
        std::fs::create_dir(&busy).unwrap();
        std::fs::write(busy.join("mine.txt"), b"x").unwrap();
        let e = Repo::at(busy.to_str().unwrap(), &LocalOnly).unwrap().init(&serde_json::json!({})).unwrap_err();
        assert!(e.to_string().contains("mine.txt"), "{e}");
    }
}
