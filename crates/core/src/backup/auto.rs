//! `--compression auto`: zstd's level steered chunk by chunk from the pipeline's own pressure.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// `--compression auto`: the zstd level, steered chunk by chunk from the pipeline's own pressure.
/// Over windows of at least [`AUTO_SETTLE`] it watches two things: how much of their time the
/// compressors spent waiting for a chunk, and how often a frame was waiting for the writers.
/// Compressors idle while frames wait: the output (a slow target, `--max-rate`) holds the pipeline
/// up and the compressors have time to spare, so a level up costs nothing. Compressors hardly ever
/// idle: the CPU is the bottleneck, so a level down (to zstd:low at the least). Compressors idle
/// with nothing waiting for the writers: the reader is the bottleneck, and the level stays. One
/// step per window at most, so each change shows before the next. (Frames waiting alone say too
/// little: on a machine whose cores are all compressing, the writer thread waits for a core too.)
pub(crate) struct AutoLevel {
    step: AtomicUsize,
    /// Chunks compressed at each step.
    chunks: Vec<AtomicU64>,
    threads: u64,
    /// The window: when it started (ns after `epoch`), the compressors' waiting time in it, and
    /// the looks at the writers' queue and how many found a frame waiting. Atomics, so that a
    /// chunk costs no lock; the compressor that closes a window claims it with one exchange.
    epoch: Instant,
    started_ns: AtomicU64,
    idle_ns: AtomicU64,
    out_busy: AtomicU64,
    samples: AtomicU64,
}

/// The levels `auto` moves over: zstd low (1) to past high (7).
pub const AUTO_LEVELS: [i32; 9] = [1, 2, 3, 4, 5, 6, 7, 9, 12];
/// Least time over which the pipeline is watched before a level change.
pub const AUTO_SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

impl AutoLevel {
    pub(crate) fn new(threads: usize) -> AutoLevel {
        AutoLevel {
            step: Default::default(),
            chunks: AUTO_LEVELS.iter().map(|_| Default::default()).collect(),
            threads: threads.max(1) as u64,
            epoch: Instant::now(),
            started_ns: Default::default(),
            idle_ns: Default::default(),
            out_busy: Default::default(),
            samples: Default::default(),
        }
    }

    /// The level for the next chunk, from a compressor that waited `idle` for it and sees
    /// `waiting_out` frames queued for the writers.
    pub(crate) fn next(&self, idle: std::time::Duration, waiting_out: usize) -> i32 {
        self.idle_ns.fetch_add(idle.as_nanos() as u64, Relaxed);
        self.out_busy.fetch_add(u64::from(waiting_out > 0), Relaxed);
        let samples = self.samples.fetch_add(1, Relaxed) + 1;
        let now = self.epoch.elapsed().as_nanos() as u64;
        let started = self.started_ns.load(Relaxed);
        let span = now.saturating_sub(started);
        let mut step = self.step.load(Relaxed);
        if span >= AUTO_SETTLE.as_nanos() as u64 && samples >= 4 && self.started_ns.compare_exchange(started, now, Relaxed, Relaxed).is_ok() {
            let (idle, busy, samples) = (self.idle_ns.swap(0, Relaxed), self.out_busy.swap(0, Relaxed), self.samples.swap(0, Relaxed));
            // Idle share of the compressors' time; frames waiting at half the looks or more.
            let idle_share = idle as f64 / (span as f64 * self.threads as f64);
            let output_bound = busy * 2 >= samples;
            let want = if idle_share >= 0.15 && output_bound {
                (step + 1).min(AUTO_LEVELS.len() - 1)
            } else if idle_share < 0.05 {
                step.saturating_sub(1)
            } else {
                step
            };
            if want != step {
                step = want;
                self.step.store(step, Relaxed);
            }
        }
        self.chunks[step].fetch_add(1, Relaxed);
        AUTO_LEVELS[step]
    }

    /// Chunks compressed at each level used.
    pub(crate) fn levels(&self) -> std::collections::BTreeMap<i32, u64> {
        AUTO_LEVELS.iter().zip(&self.chunks).map(|(&l, n)| (l, n.load(Relaxed))).filter(|&(_, n)| n > 0).collect()
    }
}
