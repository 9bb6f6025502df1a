//! One stripe object read ([`S3Source`]): pinned to the version first seen, ranged reads read ahead.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};
use sheaf_core::storage::{checked_range, into_io, stream_range, StripeSource};
use sheaf_core::{Error, ErrorKind, Result};
use std::collections::VecDeque;
use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::*;

pub(super) struct S3Source {
    pub(super) redact: Redact,
    pub(super) handle: Handle,
    pub(super) client: Arc<dyn ObjectStore>,
    pub(super) path: Path,
    pub(super) shown: String,
    pub(super) len: u64,
    pub(super) etag: Option<String>,
    pub(super) read_ahead: usize,
    pub(super) block: u64,
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
            return Err(Error::incomplete(format!("stripe {}: asked for {want} bytes at {at}, got {} (the object changed or is truncated)", self.shown, b.len())));
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
        let range = stream_range(&self.shown, start, end, self.len)?;
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
