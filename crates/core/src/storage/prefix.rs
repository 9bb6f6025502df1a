//! A store seen through a prefix (object_store's `PrefixStore`): every name given is taken as
//! under `PREFIX/`, every name listed comes back without it. A repository's names are relative to
//! its root, so the same code runs in a folder, at a bucket's top or under a prefix, and nothing
//! above this wrapper joins or strips a root by hand.

use std::sync::Arc;

use super::{Capabilities, ObjectVersion, Retention, Store, Stored, StripeSink, StripeSource, WriteOptions};
use crate::error::Result;
use crate::storage::LockMode;

/// `inner`, with every name under `prefix` (empty: the store's top).
#[derive(Debug)]
pub struct Prefixed {
    inner: Arc<dyn Store>,
    prefix: String,
}

impl Prefixed {
    /// `inner` through `prefix` (a name of `inner`'s, without a trailing `/`; empty for its top).
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<String>) -> Prefixed {
        Prefixed { inner, prefix: prefix.into().trim_end_matches('/').to_string() }
    }

    /// `inner`'s name of `name` (the prefix itself for an empty name).
    pub fn full(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{name}", self.prefix),
        }
    }

    /// `name` of `inner`'s without the prefix; `None` for a name outside it.
    fn strip(&self, name: &str) -> Option<String> {
        if self.prefix.is_empty() {
            return Some(name.to_string());
        }
        name.strip_prefix(&self.prefix)?.strip_prefix('/').filter(|n| !n.is_empty()).map(str::to_string)
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl Store for Prefixed {
    fn credentials(&self) -> Option<String> {
        self.inner.credentials()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn describe(&self, name: &str) -> String {
        self.inner.describe(&self.full(name))
    }
    fn sink_memory(&self, expected_bytes: u64) -> u64 {
        self.inner.sink_memory(expected_bytes)
    }
    fn resumable_memory(&self, expected_bytes: u64) -> u64 {
        self.inner.resumable_memory(expected_bytes)
    }
    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        self.inner.create(&self.full(name), opts)
    }
    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        self.inner.open(&self.full(name))
    }
    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn super::UnfinishedStripe>>> {
        self.inner.resume(&self.full(name), opts)
    }
    fn can_resume(&self) -> bool {
        self.inner.can_resume()
    }
    fn exists(&self, name: &str) -> Result<bool> {
        self.inner.exists(&self.full(name))
    }
    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        Ok(self.inner.list(&self.full(prefix))?.into_iter().filter_map(|o| Some(Stored { name: self.strip(&o.name)?, ..o })).collect())
    }
    fn delete(&self, name: &str) -> Result<()> {
        self.inner.delete(&self.full(name))
    }
    fn prepare(&self, name: &str, below: Option<&str>) -> Result<()> {
        self.inner.prepare(&self.full(name), below.map(|b| self.full(b)).as_deref())
    }
    fn prune(&self, dir: &str) {
        self.inner.prune(&self.full(dir))
    }
    fn abort_uploads(&self, prefix: &str) -> Result<usize> {
        self.inner.abort_uploads(&self.full(prefix))
    }
    fn identity(&self, name: &str) -> String {
        self.inner.identity(&self.full(name))
    }
    fn sibling(&self, name: &str, sibling: &str) -> String {
        let full = self.inner.sibling(&self.full(name), sibling);
        self.strip(&full).unwrap_or(full)
    }
    fn retention(&self) -> Option<&dyn Retention> {
        self.inner.retention().map(|_| self as &dyn Retention)
    }
}

/// The inner store's retention, names taken under the prefix.
impl Retention for Prefixed {
    fn lock_enabled(&self) -> Result<bool> {
        self.inner_retention()?.lock_enabled()
    }
    fn extend_lock(&self, name: &str, mode: LockMode, until: i64) -> Result<()> {
        self.inner_retention()?.extend_lock(&self.full(name), mode, until)
    }
    fn lock_of(&self, name: &str) -> Result<Option<(LockMode, i64)>> {
        self.inner_retention()?.lock_of(&self.full(name))
    }
    fn versions(&self, prefix: &str) -> Result<Vec<ObjectVersion>> {
        Ok(self.inner_retention()?.versions(&self.full(prefix))?.into_iter().filter_map(|v| Some(ObjectVersion { name: self.strip(&v.name)?, ..v })).collect())
    }
    fn delete_version(&self, name: &str, version: &str) -> Result<()> {
        self.inner_retention()?.delete_version(&self.full(name), version)
    }
}

impl Prefixed {
    fn inner_retention(&self) -> Result<&dyn Retention> {
        super::retention_of(self.inner.as_ref(), &self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;

    #[test]
    fn names_go_under_the_prefix_and_come_back_without_it() {
        let inner: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let write = |s: &dyn Store, name: &str| {
            let mut k = s.create(name, &WriteOptions::default()).unwrap();
            k.write_all(name.as_bytes()).unwrap();
            k.publish().unwrap();
        };
        write(inner.as_ref(), "other/x");
        let p = Prefixed::new(inner.clone(), "pg/main/");
        write(&p, "backups/a.json");
        assert!(inner.exists("pg/main/backups/a.json").unwrap() && p.exists("backups/a.json").unwrap());
        assert_eq!(p.list("").unwrap().into_iter().map(|o| o.name).collect::<Vec<_>>(), ["backups/a.json"], "nothing outside it, and without it");
        assert_eq!(p.full(""), "pg/main");
        assert_eq!(p.sibling("backups/a.json", "b.json"), "backups/b.json");
        p.delete("backups/a.json").unwrap();
        assert!(!inner.exists("pg/main/backups/a.json").unwrap());
        let top = Prefixed::new(inner.clone(), "");
        assert_eq!(top.list("").unwrap().len(), 1, "the store's top: every name as it is");
        assert!(p.retention().is_none(), "no retention where the store has none");
    }
}
