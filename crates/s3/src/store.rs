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

use std::collections::VecDeque;
use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::client::HttpConnector;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, Certificate, ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};
use sheaf_core::pipeline::{Pool, PoolBuf};
use sheaf_core::storage::{checked_range, into_io, no_lock, Capabilities, LockMode, ObjectVersion, Stored, StripeSink, StripeSource, WriteLock};
use sheaf_core::{Error, ErrorKind, Result, Store};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use crate::config::{Resolved, S3Options, MAX_PARTS};
use crate::gcs::GcsWriter;
use crate::lock::{call_failed, S3Extra};

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
    /// GCS's JSON API uploads; `None` for S3 and Azure.
    gcs: Option<GcsWriter>,
    /// Once a locked repository is opened here: the lock, and the client that sends the parts of
    /// uploads that carry it.
    locked: OnceLock<(Arc<object_store::aws::AmazonS3>, WriteLock)>,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the client: it holds the credentials.
        write!(f, "S3Store({}://{} at {})", self.scheme, self.bucket, self.endpoint)
    }
}

/// Which side of a request failed: it decides the exit code and what "not found" means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Starting an upload: not found means no such bucket.
    Create,
    /// Parts, completion, deletes: not found means the upload (or bucket) went away.
    Write,
    /// HEAD and GET.
    Read,
}

/// Values that must never appear in a message (the secret key, a session token), and the parts of
/// S3 error bodies that can quote signed headers (AWS's SignatureDoesNotMatch echoes the canonical
/// request, token included).
#[derive(Clone, Default)]
pub(crate) struct Redact(Arc<Vec<String>>, &'static str);

/// Where each cloud's credentials come from, for the messages that say to check them.
pub(crate) const AWS_CREDENTIALS: &str = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile";
pub(crate) const AZURE_CREDENTIALS: &str = "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN, or AZURE_CLIENT_ID / AZURE_CLIENT_SECRET / AZURE_TENANT_ID)";
pub(crate) const GCS_CREDENTIALS: &str = "GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT (a service account key file)";

impl Redact {
    fn hint(&self) -> &'static str {
        if self.1.is_empty() {
            AWS_CREDENTIALS
        } else {
            self.1
        }
    }

    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for tag in ["CanonicalRequest", "CanonicalRequestBytes", "StringToSign", "StringToSignBytes"] {
            let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
            let mut kept = String::with_capacity(out.len());
            let mut rest = out.as_str();
            while let Some(a) = rest.find(&open) {
                kept.push_str(&rest[..a]);
                kept.push_str(&open);
                kept.push_str("(removed)");
                kept.push_str(&close);
                // An unclosed element is cut to the end.
                rest = rest[a..].find(&close).map_or("", |b| &rest[a + b + close.len()..]);
            }
            kept.push_str(rest);
            out = kept;
        }
        for secret in self.0.iter().filter(|s| s.len() >= 4) {
            out = out.replace(secret.as_str(), "(redacted)");
        }
        out
    }
}

/// Whether a failure of the object store may pass if tried again, by the client's error variants
/// (never the text): a connection that failed or was cut, a request that timed out. The client
/// retried these already (with backoff, within its budget); the caller may still try later.
fn is_transient(e: &object_store::Error) -> bool {
    use object_store::client::HttpErrorKind as K;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<object_store::client::HttpError>() {
            return matches!(h.kind(), K::Connect | K::Request | K::Timeout | K::Interrupted);
        }
        cause = c.source();
    }
    false
}

/// What went wrong, in words a DBA can act on, with the kind that picks the exit code and whether
/// it is transient. The message holds the whole cause chain, scrubbed of secrets; the raw cause is
/// not kept beside it, since it would show them again.
fn map_err(e: object_store::Error, what: &str, side: Side, redact: &Redact) -> Error {
    let transient = is_transient(&e);
    classify(e, what, side, redact).transient(transient)
}

fn classify(e: object_store::Error, what: &str, side: Side, redact: &Redact) -> Error {
    use object_store::Error as E;
    // The whole chain: "error sending request" alone hides the cause (a certificate, a refusal).
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    let text = redact.scrub(&text);
    let kind = if side == Side::Read { ErrorKind::Io } else { ErrorKind::Target };
    const NO_BUCKET: &str = "the bucket (Azure: the container) does not exist (create it first, or check the name and endpoint)";
    match e {
        E::NotFound { .. } if side == Side::Create => Error::new(kind, format!("{what}: {NO_BUCKET}: {text}")),
        E::NotFound { .. } if side == Side::Write => Error::new(
            kind,
            format!("{what}: the upload or its bucket no longer exists (a lifecycle rule that aborts uploads, or someone removed it): {text}"),
        ),
        E::NotFound { .. } => Error::incomplete(format!("{what} does not exist")),
        E::PermissionDenied { .. } => Error::new(
            kind,
            format!("{what}: access denied (403): the credentials are wrong, or lack permission on this bucket (check the keys, the profile and the bucket's policy): {text}"),
        ),
        E::Unauthenticated { .. } => Error::new(
            kind,
            format!("{what}: the server rejected the credentials (check {}, and the clock): {text}", redact.hint()),
        ),
        E::Precondition { .. } => {
            Error::incomplete(format!("{what}: the object changed while it was being read (it was replaced): read it again"))
        }
        _ if text.contains("NoSuchBucket") => Error::new(kind, format!("{what}: {NO_BUCKET}: {text}")),
        _ if ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthenticationFailed", "AuthorizationFailure"].iter().any(|c| text.contains(c)) => Error::new(
            kind,
            format!("{what}: the server rejected the credentials (check {}): {text}", redact.hint()),
        ),
        _ if text.contains("AccessDenied") => Error::new(kind, format!("{what}: access denied: {text}")),
        _ if text.contains("Quota") || text.contains("EntityTooLarge") => {
            Error::new(ErrorKind::NoSpace, format!("{what}: the bucket's quota or size limit is reached: {text}"))
        }
        _ => Error::new(kind, format!("{what}: {text}")),
    }
}

/// The retries and HTTP client options every cloud's store shares: `options`' limits, plain HTTP
/// where allowed, and a CA bundle's certificates besides the system's.
fn client_setup(allow_http: bool, ca_bundle: Option<&std::path::Path>, options: &S3Options) -> Result<(RetryConfig, ClientOptions)> {
    let retry = RetryConfig {
        backoff: BackoffConfig { init_backoff: std::time::Duration::from_millis(100), max_backoff: std::time::Duration::from_secs(10), base: 2.0 },
        max_retries: options.max_retries,
        retry_timeout: options.retry_timeout,
    };
    let mut client_options = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout(options.request_timeout)
        .with_connect_timeout(std::time::Duration::from_secs(10));
    if let Some(path) = ca_bundle {
        let pem = std::fs::read(path)
            .map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read the CA bundle {} (--s3-ca-bundle or AWS_CA_BUNDLE)", path.display()), e))?;
        let certs = Certificate::from_pem_bundle(&pem)
            .map_err(|e| Error::invalid(format!("CA bundle {}: not PEM certificates: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Error::invalid(format!("CA bundle {} holds no certificate", path.display())));
        }
        for c in certs {
            client_options = client_options.with_root_certificate(c);
        }
    }
    Ok((retry, client_options))
}

impl S3Store {
    /// A store for `bucket`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn new(bucket: &str, r: &Resolved, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        let (retry, client_options) = client_setup(r.allow_http, r.ca_bundle.as_deref(), options)?;
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&r.region)
            .with_allow_http(r.allow_http)
            .with_virtual_hosted_style_request(!r.path_style)
            .with_retry(retry);
        if let Some(e) = &r.endpoint {
            b = b.with_endpoint(e);
        }
        // Over HTTPS, TLS already protects the body in transit and every frame carries its own
        // CRC-32C, checked on every read: hashing each part with SHA-256 for the signature would
        // only spend CPU the compressors need (measured in docs/bench/s3-sf1). Over plain HTTP the
        // signature is all the body has, so it stays signed.
        let https = r.endpoint.as_deref().is_none_or(|e| e.starts_with("https://"));
        b = b.with_unsigned_payload(https);
        if let (Some(k), Some(s)) = (&r.access_key_id, &r.secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
        }
        if let Some(t) = &r.session_token {
            b = b.with_token(t);
        }
        let client = Arc::new(b.clone().with_client_options(client_options.clone()).build().map_err(|e| Error::invalid(format!("S3 configuration for bucket {bucket}: {e}")))?);
        let extra = S3Extra::new(b, client_options, client.clone())?;
        let endpoint = r.endpoint.clone().unwrap_or_else(|| format!("AWS {}", r.region));
        let secrets = [r.secret_access_key.clone(), r.session_token.clone()].into_iter().flatten().collect();
        Ok(S3Store {
            scheme: "s3",
            bucket: bucket.into(),
            endpoint,
            client,
            runtime,
            options: options.clone(),
            redact: Redact(Arc::new(secrets), AWS_CREDENTIALS),
            extra: Some(extra),
            gcs: None,
            locked: OnceLock::new(),
        })
    }

    /// A store for Azure Blob Storage container `container`, configured by the standard
    /// `AZURE_*` variables `env` gives: the account and its key, a SAS token, or a service
    /// principal (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, `AZURE_TENANT_ID`), a federated token
    /// or managed identity; `AZURE_STORAGE_USE_EMULATOR=true` for Azurite, `AZURE_STORAGE_ENDPOINT`
    /// for another endpoint.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn azure(container: &str, env: &dyn Fn(&str) -> Option<String>, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        const KEYS: [&str; 12] = [
            "AZURE_STORAGE_ACCOUNT_NAME",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_STORAGE_TOKEN",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_TENANT_ID",
            "AZURE_AUTHORITY_HOST",
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_STORAGE_USE_EMULATOR",
            "AZURE_STORAGE_ENDPOINT",
            "AZURE_MSI_ENDPOINT",
        ];
        let mut b = MicrosoftAzureBuilder::new().with_container_name(container);
        let mut secrets = Vec::new();
        for k in KEYS {
            if let Some(v) = env(k) {
                let key = k.to_ascii_lowercase().parse().map_err(|e| Error::invalid(format!("{k}: {e}")))?;
                if matches!(k, "AZURE_STORAGE_ACCOUNT_KEY" | "AZURE_STORAGE_SAS_TOKEN" | "AZURE_STORAGE_TOKEN" | "AZURE_CLIENT_SECRET") {
                    secrets.push(v.clone());
                }
                b = b.with_config(key, v);
            }
        }
        let emulator = env("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| v == "true" || v == "1");
        let endpoint = env("AZURE_STORAGE_ENDPOINT");
        let http = emulator || endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
        let (retry, client_options) = client_setup(http, None, options)?;
        let client = b.with_retry(retry).with_client_options(client_options).build().map_err(|e| Error::invalid(format!("Azure configuration for container {container}: {e}")))?;
        let endpoint = endpoint.unwrap_or_else(|| if emulator { "Azurite".into() } else { "Azure".into() });
        Ok(S3Store { scheme: "az", bucket: container.into(), endpoint, client: Arc::new(client), runtime, options: options.clone(), redact: Redact(Arc::new(secrets), AZURE_CREDENTIALS), extra: None, gcs: None, locked: OnceLock::new() })
    }

    /// A store for Google Cloud Storage bucket `bucket`, configured by the standard variables
    /// `env` gives: `GOOGLE_APPLICATION_CREDENTIALS` (or `GOOGLE_SERVICE_ACCOUNT`, a key file;
    /// `GOOGLE_SERVICE_ACCOUNT_KEY`, its JSON), else the instance's own account; `GOOGLE_BASE_URL`
    /// (or the key file's `gcs_base_url`) for another endpoint, such as an emulator.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the client cannot be configured.
    pub fn gcs(bucket: &str, env: &dyn Fn(&str) -> Option<String>, options: &S3Options, runtime: Arc<Runtime>) -> Result<Self> {
        let mut b = GoogleCloudStorageBuilder::new().with_bucket_name(bucket);
        if let Some(v) = env("GOOGLE_SERVICE_ACCOUNT").or_else(|| env("GOOGLE_SERVICE_ACCOUNT_PATH")) {
            b = b.with_service_account_path(v);
        }
        if let Some(v) = env("GOOGLE_SERVICE_ACCOUNT_KEY") {
            b = b.with_service_account_key(v);
        }
        if let Some(v) = env("GOOGLE_APPLICATION_CREDENTIALS") {
            b = b.with_application_credentials(v);
        }
        // An emulator's address comes from the variable or the key file's gcs_base_url.
        let key_file_url = ["GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_APPLICATION_CREDENTIALS"]
            .iter()
            .filter_map(|k| env(k))
            .filter_map(|p| std::fs::read(p).ok())
            .filter_map(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .find_map(|v| v["gcs_base_url"].as_str().map(str::to_string));
        let base = env("GOOGLE_BASE_URL").or(key_file_url);
        if let Some(u) = env("GOOGLE_BASE_URL") {
            b = b.with_base_url(&u);
        }
        let http = base.as_deref().is_some_and(|u| u.starts_with("http://"));
        let (retry, client_options) = client_setup(http, None, options)?;
        let client = b.with_retry(retry).with_client_options(client_options.clone()).build().map_err(|e| Error::invalid(format!("Google Cloud Storage configuration for bucket {bucket}: {e}")))?;
        let connection = object_store::client::ReqwestConnector::default().connect(&client_options).map_err(|e| Error::invalid(format!("GCS client: {e}")))?;
        let writer = GcsWriter::new(connection, client.credentials().clone(), base.as_deref().unwrap_or("https://storage.googleapis.com"), bucket);
        let endpoint = base.unwrap_or_else(|| "Google Cloud Storage".into());
        Ok(S3Store {
            scheme: "gs",
            bucket: bucket.into(),
            endpoint,
            client: Arc::new(client),
            runtime,
            options: options.clone(),
            redact: Redact(Arc::new(Vec::new()), GCS_CREDENTIALS),
            extra: None,
            gcs: Some(writer),
            locked: OnceLock::new(),
        })
    }

    fn path(&self, name: &str) -> Result<Path> {
        Path::parse(name).map_err(|e| Error::invalid(format!("{}: not a usable object name: {e}", self.describe(name))))
    }

    fn handle(&self) -> &Handle {
        self.runtime.handle()
    }

    /// The lock an upload of `name` carries: the one set, but for the names it spares.
    fn lock_for(&self, name: &str) -> Option<&(Arc<object_store::aws::AmazonS3>, WriteLock)> {
        self.locked.get().filter(|(_, lock)| !lock.spare.iter().any(|s| name.ends_with(s.as_str())))
    }

    /// S3's own calls, or the refusal for Azure and GCS.
    fn extra(&self) -> Result<&S3Extra> {
        self.extra.as_ref().ok_or_else(|| no_lock(&format!("{}://{}", self.scheme, self.bucket)))
    }
}

impl Store for S3Store {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true }
    }

    fn describe(&self, name: &str) -> String {
        format!("{}://{}/{name}", self.scheme, self.bucket)
    }

    fn sink_memory(&self, expected_bytes: u64) -> u64 {
        (self.options.parts_in_flight as u64 + 1) * self.options.part_size_for(expected_bytes)
    }

    fn create(&self, name: &str, overwrite: bool, expected_bytes: u64) -> Result<Box<dyn StripeSink>> {
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
        let started = match (self.lock_for(name), &self.extra) {
            (Some((parts, lock)), Some(extra)) => {
                self.handle().block_on(async { extra.start_locked(parts.clone(), name, lock).await.map(|u| Box::new(u) as Box<dyn MultipartUpload>) })
            }
            _ => self.handle().block_on(async move { client.put_multipart(&p).await }),
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
            return Err(Error::new(
                ErrorKind::Target,
                format!("target {shown} already exists: remove it, choose another name, or pass --overwrite"),
            ));
        }
        Ok(Box::new(S3Sink::new(self, path, shown, Some(upload), part_size, overwrite)))
    }

    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        let shown = self.describe(name);
        let path = self.path(name)?;
        let client = self.client.clone();
        let p = path.clone();
        let meta = self
            .handle()
            .block_on(async move { client.head(&p).await })
            .map_err(|e| map_err(e, &format!("stripe {shown}"), Side::Read, &self.redact))?;
        Ok(Box::new(S3Source {
            redact: self.redact.clone(),
            handle: self.handle().clone(),
            client: self.client.clone(),
            path,
            shown,
            len: meta.size,
            etag: meta.e_tag,
            read_ahead: self.options.read_ahead,
            block: self.options.read_block,
        }))
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
                out.push(Stored { name: key, size: meta.size, modified: meta.last_modified.timestamp() });
            }
        }
        out.sort();
        Ok(out)
    }

    fn lock_enabled(&self) -> Result<bool> {
        let extra = self.extra()?;
        let what = format!("cannot ask whether {}://{} has Object Lock", self.scheme, self.bucket);
        self.handle().block_on(extra.lock_enabled()).map_err(|e| call_failed(&what, &self.redact.scrub(&e)))
    }

    fn lock_writes(&self, lock: &WriteLock) -> Result<()> {
        if let Some((_, held)) = self.locked.get() {
            return if held.mode == lock.mode {
                Ok(())
            } else {
                Err(Error::invalid(format!("{}://{} holds repositories locked in both {} and {} mode: use one mode per bucket", self.scheme, self.bucket, held.mode, lock.mode)))
            };
        }
        let client = self.extra()?.checksummed()?;
        let _ = self.locked.set((client, lock.clone()));
        Ok(())
    }

    fn extend_lock(&self, name: &str, mode: LockMode, until: i64) -> Result<()> {
        let extra = self.extra()?;
        let what = format!("cannot lock {} until {}", self.describe(name), sheaf_core::time::utc(until));
        self.handle().block_on(extra.put_retention(name, mode, until)).map_err(|e| call_failed(&what, &self.redact.scrub(&e)))
    }

    fn lock_of(&self, name: &str) -> Result<Option<(LockMode, i64)>> {
        let extra = self.extra()?;
        let what = format!("cannot read the lock of {}", self.describe(name));
        self.handle().block_on(extra.retention(name)).map_err(|e| call_failed(&what, &self.redact.scrub(&e)))
    }

    fn versions(&self, prefix: &str) -> Result<Vec<ObjectVersion>> {
        let extra = self.extra()?;
        let what = format!("cannot list the versions under {}", self.describe(prefix));
        self.handle().block_on(extra.versions(prefix)).map_err(|e| call_failed(&what, &self.redact.scrub(&e)))
    }

    fn delete_version(&self, name: &str, version: &str) -> Result<()> {
        let extra = self.extra()?;
        let what = format!("cannot remove version {version} of {}", self.describe(name));
        self.handle().block_on(extra.delete_version(name, version)).map_err(|e| call_failed(&what, &self.redact.scrub(&e)))
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

type PartResult = std::result::Result<(), object_store::Error>;

/// One stripe being uploaded.
struct S3Sink {
    redact: Redact,
    handle: Handle,
    client: Arc<dyn ObjectStore>,
    path: Path,
    shown: String,
    upload: Option<Box<dyn MultipartUpload>>,
    /// Its upload is not started yet: it starts when the first part is full, and an object that
    /// fits in one part is published by one request.
    lazy: bool,
    /// GCS's JSON API writer, which starts and sends lazy uploads there.
    gcs: Option<GcsWriter>,
    pool: Arc<Pool>,
    current: Option<PoolBuf>,
    filled: usize,
    in_flight: VecDeque<JoinHandle<PartResult>>,
    max_in_flight: usize,
    parts: u64,
    written: u64,
    /// The last bytes written (a stripe's or blob's trailer, which names its content), to know
    /// our own object when a completion's answer was lost.
    tail: Vec<u8>,
    published: bool,
    overwrite: bool,
}

/// How many of the last bytes written [`S3Sink`] keeps.
const TAIL_KEPT: usize = 64;

impl S3Sink {
    /// A sink for `path` in `store`: its upload started, or (`None`) to be started when its first
    /// part is full, or never if it fits in one.
    fn new(store: &S3Store, path: Path, shown: String, upload: Option<Box<dyn MultipartUpload>>, part_size: usize, overwrite: bool) -> Self {
        S3Sink {
            redact: store.redact.clone(),
            handle: store.handle().clone(),
            client: store.client.clone(),
            path,
            shown,
            lazy: upload.is_none(),
            gcs: store.gcs.clone(),
            upload,
            pool: Pool::new(store.options.parts_in_flight + 1, part_size),
            current: None,
            filled: 0,
            in_flight: VecDeque::new(),
            max_in_flight: store.options.parts_in_flight,
            parts: 0,
            written: 0,
            tail: Vec::with_capacity(2 * TAIL_KEPT),
            published: false,
            overwrite,
        }
    }

    fn part_failed(&self, e: object_store::Error) -> Error {
        map_err(e, &format!("uploading part of {}", self.shown), Side::Write, &self.redact)
    }

    /// Wait for the oldest part in flight; its buffer is back in the pool once its request ended.
    fn wait_oldest(&mut self) -> Result<()> {
        let Some(h) = self.in_flight.pop_front() else { return Ok(()) };
        match self.handle.block_on(h) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.part_failed(e)),
            Err(e) => Err(Error::new(ErrorKind::Target, format!("uploading part of {}: the upload task failed: {e}", self.shown))),
        }
    }

    /// Send the part being filled.
    fn send_part(&mut self) -> Result<()> {
        let Some(mut buf) = self.current.take() else { return Ok(()) };
        buf.set_len(self.filled);
        self.filled = 0;
        self.parts += 1;
        if self.parts > MAX_PARTS {
            return Err(Error::new(
                ErrorKind::Target,
                format!(
                    "{} needs more than {MAX_PARTS} parts of {}: give a larger --s3-part-size, or more stripes",
                    self.shown,
                    sheaf_core::size::format_size(self.pool.buffer_len() as u64)
                ),
            ));
        }
        if self.lazy {
            let (client, path, gcs) = (self.client.clone(), self.path.clone(), self.gcs.clone());
            let started = self.handle.block_on(async move {
                match gcs {
                    Some(w) => w.start(path.as_ref()).await.map(|u| Box::new(u) as Box<dyn MultipartUpload>),
                    None => client.put_multipart(&path).await,
                }
            });
            self.upload = Some(started.map_err(|e| map_err(e, &format!("cannot start uploading {}", self.shown), Side::Create, &self.redact))?);
            self.lazy = false;
        }
        let upload = self.upload.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("{} is closed", self.shown)))?;
        // The payload owns the guard: the buffer goes back when the request is done with it.
        let part = upload.put_part(PutPayload::from_bytes(Bytes::from_owner(buf)));
        self.in_flight.push_back(self.handle.spawn(part));
        while self.in_flight.len() >= self.max_in_flight {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn abort(&mut self) {
        // Cancel the parts in flight and wait until they have stopped, so that none lands after
        // the abort below and keeps storage (their buffers return to the pool as they drop).
        let parts: Vec<_> = self.in_flight.drain(..).collect();
        parts.iter().for_each(JoinHandle::abort);
        for h in parts {
            let _ = self.handle.block_on(h);
        }
        if let Some(mut upload) = self.upload.take() {
            let _ = self.handle.block_on(async move { upload.abort().await });
        }
    }
}

impl StripeSink for S3Sink {
    fn write_all(&mut self, mut buf: &[u8]) -> Result<()> {
        let keep = &buf[buf.len().saturating_sub(TAIL_KEPT)..];
        self.tail.extend_from_slice(keep);
        let excess = self.tail.len().saturating_sub(TAIL_KEPT);
        self.tail.drain(..excess);
        while !buf.is_empty() {
            if self.current.is_none() {
                self.current = Some(self.pool.take_wait());
            }
            let cur = self.current.as_mut().expect("just set");
            let n = (cur.len() - self.filled).min(buf.len());
            cur[self.filled..self.filled + n].copy_from_slice(&buf[..n]);
            self.filled += n;
            self.written += n as u64;
            buf = &buf[n..];
            if self.filled == cur.len() {
                self.send_part()?;
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        // An object not started yet is sent whole at publish: nothing is durable before it anyway.
        if self.lazy {
            return Ok(());
        }
        if self.filled > 0 {
            self.send_part()?;
        }
        while !self.in_flight.is_empty() {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn publish(&mut self) -> Result<()> {
        self.sync()?;
        if !self.overwrite {
            let (client, path) = (self.client.clone(), self.path.clone());
            if self.handle.block_on(async move { client.head(&path).await }).is_ok() {
                return Err(Error::new(
                    ErrorKind::Target,
                    format!("target {} appeared while the backup ran: remove it, or pass --overwrite", self.shown),
                ));
            }
        }
        if self.lazy {
            // The part buffer itself goes out (back to the pool when the request is done).
            let bytes = self.current.take().map_or_else(Bytes::new, |mut b| {
                b.set_len(self.filled);
                Bytes::from_owner(b)
            });
            self.filled = 0;
            let (client, path, gcs) = (self.client.clone(), self.path.clone(), self.gcs.clone());
            let done = self.handle.block_on(async move {
                match gcs {
                    Some(w) => w.put(path.as_ref(), bytes).await,
                    None => client.put(&path, PutPayload::from_bytes(bytes)).await.map(|_| ()),
                }
            });
            return match done {
                Ok(()) => {
                    self.published = true;
                    self.lazy = false;
                    Ok(())
                }
                Err(e) => Err(map_err(e, &format!("cannot upload {}", self.shown), Side::Create, &self.redact)),
            };
        }
        let mut upload = self.upload.take().ok_or_else(|| Error::new(ErrorKind::Target, format!("{} is closed", self.shown)))?;
        let done = self.handle.block_on(async { upload.complete().await });
        match done {
            Ok(_) => {
                self.published = true;
                Ok(())
            }
            Err(e) => {
                // The server may have completed it and the answer been lost (a retry then finds no
                // such upload): an object of exactly our size that ends with exactly our last bytes
                // (its trailer: backup id or content checksum), not there when we started, is ours.
                let (client, path) = (self.client.clone(), self.path.clone());
                let (size, tail) = (self.written, self.tail.clone());
                let ours = self.handle.block_on(async move {
                    let meta = client.head(&path).await.ok()?;
                    if meta.size != size {
                        return Some(false);
                    }
                    let range = size - tail.len() as u64..size;
                    let opts = GetOptions { range: Some(GetRange::Bounded(range)), if_match: meta.e_tag, ..Default::default() };
                    let got = client.get_opts(&path, opts).await.ok()?.bytes().await.ok()?;
                    Some(got[..] == tail[..])
                });
                if ours == Some(true) && !self.overwrite {
                    self.published = true;
                    return Ok(());
                }
                let _ = self.handle.block_on(async move { upload.abort().await });
                Err(map_err(e, &format!("cannot complete the upload of {}", self.shown), Side::Write, &self.redact))
            }
        }
    }

    fn discard(&mut self) {
        self.abort();
        if self.published {
            let (client, path) = (self.client.clone(), self.path.clone());
            let _ = self.handle.block_on(async move { client.delete(&path).await });
            self.published = false;
        }
    }

    fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for S3Sink {
    fn drop(&mut self) {
        if !self.published {
            self.discard();
        }
    }
}

/// One stripe object being read.
struct S3Source {
    redact: Redact,
    handle: Handle,
    client: Arc<dyn ObjectStore>,
    path: Path,
    shown: String,
    len: u64,
    etag: Option<String>,
    read_ahead: usize,
    block: u64,
}

impl S3Source {
    fn get(&self, range: Range<u64>) -> JoinHandle<BytesResult> {
        let (client, path) = (self.client.clone(), self.path.clone());
        let opts = GetOptions { range: Some(GetRange::Bounded(range)), if_match: self.etag.clone(), ..Default::default() };
        self.handle.spawn(async move { client.get_opts(&path, opts).await?.bytes().await })
    }

    fn wait(&self, h: JoinHandle<BytesResult>, want: u64, at: u64) -> Result<Bytes> {
        let b = match self.handle.block_on(h) {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(map_err(e, &format!("reading stripe {}", self.shown), Side::Read, &self.redact)),
            Err(e) => return Err(Error::new(ErrorKind::Io, format!("reading stripe {}: the read task failed: {e}", self.shown))),
        };
        if b.len() as u64 != want {
            return Err(Error::incomplete(format!(
                "stripe {}: asked for {want} bytes at {at}, got {} (the object changed or is truncated)",
                self.shown,
                b.len()
            )));
        }
        Ok(b)
    }

}

type BytesResult = std::result::Result<Bytes, object_store::Error>;

impl StripeSource for S3Source {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let range = checked_range(&self.shown, offset, buf.len() as u64, self.len)?;
        if buf.is_empty() {
            return Ok(());
        }
        let b = self.wait(self.get(range), buf.len() as u64, offset)?;
        buf.copy_from_slice(&b);
        Ok(())
    }

    fn location(&self) -> &str {
        &self.shown
    }

    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send + '_>> {
        if end < start {
            return Err(Error::invalid(format!("stripe {}: a stream from {start} to {end} runs backwards", self.shown)));
        }
        let range = checked_range(&self.shown, start, end - start, self.len)?;
        Ok(Box::new(ReadAhead { src: self, next: range.start, end: range.end, pending: VecDeque::new(), current: Bytes::new() }))
    }
}

/// Sequential reads with up to `read_ahead` ranged GETs in flight.
struct ReadAhead<'a> {
    src: &'a S3Source,
    /// Next byte to request.
    next: u64,
    end: u64,
    pending: VecDeque<(JoinHandle<BytesResult>, u64, u64)>,
    current: Bytes,
}

impl ReadAhead<'_> {
    fn fill(&mut self) {
        while self.pending.len() < self.src.read_ahead && self.next < self.end {
            let to = (self.next + self.src.block).min(self.end);
            self.pending.push_back((self.src.get(self.next..to), to - self.next, self.next));
            self.next = to;
        }
    }
}

impl Read for ReadAhead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.current.is_empty() {
            self.fill();
            let Some((h, want, at)) = self.pending.pop_front() else { return Ok(0) };
            self.current = self.src.wait(h, want, at).map_err(into_io)?;
            self.fill();
        }
        let n = self.current.len().min(buf.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

impl Drop for ReadAhead<'_> {
    fn drop(&mut self) {
        for (h, _, _) in self.pending.drain(..) {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_lose_signed_headers_and_secrets() {
        let r = Redact(Arc::new(vec!["SeCrEtKeY123".into(), "FQoGZXIvYXdzEToken".into()]), AWS_CREDENTIALS);
        let body = "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIAEXAMPLE</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256\n20261122T000000Z</StringToSign><CanonicalRequest>PUT\n/b/k\n\
            x-amz-security-token:FQoGZXIvYXdzEToken\n</CanonicalRequest><CanonicalRequestBytes>50 55</CanonicalRequestBytes>\
            <Message>key SeCrEtKeY123</Message></Error>";
        let out = r.scrub(body);
        assert!(!out.contains("FQoGZXIvYXdzEToken") && !out.contains("SeCrEtKeY123"), "{out}");
        assert!(!out.contains("x-amz-security-token") && !out.contains("20261122T000000Z") && !out.contains("50 55"), "{out}");
        assert!(out.contains("SignatureDoesNotMatch") && out.contains("<CanonicalRequest>(removed)</CanonicalRequest>"), "{out}");
        // An element cut short by a truncated body is removed to the end.
        assert_eq!(r.scrub("a<StringToSign>xyz"), "a<StringToSign>(removed)</StringToSign>");

        let e = object_store::Error::Generic { store: "S3", source: body.into() };
        let mapped = map_err(e, "uploading part of s3://b/k", Side::Write, &r);
        assert_eq!(mapped.kind(), ErrorKind::Target);
        let text = mapped.to_string();
        assert!(text.contains("rejected the credentials") && !text.contains("FQoGZXIvYXdzEToken"), "{text}");
    }

    #[test]
    fn transience_comes_from_the_clients_error_kind_not_the_text() {
        use object_store::client::{HttpError, HttpErrorKind as K};
        let http = |kind, text: &str| object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(kind, std::io::Error::other(text.to_string()))),
        };
        let r = Redact::default();
        for kind in [K::Connect, K::Request, K::Timeout, K::Interrupted] {
            assert!(map_err(http(kind, "reset"), "reading s3://b/k", Side::Read, &r).is_transient(), "{kind:?}");
        }
        // A timeout named in a body is not one: only the kind counts.
        assert!(!map_err(http(K::Decode, "operation timed out"), "reading s3://b/k", Side::Read, &r).is_transient());
        let denied = object_store::Error::PermissionDenied { path: "k".into(), source: "timed out".into() };
        assert!(!map_err(denied, "reading s3://b/k", Side::Read, &r).is_transient());
    }
}
