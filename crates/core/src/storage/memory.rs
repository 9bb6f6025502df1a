//! A store in memory: objects in a map, published whole. For tests and for trying the object-store
//! rules (no rename, publish on completion) without a server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{Capabilities, Store, Stored, StripeSink, StripeSource};
use crate::error::{Error, ErrorKind, Result};

type Objects = Arc<Mutex<BTreeMap<String, Arc<Vec<u8>>>>>;

/// Objects in memory, shared by clones of the store.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    objects: Objects,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Vec<u8>>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for MemoryStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true, files: false }
    }
    fn describe(&self, name: &str) -> String {
        format!("memory://{name}")
    }
    fn create(&self, name: &str, opts: &super::WriteOptions) -> Result<Box<dyn StripeSink>> {
        if opts.lock.is_some() {
            return Err(super::no_lock(&self.describe(name)));
        }
        let overwrite = opts.overwrite;
        if !overwrite && self.objects().contains_key(name) {
            return Err(Error::new(ErrorKind::Target, format!("target {} already exists: remove it, choose another name, or pass --overwrite", self.describe(name))));
        }
        Ok(Box::new(MemorySink { objects: self.objects.clone(), name: name.into(), buf: Vec::new(), published: false, overwrite }))
    }
    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        let data = self.objects().get(name).cloned().ok_or_else(|| Error::incomplete(format!("stripe {} does not exist", self.describe(name))).with_object(name))?;
        Ok(Box::new(MemorySource { data, shown: self.describe(name) }))
    }
    fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.objects().contains_key(name))
    }
    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        Ok(self
            .objects()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| Stored { name: k.clone(), size: v.len() as u64, modified: 0, tag: format!("{:08x}", crc32c::crc32c(v)) })
            .collect())
    }
    fn delete(&self, name: &str) -> Result<()> {
        self.objects().remove(name);
        Ok(())
    }
}

struct MemorySink {
    objects: Objects,
    name: String,
    buf: Vec<u8>,
    published: bool,
    overwrite: bool,
}

impl StripeSink for MemorySink {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(buf);
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    fn publish(&mut self) -> Result<()> {
        let mut objects = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        if !self.overwrite && objects.contains_key(&self.name) {
            return Err(Error::new(ErrorKind::Target, format!("target memory://{} appeared while the backup ran", self.name)));
        }
        objects.insert(self.name.clone(), Arc::new(self.buf.clone()));
        self.published = true;
        Ok(())
    }
    fn discard(&mut self) {
        if self.published {
            self.objects.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.name);
            self.published = false;
        }
        self.buf = Vec::new();
    }
    fn written(&self) -> u64 {
        self.buf.len() as u64
    }
}

struct MemorySource {
    data: Arc<Vec<u8>>,
    shown: String,
}

impl StripeSource for MemorySource {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let r = super::checked_range(&self.shown, offset, buf.len() as u64, self.len())?;
        buf.copy_from_slice(&self.data[r.start as usize..r.end as usize]);
        Ok(())
    }
    fn location(&self) -> &str {
        &self.shown
    }
}
