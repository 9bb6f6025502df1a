//! An opened repository ([`Repo`]): what [`super::Place::open`] resolved, held as values: the
//! description (`repo.json`, as the caller's [`Meta`] type), the keys and the opened key ring,
//! whether this process may write, and the store every object goes through (with its lock, for a
//! locked repository). Nothing here is resolved later or set as a side effect.

use std::io::Read;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::place::Place;
use super::ring::Unlocked;
use super::META;
use crate::blob::write_blob;
use crate::blob::BlobInfo;
use crate::codec::{CodecKind, CodecSpec};
use crate::crypto::{Encryption, Kdf, Keys};
use crate::error::{Error, ErrorKind, Result};
use crate::keyring::{KeyRecord, Ring, KEYS_DIR};
use crate::storage::{retention_of, Location, LockMode, Store, Stored, StripeSource, WriteLock};
use crate::storage::{Locked, Prefixed, WriteOptions};

/// What a repository's `repo.json` holds, as its owner (sheaf-pg) types it.
pub trait Meta: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Refuse a repository this program cannot use (of another kind, a newer format), naming it
    /// as `place`.
    ///
    /// # Errors
    /// Why it cannot be used, and what to do.
    fn check(&self, _place: &str) -> Result<()> {
        Ok(())
    }

    /// The lock every object written from `now` (seconds since the epoch) carries, for a locked
    /// repository.
    fn lock(&self, _now: i64) -> Option<WriteLock> {
        None
    }
}

/// Any JSON: a repository whose description nobody types (tests, tools).
impl Meta for serde_json::Value {}

/// An opened repository. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Repo<M> {
    place: Place,
    /// The place's store, with the repository's lock around it when it has one.
    store: Arc<dyn Store>,
    meta: M,
    keys: Option<Arc<Keys>>,
    ring: Option<Arc<Unlocked>>,
    /// `repo.json`'s KDF (`None`: not encrypted).
    kdf: Option<Kdf>,
    /// Why this process may not write here (another user owns it); `None`: it may.
    refusal: Option<String>,
    lock: Option<WriteLock>,
    /// The whole repository when this is a part of it ([`Repo::part`]).
    whole: Option<Arc<Repo<M>>>,
}

impl<M: Meta> Repo<M> {
    /// What `repo.json` says.
    pub fn meta(&self) -> &M {
        &self.meta
    }

    /// The part of this repository under `prefix` (a folder of its root, without a trailing
    /// `/`), seen as a repository of its own described by `meta`: every name relative to that
    /// folder, written with the same keys, lock and owner. A part of a part is a part of the
    /// whole.
    pub fn part(&self, prefix: &str, meta: M) -> Repo<M> {
        let whole = self.root();
        let store: Arc<dyn Store> = Arc::new(Prefixed::new(whole.store.clone(), prefix));
        Repo { store, meta, whole: Some(Arc::new(whole.clone())), ..whole }
    }

    /// The whole repository this is a part of ([`Repo::part`]); itself when it is whole.
    pub fn root(&self) -> Repo<M> {
        match &self.whole {
            Some(w) => (**w).clone(),
            None => self.clone(),
        }
    }

    /// Where it is, unopened (to open it again, or for what needs no opening).
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// Where it is, for messages (a path made absolute, or a URL; never a secret).
    pub fn display(&self) -> &str {
        self.place.display()
    }

    /// `rel` as the user reads it.
    pub fn describe(&self, rel: &str) -> String {
        self.store.describe(rel)
    }

    /// The keys given, holding the repository's key ring (if it has one).
    pub fn keys(&self) -> Option<&Keys> {
        self.keys.as_deref()
    }

    /// The key ring the keys opened (`None`: not encrypted, or encrypted before key rings).
    pub fn ring(&self) -> Option<&Unlocked> {
        self.ring.as_deref()
    }

    /// What new objects and backups are encrypted with: `None` for a repository that is not
    /// encrypted.
    ///
    /// # Errors
    /// [`ErrorKind::Key`] for keys given to a repository that is not encrypted (nothing would
    /// be), and for a key ring a rotation left behind.
    pub fn encryption(&self) -> Result<Option<Encryption>> {
        match (self.kdf, &self.keys) {
            (Some(kdf), Some(keys)) => match &self.ring {
                Some(u) => {
                    u.check_current()?;
                    Ok(Some(Encryption { keys: keys.clone(), kdf: u.ring.current() }))
                }
                None => Ok(Some(Encryption { keys: keys.clone(), kdf })),
            },
            (None, None) => Ok(None),
            (Some(kdf), None) => Err(Error::new(ErrorKind::Key, format!("the repository {} is encrypted: give {}", self.display(), kdf.needs()))),
            (None, Some(_)) => Err(Error::new(
                ErrorKind::Key,
                format!(
                    "the repository {} is not encrypted, and a key or passphrase was given: nothing would be encrypted; drop it (--encryption-key-file, --passphrase-file, SHEAF_PASSPHRASE), or make an encrypted repository with `sheaf init` and one of them",
                    self.display()
                ),
            )),
        }
    }

    /// `rel` as a [`Location`] (for stripes), written with the repository's lock, if any.
    pub fn location(&self, rel: &str) -> Location {
        Location::new(self.store.clone(), rel.to_string())
    }

    /// Refuse to change a repository on this host's filesystem that belongs to another user than
    /// the one sheaf runs as (asked when it was opened).
    ///
    /// # Errors
    /// [`ErrorKind::Denied`], naming the repository, its owner, this user and the fix.
    pub fn check_writer(&self) -> Result<()> {
        match &self.refusal {
            Some(why) => Err(Error::new(ErrorKind::Denied, why.clone())),
            None => Ok(()),
        }
    }

    /// Make sure `rel` can be created (its folders, on a filesystem).
    ///
    /// # Errors
    /// Another user's repository; when a folder cannot be made.
    pub fn prepare(&self, rel: &str) -> Result<()> {
        self.place.prepare_in(self.store.as_ref(), rel, self.refusal.as_deref())
    }

    /// Whether `rel` exists.
    ///
    /// # Errors
    /// When the store cannot be asked.
    pub fn exists(&self, rel: &str) -> Result<bool> {
        self.store.exists(rel)
    }

    /// Store what `content` yields as `rel`, compressed with `spec`, checksummed, encrypted as the
    /// repository is, published whole.
    ///
    /// # Errors
    /// [`ErrorKind::Target`] when it exists and `overwrite` is false; write errors.
    pub fn put(&self, rel: &str, content: &mut dyn Read, spec: CodecSpec, overwrite: bool, what: &str) -> Result<BlobInfo> {
        let enc = self.encryption()?;
        self.place.put_in(self.store.as_ref(), self.refusal.as_deref(), rel, content, spec, overwrite, what, enc.as_ref())
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
        let bytes = self.get_bytes(rel)?;
        serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{}: not the record expected: {e}", self.describe(rel))).with_object(rel))
    }

    /// The content of `rel`, a small object (a record, a summary, a timeline history), checked.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when missing; [`ErrorKind::Corrupt`] when damaged or over 64 MiB.
    pub fn get_bytes(&self, rel: &str) -> Result<Vec<u8>> {
        self.place.read_small(self.store.as_ref(), rel, self.keys()).map(|(bytes, _)| bytes)
    }

    /// Open `rel` for reading.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when missing.
    pub fn open(&self, rel: &str) -> Result<Box<dyn StripeSource>> {
        self.store.open(rel)
    }

    /// Published objects under `rel_prefix`, names relative to the repository, sorted.
    ///
    /// # Errors
    /// When the store cannot be listed.
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<Stored>> {
        self.store.list(rel_prefix)
    }

    /// Remove `rel` (missing is fine).
    ///
    /// # Errors
    /// Another user's repository; when it exists and cannot be removed.
    pub fn delete(&self, rel: &str) -> Result<()> {
        self.check_writer()?;
        self.store.delete(rel)
    }

    /// Remove the folder `rel` if empty (filesystems), and abort the uploads in progress that
    /// killed writers left in it (object stores): it is only pruned once what it held is gone.
    pub fn prune(&self, rel: &str) {
        if let Err(e) = self.store.abort_uploads(&format!("{rel}/")) {
            tracing::warn!(folder = rel, "uploads left open there stay open: {e}");
        }
        self.store.prune(rel);
    }

    /// Abort the uploads in progress under `rel_prefix` that writers killed before they finished
    /// ([`Store::abort_uploads`]): names no writer still writes.
    ///
    /// # Errors
    /// Another user's repository; the store cannot list or abort them.
    pub fn abort_uploads(&self, rel_prefix: &str) -> Result<usize> {
        self.check_writer()?;
        self.store.abort_uploads(rel_prefix)
    }

    /// The lock new objects carry, if any.
    pub fn write_lock(&self) -> Option<&WriteLock> {
        self.lock.as_ref()
    }

    /// Keep `rel` locked until `until` (seconds since the epoch).
    ///
    /// # Errors
    /// A store that cannot lock objects; the server's refusal.
    pub fn extend_lock(&self, rel: &str, mode: LockMode, until: i64) -> Result<()> {
        retention_of(self.store.as_ref(), rel)?.extend_lock(rel, mode, until)
    }

    /// The lock `rel` carries, if any.
    ///
    /// # Errors
    /// A store that cannot lock objects; when it cannot be asked.
    pub fn lock_of(&self, rel: &str) -> Result<Option<(LockMode, i64)>> {
        retention_of(self.store.as_ref(), rel)?.lock_of(rel)
    }
}

/// Opening a repository, and making one: what resolves a [`Place`] into a [`Repo`].
impl Place {
    /// Open the repository with the keys given: `repo.json` read into
    /// `M` and checked, the keys checked against it and the key ring opened, the owner compared
    /// with who runs sheaf, and, for a locked repository, every object written from now on
    /// locked: once, here.
    ///
    /// # Errors
    /// No repository here (naming `sheaf init`), or one `M` refuses; [`ErrorKind::Key`] for an
    /// encrypted repository and no keys or the wrong ones, or one whose key records are gone;
    /// reading it.
    pub fn open<M: Meta>(&self) -> Result<Repo<M>> {
        let keys = self.keys_given();
        let block = self.key_block()?;
        let ring = match (&block, keys.as_deref()) {
            (Some(block), Some(k)) => {
                let ring = self.unlock()?;
                if ring.is_none() && matches!(block.kdf, Kdf::Ring { .. }) {
                    return Err(Error::new(
                        ErrorKind::Key,
                        format!("the repository {} is encrypted with a key ring, and its key records ({KEYS_DIR}) are gone: restore them from a copy (or a bucket's versions: `sheaf undelete`)", self.display()),
                    ));
                }
                k.open(block).map_err(|e| e.context(format!("repository {}", self.display())))?;
                ring
            }
            (Some(block), None) => return Err(Error::new(ErrorKind::Key, format!("the repository {} is encrypted: give {}", self.display(), block.kdf.needs()))),
            (None, _) => None,
        };
        let (bytes, _) = self.read_small(self.store().as_ref(), META, keys.as_deref())?;
        let meta: M = serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{}: not the repository description expected: {e}", self.describe(META))))?;
        meta.check(self.display())?;
        let lock = meta.lock(crate::time::now_ms() / 1000);
        let store: Arc<dyn Store> = match &lock {
            Some(l) => Arc::new(Locked::new(self.store().clone(), l.clone())?),
            None => self.store().clone(),
        };
        let kdf = block.map(|b| b.kdf);
        Ok(Repo { place: self.clone(), store, meta, keys, ring: ring.map(Arc::new), kdf, refusal: self.refusal(), lock, whole: None })
    }

    /// Create the repository: `repo.json` written with `meta`, refusing a place that already holds
    /// one or anything else. With keys, an encrypted one: the first key's record is written
    /// first, then `repo.json` under the new ring's first generation. For a locked repository,
    /// `repo.json` itself is locked: without it nothing in the repository can be read.
    ///
    /// # Errors
    /// [`ErrorKind::TargetNotEmpty`] when a repository (or anything else) is there already; a lock
    /// on a store that cannot lock; write errors, naming the place.
    pub fn init<M: Meta>(&self, meta: &M) -> Result<Repo<M>> {
        let keys = self.keys_given();
        if self.exists(META)? {
            return Err(Error::new(ErrorKind::TargetNotEmpty, format!("{} already holds a sheaf repository: use it as it is, or choose another place", self.display())));
        }
        let other = self.list("")?;
        if let Some(o) = other.first() {
            return Err(Error::new(
                ErrorKind::TargetNotEmpty,
                format!("{} is not empty (it holds {}, and {} more): a repository needs a place of its own", self.display(), o.name, other.len() - 1),
            ));
        }
        let lock = meta.lock(crate::time::now_ms() / 1000);
        let store: Arc<dyn Store> = match &lock {
            Some(l) => Arc::new(Locked::new(self.store().clone(), l.clone())?),
            None => self.store().clone(),
        };
        let cannot = |e: Error| e.context(format!("cannot create a repository at {}", self.display()));
        let ring = match keys.as_deref() {
            None => None,
            Some(k) => {
                // The repository's own folder is made as for repo.json (only init makes it).
                self.prepare_in(self.store().as_ref(), META, self.refusal().as_deref())?;
                let ring = Ring::new()?;
                let record = KeyRecord::seal(k, &ring, crate::time::now_ms() / 1000, &crate::host::who())?;
                self.put_key_record(&record, false).map_err(cannot)?;
                k.install_ring(ring.entries());
                Some(Arc::new(Unlocked { ring, opened_by: record.id.clone(), records: vec![record] }))
            }
        };
        let kdf = ring.as_ref().map(|u| u.ring.current());
        let repo = Repo { place: self.clone(), store, meta: meta.clone(), keys, ring, kdf, refusal: self.refusal(), lock, whole: None };
        if let Err(e) = repo.put_json(META, meta, false) {
            if let Some(u) = repo.ring() {
                let _ = self.delete(&u.records[0].name());
            }
            return Err(cannot(e));
        }
        Ok(repo)
    }

    /// Create a repository as sheaf did before key rings: everything under one KDF of the
    /// secret's. For tests of `sheaf key migrate`.
    ///
    /// # Errors
    /// As [`Place::init`].
    #[doc(hidden)]
    pub fn init_without_ring<M: Meta>(&self, meta: &M) -> Result<()> {
        let enc = self.keys_given().map(|k| k.fresh_kdf().map(|kdf| Encryption { keys: k, kdf })).transpose()?;
        self.prepare_in(self.store().as_ref(), META, None)?;
        let text = serde_json::to_vec_pretty(meta).map_err(|e| Error::invalid(format!("{META}: {e}")))?;
        let sink = self.store().create(META, &WriteOptions::default())?;
        write_blob(sink, &mut &text[..], CodecSpec { kind: CodecKind::None, level: 0, named: None }, META, enc.as_ref()).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::META;
    use crate::storage::LocalOnly;

    fn place(p: &std::path::Path) -> Place {
        Place::at(p.to_str().unwrap(), &LocalOnly).unwrap()
    }

    #[test]
    fn another_user_s_repository_is_refused_before_anything_is_written() {
        if !crate::host::is_root() {
            crate::testing::missing("root, to give a folder to another user");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let at = d.path().join("repo");
        place(&at).init(&serde_json::json!({"system_identifier": "7"})).unwrap();
        std::os::unix::fs::chown(&at, Some(65534), Some(65534)).unwrap();
        let repo = place(&at).open::<serde_json::Value>().unwrap();
        let e = repo.put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Denied);
        let owner = crate::host::user_name(65534);
        for part in [format!("belongs to {owner} (uid 65534)"), "sheaf runs as root (uid 0)".into(), format!("sudo -u {owner} sheaf"), "chown -R root".into()] {
            assert!(e.to_string().contains(&part), "{part}: {e}");
        }
        assert_eq!(repo.delete(META).unwrap_err().kind(), ErrorKind::Denied);
        assert!(at.join(META).exists() && !at.join("wal").exists(), "nothing written, nothing removed");
        // Reading is no hazard.
        assert_eq!(repo.meta()["system_identifier"], "7");
        // Given back to us, it is writable again (a new process opens it anew).
        std::os::unix::fs::chown(&at, Some(0), Some(0)).unwrap();
        place(&at).open::<serde_json::Value>().unwrap().put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap();
    }

    #[test]
    fn a_repository_is_made_once_and_keeps_records() {
        let d = tempfile::tempdir().unwrap();
        let at = d.path().join("repo");
        let e = place(&at).open::<serde_json::Value>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "not there, not a typo");
        assert!(e.to_string().contains("sheaf init"), "{e}");
        let repo = place(&at).init(&serde_json::json!({"system_identifier": "7"})).unwrap();
        let again = place(&at).init(&serde_json::json!({})).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::TargetNotEmpty);
        assert_eq!(place(&at).open::<serde_json::Value>().unwrap().meta()["system_identifier"], "7");
        repo.put("wal/00000001/a.wal", &mut &b"abc"[..], CodecSpec::default(), false, "a").unwrap();
        repo.put_json("backups/x.json", &serde_json::json!({"id": "x"}), false).unwrap();
        let names: Vec<String> = repo.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(names, vec!["backups/x.json", "repo.json", "wal/00000001/a.wal"]);
        assert!(repo.put("wal/00000001/a.wal", &mut &b"abd"[..], CodecSpec::default(), false, "a").is_err(), "no silent replace");
        repo.delete("wal/00000001/a.wal").unwrap();
        repo.prune("wal/00000001");
        assert!(!at.join("wal/00000001").exists());

        // A repository moved away while open is not made again where it was.
        let moved = d.path().join("moved");
        std::fs::rename(&at, &moved).unwrap();
        let e = repo.put("wal/00000002/b.wal", &mut &b"abc"[..], CodecSpec::default(), false, "b").unwrap_err();
        assert!(e.to_string().contains("is gone"), "{e}");
        assert!(!at.exists(), "the old place stays empty");

        // Another place with something in it is not taken for a repository.
        let busy = d.path().join("busy");
        std::fs::create_dir(&busy).unwrap();
        std::fs::write(busy.join("mine.txt"), b"x").unwrap();
        let e = place(&busy).init(&serde_json::json!({})).unwrap_err();
        assert!(e.to_string().contains("mine.txt"), "{e}");
    }

    #[test]
    fn what_the_description_refuses_and_locks_is_decided_at_the_open() {
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        struct Strict {
            kind: String,
        }
        impl Meta for Strict {
            fn check(&self, place: &str) -> Result<()> {
                (self.kind == "mine").then_some(()).ok_or_else(|| Error::invalid(format!("{place} is a repository of {}", self.kind)))
            }
        }
        let d = tempfile::tempdir().unwrap();
        let at = d.path().join("repo");
        place(&at).init(&Strict { kind: "theirs".into() }).unwrap();
        let e = place(&at).open::<Strict>().unwrap_err();
        assert!(e.to_string().contains("a repository of theirs"), "{e}");
        // Keys given to a repository that is not encrypted: reading is fine, writing is refused.
        let keyed = place(&at).with_keys(Some(Arc::new(Keys::from_key([7; 32])))).open::<serde_json::Value>().unwrap();
        assert_eq!(keyed.meta()["kind"], "theirs");
        assert_eq!(keyed.put_json("x.json", &1, false).unwrap_err().kind(), ErrorKind::Key);
    }
}
