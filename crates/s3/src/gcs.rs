//! Writing to Google Cloud Storage through its JSON API, as `gcloud storage` does: an object that
//! fits in one part in one request (`uploadType=media`), a larger one as a resumable upload
//! (`uploadType=resumable`) whose parts go in order, each at its offset. `object_store` writes GCS
//! through the XML API's multipart upload instead, which emulators such as fake-gcs-server lack;
//! reads, listings and removals stay `object_store`'s. Requests carry the bearer token of the
//! client's own credentials and go through its HTTP client.
//!
//! A resumable upload takes parts in multiples of 256 KiB except the last, which is what a stripe
//! sink hands over (whole parts of a MiB multiple, then the rest at the end); the last part is held
//! until [`MultipartUpload::complete`], which sends it with the object's total length. A part whose
//! request fails is sent again after asking the server how much it holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use object_store::client::{HttpClient, HttpRequestBody};
use object_store::gcp::GcpCredentialProvider;
use object_store::{MultipartUpload, PutPayload, PutResult, UploadPart};
use sheaf_core::retry::Backoff;
use sheaf_core::ErrorKind;
use tokio::sync::watch;

/// GCS's unit for the parts of a resumable upload.
const QUANTUM: usize = 256 << 10;

/// How a request or a part whose send failed transiently is sent again: four tries in all,
/// after 0.4, 0.8 and 1.6 s.
const RETRY: Backoff = Backoff::new(4, Duration::from_millis(400), Duration::from_secs(4));

/// An answer: its status, headers and body.
type Reply = (u16, http::HeaderMap, Bytes);

/// What GCS's retries gave up on, for `object_store`'s callers.
fn gave_up(e: sheaf_core::Error) -> Error {
    Error::Generic { store: "GCS", source: Box::new(e) }
}

/// A bucket's JSON API uploads.
#[derive(Clone, Debug)]
pub(crate) struct GcsWriter {
    http: HttpClient,
    credentials: GcpCredentialProvider,
    /// `https://storage.googleapis.com`, or an emulator's address.
    base: String,
    bucket: String,
}

type Error = object_store::Error;

fn failed(what: String) -> Error {
    Error::Generic { store: "GCS", source: what.into() }
}

impl GcsWriter {
    pub(crate) fn new(http: HttpClient, credentials: GcpCredentialProvider, base: &str, bucket: &str) -> Self {
        GcsWriter { http, credentials, base: base.trim_end_matches('/').to_string(), bucket: bucket.to_string() }
    }

    async fn send(&self, method: Method, url: &str, headers: &[(&str, String)], body: impl Into<PutPayload>) -> Result<(u16, http::HeaderMap, Bytes), Error> {
        let body: PutPayload = body.into();
        let token = self.credentials.get_credential().await?;
        let mut request = http::Request::builder().method(method).uri(url);
        if !token.bearer.is_empty() {
            request = request.header("Authorization", format!("Bearer {}", token.bearer));
        }
        for (k, v) in headers {
            request = request.header(*k, v);
        }
        let request = request.header("Content-Length", body.content_length().to_string()).body(HttpRequestBody::from(body)).map_err(|e| failed(e.to_string()))?;
        let response = self.http.execute(request).await.map_err(|e| Error::Generic { store: "GCS", source: Box::new(e) })?;
        let (parts, body) = response.into_parts();
        let body = body.bytes().await.map_err(|e| Error::Generic { store: "GCS", source: Box::new(e) })?;
        Ok((parts.status.as_u16(), parts.headers, body))
    }

    /// One request: its answer, or why there is none worth taking. No answer (a failed
    /// connection) and a 5xx or 429 are transient, what a whole request may pass on a second
    /// try; any other answer is the caller's to judge.
    async fn attempt(&self, method: Method, url: &str, headers: &[(&str, String)], body: PutPayload) -> sheaf_core::Result<Reply> {
        match self.send(method, url, headers, body).await {
            Ok((status, _, body)) if status >= 500 || status == 429 => {
                Err(sheaf_core::Error::new(ErrorKind::Io, format!("GCS answered {status}: {}", String::from_utf8_lossy(&body))).transient(true))
            }
            Ok(reply) => Ok(reply),
            Err(e) => Err(sheaf_core::Error::new(ErrorKind::Io, "a request to GCS failed").with_source(e).transient(true)),
        }
    }

    /// [`GcsWriter::attempt`], again as [`RETRY`] says.
    async fn send_again(&self, method: Method, url: &str, headers: &[(&str, String)], body: impl Into<PutPayload>) -> Result<Reply, Error> {
        let body: PutPayload = body.into();
        RETRY.run_async(|_| self.attempt(method.clone(), url, headers, body.clone()), tokio::time::sleep).await.map_err(gave_up)
    }

    fn upload_url(&self, kind: &str, name: &str) -> String {
        format!("{}/upload/storage/v1/b/{}/o?uploadType={kind}&name={}", self.base, escape(&self.bucket), escape(name))
    }

    /// Write `name` whole in one request.
    pub(crate) async fn put(&self, name: &str, bytes: Bytes) -> Result<(), Error> {
        let url = self.upload_url("media", name);
        let (status, _, body) = self.send_again(Method::POST, &url, &[("Content-Type", "application/octet-stream".into())], bytes).await?;
        ok_or(status, &body, name)
    }

    /// Start a resumable upload of `name`.
    pub(crate) async fn start(&self, name: &str) -> Result<Resumable, Error> {
        let url = self.upload_url("resumable", name);
        let (status, headers, body) = self.send_again(Method::POST, &url, &[("X-Upload-Content-Type", "application/octet-stream".into())], Bytes::new()).await?;
        ok_or(status, &body, name)?;
        let session = headers.get("Location").and_then(|v| v.to_str().ok()).ok_or_else(|| failed(format!("GCS started an upload of {name} but gave no session address")))?;
        let (turn, _) = watch::channel(0);
        Ok(Resumable { writer: self.clone(), name: name.to_string(), session: session.to_string(), next: 0, turn: Arc::new(turn), state: Arc::new(Mutex::new(State::default())) })
    }
}

/// What names a resumable stripe's parts: `NAME.sheaf-part-000001`, ... (hidden from listings).
pub(crate) const PART_MARK: &str = ".sheaf-part-";
/// What names the objects a publish composes on the way (more than 32 parts).
pub(crate) const COMPOSE_MARK: &str = ".sheaf-compose-";
/// Sources one compose request takes at most.
const COMPOSE_MAX: usize = 32;

/// The name of part `n` (from 1) of stripe `name`.
pub(crate) fn part_name(name: &str, n: usize) -> String {
    format!("{name}{PART_MARK}{n:06}")
}

/// The number of part `key` of stripe `name`, if it is one.
pub(crate) fn part_number(name: &str, key: &str) -> Option<usize> {
    key.strip_prefix(name)?.strip_prefix(PART_MARK)?.parse().ok()
}

/// Whether `key` is a part of a resumable stripe or a step of its publish, not an object of its own.
pub(crate) fn is_piece(key: &str) -> bool {
    key.contains(PART_MARK) || key.contains(COMPOSE_MARK)
}

impl GcsWriter {
    /// Write part `name` of a resumable stripe whole, in one request: in the Standard class
    /// whatever the bucket's (it lives minutes, and a colder class bills 30 days or more for an
    /// object removed sooner), with its CRC-32C, which the server checks before it keeps it. The
    /// part's buffers are sent as they are, not copied.
    async fn put_piece(&self, name: &str, data: PutPayload) -> Result<(), Error> {
        let mut crc = 0u32;
        for b in &data {
            crc = crc32c::crc32c_append(crc, b);
        }
        use base64::Engine as _;
        let meta = serde_json::json!({
            "name": name,
            "storageClass": "STANDARD",
            "contentType": "application/octet-stream",
            "crc32c": base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes()),
        });
        let boundary = "sheaf-piece-boundary-7f3a9c";
        let head = format!("--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n");
        let tail = format!("\r\n--{boundary}--\r\n");
        let body: PutPayload = std::iter::once(Bytes::from(head)).chain(data).chain(std::iter::once(Bytes::from(tail))).collect();
        let url = format!("{}/upload/storage/v1/b/{}/o?uploadType=multipart", self.base, escape(&self.bucket));
        let (status, _, answer) = self.send_again(Method::POST, &url, &[("Content-Type", format!("multipart/related; boundary={boundary}"))], body).await?;
        ok_or(status, &answer, name)
    }

    /// Make `dest` the concatenation of `sources` (at most 32), on the server.
    async fn compose(&self, dest: &str, sources: &[String]) -> Result<(), Error> {
        let url = format!("{}/storage/v1/b/{}/o/{}/compose", self.base, escape(&self.bucket), escape(dest));
        let body = serde_json::json!({
            "sourceObjects": sources.iter().map(|n| serde_json::json!({ "name": n })).collect::<Vec<_>>(),
            "destination": { "contentType": "application/octet-stream" },
        });
        let (status, _, answer) = self.send_again(Method::POST, &url, &[("Content-Type", "application/json".into())], Bytes::from(body.to_string())).await?;
        ok_or(status, &answer, dest)
    }
}

/// A resumable stripe in GCS: each part an object of its own (`NAME.sheaf-part-N`, written whole
/// in one request, so that it is there entire or not at all), composed into `NAME` on the server
/// when published, then removed. A stopped backup's parts stay for the next attempt to list and
/// go on from: a resumable upload could not be, as it goes on only from what the server holds,
/// never from an earlier frame's end.
pub(crate) struct Composed {
    writer: GcsWriter,
    client: Arc<dyn object_store::ObjectStore>,
    name: String,
    /// Parts sent or being sent (the next is `sent + 1`).
    sent: usize,
}

impl std::fmt::Debug for Composed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Composed({}, {} parts)", self.name, self.sent)
    }
}

impl Composed {
    /// Stripe `name`, whose first `kept` parts are there already.
    pub(crate) fn going_on(writer: GcsWriter, client: Arc<dyn object_store::ObjectStore>, name: String, kept: usize) -> Composed {
        Composed { writer, client, name, sent: kept }
    }
}

/// Remove `names` (missing ones are no error), a few at a time.
pub(crate) async fn remove_all(client: &Arc<dyn object_store::ObjectStore>, names: Vec<String>) -> Result<(), Error> {
    use futures::StreamExt;
    use object_store::ObjectStoreExt;
    let gone = futures::stream::iter(names)
        .map(|n| {
            let c = client.clone();
            async move {
                match c.delete(&object_store::path::Path::from(n)).await {
                    Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    gone.into_iter().collect()
}

#[async_trait::async_trait]
impl MultipartUpload for Composed {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.sent += 1;
        let (writer, part) = (self.writer.clone(), part_name(&self.name, self.sent));
        Box::pin(async move { writer.put_piece(&part, data).await })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        if self.sent == 0 {
            self.writer.put(&self.name, Bytes::new()).await?;
            return Ok(PutResult { e_tag: None, version: None, extensions: Default::default() });
        }
        // Up to 32 sources a request: a tree of composes for more, its steps removed after.
        let mut level: Vec<String> = (1..=self.sent).map(|n| part_name(&self.name, n)).collect();
        let mut steps = Vec::new();
        let mut round = 0;
        while level.len() > COMPOSE_MAX {
            let mut next = Vec::new();
            for (i, group) in level.chunks(COMPOSE_MAX).enumerate() {
                let step = format!("{}{COMPOSE_MARK}{round}-{i:06}", self.name);
                self.writer.compose(&step, group).await?;
                next.push(step);
            }
            steps.extend(next.iter().cloned());
            level = next;
            round += 1;
        }
        self.writer.compose(&self.name, &level).await?;
        let pieces = (1..=self.sent).map(|n| part_name(&self.name, n)).chain(steps).collect();
        // Published already: a piece left behind is hidden, and goes with its backup's folder.
        let _ = remove_all(&self.client, pieces).await;
        Ok(PutResult { e_tag: None, version: None, extensions: Default::default() })
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        let pieces = (1..=self.sent).map(|n| part_name(&self.name, n)).collect();
        remove_all(&self.client, pieces).await
    }
}

/// What a resumable upload has sent, and the last part, held.
#[derive(Debug, Default)]
struct State {
    offset: u64,
    last: Option<PutPayload>,
    failed: Option<String>,
}

/// One resumable upload.
#[derive(Debug)]
pub(crate) struct Resumable {
    writer: GcsWriter,
    name: String,
    session: String,
    /// The index the next part gets.
    next: usize,
    /// The index of the part whose turn it is to be sent.
    turn: Arc<watch::Sender<usize>>,
    state: Arc<Mutex<State>>,
}

impl Resumable {
    /// Send `bytes` at `offset`; `total` once known (the last request). Sent again as [`RETRY`]
    /// says, from where the server says it stands, when a request fails transiently.
    async fn chunk(writer: &GcsWriter, session: &str, name: &str, offset: u64, bytes: Bytes, total: Option<u64>) -> Result<(), Error> {
        // Bytes of this part the server holds.
        let held = AtomicUsize::new(0);
        let (held, bytes) = (&held, &bytes);
        let sent = RETRY
            .run_async(
                |n| async move {
                    if n > 0 {
                        // How much of this part the server holds already.
                        let (status, headers, body) = writer.attempt(Method::PUT, session, &[("Content-Range", "bytes */*".into())], PutPayload::default()).await?;
                        match status {
                            200 | 201 => return Ok(None),
                            308 => {
                                let end = headers.get("Range").and_then(|v| v.to_str().ok()).and_then(|r| r.rsplit('-').next()?.parse::<u64>().ok()).map_or(0, |end| end + 1);
                                held.store(end.saturating_sub(offset).min(bytes.len() as u64) as usize, Ordering::Relaxed);
                            }
                            _ => return Ok(Some((status, body))),
                        }
                    }
                    let at = held.load(Ordering::Relaxed);
                    let rest = bytes.slice(at..);
                    let start = offset + at as u64;
                    let end_total = total.map_or("*".to_string(), |t| t.to_string());
                    let range = if rest.is_empty() { format!("bytes */{end_total}") } else { format!("bytes {start}-{}/{end_total}", start + rest.len() as u64 - 1) };
                    match writer.attempt(Method::PUT, session, &[("Content-Range", range)], rest.into()).await? {
                        (200 | 201, _, _) => Ok(None),
                        (308, _, _) if total.is_none() => Ok(None),
                        (status, _, body) => Ok(Some((status, body))),
                    }
                },
                tokio::time::sleep,
            )
            .await
            .map_err(gave_up)?;
        match sent {
            None => Ok(()),
            Some((status, body)) => ok_or(status, &body, name),
        }
    }
}

#[async_trait::async_trait]
impl MultipartUpload for Resumable {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let idx = self.next;
        self.next += 1;
        let (writer, session, name, turn, state) = (self.writer.clone(), self.session.clone(), self.name.clone(), self.turn.clone(), self.state.clone());
        Box::pin(async move {
            let mut rx = turn.subscribe();
            rx.wait_for(|t| *t == idx).await.map_err(|e| failed(e.to_string()))?;
            let result = async {
                let mut st = std::mem::take(&mut *state.lock().unwrap_or_else(|p| p.into_inner()));
                let outcome = if let Some(why) = &st.failed {
                    Err(failed(why.clone()))
                } else if st.last.is_some() {
                    Err(failed(format!("a part of {name} came after one that was not a multiple of 256 KiB")))
                } else if data.content_length() % QUANTUM != 0 {
                    // The last part: sent with the total at complete.
                    st.last = Some(data);
                    Ok(())
                } else {
                    let bytes = whole(data);
                    let n = bytes.len() as u64;
                    let r = Resumable::chunk(&writer, &session, &name, st.offset, bytes, None).await;
                    if r.is_ok() {
                        st.offset += n;
                    }
                    r
                };
                if let Err(e) = &outcome {
                    st.failed = Some(e.to_string());
                }
                *state.lock().unwrap_or_else(|p| p.into_inner()) = st;
                outcome
            }
            .await;
            turn.send_replace(idx + 1);
            result
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let mut rx = self.turn.subscribe();
        let want = self.next;
        rx.wait_for(|t| *t == want).await.map_err(|e| failed(e.to_string()))?;
        let st = std::mem::take(&mut *self.state.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(why) = st.failed {
            return Err(failed(why));
        }
        let last = st.last.map(whole).unwrap_or_default();
        let total = st.offset + last.len() as u64;
        Resumable::chunk(&self.writer, &self.session, &self.name, st.offset, last, Some(total)).await?;
        Ok(PutResult { e_tag: None, version: None, extensions: Default::default() })
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        // GCS answers 499 to a cancelled session.
        let _ = self.writer.send(Method::DELETE, &self.session, &[], Bytes::new()).await?;
        Ok(())
    }
}

/// A payload as one buffer (a sink's part is one already: then nothing is copied).
fn whole(p: PutPayload) -> Bytes {
    let mut chunks: Vec<Bytes> = p.into_iter().collect();
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    chunks.concat().into()
}

/// GCS's words for a refusal, or success.
fn ok_or(status: u16, body: &[u8], name: &str) -> Result<(), Error> {
    match status {
        200..=299 => Ok(()),
        404 => Err(Error::NotFound { path: name.to_string(), source: format!("GCS answered 404: {}", String::from_utf8_lossy(body)).into() }),
        401 | 403 => Err(Error::PermissionDenied { path: name.to_string(), source: format!("GCS answered {status}: {}", String::from_utf8_lossy(body)).into() }),
        _ => Err(failed(format!("GCS answered {status} for {name}: {}", String::from_utf8_lossy(body)))),
    }
}

/// All but RFC 3986's unreserved characters, which a query value or a path segment keeps as they are.
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Percent-encode for a query value or a path segment.
fn escape(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, RESERVED).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parts_are_named_in_order_and_read_back() {
        let p = super::part_name("b/1_1.sheaf", 12);
        assert_eq!(p, "b/1_1.sheaf.sheaf-part-000012");
        assert_eq!(super::part_number("b/1_1.sheaf", &p), Some(12));
        assert_eq!(super::part_number("b/1_1.sheaf", "b/1_1.sheaf"), None);
        assert_eq!(super::part_number("b/1_1", &p), None, "another stripe's part");
        assert!(super::is_piece(&p) && super::is_piece("x.sheaf-compose-0-000001") && !super::is_piece("b/1_1.sheaf"));
    }

    #[test]
    fn names_are_escaped_whole() {
        assert_eq!(super::escape("run1/a b_1.sheaf"), "run1%2Fa%20b_1.sheaf");
        assert_eq!(super::escape("é~&="), "%C3%A9~%26%3D");
    }
}
