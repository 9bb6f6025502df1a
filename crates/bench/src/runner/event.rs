//! Progress: what the runner tells its caller (the library prints nothing), and the ETA.

use std::time::{Duration, Instant};

/// What the runner tells its caller.
#[derive(Debug)]
pub enum Event<'a> {
    /// Something is being prepared.
    Note(&'a str),
    /// Something did not go as asked but the bench goes on (a peer missing or failing).
    Warning(&'a str),
    /// A run starts: `index` from 1 of `total`, `eta` once one run has finished.
    Run {
        /// Which run, from 1.
        index: usize,
        /// Runs in all.
        total: usize,
        /// Tool and permutation.
        what: &'a str,
        /// Which repeat, from 1.
        repeat: usize,
        /// Repeats per permutation.
        repeats: usize,
        /// Time left, estimated from the runs so far.
        eta: Option<Duration>,
    },
}

/// Runs so far, for the ETA.
pub(super) struct Clock {
    pub(super) start: Instant,
    pub(super) done: usize,
    pub(super) total: usize,
}

impl Clock {
    pub(super) fn eta(&self) -> Option<Duration> {
        (self.done > 0).then(|| self.start.elapsed().mul_f64(self.total.saturating_sub(self.done) as f64 / self.done as f64))
    }
}
