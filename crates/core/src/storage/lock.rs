//! Every object written through a store carries a lock (S3 Object Lock): a locked repository's
//! policy as a wrapper around its store (object_store's `limit.rs` pattern), not a flag its
//! writers each remember. What the lock spares ([`WriteLock::for_name`]) is written unlocked; a
//! write that asks for a lock of its own keeps it.

use std::sync::Arc;

use super::{Store, StripeSink, StripeSource, WriteLock, WriteOptions};
use crate::error::Result;

/// `inner`, every object created through it locked as `lock` says.
#[derive(Debug)]
pub struct Locked {
    inner: Arc<dyn Store>,
    lock: WriteLock,
}

impl Locked {
    /// Objects created through `inner` carry `lock`.
    ///
    /// # Errors
    /// A store that cannot lock objects ([`super::no_lock`]).
    pub fn new(inner: Arc<dyn Store>, lock: WriteLock) -> Result<Locked> {
        super::retention_of(inner.as_ref(), "")?;
        Ok(Locked { inner, lock })
    }

    /// The lock new objects carry.
    pub fn lock(&self) -> &WriteLock {
        &self.lock
    }
}

impl Store for Locked {
    fn credentials(&self) -> Option<String> {
        self.inner.credentials()
    }

    super::pass_to_inner!();
    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        let opts = WriteOptions { lock: opts.lock.or_else(|| self.lock.for_name(name)), ..opts.clone() };
        self.inner.create(name, &opts)
    }
    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        self.inner.open(name)
    }
    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn super::UnfinishedStripe>>> {
        let opts = WriteOptions { lock: opts.lock.or_else(|| self.lock.for_name(name)), ..opts.clone() };
        self.inner.resume(name, &opts)
    }
    /// A locked object cannot be cut, replaced or completed elsewhere: a backup here starts
    /// afresh, and keeps no journal whose objects the lock would keep for its whole term.
    fn can_resume(&self) -> bool {
        false
    }
}
