//! The receiver: WAL from START_REPLICATION's stream into the spool's segment files, each synced
//! before its position is reported to the server as flushed, and renamed to its name when whole.

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sheaf_core::{Error, ErrorKind, Result};

use super::shared::{ReceiveOptions, Shared};
use crate::cluster::lsn::Lsn;
use crate::cluster::walname::segment_name;
use crate::connect::wire::{cell, lsn_cell};
use crate::connect::wire::{Copy, Replication, Streamed};

/// How often the receiver tells the server where it stands when nothing else makes it.
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The segment file being written.
pub(super) struct Open {
    segno: u64,
    pub(super) name: String,
    pub(super) path: PathBuf,
    file: File,
}

/// What streaming a timeline to its end leaves: the next timeline, where it starts, and the
/// timeline's last segment, synced and never to complete.
pub(super) type TimelineEnd = (u32, Lsn, Option<Open>);

/// Stream timeline `tli` from `start` (a segment's start) until stopped (`None`) or the timeline
/// ends.
pub(super) fn stream(c: &mut Replication, opts: &ReceiveOptions, shared: &Shared, tli: u32, start: Lsn, seg: u64) -> Result<Option<TimelineEnd>> {
    let mut open: Option<Open> = None;
    let (mut written, mut flushed) = (start, start);
    let mut last_status = Instant::now();
    let io = |what: &str, p: &Path, e: std::io::Error| Error::io(ErrorKind::Io, format!("{what} {}", p.display()), e);
    loop {
        opts.beat.beat();
        if opts.stop.asked() {
            if let Some(o) = &open {
                o.file.sync_data().map_err(|e| io("cannot sync", &o.path, e))?;
            }
            let _ = c.send_standby_status(written, flushed);
            return Ok(None);
        }
        match c.next_copy_within(Duration::from_millis(500))? {
            None => {}
            Some(Copy::Done) => {
                c.end_copy()?;
                let rows = c.finish_copy()?;
                if let Some(o) = &open {
                    o.file.sync_data().map_err(|e| io("cannot sync", &o.path, e))?;
                }
                let next: u32 = cell(&rows, 0, "the end of the timeline")?
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| Error::corrupt("the server ended the stream without naming the next timeline"))?;
                let at = lsn_cell(&rows, 1, "the end of the timeline")?.unwrap_or(written);
                return Ok(Some((next, at, open)));
            }
            Some(Copy::Data(d)) => match Streamed::parse(&d) {
                Streamed::Wal { at, data } => {
                    if at > written {
                        return Err(Error::corrupt(format!("the server sent WAL from {at} where {written} was next: a gap")));
                    }
                    let mut pos = at;
                    let mut rest = data;
                    while !rest.is_empty() {
                        let segno = pos.segment_number(seg);
                        if open.as_ref().is_none_or(|o| o.segno != segno) {
                            if let Some(o) = open.take() {
                                complete(o, shared)?;
                            }
                            open = Some(open_segment(&opts.spool, tli, segno, seg, shared)?);
                        }
                        let o = open.as_ref().expect("just opened");
                        let off = pos.segment_offset(seg);
                        let n = rest.len().min((seg - off) as usize);
                        o.file.write_all_at(&rest[..n], off).map_err(|e| io("cannot write", &o.path, e))?;
                        pos += n as u64;
                        rest = &rest[n..];
                        if pos.segment_offset(seg) == 0 {
                            let o = open.take().expect("open");
                            complete(o, shared)?;
                        }
                    }
                    written = written.max(pos);
                    shared.report().bytes += data.len() as u64;
                    // A burst is flushed once, at its end.
                    if !c.has_message() {
                        flushed = flush(open.as_ref(), shared, written)?;
                        c.send_standby_status(written, flushed)?;
                        last_status = Instant::now();
                    }
                }
                // Asked where it stands (a server shutting down waits until all it sent is
                // flushed): all that was written is flushed first.
                Streamed::Keepalive { reply: true } => {
                    flushed = flush(open.as_ref(), shared, written)?;
                    c.send_standby_status(written, flushed)?;
                    last_status = Instant::now();
                }
                Streamed::Keepalive { reply: false } | Streamed::Other => {}
            },
        }
        if flushed < written && !c.has_message() {
            flushed = flush(open.as_ref(), shared, written)?;
            c.send_standby_status(written, flushed)?;
            last_status = Instant::now();
        }
        if last_status.elapsed() >= STATUS_EVERY {
            c.send_standby_status(written, flushed)?;
            last_status = Instant::now();
        }
    }
}

/// Everything written up to `written` on disk: the segment being written synced (those before
/// it were when they completed); the new flush position, shared with the uploader.
fn flush(open: Option<&Open>, shared: &Shared, written: Lsn) -> Result<Lsn> {
    if let Some(o) = open {
        o.file.sync_data().map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync {}", o.path.display()), e))?;
    }
    {
        let mut st = shared.lock();
        if st.flushed != written {
            st.flushed = written;
            st.version += 1;
        }
    }
    shared.report().flushed = Some(written);
    Ok(written)
}

/// The spool file for a segment, made at its full size (zeros past what is received), and known
/// to the uploader as the segment being received.
fn open_segment(spool: &Path, tli: u32, segno: u64, seg: u64, shared: &Shared) -> Result<Open> {
    let name = segment_name(tli, segno, seg);
    let path = spool.join(format!("{name}.partial"));
    let file =
        File::options().create(true).truncate(false).read(true).write(true).open(&path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", path.display()), e))?;
    file.set_len(seg).map_err(|e| Error::io(ErrorKind::Io, format!("cannot size {}", path.display()), e))?;
    // Its name durable before any position in it is reported flushed: a synchronous commit the
    // server acknowledges on that report must survive a power cut here.
    file.sync_all().map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync {}", path.display()), e))?;
    sheaf_core::whole::sync_dir(spool).map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync the spool folder {}", spool.display()), e))?;
    shared.lock().partial = Some((path.clone(), name.clone()));
    Ok(Open { segno, name, path, file })
}

/// A segment received whole: on disk, renamed to its name, handed to the uploader.
fn complete(o: Open, shared: &Shared) -> Result<()> {
    o.file.sync_data().map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync {}", o.path.display()), e))?;
    let done = o.path.with_file_name(&o.name);
    fs::rename(&o.path, &done).map_err(|e| Error::io(ErrorKind::Io, format!("cannot rename {}", o.path.display()), e))?;
    sheaf_core::whole::sync_dir(&sheaf_core::whole::parent_dir(&done)).map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync the folder of {}", done.display()), e))?;
    let mut st = shared.lock();
    if st.partial.as_ref().is_some_and(|(p, _)| *p == o.path) {
        st.partial = None;
    }
    drop(st);
    shared.wake.notify_all();
    Ok(())
}
