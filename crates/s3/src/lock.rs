//! What only S3 has and `object_store` does not call: whether a bucket has Object Lock, uploads
//! that carry a lock, and the versions a versioned bucket keeps (to list them and to remove a
//! delete marker an attacker or a mistake left on top of a locked object).
//!
//! An upload that carries a lock is started here, with `x-amz-object-lock-mode` and
//! `x-amz-object-lock-retain-until-date` on the request that starts it, and continued through
//! `object_store`'s low-level multipart calls with a SHA-256 checksum of each part, which S3
//! requires of an upload with a retention date. These calls are presigned by `object_store`'s own signer
//! (`Signer::signed_url_opts`, with the query they need) and sent through its HTTP client, so they
//! use the same credentials, TLS roots and proxy as every other request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method};
use object_store::aws::{AmazonS3, AmazonS3Builder, Checksum};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::signer::{SignedUrlOptions, Signer};
use object_store::{ClientOptions, MultipartUpload, PutPayload, PutResult, UploadPart};
use serde::Deserialize;
use sheaf_core::storage::{LockMode, ObjectLock, ObjectVersion};
use sheaf_core::{Error, ErrorKind, Result};

/// A bucket's S3-only calls.
#[derive(Clone)]
pub(crate) struct S3Extra {
    signer: Arc<AmazonS3>,
    http: HttpClient,
    builder: AmazonS3Builder,
    client_options: ClientOptions,
    /// The server-side encryption headers an upload starts with.
    sse: Vec<(&'static str, String)>,
}

/// What a call answered: the status and the body.
type Answer = (u16, Bytes);

impl S3Extra {
    /// The calls for the bucket `builder` (configured but for its client options) reaches.
    pub(crate) fn new(builder: AmazonS3Builder, client_options: ClientOptions, signer: Arc<AmazonS3>, sse: Vec<(&'static str, String)>) -> Result<Self> {
        let http = ReqwestConnector::default().connect(&client_options).map_err(|e| Error::invalid(format!("S3 client: {e}")))?;
        Ok(S3Extra { signer, http, builder, client_options, sse })
    }

    /// A client of the same bucket that sends a checksum of each part, as S3 requires of an upload
    /// with a retention date.
    pub(crate) fn checksummed(&self) -> Result<Arc<AmazonS3>> {
        let client = self
            .builder
            .clone()
            .with_client_options(self.client_options.clone())
            .with_checksum_algorithm(Checksum::SHA256)
            .build()
            .map_err(|e| Error::invalid(format!("S3 client with Object Lock: {e}")))?;
        Ok(Arc::new(client))
    }

    /// Start an upload of `key` that carries `lock`, its parts sent by `parts` (from
    /// [`S3Extra::checksummed`]). Only the request that starts an upload takes the lock headers
    /// (S3 and MinIO refuse them on the others), and `object_store` starts its own uploads
    /// without a way to add them, so this one is started here and driven by its low-level calls.
    pub(crate) async fn start_locked(&self, parts: Arc<AmazonS3>, key: &str, lock: &ObjectLock, class: Option<&str>) -> std::result::Result<LockedUpload, object_store::Error> {
        let generic = |e: String| object_store::Error::Generic { store: "S3", source: e.into() };
        let mut headers = vec![
            ("x-amz-object-lock-mode", lock.mode.as_s3().to_string()),
            ("x-amz-object-lock-retain-until-date", sheaf_core::time::utc(lock.until)),
            ("x-amz-checksum-algorithm", "SHA256".to_string()),
        ];
        // Server-side encryption and the storage class are asked for when the upload starts.
        headers.extend(self.sse.iter().cloned());
        if let Some(c) = class {
            headers.push(("x-amz-storage-class", c.to_string()));
        }
        let (status, body) = self.call(Method::POST, key, &[("uploads", "")], &headers, Bytes::new()).await.map_err(|r| generic(r.to_string()))?;
        if status != 200 {
            let why = Refusal::of(status, &body);
            return Err(if why.code.as_deref() == Some("NoSuchBucket") {
                object_store::Error::NotFound { path: key.to_string(), source: why.to_string().into() }
            } else {
                generic(why.to_string())
            });
        }
        let started: Started = xml(&body).map_err(|r| generic(r.to_string()))?;
        let id = started.upload_id.filter(|id| !id.is_empty());
        let id = id.ok_or_else(|| generic(format!("S3 started an upload of {key} but named no upload id")))?;
        Ok(LockedUpload { client: parts, path: Path::from(key), id, parts: Arc::new(std::sync::Mutex::new(Vec::new())), next: 0 })
    }

    /// Send `method` on `key` (empty: the bucket) with `query`, presigned.
    /// The lock `key` carries: its mode and date.
    pub(crate) async fn retention(&self, key: &str) -> std::result::Result<Option<(LockMode, i64)>, Refusal> {
        let (status, body) = self.call(Method::GET, key, &[("retention", "")], &[], Bytes::new()).await?;
        match status {
            200 => {
                let r: Retention = xml(&body)?;
                let mode = r.mode.ok_or_else(|| Refusal::unread("a retention without a mode"))?.parse::<LockMode>().map_err(|e| Refusal::unread(e.to_string()))?;
                let until = parse_time(&r.retain_until_date.ok_or_else(|| Refusal::unread("a retention without a date"))?)?;
                Ok(Some((mode, until)))
            }
            _ => match Refusal::of(status, &body) {
                r if matches!(status, 400 | 404) && r.code.as_deref() == Some("NoSuchObjectLockConfiguration") => Ok(None),
                r => Err(r),
            },
        }
    }

    /// Lock `key` until `until`.
    pub(crate) async fn put_retention(&self, key: &str, mode: LockMode, until: i64) -> std::result::Result<(), Refusal> {
        let body = format!(
            r#"<Retention xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Mode>{}</Mode><RetainUntilDate>{}</RetainUntilDate></Retention>"#,
            mode.as_s3(),
            sheaf_core::time::utc(until)
        );
        use base64::Engine as _;
        use md5::Digest as _;
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(body.as_bytes()));
        let (status, answer) = self.call(Method::PUT, key, &[("retention", "")], &[("content-md5", md5)], Bytes::from(body)).await?;
        match status {
            200 | 204 => Ok(()),
            _ => Err(Refusal::of(status, &answer)),
        }
    }

    async fn call(&self, method: Method, key: &str, query: &[(&str, &str)], headers: &[(&str, String)], body: Bytes) -> std::result::Result<Answer, Refusal> {
        let mut options = SignedUrlOptions::new().with_query(query.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut request = http::Request::builder().method(method.clone());
        for (k, v) in headers {
            let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| Refusal::unread(e.to_string()))?;
            let value = HeaderValue::from_str(v).map_err(|e| Refusal::unread(e.to_string()))?;
            options = options.with_signed_header(name.clone(), value.clone());
            request = request.header(name, value);
        }
        let url = self.signer.signed_url_opts(method, &Path::from(key), Duration::from_secs(600), &options).await.map_err(|e| Refusal::unread(e.to_string()))?;
        let request = request.uri(url.as_str()).body(HttpRequestBody::from(body)).map_err(|e| Refusal::unread(e.to_string()))?;
        let response = self.http.execute(request).await.map_err(|e| Refusal::link(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.into_body().bytes().await.map_err(|e| Refusal::link(e.to_string()))?;
        Ok((status, body))
    }

    /// Whether the bucket has Object Lock enabled.
    pub(crate) async fn lock_enabled(&self) -> std::result::Result<bool, Refusal> {
        let (status, body) = self.call(Method::GET, "", &[("object-lock", "")], &[], Bytes::new()).await?;
        match status {
            200 => Ok(xml::<LockConfiguration>(&body)?.object_lock_enabled.as_deref() == Some("Enabled")),
            _ => match Refusal::of(status, &body) {
                r if status == 404 && r.code.as_deref() == Some("ObjectLockConfigurationNotFoundError") => Ok(false),
                r if status == 404 && r.code.as_deref() == Some("ObjectLockConfigurationNotFound") => Ok(false),
                r => Err(r),
            },
        }
    }

    /// Every version of every object under `prefix`.
    pub(crate) async fn versions(&self, prefix: &str) -> std::result::Result<Vec<ObjectVersion>, Refusal> {
        let mut out = Vec::new();
        let (mut key_marker, mut version_marker) = (String::new(), String::new());
        loop {
            let mut query = vec![("versions", ""), ("prefix", prefix)];
            if !key_marker.is_empty() {
                query.push(("key-marker", &key_marker));
                if !version_marker.is_empty() {
                    query.push(("version-id-marker", &version_marker));
                }
            }
            let (status, body) = self.call(Method::GET, "", &query, &[], Bytes::new()).await?;
            if status != 200 {
                return Err(Refusal::of(status, &body));
            }
            let page: ListVersions = xml(&body)?;
            for (v, deleted) in page.versions.into_iter().map(|v| (v, false)).chain(page.markers.into_iter().map(|m| (m, true))) {
                out.push(ObjectVersion { modified: parse_time(&v.last_modified)?, name: v.key, version: v.version_id, latest: v.is_latest, deleted, size: v.size });
            }
            match (page.is_truncated, page.next_key_marker) {
                (true, Some(k)) if !k.is_empty() => {
                    key_marker = k;
                    version_marker = page.next_version_id_marker.unwrap_or_default();
                }
                _ => break,
            }
        }
        // Newest first within a name; the listing gives versions and markers apart.
        out.sort_by(|a, b| a.name.cmp(&b.name).then(b.latest.cmp(&a.latest)).then(b.modified.cmp(&a.modified)));
        Ok(out)
    }

    /// Remove version `version` of `key` for good.
    pub(crate) async fn delete_version(&self, key: &str, version: &str) -> std::result::Result<(), Refusal> {
        let (status, body) = self.call(Method::DELETE, key, &[("versionId", version)], &[], Bytes::new()).await?;
        match status {
            200 | 204 => Ok(()),
            _ => Err(Refusal::of(status, &body)),
        }
    }
}

/// A part of an upload in progress: its number, ETag and size.
pub(crate) type UploadedPart = (usize, String, u64);

impl S3Extra {
    /// The client whose low-level multipart calls drive uploads sheaf goes on with.
    pub(crate) fn client(&self) -> Arc<AmazonS3> {
        self.signer.clone()
    }

    /// The newest multipart upload of exactly `key` still open, if any.
    pub(crate) async fn open_upload(&self, key: &str) -> std::result::Result<Option<String>, Refusal> {
        let mut ours: Vec<Upload> = self.uploads(key).await?.into_iter().filter(|u| u.key == key).collect();
        ours.sort_by(|a, b| a.initiated.cmp(&b.initiated));
        Ok(ours.pop().map(|u| u.upload_id))
    }

    /// Every multipart upload still open whose key starts with `prefix`, as `(key, upload id)`.
    /// MinIO lists by a prefix only an object's own uploads (its issue 20989): where the prefix
    /// finds none, the bucket's uploads in progress (few: they are not its objects) are listed
    /// and sifted here.
    pub(crate) async fn open_uploads(&self, prefix: &str) -> std::result::Result<Vec<(String, String)>, Refusal> {
        let mut found = self.uploads(prefix).await?;
        if found.is_empty() && !prefix.is_empty() {
            found = self.uploads("").await?;
        }
        Ok(found.into_iter().filter(|u| u.key.starts_with(prefix)).map(|u| (u.key, u.upload_id)).collect())
    }

    /// The uploads in progress under `prefix`, every page of them.
    async fn uploads(&self, prefix: &str) -> std::result::Result<Vec<Upload>, Refusal> {
        let mut out = Vec::new();
        let (mut key_marker, mut id_marker) = (String::new(), String::new());
        loop {
            let mut query = vec![("uploads", ""), ("prefix", prefix)];
            if !key_marker.is_empty() {
                query.push(("key-marker", &key_marker));
                query.push(("upload-id-marker", &id_marker));
            }
            let (status, body) = self.call(Method::GET, "", &query, &[], Bytes::new()).await?;
            if status != 200 {
                return Err(Refusal::of(status, &body));
            }
            let page: ListUploads = xml(&body)?;
            out.extend(page.uploads);
            match (page.is_truncated, page.next_key_marker) {
                (true, Some(k)) if !k.is_empty() => {
                    key_marker = k;
                    id_marker = page.next_upload_id_marker.unwrap_or_default();
                }
                _ => return Ok(out),
            }
        }
    }

    /// The parts upload `id` of `key` holds, in order.
    pub(crate) async fn parts(&self, key: &str, id: &str) -> std::result::Result<Vec<UploadedPart>, Refusal> {
        let mut out = Vec::new();
        let mut marker = String::new();
        loop {
            let mut query = vec![("uploadId", id)];
            if !marker.is_empty() {
                query.push(("part-number-marker", &marker));
            }
            let (status, body) = self.call(Method::GET, key, &query, &[], Bytes::new()).await?;
            if status != 200 {
                return Err(Refusal::of(status, &body));
            }
            let page: ListParts = xml(&body)?;
            out.extend(page.parts.into_iter().map(|p| (p.part_number, p.e_tag, p.size)));
            match (page.is_truncated, page.next_part_number_marker) {
                (true, Some(m)) if !m.is_empty() => marker = m,
                _ => break,
            }
        }
        out.sort_by_key(|p| p.0);
        Ok(out)
    }
}

/// The answer to listing a bucket's uploads in progress.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ListUploads {
    #[serde(rename = "Upload", default)]
    uploads: Vec<Upload>,
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Upload {
    key: String,
    upload_id: String,
    #[serde(default)]
    initiated: String,
}

/// The answer to listing an upload's parts.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ListParts {
    #[serde(rename = "Part", default)]
    parts: Vec<Part>,
    #[serde(default)]
    is_truncated: bool,
    next_part_number_marker: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Part {
    part_number: usize,
    #[serde(rename = "ETag")]
    e_tag: String,
    size: u64,
}

/// An upload started with a lock (or one sheaf goes on with after a stopped backup), driven by
/// `object_store`'s low-level multipart calls.
#[derive(Debug)]
pub(crate) struct LockedUpload {
    client: Arc<AmazonS3>,
    path: Path,
    id: String,
    /// Each part's id once its upload ended, by index.
    parts: Arc<std::sync::Mutex<Vec<Option<PartId>>>>,
    next: usize,
}

impl LockedUpload {
    /// Upload `id` of `path`, whose first parts are `done` (copied already): its next part follows.
    pub(crate) fn going_on(client: Arc<AmazonS3>, path: Path, id: String, done: Vec<PartId>) -> LockedUpload {
        let next = done.len();
        LockedUpload { client, path, id, parts: Arc::new(std::sync::Mutex::new(done.into_iter().map(Some).collect())), next }
    }
}

#[async_trait::async_trait]
impl MultipartUpload for LockedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let (client, path, id, parts, idx) = (self.client.clone(), self.path.clone(), self.id.clone(), self.parts.clone(), self.next);
        self.next += 1;
        Box::pin(async move {
            let part = client.put_part(&path, &id, idx, data).await?;
            let mut held = parts.lock().unwrap_or_else(|p| p.into_inner());
            if held.len() <= idx {
                held.resize(idx + 1, None);
            }
            held[idx] = Some(part);
            Ok(())
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        if self.next == 0 {
            // S3 completes no upload without a part: an empty object is one empty part.
            self.put_part(PutPayload::default()).await?;
        }
        let parts: Option<Vec<PartId>> = self.parts.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        let parts = parts.ok_or_else(|| object_store::Error::Generic { store: "S3", source: "a part of the upload never finished".into() })?;
        self.client.complete_multipart(&self.path, &self.id, parts).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.client.abort_multipart(&self.path, &self.id).await
    }
}

/// Why an S3 call failed: the HTTP status and the service's error code where it answered (read
/// from its XML error body, as S3 documents it), or the link's failure. Callers decide by the
/// status and the code, never by the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The HTTP status; `None` when no answer came (the link failed) or it could not be read.
    pub status: Option<u16>,
    /// S3's error code (`AccessDenied`, `NoSuchBucket`, ...).
    pub code: Option<String>,
    /// What to show: `Code: Message (HTTP status)`, or what failed.
    pub text: String,
    /// Whether asking again may succeed: no answer, a 5xx, a 429.
    pub transient: bool,
}

/// An S3 error body.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ErrorBody {
    code: Option<String>,
    message: Option<String>,
}

impl Refusal {
    /// The server's refusal: `status` and its error body.
    pub(crate) fn of(status: u16, body: &[u8]) -> Refusal {
        let e: ErrorBody = quick_xml::de::from_reader(body).unwrap_or_default();
        let text = match (&e.code, &e.message) {
            (Some(c), Some(m)) => format!("{c}: {m} (HTTP {status})"),
            (Some(c), None) => format!("{c} (HTTP {status})"),
            _ => format!("HTTP {status}"),
        };
        Refusal { status: Some(status), code: e.code, text, transient: status >= 500 || status == 429 }
    }

    /// No answer: the link failed.
    fn link(text: String) -> Refusal {
        Refusal { status: None, code: None, text, transient: true }
    }

    /// An answer or a request sheaf could not make sense of.
    fn unread(text: impl Into<String>) -> Refusal {
        Refusal { status: None, code: None, text: text.into(), transient: false }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A small XML answer read as `T`.
fn xml<T: serde::de::DeserializeOwned>(body: &[u8]) -> std::result::Result<T, Refusal> {
    quick_xml::de::from_reader(body).map_err(|e| Refusal::unread(format!("an answer sheaf cannot read: {e}")))
}

/// The answer to starting a multipart upload.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Started {
    upload_id: Option<String>,
}

/// An object's retention.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Retention {
    mode: Option<String>,
    retain_until_date: Option<String>,
}

/// A bucket's Object Lock configuration.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LockConfiguration {
    object_lock_enabled: Option<String>,
}

/// What a failed call means for the caller, by the status and S3's code: refused for this object
/// or these credentials (a lock, WORM, a denied request) is a target error; a server error or no
/// answer is I/O, and transient.
pub(crate) fn call_failed(what: &str, why: &Refusal, scrub: impl Fn(&str) -> String) -> Error {
    let refused = matches!(why.code.as_deref(), Some("AccessDenied" | "InvalidRequest" | "ObjectLocked")) || why.status == Some(403);
    let kind = if refused { ErrorKind::Target } else { ErrorKind::Io };
    Error::new(kind, format!("{what}: {}", scrub(&why.text))).transient(why.transient)
}

fn parse_time(text: &str) -> std::result::Result<i64, Refusal> {
    chrono::DateTime::parse_from_rfc3339(text).map(|t| t.timestamp()).map_err(|e| Refusal::unread(format!("a time sheaf cannot read ({text}): {e}")))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListVersions {
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_version_id_marker: Option<String>,
    #[serde(default, rename = "Version")]
    versions: Vec<VersionEntry>,
    #[serde(default, rename = "DeleteMarker")]
    markers: Vec<VersionEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct VersionEntry {
    key: String,
    version_id: String,
    is_latest: bool,
    last_modified: String,
    #[serde(default)]
    size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_listing_reads_with_markers_between_versions() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix><KeyMarker></KeyMarker><NextVersionIdMarker></NextVersionIdMarker><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>
<DeleteMarker><Key>a &amp; b</Key><LastModified>2026-11-24T18:43:03.696Z</LastModified><IsLatest>true</IsLatest><VersionId>m1</VersionId></DeleteMarker>
<Version><Key>a &amp; b</Key><LastModified>2026-11-24T18:43:03.666Z</LastModified><ETag>"x"</ETag><Size>6</Size><IsLatest>false</IsLatest><VersionId>v2</VersionId></Version>
<DeleteMarker><Key>c</Key><LastModified>2026-11-24T18:43:04Z</LastModified><IsLatest>false</IsLatest><VersionId>m2</VersionId></DeleteMarker>
<Version><Key>c</Key><LastModified>2026-11-24T18:43:05.000Z</LastModified><Size>7</Size><IsLatest>true</IsLatest><VersionId>v3</VersionId></Version>
</ListVersionsResult>"#;
        let page: ListVersions = quick_xml::de::from_reader(xml.as_bytes()).unwrap();
        assert!(!page.is_truncated);
        assert_eq!((page.versions.len(), page.markers.len()), (2, 2));
        assert_eq!(page.markers[0].key, "a & b");
        assert_eq!(page.versions[1].size, 7);
        assert_eq!(parse_time(&page.versions[0].last_modified).unwrap(), 1_795_545_783);
    }

    #[test]
    fn refusals_are_decided_by_status_and_code_never_by_words() {
        let body = "<Error><Code>InvalidRequest</Code><Message>Object is WORM protected and cannot be overwritten</Message></Error>";
        let why = Refusal::of(400, body.as_bytes());
        assert_eq!(why.text, "InvalidRequest: Object is WORM protected and cannot be overwritten (HTTP 400)");
        assert_eq!(why.code.as_deref(), Some("InvalidRequest"));
        let e = call_failed("x", &why, str::to_string);
        assert_eq!((e.kind(), e.is_transient()), (ErrorKind::Target, false));
        // The same words under another code are not a refusal; a 503 is transient.
        let other = Refusal::of(400, b"<Error><Code>MalformedXML</Code><Message>AccessDenied WORM InvalidRequest</Message></Error>");
        assert_eq!(call_failed("x", &other, str::to_string).kind(), ErrorKind::Io);
        let busy = Refusal::of(503, b"");
        assert_eq!(busy.text, "HTTP 503");
        let e = call_failed("x", &busy, str::to_string);
        assert_eq!((e.kind(), e.is_transient()), (ErrorKind::Io, true));
        assert_eq!(call_failed("x", &Refusal::of(403, b""), str::to_string).kind(), ErrorKind::Target);
    }
}
