//! Pieces the backup and restore pipelines share: the bounded buffer pool, the first-error-wins
//! failure slot that cancels every thread, and the progress trait the caller draws.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::Error;
use crate::stop::Stop;

/// Receives progress; the library never draws. All methods have empty defaults.
pub trait Progress: Send + Sync {
    /// A phase begins (`"backup"`, `"restore"`, `"verify"`) with this many bytes to process.
    fn begin(&self, _phase: &str, _total_bytes: u64) {}
    /// `bytes` more are to be processed than the phase began with (a listing that streams).
    fn more(&self, _bytes: u64) {}
    /// `bytes` more were processed.
    fn advance(&self, _bytes: u64) {}
    /// The phase is over.
    fn end(&self) {}
    /// Something the user should hear while it lasts: what a long wait waits for, and how to end
    /// it sooner.
    fn note(&self, _message: &str) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}

/// State every thread of one operation shares: the first error, a cancel flag, counters.
pub(crate) struct Shared {
    cancelled: AtomicBool,
    /// Asked by the caller to stop (Ctrl-C, SIGTERM): seen like our own cancel.
    stop_asked: Option<Stop>,
    /// Dropped on cancel: whoever waits on `stopped` wakes at once (no polling).
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    error: Mutex<Option<Error>>,
    pub(crate) progress: Arc<dyn Progress>,
    pub(crate) bytes: AtomicU64,
    /// Findings of chunk checks (rare: a mutex is cheap enough).
    pub(crate) findings: Mutex<Vec<String>>,
}

impl Shared {
    #[cfg(test)]
    pub(crate) fn new(progress: Arc<dyn Progress>) -> Arc<Self> {
        Self::stoppable(progress, None)
    }

    /// As [`Shared::new`], also cancelled once a stop is asked of `stop_asked`.
    pub(crate) fn stoppable(progress: Arc<dyn Progress>, stop_asked: Option<Stop>) -> Arc<Self> {
        let (stop, stopped) = bounded(0);
        Arc::new(Shared {
            cancelled: AtomicBool::new(false),
            stop_asked,
            stop: Mutex::new(Some(stop)),
            stopped,
            error: Mutex::new(None),
            progress,
            bytes: AtomicU64::new(0),
            findings: Mutex::new(Vec::new()),
        })
    }

    /// Record `e` if it is the first error, and cancel everything.
    pub(crate) fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        drop(slot);
        self.cancel();
    }

    /// Cancel without an error of our own (the caller gave up).
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || self.stop_asked.as_ref().is_some_and(Stop::asked)
    }

    pub(crate) fn take_error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn count(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        self.progress.advance(n);
    }
}

/// Memory a [`Pool`] hands out: a plain vector, or an [`AlignedBuf`](crate::aligned::AlignedBuf)
/// where the bytes go to disk with direct I/O.
pub trait Buffer: std::ops::DerefMut<Target = [u8]> + Send + 'static {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> Self;
}

impl Buffer for Vec<u8> {
    fn zeroed(len: usize) -> Self {
        vec![0; len]
    }
}

impl Buffer for crate::aligned::AlignedBuf {
    fn zeroed(len: usize) -> Self {
        crate::aligned::AlignedBuf::new(len)
    }
}

/// At most `cap` buffers of `size` bytes, allocated on first need and recycled. Taking blocks while
/// all are in use: this is what bounds the memory of a pipeline to `cap × size`. A buffer is a
/// [`PoolBuf`] guard that goes back when dropped, on every path (an upload that fails, a thread
/// that stops early), so nothing has to give buffers back by hand and the bound always holds.
pub struct Pool<B: Buffer = Vec<u8>> {
    tx: Sender<B>,
    rx: Receiver<B>,
    allocated: AtomicUsize,
    cap: usize,
    size: usize,
}

impl<B: Buffer> Pool<B> {
    /// A pool of at most `cap` (at least 1) buffers of `size` bytes.
    pub fn new(cap: usize, size: usize) -> Arc<Self> {
        let (tx, rx) = bounded(cap.max(1));
        Arc::new(Pool { tx, rx, allocated: AtomicUsize::new(0), cap: cap.max(1), size })
    }

    /// Bytes per buffer.
    pub fn buffer_len(&self) -> usize {
        self.size
    }

    fn ready(self: &Arc<Self>) -> Option<PoolBuf<B>> {
        if let Ok(b) = self.rx.try_recv() {
            return Some(self.guard(b));
        }
        let n = self.allocated.load(Ordering::Relaxed);
        if n < self.cap && self.allocated.compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            return Some(self.guard(B::zeroed(self.size)));
        }
        None
    }

    fn guard(self: &Arc<Self>, buf: B) -> PoolBuf<B> {
        let len = buf.len();
        PoolBuf { buf: std::mem::ManuallyDrop::new(buf), len, pool: self.clone() }
    }

    /// A buffer, or `None` once `shared` is cancelled (it wakes the wait).
    pub(crate) fn take(self: &Arc<Self>, shared: &Shared) -> Option<PoolBuf<B>> {
        if shared.is_cancelled() {
            return None;
        }
        if let Some(b) = self.ready() {
            return Some(b);
        }
        // All `cap` buffers exist and are in use: wait for one to come back, or for a cancel.
        crossbeam_channel::select! {
            recv(self.rx) -> b => b.ok().map(|b| self.guard(b)),
            recv(shared.stopped) -> _ => None,
        }
    }

    /// A buffer, waiting as long as it takes: for holders whose buffers always come back (an
    /// uploader's parts return when the request ends, however it ends).
    pub fn take_wait(self: &Arc<Self>) -> PoolBuf<B> {
        loop {
            if let Some(b) = self.ready() {
                return b;
            }
            if let Ok(b) = self.rx.recv() {
                return self.guard(b);
            }
        }
    }

    /// Buffers allocated so far (for tests and reports).
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}

/// A buffer of a [`Pool`]; it returns to the pool when dropped. It derefs to its first `len` bytes
/// (all of it until [`PoolBuf::set_len`]).
pub struct PoolBuf<B: Buffer = Vec<u8>> {
    /// Taken out only in `drop`, to go back to the pool.
    buf: std::mem::ManuallyDrop<B>,
    len: usize,
    pool: Arc<Pool<B>>,
}

impl<B: Buffer> PoolBuf<B> {
    /// Show only the first `len` bytes (at most the buffer's size).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.buf.len());
    }
}

impl<B: Buffer> std::ops::Deref for PoolBuf<B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<B: Buffer> std::ops::DerefMut for PoolBuf<B> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl<B: Buffer> AsRef<[u8]> for PoolBuf<B> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl<B: Buffer> Drop for PoolBuf<B> {
    fn drop(&mut self) {
        // SAFETY: `buf` is never used again: this is the guard's end.
        let buf = unsafe { std::mem::ManuallyDrop::take(&mut self.buf) };
        // Never full: at most `cap` buffers exist.
        let _ = self.pool.tx.try_send(buf);
    }
}

/// Read until `buf` is full or the reader ends; returns the bytes read.
///
/// # Errors
/// The reader's errors other than `Interrupted`.
pub fn read_full<R: std::io::Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Whether every byte is zero (an unwritten or sparse region).
pub(crate) fn is_zero(b: &[u8]) -> bool {
    // Word by word where aligned: the test runs on every chunk a backup reads.
    // SAFETY: every bit pattern is a valid u128, and align_to puts only aligned whole words in `mid`.
    let (pre, mid, post) = unsafe { b.align_to::<u128>() };
    pre.iter().all(|&x| x == 0) && mid.iter().all(|&x| x == 0) && post.iter().all(|&x| x == 0)
}

/// crc32c of `len` zero bytes, without a buffer of that size.
pub(crate) fn zero_crc(len: usize) -> u32 {
    // Whole blocks by doubling (crc combination), so a hole of a gigabyte costs microseconds.
    const Z: [u8; 4096] = [0; 4096];
    let (mut crc, mut block, mut block_len, mut left) = (0u32, crc32c::crc32c(&Z), Z.len(), len);
    crc = crc32c::crc32c_append(crc, &Z[..left % Z.len()]);
    left -= left % Z.len();
    while left > 0 {
        if left / block_len % 2 == 1 {
            crc = crate::crc::combine(crc, block, block_len as u64);
            left -= block_len;
        }
        if left == 0 {
            break;
        }
        block = crate::crc::combine(block, block, block_len as u64);
        block_len *= 2;
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_bounds_allocation_and_recycles() {
        let shared = Shared::new(Arc::new(NoProgress));
        let pool = Pool::<Vec<u8>>::new(2, 16);
        let a = pool.take(&shared).unwrap();
        let b = pool.take(&shared).unwrap();
        assert_eq!(pool.allocated(), 2);
        drop(a);
        let c = pool.take(&shared).unwrap();
        assert_eq!(pool.allocated(), 2, "a dropped buffer is reused, not a new one made");
        // A taker waiting on a full pool wakes when another thread cancels: no polling, no hang.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| pool.take(&shared).is_none());
            std::thread::sleep(std::time::Duration::from_millis(50));
            shared.cancel();
            assert!(waiter.join().unwrap(), "a cancelled take returns instead of waiting forever");
        });
        drop((b, c));
    }

    #[test]
    fn buffers_come_back_from_other_threads_on_drop() {
        let pool = Pool::<Vec<u8>>::new(1, 8);
        let mut a = pool.take_wait();
        a.set_len(3);
        assert_eq!(a.len(), 3);
        let t = std::thread::spawn(move || drop(a));
        let b = pool.take_wait();
        t.join().unwrap();
        assert_eq!(b.len(), 8, "a returned buffer is whole again");
        assert_eq!(pool.allocated(), 1);
    }

    #[test]
    fn zero_detection_and_crc() {
        let mut v = vec![0u8; 10_001];
        assert!(is_zero(&v));
        assert_eq!(zero_crc(v.len()), crc32c::crc32c(&v));
        for len in [0, 1, 4095, 4096, 4097, 8192, 3 * 4096 + 5, 7 * 4096, 1 << 20, (1 << 20) + 12_345] {
            assert_eq!(zero_crc(len), crc32c::crc32c(&vec![0u8; len]), "{len}");
        }
        v[10_000] = 1;
        assert!(!is_zero(&v));
        v[10_000] = 0;
        v[3] = 1;
        assert!(!is_zero(&v));
        assert!(is_zero(&[]));
    }

    #[test]
    fn first_error_wins() {
        let shared = Shared::new(Arc::new(NoProgress));
        shared.fail(Error::corrupt("first"));
        shared.fail(Error::corrupt("second"));
        assert!(shared.is_cancelled());
        assert_eq!(shared.take_error().unwrap().message(), "first");
    }
}
