//! Where stripes go and come from.
//!
//! ```text
//!  text ──Location::parse──► Location { store, name }     capabilities as data
//!  /mnt/a/x.sheaf | nul | s3://b/p/x.sheaf                 Store: create → StripeSink
//!                                                                 open   → StripeSource
//!                                                                 exists / list / delete
//! ```
//! A [`Location`] is parsed once: a [`Store`] (a filesystem, the null target, a bucket, memory)
//! and a name inside it. Everything else — writing a stripe, opening one, finding its siblings
//! ("the other stripes beside this one") — goes through the store, so a new kind of storage joins by
//! implementing [`Store`] and passing the conformance suite ([`conformance`]). Kinds core does not
//! know (`s3://`) come from a [`Schemes`] the caller hands in. Each kind is one file
//! (`storage/local.rs`, `storage/null.rs`, `storage/memory.rs`; S3 lives in the `sheaf-s3` crate).
//! Wrappers take any of them: [`Throttled`] (`--max-rate`), [`Prefixed`] (a repository's root),
//! [`Locked`] (a locked repository's Object Lock on every write).

/// The [`Store`] methods a wrapper (a lock on what it creates, a rate on what it moves) passes to
/// its `inner` store unchanged: it writes only `create` and `open`.
macro_rules! pass_to_inner {
    () => {
        fn capabilities(&self) -> $crate::storage::Capabilities {
            self.inner.capabilities()
        }
        fn describe(&self, name: &str) -> String {
            self.inner.describe(name)
        }
        fn sink_memory(&self, expected_bytes: u64) -> u64 {
            self.inner.sink_memory(expected_bytes)
        }
        fn resumable_memory(&self, expected_bytes: u64) -> u64 {
            self.inner.resumable_memory(expected_bytes)
        }
        fn exists(&self, name: &str) -> $crate::error::Result<bool> {
            self.inner.exists(name)
        }
        fn list(&self, prefix: &str) -> $crate::error::Result<Vec<$crate::storage::Stored>> {
            self.inner.list(prefix)
        }
        fn delete(&self, name: &str) -> $crate::error::Result<()> {
            self.inner.delete(name)
        }
        fn prepare(&self, name: &str, below: Option<&str>) -> $crate::error::Result<()> {
            self.inner.prepare(name, below)
        }
        fn prune(&self, dir: &str) {
            self.inner.prune(dir)
        }
        fn abort_uploads(&self, prefix: &str) -> $crate::error::Result<usize> {
            self.inner.abort_uploads(prefix)
        }
        fn identity(&self, name: &str) -> String {
            self.inner.identity(name)
        }
        fn sibling(&self, name: &str, sibling: &str) -> String {
            self.inner.sibling(name, sibling)
        }
        fn retention(&self) -> Option<&dyn $crate::storage::Retention> {
            self.inner.retention()
        }
    };
}
pub(crate) use pass_to_inner;

pub mod conformance;
pub(crate) mod local;
pub mod lock;
mod memory;
mod null;
pub mod prefix;
pub mod throttle;

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

pub use local::{stored_at, try_lock_exclusive, LocalSink, LocalSource, LocalStore};
pub use lock::Locked;
pub use memory::MemoryStore;
pub use null::{NullSink, NullStore};
pub use prefix::Prefixed;
pub use throttle::{RateLimit, Throttled};

/// What a store can do, as data (callers never downcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Stripes written here can be read back (false for `nul`).
    pub readable: bool,
    /// A stripe appears under its final name only once whole (a rename, a completed upload).
    pub atomic_publish: bool,
    /// `list` works.
    pub list: bool,
    /// Names are paths on this host's filesystem: what is written is owned by the user who
    /// writes it.
    pub files: bool,
}

/// Where stripes live: a filesystem, a bucket, memory, or nowhere (`nul`). Names are the store's
/// own (`/`-separated keys, or paths for the filesystem).
pub trait Store: Send + Sync + fmt::Debug {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// The location text of `name`, for messages and the manifest (never holding a secret).
    fn describe(&self, name: &str) -> String;
    /// Memory a stripe being written here holds outside the backup's buffer pool (upload parts in
    /// flight), when the stripe is expected to hold about `expected_bytes`.
    fn sink_memory(&self, _expected_bytes: u64) -> u64 {
        0
    }
    /// Memory a resumable stripe ([`WriteOptions::keep_unfinished`]) holds here besides
    /// [`Store::sink_memory`]'s (an upload part waiting for its frame to end).
    fn resumable_memory(&self, _expected_bytes: u64) -> u64 {
        0
    }
    /// Start writing stripe `name` under a temporary name; it becomes visible only through
    /// [`StripeSink::publish`], written as `opts` says.
    ///
    /// # Errors
    /// [`ErrorKind::Target`] when `name` exists and `opts.overwrite` is false, or the place is
    /// unusable; [`ErrorKind::InvalidInput`] for a lock a store that cannot lock is asked for.
    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>>;
    /// Open a published stripe.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when it does not exist; I/O errors otherwise.
    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>>;

    /// The stripe a stopped backup left unfinished at `name` (written with
    /// [`WriteOptions::keep_unfinished`]), taken over so that a new attempt can read what it holds
    /// and go on writing after the part it keeps; `None` when there is none, or this store cannot
    /// take one over (the backup then starts afresh). An object store may instead hand over one
    /// that holds nothing ([`Holding::Parts`] empty), so that a backup whose other stripes hold
    /// frames goes on with this one from its start.
    ///
    /// # Errors
    /// Another writer still holds it, or it cannot be opened.
    fn resume(&self, _name: &str, _opts: &WriteOptions) -> Result<Option<Box<dyn UnfinishedStripe>>> {
        Ok(None)
    }

    /// Whether [`Store::resume`] can take over what a stopped backup left here.
    fn can_resume(&self) -> bool {
        false
    }
    /// Whether a published stripe `name` exists.
    ///
    /// # Errors
    /// When the store cannot be asked.
    fn exists(&self, name: &str) -> Result<bool>;
    /// Published names that start with `prefix` (at any depth: `a/` lists `a/b/c` too), sorted, with
    /// their sizes.
    ///
    /// # Errors
    /// When the store cannot be listed.
    fn list(&self, prefix: &str) -> Result<Vec<Stored>>;
    /// Remove `name`; removing a missing name is not an error.
    ///
    /// # Errors
    /// When it exists and cannot be removed.
    fn delete(&self, name: &str) -> Result<()>;
    /// Make sure `name` can be created: its folders, for a filesystem (nothing for object stores,
    /// which have no folders). Stripes given with `--to` are not prepared: a missing folder there is
    /// more likely a typo than a wish. With `below` (a repository's root), only folders under it
    /// are made and it must still exist.
    ///
    /// # Errors
    /// When a folder cannot be made; [`crate::error::ErrorKind::Incomplete`] when `below` is gone.
    fn prepare(&self, _name: &str, _below: Option<&str>) -> Result<()> {
        Ok(())
    }
    /// Remove the folder `dir` if it is empty, once what stopped writers left unfinished in it is
    /// gone (filesystems; nothing for object stores).
    fn prune(&self, _dir: &str) {}
    /// Abort the uploads in progress under `prefix` that writers killed before they published or
    /// aborted them (an object store keeps, and bills, a multipart upload until it is completed or
    /// aborted); returns how many. Only for names no writer still writes: a dead backup's folder,
    /// a published backup's journal. Nothing for stores without such uploads.
    ///
    /// # Errors
    /// When the store cannot list or abort them.
    fn abort_uploads(&self, _prefix: &str) -> Result<usize> {
        Ok(0)
    }
    /// A key equal for two names of the same stripe; by default what [`Store::describe`] says.
    fn identity(&self, name: &str) -> String {
        self.describe(name)
    }
    /// The name of `sibling` in the same folder or prefix as `name`.
    fn sibling(&self, name: &str, sibling: &str) -> String {
        match name.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{sibling}"),
            None => sibling.to_string(),
        }
    }
    /// What it can keep from being deleted or overwritten, and the versions it keeps (S3 Object
    /// Lock): `None` for a store that has no such thing. A capability a store may offer, so that a
    /// decorator forwards this one method and no store answers for what it cannot do.
    fn retention(&self) -> Option<&dyn Retention> {
        None
    }

    /// Whom the store acts as, in words for `sheaf check`: where its credentials come from and
    /// when they expire (`None`: a store without credentials of its own, such as a folder).
    fn credentials(&self) -> Option<String> {
        None
    }
}

/// How one object is written ([`Store::create`]): everything a write needs travels with it, so a
/// store shared by several repositories (one bucket, two prefixes) keeps no state of theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Replace an object already at the name.
    pub overwrite: bool,
    /// About how many bytes it will hold (sizes upload parts where that matters; 0: unknown).
    pub expected_bytes: u64,
    /// The lock it carries from its first byte (S3 Object Lock); a store that cannot lock refuses.
    pub lock: Option<ObjectLock>,
    /// Bulk: a stripe or a WAL segment, read back only to restore, verify or drill. A store with
    /// storage classes writes it in the one chosen (`--s3-storage-class`); records stay standard.
    pub bulk: bool,
    /// A stripe of a backup that can be resumed: left unfinished where it stops (dropped or
    /// discarded unpublished), for the next attempt to go on from ([`Store::resume`]), rather
    /// than removed. A store that cannot resume removes it as usual.
    pub keep_unfinished: bool,
}

/// A lock one object is written with: it cannot be deleted or overwritten before `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectLock {
    /// Governance or compliance.
    pub mode: LockMode,
    /// Seconds since the epoch.
    pub until: i64,
}

/// What a store that keeps objects from being deleted offers ([`Store::retention`]): S3 Object
/// Lock and the versions of a versioned bucket.
pub trait Retention: Send + Sync {
    /// Whether this place keeps objects from being deleted or overwritten (Object Lock enabled on
    /// the bucket); `Ok(false)` for a bucket without it.
    ///
    /// # Errors
    /// When it cannot be asked.
    fn lock_enabled(&self) -> Result<bool>;
    /// Keep `name` locked until `until` (seconds since the epoch): a lock is only ever lengthened.
    ///
    /// # Errors
    /// The server's refusal (a shorter date), or when it cannot be asked.
    fn extend_lock(&self, name: &str, mode: LockMode, until: i64) -> Result<()>;
    /// The lock `name` carries, if any.
    ///
    /// # Errors
    /// When it cannot be asked.
    fn lock_of(&self, name: &str) -> Result<Option<(LockMode, i64)>>;
    /// Every version of the objects under `prefix` (a versioned bucket keeps each overwrite and a
    /// delete marker for each delete), sorted by name, newest first within a name.
    ///
    /// # Errors
    /// When it cannot be listed.
    fn versions(&self, prefix: &str) -> Result<Vec<ObjectVersion>>;
    /// Remove one version of `name` for good (a delete marker, or an overwrite). A locked version
    /// is refused by the server.
    ///
    /// # Errors
    /// The server's refusal.
    fn delete_version(&self, name: &str, version: &str) -> Result<()>;
}

/// `store`'s retention, or the refusal of a store that has none, naming `name`'s place.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] for a store that cannot lock objects or keep versions.
pub fn retention_of<'a>(store: &'a dyn Store, name: &str) -> Result<&'a dyn Retention> {
    store.retention().ok_or_else(|| no_lock(&store.describe(name)))
}

/// The refusal of a store that cannot lock objects.
pub fn no_lock(place: &str) -> Error {
    Error::invalid(format!(
        "{place} cannot lock objects: --lock needs an S3 bucket created with Object Lock enabled (aws s3api create-bucket --object-lock-enabled-for-bucket, mc mb --with-lock); for Azure set an immutability policy on the container, for Google Cloud Storage a retention policy on the bucket"
    ))
}

/// S3 Object Lock's two modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LockMode {
    /// Nobody deletes a locked version before its date except a user granted
    /// `s3:BypassGovernanceRetention` who asks to bypass it.
    Governance,
    /// Nobody at all, not even the account's root user, deletes it before its date.
    Compliance,
}

impl LockMode {
    /// The header value S3 takes.
    pub fn as_s3(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockMode::Governance => "governance",
            LockMode::Compliance => "compliance",
        })
    }
}

impl std::str::FromStr for LockMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "governance" => Ok(LockMode::Governance),
            "compliance" => Ok(LockMode::Compliance),
            _ => Err(Error::invalid(format!(
                "lock mode '{s}': use governance (an administrator granted the bypass permission can still remove a version) or compliance (nobody can)"
            ))),
        }
    }
}

/// What a repository's new objects carry: they cannot be deleted or overwritten before `until`;
/// each write is given its [`ObjectLock`] ([`WriteLock::for_name`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteLock {
    /// Governance or compliance.
    pub mode: LockMode,
    /// Seconds since the epoch.
    pub until: i64,
    /// Name endings written without a lock: objects that are removed again soon.
    pub spare: Vec<String>,
}

impl WriteLock {
    /// The lock an object called `name` is written with: none for the names it spares.
    pub fn for_name(&self, name: &str) -> Option<ObjectLock> {
        (!self.spare.iter().any(|s| name.ends_with(s.as_str()))).then_some(ObjectLock { mode: self.mode, until: self.until })
    }
}

/// One version of an object in a versioned bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    /// The object's name.
    pub name: String,
    /// The version's id.
    pub version: String,
    /// When it was written, seconds since the epoch.
    pub modified: i64,
    /// Whether it is what a read of `name` gets now.
    pub latest: bool,
    /// A delete marker (what a delete without a version writes), not data.
    pub deleted: bool,
    /// Its length in bytes.
    pub size: u64,
}

/// A published object and its size, as [`Store::list`] gives them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stored {
    /// Its name in the store.
    pub name: String,
    /// Its length in bytes.
    pub size: u64,
    /// When it was last written, seconds since the epoch (0 where the store does not say).
    pub modified: i64,
    /// What changes whenever the object is written again: the store's ETag, or a file's inode
    /// and modification time in nanoseconds (empty where the store gives nothing). Equal name,
    /// size and tag mean the very object read before (`verify`'s ledger trusts that).
    pub tag: String,
}

/// Makes stores for URL schemes core does not know (`s3://BUCKET/KEY`). The CLI hands one in that
/// knows S3; [`LocalOnly`] knows none.
pub trait Schemes: Send + Sync {
    /// The store for `scheme://bucket/...` and the name of `key` inside it.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a scheme it does not handle; configuration errors.
    fn resolve(&self, scheme: &str, bucket: &str, key: &str) -> Result<(Arc<dyn Store>, String)>;
}

/// Knows files and `nul` only.
pub struct LocalOnly;

impl Schemes for LocalOnly {
    fn resolve(&self, scheme: &str, _: &str, _: &str) -> Result<(Arc<dyn Store>, String)> {
        Err(Error::invalid(format!("{scheme}:// locations need sheaf's command line (built with S3 support); this caller knows only files and nul")))
    }
}

/// One stripe's place: a store and a name in it. Parsed once from what the user typed.
#[derive(Clone, Debug)]
pub struct Location {
    store: Arc<dyn Store>,
    name: String,
    /// The lock a stripe written here carries (a locked repository's).
    lock: Option<ObjectLock>,
}

impl Location {
    /// Parse `nul` (SQL Server's `DISK='NUL'`), a file path, or `SCHEME://BUCKET/KEY` (handed to
    /// `schemes`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an empty text, a URL without bucket or key, or an unknown
    /// scheme.
    pub fn parse(text: &str, schemes: &dyn Schemes) -> Result<Location> {
        if text.is_empty() {
            return Err(Error::invalid("an empty location: give a file path, nul, or s3://BUCKET/KEY"));
        }
        if matches!(text.to_ascii_lowercase().as_str(), "nul" | "nul:") {
            return Ok(Location::null());
        }
        if let Some(path) = text.strip_prefix("file://") {
            return Ok(Location::file(path));
        }
        if let Some((scheme, rest)) = text.split_once("://") {
            if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-') {
                return Ok(Location::file(text));
            }
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() || key.ends_with('/') {
                return Err(Error::invalid(format!("location {text}: write {scheme}://BUCKET/PREFIX/NAME.sheaf (a bucket and an object name)")));
            }
            if key.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                return Err(Error::invalid(format!("location {text}: the object name has an empty, '.' or '..' part")));
            }
            let (store, name) = schemes.resolve(&scheme.to_ascii_lowercase(), bucket, key)?;
            return Ok(Location { store, name, lock: None });
        }
        Ok(Location::file(text))
    }

    /// A stripe file at `path`.
    pub fn file(path: impl Into<PathBuf>) -> Location {
        let path: PathBuf = path.into();
        Location { store: Arc::new(LocalStore), name: path.to_string_lossy().into_owned(), lock: None }
    }

    /// The null target: stripes are counted and discarded.
    pub fn null() -> Location {
        Location { store: Arc::new(NullStore), name: "nul".into(), lock: None }
    }

    /// `name` in `store`.
    pub fn new(store: Arc<dyn Store>, name: impl Into<String>) -> Location {
        Location { store, name: name.into(), lock: None }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The name inside the store.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it can do.
    pub fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    /// Whether a stripe's expected size shapes how it is written here (the part size of an
    /// upload, and with it the memory parts in flight take).
    pub fn wants_size(&self) -> bool {
        self.store.sink_memory(1 << 50) > self.store.sink_memory(0)
    }

    /// Whether stripes written here cannot be read back (`nul`).
    pub fn is_null(&self) -> bool {
        !self.capabilities().readable
    }

    /// Where it is, for messages and the manifest (a path made absolute, or a URL).
    pub fn display(&self) -> String {
        self.store.describe(&self.name)
    }

    /// The last part of the name (a file name, an object's base name), as stored in the manifest.
    pub fn file_name(&self) -> String {
        self.name.rsplit('/').next().unwrap_or_default().to_string()
    }

    /// This location with every byte written to it or read from it, and from its siblings, held
    /// to `limit` (shared with whatever else holds it): `--max-rate`.
    pub fn throttled(&self, limit: &Arc<RateLimit>) -> Location {
        Location { store: Arc::new(Throttled::new(self.store.clone(), limit.clone())), name: self.name.clone(), lock: self.lock }
    }

    /// The stripe called `name` beside this one (same folder, same prefix).
    pub fn sibling(&self, name: &str) -> Location {
        Location { store: self.store.clone(), name: self.store.sibling(&self.name, name), lock: self.lock }
    }

    /// This location, its stripes written with `lock` (a locked repository's).
    pub fn with_lock(mut self, lock: Option<ObjectLock>) -> Location {
        self.lock = lock;
        self
    }

    /// Start writing a stripe here (with this location's lock, if any); see [`Store::create`].
    ///
    /// # Errors
    /// As [`Store::create`].
    pub fn create(&self, overwrite: bool, expected_bytes: u64) -> Result<Box<dyn StripeSink>> {
        self.store.create(&self.name, &WriteOptions { overwrite, expected_bytes, lock: self.lock, bulk: true, keep_unfinished: false })
    }

    /// Start writing a stripe here that is left unfinished, not removed, if the backup stops
    /// ([`WriteOptions::keep_unfinished`]).
    ///
    /// # Errors
    /// As [`Store::create`].
    pub fn create_resumable(&self, overwrite: bool, expected_bytes: u64) -> Result<Box<dyn StripeSink>> {
        self.store.create(&self.name, &WriteOptions { overwrite, expected_bytes, lock: self.lock, bulk: true, keep_unfinished: true })
    }

    /// The unfinished stripe a stopped backup left here, taken over; see [`Store::resume`].
    ///
    /// # Errors
    /// As [`Store::resume`].
    pub fn resume(&self, expected_bytes: u64) -> Result<Option<Box<dyn UnfinishedStripe>>> {
        self.store.resume(&self.name, &WriteOptions { overwrite: false, expected_bytes, lock: self.lock, bulk: true, keep_unfinished: true })
    }

    /// Open the published stripe here; see [`Store::open`].
    ///
    /// # Errors
    /// As [`Store::open`]; reading back from `nul` is refused.
    pub fn open(&self) -> Result<Box<dyn StripeSource>> {
        if self.is_null() {
            return Err(Error::invalid("a backup to nul wrote nothing: there is nothing to read back"));
        }
        self.store.open(&self.name)
    }

    /// Whether a published stripe is here.
    ///
    /// # Errors
    /// As [`Store::exists`].
    pub fn exists(&self) -> Result<bool> {
        self.store.exists(&self.name)
    }

    /// A key that is equal for two locations naming the same stripe (links and `..` resolved
    /// where the store can).
    pub fn identity(&self) -> String {
        self.store.identity(&self.name)
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// The write side of one stripe. Bytes go to a temporary place; [`StripeSink::sync`] makes them
/// durable, [`StripeSink::publish`] makes the stripe visible under its final name. Dropping a sink
/// that was not published removes what it wrote.
pub trait StripeSink: Send {
    /// Append bytes.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Target`] or [`crate::error::ErrorKind::NoSpace`].
    fn write_all(&mut self, buf: &[u8]) -> Result<()>;
    /// Flush and make durable what can be made durable before publishing.
    ///
    /// # Errors
    /// As `write_all`.
    fn sync(&mut self) -> Result<()>;
    /// Give the stripe its final name, durably.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Target`].
    fn publish(&mut self) -> Result<()>;
    /// Remove whatever was written, published or not (best effort).
    fn discard(&mut self);
    /// Bytes written so far.
    fn written(&self) -> u64;
    /// The bytes written so far end a frame. A resumable stripe that is sent in parts (an S3
    /// upload) ends a part only here, so that a later attempt can go on from any part it holds
    /// ([`Holding::Parts`]). Returns whether a part was ended (on its way to the store): a journal
    /// then records what it holds.
    ///
    /// # Errors
    /// As `write_all`.
    fn frame_end(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// Reserve room for about `bytes` up front (`--preallocate`, SQL Server's default where trace
    /// flag 3042 is off), trimmed to what was written when the stripe is synced. Returns whether
    /// anything was reserved: stores without the notion (objects, memory, `nul`) and filesystems
    /// that cannot (or have not the room) grow the stripe as it is written, as by default.
    ///
    /// # Errors
    /// Only what stops the stripe being written at all.
    fn reserve(&mut self, _bytes: u64) -> Result<bool> {
        Ok(false)
    }
}

/// A stripe a stopped backup left unfinished, held by this process ([`Store::resume`]): see what
/// it holds, then keep its first bytes and go on writing after them.
pub trait UnfinishedStripe: Send {
    /// What it holds, as written so far (no trailer).
    fn holds(&self) -> Holding<'_>;
    /// Keep its first `keep` bytes, drop the rest, and write on from there: the sink's
    /// [`StripeSink::written`] counts only the bytes written from now on. Where it holds
    /// [`Holding::Parts`], `keep` is 0 or one of their ends.
    ///
    /// # Errors
    /// It cannot be cut or written, or `keep` is not a place it can go on from.
    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>>;
    /// Remove what it holds (best effort): the backup it was left by is given up.
    fn abandon(self: Box<Self>);
}

/// What an [`UnfinishedStripe`] holds.
pub enum Holding<'a> {
    /// Bytes that can be read back (a file's `.partial`).
    Bytes(&'a dyn StripeSource),
    /// Parts the store holds whole but cannot read before they are published (an S3 upload in
    /// progress, Azure's uncommitted blocks, GCS's part objects): where each ends, in order, each
    /// received whole (TLS, or S3's signed payload hash, or GCS's CRC-32C). Each ends where a
    /// frame did ([`StripeSink::frame_end`]), or the stripe can go on from none.
    Parts(&'a [u64]),
}

/// The read side of one stripe: positional reads of a known length, and sequential streams.
pub trait StripeSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;
    /// Whether the stripe is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from `offset`.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Incomplete`] when the stripe ends before `offset + buf.len()`, else I/O.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Where it is, for messages.
    fn location(&self) -> &str;
    /// Bytes `start..end` in order. Stores with latency read ahead (bounded); the default reads
    /// straight into the caller's buffers with [`StripeSource::read_exact_at`].
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when `end` is past the stripe's length.
    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send + '_>> {
        let range = stream_range(self.location(), start, end, self.len())?;
        Ok(Box::new(Positional { src: self, pos: range.start, end: range.end }))
    }
}

/// `start..end` of a stripe of `len` bytes, for [`StripeSource::stream`]: refused when it runs
/// backwards or past the end.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] backwards, [`ErrorKind::Incomplete`] past the end.
pub fn stream_range(location: &str, start: u64, end: u64, len: u64) -> Result<std::ops::Range<u64>> {
    if end < start {
        return Err(Error::invalid(format!("stripe {location}: a stream from {start} to {end} runs backwards")));
    }
    checked_range(location, start, end - start, len)
}

/// `offset .. offset + n` when a stripe of `len` bytes holds it; else the error that names the stripe
/// as truncated. Every source checks its reads with it.
///
/// # Errors
/// [`ErrorKind::Incomplete`].
pub fn checked_range(location: &str, offset: u64, n: u64, len: u64) -> Result<std::ops::Range<u64>> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(offset..end),
        _ => Err(Error::incomplete(format!("stripe {location}: needs bytes {offset}..{} but is only {len} bytes long (truncated)", offset.saturating_add(n)))),
    }
}

/// Reads a range through positional reads, no copy in between.
struct Positional<'a, S: StripeSource + ?Sized> {
    src: &'a S,
    pos: u64,
    end: u64,
}

impl<S: StripeSource + ?Sized> Read for Positional<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.src.read_exact_at(&mut buf[..n], self.pos).map_err(into_io)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Carry a sheaf [`Error`] through an `io::Read`; [`from_io`] takes it back out.
pub fn into_io(e: Error) -> std::io::Error {
    std::io::Error::other(e)
}

/// The sheaf [`Error`] inside an `io::Error` made by [`into_io`], or the I/O error as such.
pub fn from_io(e: std::io::Error, what: impl FnOnce() -> String) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        match e.into_inner().map(|inner| inner.downcast::<Error>()) {
            Some(Ok(inner)) => return *inner,
            Some(Err(other)) => return Error::new(ErrorKind::Io, format!("{}: {other}", what())),
            None => unreachable!("checked above"),
        }
    }
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return Error::incomplete(format!("{}: ends early (truncated)", what()));
    }
    Error::io(ErrorKind::Io, what(), e)
}
