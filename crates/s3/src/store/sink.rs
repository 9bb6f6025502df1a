//! One stripe uploaded ([`S3Sink`]): a multipart upload (a GCS resumable one, or one that carries
//! a lock), visible only once complete, aborted when dropped unpublished.

use crate::config::MAX_PARTS;
use crate::gcs::GcsWriter;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};
use sheaf_core::pipeline::{Pool, PoolBuf};
use sheaf_core::storage::StripeSink;
use sheaf_core::{Error, ErrorKind, Result};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::*;

type PartResult = std::result::Result<(), object_store::Error>;

/// One stripe being uploaded.
pub(super) struct S3Sink {
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
    /// A resumable backup's stripe: its parts end only where frames do
    /// ([`StripeSink::frame_end`]), and it is left as an upload in progress (its parts sent), not
    /// aborted, when dropped unpublished, for the next attempt to go on from ([`S3Unfinished`]).
    pub(super) keep_unfinished: bool,
    /// A resumable stripe's bytes past a full part, waiting for the frame to end (at most a part's
    /// worth: past that, the part is sent where it is).
    overflow: Vec<u8>,
    /// Bytes at the start of the object that a stopped backup's attempt sent ([`S3Unfinished`]),
    /// not written here.
    copied: u64,
    /// The largest part the store takes (a resumable stripe's part grows past its size to end
    /// where a frame does): S3's 5 GiB, Azure's 4000 MiB block.
    max_part: usize,
}

/// Azure's largest block.
const AZURE_MAX_BLOCK: usize = 4000 << 20;

/// How many of the last bytes written [`S3Sink`] keeps.
const TAIL_KEPT: usize = 64;

impl S3Sink {
    /// A sink for `path` in `store`: its upload started, or (`None`) to be started when its first
    /// part is full, or never if it fits in one.
    pub(super) fn new(store: &S3Store, path: Path, shown: String, upload: Option<Box<dyn MultipartUpload>>, part_size: usize, overwrite: bool) -> Self {
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
            keep_unfinished: false,
            overflow: Vec::new(),
            copied: 0,
            max_part: if store.scheme == "az" { AZURE_MAX_BLOCK } else { crate::config::MAX_PART_SIZE as usize },
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

    /// Send the part being filled (and what waits past it).
    fn send_part(&mut self) -> Result<()> {
        let Some(mut buf) = self.current.take() else { return Ok(()) };
        buf.set_len(self.filled);
        self.filled = 0;
        let over = std::mem::take(&mut self.overflow);
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
        let payload = if over.is_empty() { PutPayload::from_bytes(Bytes::from_owner(buf)) } else { PutPayload::from_iter([Bytes::from_owner(buf), Bytes::from(over)]) };
        let part = upload.put_part(payload);
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
            let part = cur.len();
            if self.filled == part {
                // A resumable stripe's full part waits for its frame to end (a part's worth at
                // most, and never past the store's largest part: bytes past the frames, its
                // index, are not gone on from).
                let most = part.min(self.max_part.saturating_sub(part));
                let room = most - self.overflow.len().min(most);
                if room == 0 {
                    self.send_part()?;
                    continue;
                }
                let n = room.min(buf.len());
                self.overflow.extend_from_slice(&buf[..n]);
                self.written += n as u64;
                buf = &buf[n..];
                continue;
            }
            let n = (part - self.filled).min(buf.len());
            cur[self.filled..self.filled + n].copy_from_slice(&buf[..n]);
            self.filled += n;
            self.written += n as u64;
            buf = &buf[n..];
            if self.filled == part && !self.keep_unfinished {
                self.send_part()?;
            }
        }
        Ok(())
    }

    fn frame_end(&mut self) -> Result<bool> {
        if !self.keep_unfinished || self.current.as_ref().is_none_or(|c| self.filled < c.len()) {
            return Ok(false);
        }
        self.send_part()?;
        Ok(true)
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
                return Err(Error::new(ErrorKind::Target, format!("target {} appeared while the backup ran: remove it, or pass --overwrite", self.shown)));
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
                let (size, tail) = (self.copied + self.written, self.tail.clone());
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
                // A resumable stripe's upload stays for the next attempt to decide on (it began
                // its footers, so it starts afresh and gives this one up).
                if !self.keep_unfinished {
                    let _ = self.handle.block_on(async move { upload.abort().await });
                }
                Err(map_err(e, &format!("cannot complete the upload of {}", self.shown), Side::Write, &self.redact))
            }
        }
    }

    fn discard(&mut self) {
        if self.keep_unfinished && !self.published && !self.lazy {
            // What is in flight lands, and the part being filled goes when a part may be that
            // small (the writer stopped after a whole frame); the upload stays open.
            if (self.filled + self.overflow.len()) as u64 >= crate::config::MIN_PART_SIZE {
                let _ = self.send_part();
            }
            while !self.in_flight.is_empty() {
                let _ = self.wait_oldest();
            }
            self.upload = None;
            return;
        }
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

/// How many of the parts that end at `ends` going on from `keep` keeps: none, or those up to the
/// one that ends there.
fn parts_kept(ends: &[u64], keep: u64, shown: &str) -> Result<usize> {
    match keep {
        0 => Ok(0),
        _ => ends.iter().position(|&e| e == keep).map(|i| i + 1).ok_or_else(|| Error::invalid(format!("internal: {shown} goes on only from the end of a part it holds"))),
    }
}

/// Of parts held (number from 1, size), sorted by number: where each of the unbroken run from the
/// first ends, each a whole part (a part in flight when its writer stopped may be missing while
/// later ones landed, and one set aside is a byte), and the numbers of the others.
pub(super) fn unbroken_run(held: &[(usize, u64)]) -> (Vec<u64>, Vec<usize>) {
    let run = held.iter().enumerate().take_while(|(i, p)| p.0 == i + 1 && p.1 >= crate::config::MIN_PART_SIZE).count();
    let ends = held[..run]
        .iter()
        .scan(0u64, |end, p| {
            *end += p.1;
            Some(*end)
        })
        .collect();
    (ends, held[run..].iter().map(|p| p.0).collect())
}

/// A stopped backup's upload, still open ([`S3Unfinished`]).
pub(super) struct OpenUpload {
    pub(super) id: String,
    /// The unbroken run of parts from the first (number, ETag, size).
    pub(super) kept: Vec<crate::lock::UploadedPart>,
    /// The numbers of the parts it holds past that run.
    pub(super) past: Vec<usize>,
}

/// A stripe a stopped backup left on S3 ([`sheaf_core::Store::resume`]): its upload, still in
/// progress, and the unbroken run of parts the server holds from the first. Going on sends more
/// parts to the same upload after those kept: nothing kept is read back or sent again.
pub(super) struct S3Unfinished {
    pub(super) sink: S3Sink,
    pub(super) client: Arc<object_store::aws::AmazonS3>,
    pub(super) upload: Option<OpenUpload>,
    /// Where each part kept ends.
    pub(super) ends: Vec<u64>,
    /// The storage class of a stripe begun again.
    pub(super) class: Option<&'static str>,
}

impl sheaf_core::storage::UnfinishedStripe for S3Unfinished {
    fn holds(&self) -> sheaf_core::storage::Holding<'_> {
        sheaf_core::storage::Holding::Parts(&self.ends)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        use object_store::multipart::{MultipartStore, PartId};
        let S3Unfinished { mut sink, client, upload, ends, class } = *self;
        let failed = |what: &str, e: object_store::Error| map_err(e, &format!("{what} {}", sink.shown), Side::Write, &sink.redact);
        let kept = parts_kept(&ends, keep, &sink.shown)?;
        let path = sink.path.clone();
        match upload {
            Some(OpenUpload { id, kept: parts, past }) if kept > 0 => {
                // The parts past those kept hold an earlier attempt's bytes under numbers this
                // attempt sends again: each is replaced first by one byte, too small for a part
                // that is not the last, so that a later attempt never takes one for this one's.
                let stale: Vec<usize> = parts.iter().skip(kept).map(|p| p.0).chain(past).collect();
                for n in stale {
                    let (c, p, i) = (client.clone(), path.clone(), id.clone());
                    sink.handle.block_on(async move { c.put_part(&p, &i, n - 1, PutPayload::from_static(b"\0")).await }).map_err(|e| failed("cannot set aside a part of", e))?;
                }
                let done = parts.into_iter().take(kept).map(|(_, etag, _)| PartId { content_id: etag }).collect();
                sink.upload = Some(Box::new(crate::lock::LockedUpload::going_on(client, path, id, done)));
                sink.parts = kept as u64;
                sink.copied = keep;
            }
            other => {
                // Nothing kept: the stripe begins again, as a new upload (the old one's parts
                // would be the earlier attempt's).
                if let Some(OpenUpload { id, .. }) = other {
                    let (c, p) = (client.clone(), path.clone());
                    let _ = sink.handle.block_on(async move { c.abort_multipart(&p, &id).await });
                }
                let mut put = object_store::PutMultipartOptions::default();
                if let Some(c) = class {
                    put.attributes.insert(object_store::Attribute::StorageClass, c.into());
                }
                let (c, p) = (sink.client.clone(), path.clone());
                sink.upload = Some(sink.handle.block_on(async move { c.put_multipart_opts(&p, put).await }).map_err(|e| failed("cannot start uploading", e))?);
            }
        }
        sink.lazy = false;
        Ok(Box::new(sink))
    }

    fn abandon(self: Box<Self>) {
        use object_store::multipart::MultipartStore;
        if let Some(u) = self.upload {
            let (c, p) = (self.client.clone(), self.sink.path.clone());
            let _ = self.sink.handle.block_on(async move { c.abort_multipart(&p, &u.id).await });
        }
    }
}

/// A stripe a stopped backup left in Azure ([`sheaf_core::Store::resume`]): the numbered blocks
/// the blob holds uncommitted, the unbroken run of whole parts from the first kept. Going on sends
/// the next blocks after those and commits them all: nothing kept is read back or sent again.
pub(super) struct AzureUnfinished {
    pub(super) sink: S3Sink,
    pub(super) blocks: crate::azure::AzureBlocks,
    /// Where each block kept ends.
    pub(super) ends: Vec<u64>,
    /// The numbers of the blocks it holds past that run.
    pub(super) past: Vec<usize>,
}

impl sheaf_core::storage::UnfinishedStripe for AzureUnfinished {
    fn holds(&self) -> sheaf_core::storage::Holding<'_> {
        sheaf_core::storage::Holding::Parts(&self.ends)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        let AzureUnfinished { mut sink, blocks, ends, past } = *self;
        let failed = |what: &str, e: object_store::Error| map_err(e, &format!("{what} {}", sink.shown), Side::Write, &sink.redact);
        let kept = parts_kept(&ends, keep, &sink.shown)?;
        let path = sink.path.clone();
        // The blocks past those kept hold an earlier attempt's bytes under numbers this attempt
        // sends again: each set aside first, so that a later attempt never takes one for this
        // one's (with none kept, all of them: the stripe begins again).
        let stale: Vec<usize> = (kept + 1..=ends.len()).chain(past).collect();
        let (b, p) = (blocks.clone(), path.clone());
        sink.handle.block_on(async move { b.set_aside(&p, stale).await }).map_err(|e| failed("cannot set aside a block of", e))?;
        sink.upload = Some(Box::new(crate::azure::AzureUpload::going_on(blocks, path, kept)));
        sink.parts = kept as u64;
        sink.copied = keep;
        sink.lazy = false;
        Ok(Box::new(sink))
    }

    fn abandon(self: Box<Self>) {
        // Uncommitted blocks cannot be removed (Azure drops them after a week): the first set
        // aside, so that nothing of it is ever gone on from.
        if !self.ends.is_empty() || !self.past.is_empty() {
            let (b, p) = (self.blocks.clone(), self.sink.path.clone());
            let _ = self.sink.handle.block_on(async move { b.set_aside(&p, [1]).await });
        }
    }
}

/// A stripe a stopped backup left in GCS ([`sheaf_core::Store::resume`]): its part objects, the
/// unbroken run of whole parts from the first kept. Going on writes the next parts after those and
/// composes them all: nothing kept is read back or sent again.
pub(super) struct GcsUnfinished {
    pub(super) sink: S3Sink,
    pub(super) writer: crate::gcs::GcsWriter,
    /// The stripe's object name.
    pub(super) key: String,
    /// Where each part kept ends.
    pub(super) ends: Vec<u64>,
    /// The numbers of the parts there past that run.
    pub(super) past: Vec<usize>,
}

impl sheaf_core::storage::UnfinishedStripe for GcsUnfinished {
    fn holds(&self) -> sheaf_core::storage::Holding<'_> {
        sheaf_core::storage::Holding::Parts(&self.ends)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        let GcsUnfinished { mut sink, writer, key, ends, past } = *self;
        let kept = parts_kept(&ends, keep, &sink.shown)?;
        // The parts past those kept hold an earlier attempt's bytes under numbers this attempt
        // writes again: removed first, so that a later attempt never takes one for this one's.
        let stale: Vec<String> = (kept + 1..=ends.len()).chain(past).map(|n| crate::gcs::part_name(&key, n)).collect();
        let client = sink.client.clone();
        sink.handle
            .block_on(async move { crate::gcs::remove_all(&client, stale).await })
            .map_err(|e| map_err(e, &format!("cannot remove the parts an earlier attempt left of {}", sink.shown), Side::Write, &sink.redact))?;
        sink.upload = Some(Box::new(crate::gcs::Composed::going_on(writer, sink.client.clone(), key, kept)));
        sink.parts = kept as u64;
        sink.copied = keep;
        sink.lazy = false;
        Ok(Box::new(sink))
    }

    fn abandon(self: Box<Self>) {
        let pieces: Vec<String> = (1..=self.ends.len()).chain(self.past.iter().copied()).map(|n| crate::gcs::part_name(&self.key, n)).collect();
        let client = self.sink.client.clone();
        let _ = self.sink.handle.block_on(async move { crate::gcs::remove_all(&client, pieces).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_kept_is_whole_parts_from_the_first_with_none_missing() {
        let m = crate::config::MIN_PART_SIZE;
        assert_eq!(unbroken_run(&[(1, m), (2, m + 5), (4, m), (5, 1)]), (vec![m, 2 * m + 5], vec![4, 5]), "a gap ends it");
        assert_eq!(unbroken_run(&[(1, m), (2, 1), (3, m)]), (vec![m], vec![2, 3]), "a part set aside ends it");
        assert_eq!(unbroken_run(&[(2, m)]), (vec![], vec![2]), "no first part: nothing");
        assert_eq!(parts_kept(&[10, 20, 30], 20, "x").unwrap(), 2);
        assert_eq!(parts_kept(&[10, 20], 0, "x").unwrap(), 0);
        assert!(parts_kept(&[10, 20], 15, "x").is_err(), "only from a part's end");
    }
}
