//! A repository at a place, not opened ([`Place`]): the store seen through the repository's root,
//! and what can be done before (or without) opening it: read and write its key records, look at
//! the versions a wiped bucket kept. Opening it, and making one, are [`super::opened`]'s.

use std::io::Read;
use std::sync::Arc;

use super::ring::{self, Unlocked};
use super::{owner, META};
use crate::blob::{read_blob, write_blob, BlobInfo};
use crate::codec::{CodecKind, CodecSpec};
use crate::crypto::{Encryption, KeyBlock, Keys};
use crate::error::{Error, ErrorKind, Result};
use crate::keyring::{KeyRecord, KEYS_DIR, KEY_SUFFIX};
use crate::storage::{retention_of, Location, ObjectVersion, Prefixed, RateLimit, Retention, Schemes, Store, Stored, Throttled, WriteOptions};

/// A repository's place, and the secret that opens it (if any). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Place {
    /// The store, every name relative to the repository's root.
    store: Arc<dyn Store>,
    /// The root's name in the underlying store (a path for a folder; empty for a bucket's top).
    root: String,
    shown: String,
    keys: Option<Arc<Keys>>,
}

/// The largest small object read whole (a record, a summary, a history file).
const SMALL_MAX: usize = 64 << 20;

impl Place {
    /// The repository at `text`: a folder, or `s3://BUCKET/PREFIX` (through `schemes`). Nothing is
    /// read yet.
    ///
    /// # Errors
    /// An empty or unusable location, `nul`.
    pub fn at(text: &str, schemes: &dyn Schemes) -> Result<Place> {
        let trimmed = text.trim_end_matches('/');
        if trimmed.is_empty() {
            return Err(Error::invalid(
                "an empty repository location: give a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX, sftp://USER@HOST/PATH or sheaf://HOST:PORT/NAME (--repo, SHEAF_REPO or repo in the config file)",
            ));
        }
        let meta = Location::parse(&format!("{trimmed}/{META}"), schemes)?;
        if meta.is_null() {
            return Err(Error::invalid(
                "nul cannot hold a repository: give a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX, sftp://USER@HOST/PATH or sheaf://HOST:PORT/NAME",
            ));
        }
        let name = meta.name();
        let root = name.strip_suffix(META).unwrap_or(name).trim_end_matches('/').to_string();
        let shown = meta.display().strip_suffix(&format!("/{META}")).map(str::to_string).unwrap_or_else(|| trimmed.to_string());
        Ok(Place { store: Arc::new(Prefixed::new(meta.store().clone(), root.clone())), root, shown, keys: None })
    }

    /// This place, opened with `keys` (its key file or passphrase), if any.
    pub fn with_keys(mut self, keys: Option<Arc<Keys>>) -> Place {
        self.keys = keys;
        self
    }

    /// The keys given.
    pub fn keys(&self) -> Option<&Keys> {
        self.keys.as_deref()
    }

    /// The keys given, shared.
    pub(super) fn keys_given(&self) -> Option<Arc<Keys>> {
        self.keys.clone()
    }

    /// Whom the repository's store acts as ([`Store::credentials`]).
    pub fn credentials(&self) -> Option<String> {
        self.store.credentials()
    }

    /// The store, every name relative to the root.
    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This place with every byte written to it or read from it held to `limit` (`--max-rate`).
    pub fn throttled(mut self, limit: &Arc<RateLimit>) -> Place {
        self.store = Arc::new(Throttled::new(self.store, limit.clone()));
        self
    }

    /// Where it is, for messages (a path made absolute, or a URL; never a secret).
    pub fn display(&self) -> &str {
        &self.shown
    }

    /// `rel` as the user reads it.
    pub fn describe(&self, rel: &str) -> String {
        self.store.describe(rel)
    }

    /// The underlying store's name of `rel` (a path, for a folder).
    pub fn full_name(&self, rel: &str) -> String {
        if self.root.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.root)
        }
    }

    /// Whether `rel` exists.
    ///
    /// # Errors
    /// When the store cannot be asked.
    pub fn exists(&self, rel: &str) -> Result<bool> {
        self.store.exists(rel)
    }

    /// Published objects under `rel_prefix`, names relative to the repository, sorted.
    ///
    /// # Errors
    /// When the store cannot be listed.
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<Stored>> {
        self.store.list(rel_prefix)
    }

    /// Why this process may not write here (another user owns the folder), asked now; `None`:
    /// it may.
    pub fn refusal(&self) -> Option<String> {
        owner::refusal(self.store.as_ref(), &self.root, &self.shown)
    }

    /// Refuse to change a repository on this host's filesystem that belongs to another user than
    /// the one sheaf runs as, naming both, before anything is written.
    ///
    /// # Errors
    /// [`ErrorKind::Denied`], naming the repository, its owner, this user and the fix.
    pub fn check_writer(&self) -> Result<()> {
        self.refusal().map_or(Ok(()), |why| Err(owner::denied(&why)))
    }

    /// Make sure `rel` can be created (its folders, on a filesystem): only under the root, which
    /// must still be there, but for `repo.json` (only `init` makes the root). `refusal` is why
    /// this process may not write here.
    pub(super) fn prepare_in(&self, store: &dyn Store, rel: &str, refusal: Option<&str>) -> Result<()> {
        if let Some(why) = refusal {
            return Err(owner::denied(why));
        }
        let below = (rel != META && !self.root.is_empty()).then_some("");
        store.prepare(rel, below).map_err(|e| self.hint(rel, e))
    }

    /// A permission error on `rel`, naming the file, its owner, who sheaf runs as, and the fix.
    pub(super) fn hint(&self, rel: &str, e: Error) -> Error {
        owner::denied_hint(&self.full_name(rel), &self.shown, e)
    }

    /// Remove `rel` (missing is fine).
    ///
    /// # Errors
    /// Another user's repository; when it exists and cannot be removed.
    pub fn delete(&self, rel: &str) -> Result<()> {
        self.check_writer()?;
        self.store.delete(rel)
    }

    /// The content of `rel`, a small object, read with `keys` and checked.
    pub(super) fn read_small(&self, store: &dyn Store, rel: &str, keys: Option<&Keys>) -> Result<(Vec<u8>, BlobInfo)> {
        let src = store.open(rel)?;
        let mut bytes = Vec::new();
        let info = read_blob(src.as_ref(), keys, &mut |c| {
            bytes.extend_from_slice(c);
            if bytes.len() > SMALL_MAX {
                return Err(Error::corrupt(format!("{}: a small object over 64 MiB (damaged?)", self.describe(rel))));
            }
            Ok(())
        })?;
        Ok((bytes, info))
    }

    /// The key records, as stored (no secret needed: they hold only public values).
    ///
    /// # Errors
    /// When the store cannot be listed or a record read; a damaged record.
    pub fn key_records(&self) -> Result<Vec<KeyRecord>> {
        let mut out = Vec::new();
        for o in self.list(KEYS_DIR)?.into_iter().filter(|o| o.name.ends_with(KEY_SUFFIX)) {
            let src = self.store.open(&o.name)?;
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
        self.prepare_in(self.store.as_ref(), &rel, self.refusal().as_deref())?;
        let text = serde_json::to_vec_pretty(r).map_err(|e| Error::invalid(format!("{rel}: {e}")))?;
        let opts = WriteOptions { overwrite, expected_bytes: 0, lock: None, bulk: false, keep_unfinished: false };
        let sink = self.store.create(&rel, &opts).map_err(|e| self.hint(&rel, e))?;
        write_blob(sink, &mut &text[..], CodecSpec { kind: CodecKind::None, level: 0, named: None }, &rel, None).map(drop).map_err(|e| self.hint(&rel, e))
    }

    /// The key ring, opened with the keys given: `None` without keys, or for a repository without
    /// key records (not encrypted, or encrypted before key rings).
    ///
    /// # Errors
    /// [`ErrorKind::Key`] when no record opens with the keys given; reading the records.
    pub fn unlock(&self) -> Result<Option<Unlocked>> {
        match self.keys.as_deref() {
            Some(keys) => ring::open(self.key_records()?, keys, &self.shown),
            None => Ok(None),
        }
    }

    /// `repo.json`'s key block: what it was encrypted with (`None`: not encrypted).
    ///
    /// # Errors
    /// No repository here; reading it.
    pub fn key_block(&self) -> Result<Option<KeyBlock>> {
        let src = self.store.open(META).map_err(|e| self.missing(e))?;
        Ok(crate::blob::blob_info(src.as_ref())?.key_block)
    }

    /// `e`, a failure opening `repo.json`: when there is none, the error that says how to make one.
    pub(super) fn missing(&self, e: Error) -> Error {
        if e.kind() == ErrorKind::Incomplete && !self.exists(META).unwrap_or(true) {
            // Not there, rather than a bad argument: a repository on a disk that is not mounted
            // must not look like a typo to a script (exit 7, not 2).
            return Error::new(
                ErrorKind::NotFound,
                format!(
                    "there is no sheaf repository at {}: is its disk mounted, its bucket reachable? Or create one with `sheaf init --repo {} postgres://...`, or check --repo (or SHEAF_REPO, or repo in the config file)",
                    self.shown, self.shown
                ),
            );
        }
        e
    }

    fn retention(&self) -> Result<&dyn Retention> {
        retention_of(self.store.as_ref(), "")
    }

    /// Whether the place keeps objects from being deleted (S3 Object Lock on the bucket).
    ///
    /// # Errors
    /// A store that has no such thing (naming what to use); when it cannot be asked.
    pub fn lock_enabled(&self) -> Result<bool> {
        self.retention()?.lock_enabled()
    }

    /// Every version of the objects under `rel` (names relative to the repository).
    ///
    /// # Errors
    /// A store that keeps no versions; when it cannot be listed.
    pub fn versions(&self, rel: &str) -> Result<Vec<ObjectVersion>> {
        self.retention()?.versions(rel)
    }

    /// Remove version `version` of `rel` for good.
    ///
    /// # Errors
    /// A store that keeps no versions; the server's refusal (a locked version).
    pub fn delete_version(&self, rel: &str, version: &str) -> Result<()> {
        self.retention()?.delete_version(rel, version)
    }

    /// Store what `content` yields as `rel` through `store` (the opened repository's, with its
    /// lock), compressed with `spec`, encrypted with `enc`, checksummed, published whole.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_in(
        &self,
        store: &dyn Store,
        refusal: Option<&str>,
        rel: &str,
        content: &mut dyn Read,
        spec: CodecSpec,
        overwrite: bool,
        what: &str,
        enc: Option<&Encryption>,
    ) -> Result<BlobInfo> {
        self.prepare_in(store, rel, refusal)?;
        // WAL segments are the repository's bulk beside its stripes; records are not.
        // Timeline history files are records: small, read by every recovery.
        let bulk = rel.starts_with("wal/") && rel.ends_with(".wal") && !rel.ends_with(".history.wal");
        let opts = WriteOptions { overwrite, expected_bytes: 0, lock: None, bulk, keep_unfinished: false };
        let sink = store.create(rel, &opts).map_err(|e| self.hint(rel, e))?;
        write_blob(sink, content, spec, what, enc).map_err(|e| self.hint(rel, e))
    }
}
