//! A resumable stripe in Azure Blob Storage: a block blob whose blocks sheaf names in order
//! (`sheaf-part-000001`, ...), so that what a stopped backup sent can be found again and gone on
//! from.
//!
//! `object_store` names an upload's blocks at random and keeps their order only in the writer's
//! memory: once the writer is killed, the container holds uncommitted blocks nobody can put in
//! order. Here each block is sent by a Put Block on a URL signed by `object_store`'s own Azure
//! signer (a service SAS from the account key, or a user delegation SAS from a token), with the
//! block id appended as Azure allows; the block list is committed by `object_store`'s
//! `complete_multipart`, which takes the ids as given. Get Block List (uncommitted) on a signed
//! URL tells the next attempt which blocks the server holds and their sizes.
//!
//! Uncommitted blocks outlive their writer for a week, then Azure drops them; none can be removed
//! sooner (committing an empty list would, but it publishes an empty blob under the stripe's name
//! first). A block an earlier attempt sent that the next does not keep is set aside instead:
//! replaced by one byte, too small for a whole part ([`AzureBlocks::set_aside`]).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use object_store::azure::MicrosoftAzure;
use object_store::client::{HttpClient, HttpRequestBody};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{MultipartUpload, PutPayload, PutResult, UploadPart};
use serde::Deserialize;

/// How long a signed URL is good for: one request and its tries.
const SIGNED_FOR: Duration = Duration::from_secs(3600);
/// Tries of one call whose link fails or whose answer is a 5xx or 429.
const AGAIN: sheaf_core::retry::Backoff = sheaf_core::retry::Backoff::new(8, Duration::from_millis(100), Duration::from_secs(4));

/// The id of block `n` (1-based), before base64 (all of one blob's ids are the same length).
pub(crate) fn block_id(n: usize) -> String {
    format!("sheaf-part-{n:06}")
}

/// The number of a block sheaf named, from its base64 id.
fn block_number(encoded: &str) -> Option<usize> {
    let raw = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    std::str::from_utf8(&raw).ok()?.strip_prefix("sheaf-part-")?.parse().ok()
}

fn generic(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> object_store::Error {
    object_store::Error::Generic { store: "MicrosoftAzure", source: e.into() }
}

/// The calls on one container that `object_store` does not make.
#[derive(Clone)]
pub(crate) struct AzureBlocks {
    azure: Arc<MicrosoftAzure>,
    http: HttpClient,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct BlockList {
    #[serde(default)]
    uncommitted_blocks: Blocks,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct Blocks {
    #[serde(default)]
    block: Vec<Block>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Block {
    name: String,
    size: u64,
}

impl AzureBlocks {
    pub(crate) fn new(azure: Arc<MicrosoftAzure>, http: HttpClient) -> AzureBlocks {
        AzureBlocks { azure, http }
    }

    /// Whether URLs can be signed with the credentials held (an account key or a token can; a SAS
    /// token cannot sign another).
    pub(crate) async fn can_sign(&self) -> bool {
        self.azure.signed_url(Method::GET, &Path::from("probe"), SIGNED_FOR).await.is_ok()
    }

    /// `method` on `path` with `query`, signed; asked again while the link fails or the service
    /// answers 5xx or 429 (as `object_store` does its own calls).
    async fn call(&self, method: Method, path: &Path, query: &[(&str, &str)], body: PutPayload) -> object_store::Result<(u16, Bytes)> {
        let mut url = self.azure.signed_url(method.clone(), path, SIGNED_FOR).await?;
        url.query_pairs_mut().extend_pairs(query);
        let mut pauses = AGAIN.pauses();
        let mut tries = 0;
        loop {
            tries += 1;
            let request = http::Request::builder()
                .method(method.clone())
                .uri(url.as_str())
                .header("x-ms-version", "2021-08-06")
                .header("content-length", body.content_length().to_string())
                .body(HttpRequestBody::from(body.clone()))
                .map_err(generic)?;
            let answer = match self.http.execute(request).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    response.into_body().bytes().await.map(|b| (status, b))
                }
                Err(e) => Err(e),
            };
            // A 403 once or twice too: a signature dated by a clock a little ahead of Azure's.
            let again = match &answer {
                Ok((status, _)) => *status >= 500 || *status == 429 || (*status == 403 && tries <= 2),
                Err(_) => true,
            };
            match pauses.next() {
                Some(p) if again => tokio::time::sleep(p).await,
                _ => return answer.map_err(generic),
            }
        }
    }

    /// Send block `n` of `path`.
    pub(crate) async fn put_block(&self, path: &Path, n: usize, data: PutPayload) -> object_store::Result<()> {
        let id = base64::engine::general_purpose::STANDARD.encode(block_id(n));
        let (status, answer) = self.call(Method::PUT, path, &[("comp", "block"), ("blockid", &id)], data).await?;
        match status {
            201 => Ok(()),
            404 => Err(object_store::Error::NotFound { path: path.to_string(), source: String::from_utf8_lossy(&answer).into_owned().into() }),
            _ => Err(generic(format!("Put Block {} of {path}: HTTP {status}: {}", block_id(n), String::from_utf8_lossy(&answer)))),
        }
    }

    /// The blocks sheaf named that `path` holds uncommitted: number and size, in number order.
    pub(crate) async fn uncommitted(&self, path: &Path) -> object_store::Result<Vec<(usize, u64)>> {
        let (status, body) = self.call(Method::GET, path, &[("comp", "blocklist"), ("blocklisttype", "uncommitted")], PutPayload::default()).await?;
        match status {
            200 => {}
            // No blob and no block under its name.
            404 => return Ok(Vec::new()),
            _ => return Err(generic(format!("Get Block List of {path}: HTTP {status}: {}", String::from_utf8_lossy(&body)))),
        }
        let list: BlockList = quick_xml::de::from_reader(&body[..]).map_err(|e| generic(format!("Get Block List of {path}: {e}")))?;
        let mut out: Vec<(usize, u64)> = list.uncommitted_blocks.block.iter().filter_map(|b| Some((block_number(&b.name)?, b.size))).collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Commit blocks `1..=n` of `path` as its content.
    pub(crate) async fn commit(&self, path: &Path, n: usize) -> object_store::Result<PutResult> {
        let parts = (1..=n).map(|k| PartId { content_id: block_id(k) }).collect();
        self.azure.complete_multipart(path, &String::new(), parts).await
    }

    /// Replace blocks `numbers` of `path` by one byte each: too small for a whole part, so that no
    /// later attempt takes one for its own (an earlier attempt's bytes under numbers the next one
    /// sends again). Uncommitted blocks cannot be removed; Azure drops them after a week.
    pub(crate) async fn set_aside(&self, path: &Path, numbers: impl IntoIterator<Item = usize>) -> object_store::Result<()> {
        for n in numbers {
            self.put_block(path, n, PutPayload::from_static(b"\0")).await?;
        }
        Ok(())
    }
}

/// An upload of a block blob in numbered blocks, for a resumable stripe.
pub(crate) struct AzureUpload {
    blocks: AzureBlocks,
    path: Path,
    /// Blocks sent or being sent (the next is `sent + 1`).
    sent: usize,
}

impl AzureUpload {
    /// An upload of `path` whose first `kept` blocks are there already.
    pub(crate) fn going_on(blocks: AzureBlocks, path: Path, kept: usize) -> AzureUpload {
        AzureUpload { blocks, path, sent: kept }
    }
}

impl std::fmt::Debug for AzureUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AzureUpload({}, {} blocks)", self.path, self.sent)
    }
}

#[async_trait::async_trait]
impl MultipartUpload for AzureUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.sent += 1;
        let (blocks, path, n) = (self.blocks.clone(), self.path.clone(), self.sent);
        Box::pin(async move { blocks.put_block(&path, n, data).await })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.blocks.commit(&self.path, self.sent).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        // Nothing to remove (Azure drops uncommitted blocks after a week): its first block set
        // aside, so that nothing of it is ever gone on from.
        if self.sent == 0 {
            return Ok(());
        }
        self.blocks.set_aside(&self.path, [1]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_are_one_length_and_read_back() {
        assert_eq!(block_id(1).len(), block_id(999_999).len());
        let enc = base64::engine::general_purpose::STANDARD.encode(block_id(42));
        assert_eq!(block_number(&enc), Some(42));
        // object_store's own ids (32 hex digits) are not sheaf's.
        let theirs = base64::engine::general_purpose::STANDARD.encode(format!("{:032x}", 7u128));
        assert_eq!(block_number(&theirs), None);
    }
}
