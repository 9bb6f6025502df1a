//! What the receiver and the uploader share: what they are asked ([`ReceiveOptions`]), what they
//! report ([`ReceiveReport`]), and the state between them (the segment being received, the
//! flushed position), behind one lock and one condition variable.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::Serialize;
use sheaf_core::stop::{Beat, Stop};
use sheaf_core::CodecSpec;

use crate::cluster::lsn::Lsn;

/// What to receive, and how.
#[derive(Clone)]
pub struct ReceiveOptions {
    /// The server (a replication connection is made to it; its `application_name`, default
    /// `sheaf`, is what `synchronous_standby_names` names).
    pub url: String,
    /// The physical replication slot (made when missing).
    pub slot: String,
    /// The spool folder for this repository (the segment being received, and complete ones until
    /// they are in the repository).
    pub spool: PathBuf,
    /// Codec for the WAL stored in the repository.
    pub codec: CodecSpec,
    /// How often the segment being received is copied to the repository.
    pub partial_every: Duration,
    /// Pause before connecting again after the connection failed.
    pub retry_every: Duration,
    /// Set to stop (what was received is stored first).
    pub stop: Stop,
    /// Beats each time the receiver goes round (streaming, or waiting to connect again).
    pub beat: Beat,
}

/// What a receiver did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReceiveReport {
    /// WAL bytes received.
    pub bytes: u64,
    /// Complete segments stored in the repository.
    pub segments: Vec<String>,
    /// Of those, how many the archiver had stored already.
    pub already_archived: u64,
    /// Copies of the segment being received stored in the repository.
    pub partial_uploads: u64,
    /// The last position flushed to the spool and reported to the server (in JSON, `""` before
    /// anything was).
    #[serde(serialize_with = "lsn_or_empty")]
    pub flushed: Option<Lsn>,
    /// The timeline last streamed.
    pub timeline: u32,
    /// Connections made.
    pub connections: u32,
    /// Timeline history files stored.
    pub histories: Vec<String>,
    /// The last failure met (the receiver then connected again).
    pub last_error: Option<String>,
}

/// An LSN as its text, none as `""`: the report's `flushed` as it has always been written.
fn lsn_or_empty<S: serde::Serializer>(lsn: &Option<Lsn>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match lsn {
        Some(l) => l.serialize(s),
        None => s.serialize_str(""),
    }
}

/// Where the receiver's messages go (it never prints by itself).
pub type Events = Arc<dyn Fn(&str) + Send + Sync>;

/// What the receiver and the uploader share.
#[derive(Default)]
pub(super) struct State {
    /// The segment being received: its spool file, its name, and its flushed bytes (the
    /// position in it up to which it is on disk).
    pub(super) partial: Option<(PathBuf, String)>,
    /// Flushed WAL position.
    pub(super) flushed: Lsn,
    /// Bumped whenever the partial has more on disk.
    pub(super) version: u64,
    /// Set once the receiver is done: the uploader stores what is left and ends.
    pub(super) done: bool,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) wake: Condvar,
    pub(super) report: Mutex<ReceiveReport>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(super) fn report(&self) -> std::sync::MutexGuard<'_, ReceiveReport> {
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }
}
