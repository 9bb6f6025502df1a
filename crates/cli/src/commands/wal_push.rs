//! `sheaf wal-push`: PostgreSQL's archive_command. The archiving, look-ahead and queue bound are
//! [`sheaf_pg::queue::archive`]'s; what the server log should hear is said here.

use std::time::Instant;

use sheaf_core::size::{format_size, parse_size};
use sheaf_core::Error;
use sheaf_pg::queue::{Archived, DropNotice};
use sheaf_pg::wal::wal_dir;

use crate::args::WalPushArgs;
use crate::context::Context;

/// Run it: exit 0 only once the file is durable in the repository, or dropped under
/// `--queue-max` (said loudly).
///
/// # Errors
/// The push failed and the file was not dropped.
pub fn run(ctx: &Context, a: WalPushArgs) -> Result<(), Error> {
    let spec = ctx.codec(a.compression.clone())?;
    let parallel = ctx.parallel(a.parallel)?;
    let queue_max = match ctx.settings.get("queue-max", a.queue_max.clone()) {
        Some((v, origin)) => Some(parse_size(&v).map_err(|e| e.context(format!("queue-max from {origin}")))?),
        None => None,
    };
    let repo = ctx.repo()?;
    let spool = ctx.spool(wal_dir(&a.path), &repo)?;
    let t0 = Instant::now();
    let (report, published) = match sheaf_pg::queue::archive(&repo, &spool, &a.path, spec, parallel, queue_max)? {
        Archived::Pushed { report, published } => (report, published),
        Archived::Dropped(notice) => {
            dropped(&notice, &spool);
            return Ok(());
        }
    };
    match published {
        Ok(0) => {}
        Ok(n) => eprintln!(
            "sheaf: WARNING: the repository is reachable again; {n} WAL file(s) dropped by queue-max while it was not are recorded in it (sheaf info lists them). Take a new backup: recovery cannot cross the gap."
        ),
        Err(e) => eprintln!("sheaf: WARNING: cannot record WAL dropped by queue-max in the repository yet: {e}"),
    }
    for f in &report.ahead_failed {
        eprintln!("sheaf: look-ahead push of {} failed; the archiver will ask for it again: {}", f.name, f.error);
    }
    if let Some(e) = &report.spool_error {
        eprintln!("sheaf: look-ahead is off: {e}");
    }
    if let Some(e) = &report.summary_error {
        eprintln!("sheaf: WARNING: {e}; the segment is archived, and an incremental backup reads every page where summaries are missing (sheaf wal-summarize makes them)");
    }
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serialises");
        v["seconds"] = serde_json::json!(t0.elapsed().as_secs_f64());
        println!("{v}");
    } else if report.pushed.first().is_some_and(|p| p.already) {
        eprintln!("sheaf: {} was archived already with the same content", report.name);
    }
    Ok(())
}

/// Say loudly, in the server log, that a file was left out of the archive.
fn dropped(n: &DropNotice, spool: &sheaf_pg::spool::Spool) {
    let d = &n.dropped;
    let recorded = match &n.recorded {
        Ok(()) => format!("recorded in {}", spool.dir().display()),
        Err(re) => format!("and NOT recorded ({re})"),
    };
    eprintln!(
        "sheaf: WARNING: {} DROPPED from the archive, {recorded}: {} of WAL waits in pg_wal ({} files), over queue-max {}, and the push failed: {}. Point-in-time recovery cannot pass {}; once the repository is back, take a new backup.",
        d.name,
        format_size(d.pending_bytes),
        n.files,
        format_size(d.queue_max),
        d.error,
        d.name
    );
}
