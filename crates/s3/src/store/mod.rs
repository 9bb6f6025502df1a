//! One bucket as a [`Store`]: stripes are objects.
//!
//! Writing: a multipart upload per stripe. Bytes fill a part buffer from a small pool of
//! `parts_in_flight + 1` buffers; a full part is handed to the upload as a payload that owns its
//! pool guard, so the buffer returns when the request ends, however it ends (success, failure after
//! the retries, abort). The writer waits while `parts_in_flight` parts are uploading: memory per
//! stripe is bounded by `(parts_in_flight + 1) × part_size`, which [`Store::sink_memory`] reports
//! for the budget. The object exists only once the upload completes ([`StripeSink::publish`]);
//! a sink dropped before that aborts its upload, so a failed backup leaves no object under a final
//! name and no open upload. (A killed process leaves an open upload, never an object; a bucket
//! lifecycle rule that aborts incomplete uploads cleans those up.)
//!
//! Reading: `HEAD` for the length and ETag, then ranged GETs pinned to that ETag (`If-Match`), so an
//! object replaced while being read is named, not mixed. [`StripeSource::stream`] keeps
//! `read_ahead` GETs of `read_block` bytes in flight.

use std::fmt;
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt};
use sheaf_core::storage::{no_lock, Capabilities, LockMode, ObjectVersion, Retention, Stored, StripeSink, StripeSource, WriteOptions};
use sheaf_core::{Error, ErrorKind, Result, Store};
use tokio::runtime::Runtime;

use crate::config::S3Options;
use crate::gcs::GcsWriter;
use crate::lock::{call_failed, S3Extra};

mod clients;
mod errors;
mod sink;
mod source;
pub(crate) use errors::*;
use sink::*;
use source::*;

/// A bucket of an S3-compatible store, an Azure Blob Storage container or a Google Cloud Storage
/// bucket: the same multipart writes and pinned ranged reads through `object_store`.
pub struct S3Store {
    /// `s3`, `az` or `gs`.
    scheme: &'static str,
    bucket: String,
    endpoint: String,
    client: Arc<dyn ObjectStore>,
    runtime: Arc<Runtime>,
    options: S3Options,
    redact: Redact,
    /// S3's own calls (Object Lock, versions); `None` for Azure and GCS.
    extra: Option<S3Extra>,
    /// Azure's numbered blocks (resumable stripes), and whether the credentials have signed the
    /// URLs they are sent on (set once they have); `None` for S3 and GCS.
    azure: Option<(crate::azure::AzureBlocks, OnceLock<bool>)>,
    /// GCS's JSON API uploads; `None` for S3 and Azure.
    gcs: Option<GcsWriter>,
    /// The client that sends the parts of uploads that carry a lock (with a checksum of each, as
    /// S3 requires), made for the first such upload. The locks themselves come with each write:
    /// repositories that share this bucket keep their own.
    checksummed: OnceLock<Arc<object_store::aws::AmazonS3>>,
    /// S3's credentials (`None` for Azure and GCS).
    credentials: Option<Arc<crate::credentials::Provider>>,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the client: it holds the credentials.
        write!(f, "S3Store({}://{} at {})", self.scheme, self.bucket, self.endpoint)
    }
}

impl Store for S3Store {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true, files: false }
    }

    fn describe(&self, name: &str) -> String {
        format!("{}://{}/{name}", self.scheme, self.bucket)
    }

    fn credentials(&self) -> Option<String> {
        let p = self.credentials.as_ref()?;
        let expires = self.handle().block_on(p.expires());
        Some(match expires.and_then(|t| t.duration_since(std::time::SystemTime::UNIX_EPOCH).ok()) {
            Some(t) => {
                let left = (t.as_secs() as i64).saturating_sub(sheaf_core::time::now_ms() / 1000).max(0);
                format!("{}: the credentials held expire at {} (in {} min; fetched again before then)", p.source(), sheaf_core::time::utc(t.as_secs() as i64), left / 60)
            }
            None => format!("{}: they do not expire", p.source()),
        })
    }

    fn sink_memory(&self, expected_bytes: u64) -> u64 {
        (self.options.parts_in_flight as u64 + 1) * self.options.part_size_for(expected_bytes)
    }

    fn resumable_memory(&self, expected_bytes: u64) -> u64 {
        // The bytes of a frame that does not end in a full part wait past it: a part at most.
        if self.can_resume() {
            self.options.part_size_for(expected_bytes)
        } else {
            0
        }
    }

    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        let (overwrite, expected_bytes) = (opts.overwrite, opts.expected_bytes);
        if opts.lock.is_some() && self.extra.is_none() {
            return Err(no_lock(&self.describe(name)));
        }
        let shown = self.describe(name);
        let path = self.path(name)?;
        // Azure starts a block blob upload without a request, and a GCS upload here starts only
        // once a part is full: a listing asks first whether the container or bucket is there and
        // the credentials are good, as S3 answers at the start.
        if self.scheme != "s3" {
            let client = self.client.clone();
            let p = path.clone();
            self.handle()
                .block_on(async move { client.list_with_delimiter(Some(&p)).await })
                .map_err(|e| map_err(e, &format!("cannot start uploading {shown}"), Side::Create, &self.redact))?;
        }
        // A GCS object that fits in one part goes in one request when published (its XML
        // multipart upload takes three, and some emulators have none); a larger one starts its
        // multipart upload when its first part is full.
        let lazy = self.scheme == "gs";
        let part_size = self.options.part_size_for(expected_bytes) as usize;
        if let (Some(w), true) = (&self.gcs, opts.keep_unfinished) {
            // A resumable stripe: its parts objects of their own, composed when published.
            if self.exists(name).map_err(|e| Error::new(ErrorKind::Target, e.message()))? && !overwrite {
                return Err(Error::new(ErrorKind::Target, format!("target {shown} already exists: remove it, choose another name, or pass --overwrite")));
            }
            let upload = crate::gcs::Composed::going_on(w.clone(), self.client.clone(), path.to_string(), 0);
            let mut sink = S3Sink::new(self, path, shown, Some(Box::new(upload)), part_size, overwrite);
            sink.keep_unfinished = true;
            return Ok(Box::new(sink));
        }
        if lazy {
            if self.exists(name).map_err(|e| Error::new(ErrorKind::Target, e.message()))? && !overwrite {
                return Err(Error::new(ErrorKind::Target, format!("target {shown} already exists: remove it, choose another name, or pass --overwrite")));
            }
            return Ok(Box::new(S3Sink::new(self, path, shown, None, part_size, overwrite)));
        }
        // Starting the upload first gives the server's own words for a missing bucket or bad
        // credentials (a HEAD's 403 has no body to tell them apart).
        let client = self.client.clone();
        let p = path.clone();
        // Bulk (stripes, WAL) in the storage class asked for; records in the bucket's default.
        let class = self.options.storage_class.filter(|_| opts.bulk && self.scheme == "s3").map(crate::config::StorageClass::as_str);
        let started = match (&opts.lock, &self.extra) {
            (Some(lock), Some(extra)) => {
                let parts = self.checksummed()?;
                self.handle().block_on(async { extra.start_locked(parts, name, lock, class).await.map(|u| Box::new(u) as Box<dyn MultipartUpload>) })
            }
            // A resumable stripe in Azure: blocks named in order, so that a later attempt finds them.
            _ if opts.keep_unfinished && self.azure_blocks().is_some() => {
                let blocks = self.azure_blocks().expect("just asked").clone();
                Ok(Box::new(crate::azure::AzureUpload::going_on(blocks, p, 0)) as Box<dyn MultipartUpload>)
            }
            _ => {
                let mut put = object_store::PutMultipartOptions::default();
                if let Some(c) = class {
                    put.attributes.insert(object_store::Attribute::StorageClass, c.into());
                }
                self.handle().block_on(async move { client.put_multipart_opts(&p, put).await })
            }
        };
        let mut upload = started.map_err(|e| map_err(e, &format!("cannot start uploading {shown}"), Side::Create, &self.redact))?;
        let exists = match self.exists(name) {
            Ok(x) => x,
            Err(e) => {
                let _ = self.handle().block_on(async { upload.abort().await });
                return Err(Error::new(ErrorKind::Target, e.message()));
            }
        };
        if exists && !overwrite {
            let _ = self.handle().block_on(async { upload.abort().await });
            return Err(Error::new(ErrorKind::Target, format!("target {shown} already exists: remove it, choose another name, or pass --overwrite")));
        }
        let mut sink = S3Sink::new(self, path, shown, Some(upload), part_size, overwrite);
        sink.keep_unfinished = opts.keep_unfinished;
        Ok(Box::new(sink))
    }

    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn sheaf_core::storage::UnfinishedStripe>>> {
        if opts.lock.is_some() || !self.can_resume() {
            return Ok(None);
        }
        if let Some(blocks) = self.azure_blocks() {
            return self.resume_blocks(blocks, name, opts);
        }
        if let Some(w) = &self.gcs {
            return self.resume_pieces(w, name, opts);
        }
        let extra = self.extra()?;
        let shown = self.describe(name);
        let path = self.path(name)?;
        let key = path.to_string();
        let failed = |what: &str, e: &crate::lock::Refusal| call_failed(&format!("{what} {shown}"), e, |t| self.redact.scrub(t));
        // The upload the stopped backup left open, and the parts it holds: 1, 2, ... with none
        // missing (a part in flight when the backup stopped may be absent while later ones
        // landed, and what follows a gap is not the stripe's next bytes), each large enough to
        // stay a part that is not the last. The others are named, for going on to set aside.
        let (mut upload, mut ends) = (None, Vec::new());
        if let Some(id) = self.handle().block_on(extra.open_upload(&key)).map_err(|e| failed("cannot list the uploads of", &e))? {
            let mut parts = self.handle().block_on(extra.parts(&key, &id)).map_err(|e| failed("cannot list the parts of", &e))?;
            let past;
            (ends, past) = sink::unbroken_run(&parts.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>());
            parts.truncate(ends.len());
            upload = Some(sink::OpenUpload { id, kept: parts, past });
        }
        let class = self.options.storage_class.filter(|_| opts.bulk).map(crate::config::StorageClass::as_str);
        let mut sink = S3Sink::new(self, path, shown, None, self.options.part_size_for(opts.expected_bytes) as usize, opts.overwrite);
        sink.keep_unfinished = true;
        Ok(Some(Box::new(sink::S3Unfinished { sink, client: extra.client(), upload, ends, class })))
    }

    fn can_resume(&self) -> bool {
        (self.scheme == "s3" && self.extra.is_some()) || self.azure_blocks().is_some() || self.gcs.is_some()
    }

    fn abort_uploads(&self, prefix: &str) -> Result<usize> {
        use object_store::multipart::MultipartStore;
        // GCS: the parts of resumable stripes (objects hidden from listings) and a publish's steps.
        if self.gcs.is_some() {
            let pieces: Vec<String> = self.list_all(prefix)?.into_iter().map(|o| o.name).filter(|n| crate::gcs::is_piece(n)).collect();
            let n = pieces.len();
            let client = self.client.clone();
            self.handle()
                .block_on(async move { crate::gcs::remove_all(&client, pieces).await })
                .map_err(|e| map_err(e, &format!("cannot remove the parts left under {}", self.describe(prefix)), Side::Write, &self.redact))?;
            return Ok(n);
        }
        // Only S3's uploads outlive their writer besides: Azure drops uncommitted blocks by itself
        // after a week.
        let Some(extra) = self.extra.as_ref().filter(|_| self.scheme == "s3") else { return Ok(0) };
        let shown = self.describe(prefix);
        let open = self.handle().block_on(extra.open_uploads(prefix)).map_err(|e| call_failed(&format!("cannot list the uploads under {shown}"), &e, |t| self.redact.scrub(t)))?;
        let client = extra.client();
        for (k, id) in &open {
            let (c, p, id) = (client.clone(), self.path(k)?, id.clone());
            self.handle()
                .block_on(async move { c.abort_multipart(&p, &id).await })
                .map_err(|e| map_err(e, &format!("cannot abort the upload of {}", self.describe(k)), Side::Write, &self.redact))?;
        }
        Ok(open.len())
    }

    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        Ok(Box::new(self.source(name)?))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = self.path(name)?;
        let client = self.client.clone();
        match self.handle().block_on(async move { client.head(&path).await }) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(map_err(e, &format!("cannot look at {}", self.describe(name)), Side::Read, &self.redact)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        let mut all = self.list_all(prefix)?;
        // A resumable stripe's parts in GCS are pieces of an object not published yet.
        if self.gcs.is_some() {
            all.retain(|o| !crate::gcs::is_piece(&o.name));
        }
        Ok(all)
    }

    fn retention(&self) -> Option<&dyn Retention> {
        self.extra.is_some().then_some(self as &dyn Retention)
    }

    fn delete(&self, name: &str) -> Result<()> {
        let path = self.path(name)?;
        let client = self.client.clone();
        match self.handle().block_on(async move { client.delete(&path).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_err(e, &format!("cannot remove {}", self.describe(name)), Side::Write, &self.redact)),
        }
    }
}

impl S3Store {
    /// Every object whose name starts with `prefix`, with its size, sorted.
    fn list_all(&self, prefix: &str) -> Result<Vec<Stored>> {
        // object_store lists by whole path segments: list the folder, then filter by the prefix.
        let dir = prefix.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let dir_path = if dir.is_empty() { None } else { Some(self.path(dir)?) };
        let client = self.client.clone();
        let items: Vec<_> = self.handle().block_on(async move { client.list(dir_path.as_ref()).collect::<Vec<_>>().await });
        let mut out = Vec::new();
        for item in items {
            let meta = item.map_err(|e| map_err(e, &format!("cannot list {}", self.describe(prefix)), Side::Read, &self.redact))?;
            let key = meta.location.to_string();
            if key.starts_with(prefix) {
                let tag = meta.e_tag.clone().unwrap_or_else(|| meta.last_modified.timestamp_nanos_opt().unwrap_or_default().to_string());
                out.push(Stored { name: key, size: meta.size, modified: meta.last_modified.timestamp(), tag });
            }
        }
        out.sort();
        Ok(out)
    }

    /// [`Store::resume`] in GCS: the unbroken run of the stripe's part objects from the first,
    /// each a whole part.
    fn resume_pieces(&self, w: &GcsWriter, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn sheaf_core::storage::UnfinishedStripe>>> {
        let shown = self.describe(name);
        let path = self.path(name)?;
        let key = path.to_string();
        let mut held: Vec<(usize, u64)> =
            self.list_all(&format!("{key}{}", crate::gcs::PART_MARK))?.iter().filter_map(|o| Some((crate::gcs::part_number(&key, &o.name)?, o.size))).collect();
        held.sort_unstable();
        let (ends, past) = sink::unbroken_run(&held);
        let mut sink = S3Sink::new(self, path, shown, None, self.options.part_size_for(opts.expected_bytes) as usize, opts.overwrite);
        sink.keep_unfinished = true;
        Ok(Some(Box::new(sink::GcsUnfinished { sink, writer: w.clone(), key, ends, past })))
    }
}

impl S3Store {
    /// Azure's numbered blocks, where the credentials can sign the URLs they go on (an account
    /// key or a token; not a SAS token): `None` elsewhere, and then a stopped backup starts afresh.
    fn azure_blocks(&self) -> Option<&crate::azure::AzureBlocks> {
        let (blocks, signs) = self.azure.as_ref()?;
        // Only a success is kept: a token's delegation key that could not be fetched this once is
        // asked for again next time.
        if signs.get().is_none() && self.handle().block_on(blocks.can_sign()) {
            let _ = signs.set(true);
        }
        signs.get().is_some().then_some(blocks)
    }

    /// [`Store::resume`] in Azure: the unbroken run of numbered blocks from the first, each a whole
    /// part, that the blob holds uncommitted.
    fn resume_blocks(&self, blocks: &crate::azure::AzureBlocks, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn sheaf_core::storage::UnfinishedStripe>>> {
        let shown = self.describe(name);
        let path = self.path(name)?;
        let held = self.handle().block_on(blocks.uncommitted(&path)).map_err(|e| map_err(e, &format!("cannot list the blocks of {shown}"), Side::Read, &self.redact))?;
        let (ends, past) = sink::unbroken_run(&held);
        let mut sink = S3Sink::new(self, path, shown, None, self.options.part_size_for(opts.expected_bytes) as usize, opts.overwrite);
        sink.keep_unfinished = true;
        Ok(Some(Box::new(sink::AzureUnfinished { sink, blocks: blocks.clone(), ends, past })))
    }

    /// Stripe `name`, to read.
    fn source(&self, name: &str) -> Result<S3Source> {
        let shown = self.describe(name);
        let path = self.path(name)?;
        let client = self.client.clone();
        let p = path.clone();
        let meta = self.handle().block_on(async move { client.head(&p).await }).map_err(|e| map_err(e, &format!("stripe {shown}"), Side::Read, &self.redact))?;
        Ok(S3Source {
            redact: self.redact.clone(),
            handle: self.handle().clone(),
            client: self.client.clone(),
            path,
            shown,
            len: meta.size,
            etag: meta.e_tag,
            read_ahead: self.options.read_ahead,
            block: self.options.read_block,
        })
    }
}

/// S3 Object Lock and the versions of a versioned bucket (S3 only: Azure and GCS have their own
/// immutability, which sheaf leaves to them).
impl Retention for S3Store {
    fn lock_enabled(&self) -> Result<bool> {
        let extra = self.extra()?;
        let what = format!("cannot ask whether {}://{} has Object Lock", self.scheme, self.bucket);
        self.handle().block_on(extra.lock_enabled()).map_err(|e| call_failed(&what, &e, |t| self.redact.scrub(t)))
    }

    fn extend_lock(&self, name: &str, mode: LockMode, until: i64) -> Result<()> {
        let extra = self.extra()?;
        let what = format!("cannot lock {} until {}", self.describe(name), sheaf_core::time::utc(until));
        self.handle().block_on(extra.put_retention(name, mode, until)).map_err(|e| call_failed(&what, &e, |t| self.redact.scrub(t)))
    }

    fn lock_of(&self, name: &str) -> Result<Option<(LockMode, i64)>> {
        let extra = self.extra()?;
        let what = format!("cannot read the lock of {}", self.describe(name));
        self.handle().block_on(extra.retention(name)).map_err(|e| call_failed(&what, &e, |t| self.redact.scrub(t)))
    }

    fn versions(&self, prefix: &str) -> Result<Vec<ObjectVersion>> {
        let extra = self.extra()?;
        let what = format!("cannot list the versions under {}", self.describe(prefix));
        self.handle().block_on(extra.versions(prefix)).map_err(|e| call_failed(&what, &e, |t| self.redact.scrub(t)))
    }

    fn delete_version(&self, name: &str, version: &str) -> Result<()> {
        let extra = self.extra()?;
        let what = format!("cannot remove version {version} of {}", self.describe(name));
        self.handle().block_on(extra.delete_version(name, version)).map_err(|e| call_failed(&what, &e, |t| self.redact.scrub(t)))
    }
}
