//! `--max-rate`: a [`Store`] decorator that holds every byte written to, or read from, the stores
//! it wraps to one rate, shared by all stripes (pgBackRest users have asked for this since 2015:
//! a backup that does not starve the server's own I/O or a shared link).
//!
//! ```text
//!  Location ──throttled(limit)──► Throttled { inner store, limit }   create → ThrottledSink
//!                                                                     open   → ThrottledSource
//! ```
//! The limit keeps a virtual clock: each transfer of `n` bytes books `n / rate` seconds after the
//! previous booking (or after now, less a short burst allowance, if the link sat idle), and waits
//! until its booking has begun. Any window of `W` seconds therefore carries at most
//! `rate × (W + BURST)` bytes plus one transfer, wherever the threads that share it write.

use std::fmt;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Store, StripeSink, StripeSource};
use crate::error::{Error, Result};

/// Idle time a transfer may make up for at once: a burst of `rate × BURST` bytes.
const BURST: Duration = Duration::from_millis(100);

/// A rate in bytes per second, shared by everything that holds it.
#[derive(Debug)]
pub struct RateLimit {
    bytes_per_second: u64,
    /// When the link is next free, as time since `start`.
    next: Mutex<Duration>,
    start: Instant,
}

impl RateLimit {
    /// A limit of `bytes_per_second`.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::InvalidInput`] for a rate of 0.
    pub fn new(bytes_per_second: u64) -> Result<Arc<Self>> {
        if bytes_per_second == 0 {
            return Err(Error::invalid("--max-rate 0 would never write a byte: give a rate such as 100MiB (per second)"));
        }
        Ok(Arc::new(RateLimit { bytes_per_second, next: Mutex::new(Duration::ZERO), start: Instant::now() }))
    }

    /// The rate, in bytes per second.
    pub fn bytes_per_second(&self) -> u64 {
        self.bytes_per_second
    }

    /// Book `n` bytes at `now` (time since the limit was made): how long to wait before sending them.
    fn book(&self, n: usize, now: Duration) -> Duration {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let begin = (*next).max(now.saturating_sub(BURST));
        *next = begin + Duration::from_secs_f64(n as f64 / self.bytes_per_second as f64);
        begin.saturating_sub(now)
    }

    /// Wait until `n` more bytes may go.
    pub fn take(&self, n: usize) {
        let wait = self.book(n, self.start.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// A store whose stripes' bytes, written or read, go at most at a [`RateLimit`].
pub struct Throttled {
    inner: Arc<dyn Store>,
    limit: Arc<RateLimit>,
}

impl Throttled {
    /// `inner`, held to `limit`.
    pub fn new(inner: Arc<dyn Store>, limit: Arc<RateLimit>) -> Self {
        Throttled { inner, limit }
    }
}

impl fmt::Debug for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at most {} bytes/s", self.inner, self.limit.bytes_per_second)
    }
}

impl Store for Throttled {
    fn credentials(&self) -> Option<String> {
        self.inner.credentials()
    }

    super::pass_to_inner!();
    fn create(&self, name: &str, opts: &super::WriteOptions) -> Result<Box<dyn StripeSink>> {
        Ok(Box::new(ThrottledSink { inner: self.inner.create(name, opts)?, limit: self.limit.clone() }))
    }
    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        Ok(Box::new(ThrottledSource { inner: self.inner.open(name)?, limit: self.limit.clone() }))
    }
    fn resume(&self, name: &str, opts: &super::WriteOptions) -> Result<Option<Box<dyn super::UnfinishedStripe>>> {
        Ok(self.inner.resume(name, opts)?.map(|inner| Box::new(ThrottledUnfinished { inner, limit: self.limit.clone() }) as Box<dyn super::UnfinishedStripe>))
    }
    fn can_resume(&self) -> bool {
        self.inner.can_resume()
    }
}

/// An unfinished stripe whose writing on is throttled like any other.
struct ThrottledUnfinished {
    inner: Box<dyn super::UnfinishedStripe>,
    limit: Arc<RateLimit>,
}

impl super::UnfinishedStripe for ThrottledUnfinished {
    fn holds(&self) -> super::Holding<'_> {
        self.inner.holds()
    }
    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        Ok(Box::new(ThrottledSink { inner: self.inner.go_on(keep)?, limit: self.limit }))
    }
    fn abandon(self: Box<Self>) {
        self.inner.abandon();
    }
}

struct ThrottledSink {
    inner: Box<dyn StripeSink>,
    limit: Arc<RateLimit>,
}

impl StripeSink for ThrottledSink {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        self.limit.take(buf.len());
        self.inner.write_all(buf)
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn publish(&mut self) -> Result<()> {
        self.inner.publish()
    }
    fn discard(&mut self) {
        self.inner.discard()
    }
    fn written(&self) -> u64 {
        self.inner.written()
    }
    fn reserve(&mut self, bytes: u64) -> Result<bool> {
        self.inner.reserve(bytes)
    }
    fn frame_end(&mut self) -> Result<bool> {
        self.inner.frame_end()
    }
}

struct ThrottledSource {
    inner: Box<dyn StripeSource>,
    limit: Arc<RateLimit>,
}

impl StripeSource for ThrottledSource {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.limit.take(buf.len());
        self.inner.read_exact_at(buf, offset)
    }
    fn location(&self) -> &str {
        self.inner.location()
    }
    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send + '_>> {
        Ok(Box::new(ThrottledRead { inner: self.inner.stream(start, end)?, limit: &self.limit }))
    }
}

struct ThrottledRead<'a> {
    inner: Box<dyn Read + Send + 'a>,
    limit: &'a RateLimit,
}

impl Read for ThrottledRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.limit.take(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bookings of 1 MiB sent as fast as allowed, from several writers taking turns: no window of
    /// 5 s carries more than 5 % over the rate, and a window that starts after an idle spell
    /// gets only the burst allowance.
    #[test]
    fn any_five_second_window_stays_within_five_percent() {
        let rate = 100u64 << 20;
        let limit = RateLimit::new(rate).unwrap();
        let chunk = 1usize << 20;
        // (time sent, bytes): each writer sends as soon as its booking says.
        let mut sent: Vec<(f64, usize)> = Vec::new();
        let mut now = Duration::ZERO;
        for i in 0..3000 {
            if i == 1500 {
                now += Duration::from_secs(7); // idle: nothing is owed for it beyond the burst
            }
            now += limit.book(chunk, now);
            sent.push((now.as_secs_f64(), chunk));
        }
        let end = sent.last().unwrap().0;
        let mut start = 0.0;
        while start + 5.0 <= end {
            let bytes: usize = sent.iter().filter(|(t, _)| *t >= start && *t < start + 5.0).map(|(_, n)| n).sum();
            assert!(bytes as f64 <= rate as f64 * 5.0 * 1.05, "{bytes} bytes in the 5 s from {start:.2} s");
            start += 0.05;
        }
        // Busy throughout, the rate is used, not only bounded.
        let first: usize = sent.iter().filter(|(t, _)| *t < 10.0).map(|(_, n)| n).sum();
        assert!(first as f64 >= rate as f64 * 10.0 * 0.95, "{first} bytes in the first 10 s");
    }

    #[test]
    fn a_rate_of_zero_is_refused_and_writes_wait_for_their_turn() {
        assert!(RateLimit::new(0).unwrap_err().message().contains("--max-rate 0"));
        let store = Throttled::new(Arc::new(crate::storage::MemoryStore::new()), RateLimit::new(10 << 20).unwrap());
        let t0 = Instant::now();
        let mut s = store.create("a", &Default::default()).unwrap();
        for _ in 0..3 {
            s.write_all(&[7u8; 1 << 20]).unwrap();
        }
        s.publish().unwrap();
        // 3 MiB at 10 MiB/s from a standing start: the third MiB starts 0.2 s in.
        assert!(t0.elapsed() >= Duration::from_millis(150), "{:?}", t0.elapsed());
        let src = store.open("a").unwrap();
        let mut all = Vec::new();
        src.stream(0, src.len()).unwrap().read_to_end(&mut all).unwrap();
        assert_eq!(all, vec![7u8; 3 << 20]);
    }
}
