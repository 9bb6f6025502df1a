//! `sheaf wal-push`: PostgreSQL's archive_command. The archiving, look-ahead and queue bound are
//! [`sheaf_pg::wal::queue::archive`]'s; what the server log should hear is said here.

use std::time::Instant;

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::cluster::walname::wal_dir;
use sheaf_pg::wal::queue::{Archived, DropNotice};

use crate::args::WalPushArgs;
use crate::context::Context;

/// Run it: exit 0 only once the file is durable in the repository, or dropped under
/// `--queue-max` (said loudly).
///
/// # Errors
/// The push failed and the file was not dropped.
pub fn run(ctx: &Context, a: WalPushArgs) -> Result<(), Error> {
    let spec = ctx.codec(a.compression);
    let parallel = ctx.parallel(a.parallel)?;
    let queue_max = ctx.queue_max(a.queue_max);
    // Into every repository, each with its own look-ahead and drop records: the file counts as
    // archived once every one has it (or, under --queue-max, has it or recorded its drop). One
    // that fails does not keep the others from getting it; the archiver then asks again, and
    // those that have it answer at once.
    let repos = ctx.repos_to_write()?;
    let several = repos.len() > 1;
    let mut failed: Option<Error> = None;
    let mut reports = Vec::new();
    for (k, repo) in repos.iter().enumerate() {
        let spool = ctx.spool(wal_dir(&a.path), repo);
        let t0 = Instant::now();
        match sheaf_pg::wal::queue::archive(repo, &spool, &a.path, spec, parallel, queue_max) {
            Ok(Archived::Pushed { report, published }) => {
                said(&report, published, a.json, several.then_some(repo.display()));
                let mut v = serde_json::to_value(&report).expect("report serialises");
                v["seconds"] = serde_json::json!(t0.elapsed().as_secs_f64());
                v["repo"] = serde_json::json!(repo.display());
                reports.push(v);
            }
            Ok(Archived::Dropped(notice)) => dropped(&notice, &spool),
            Err(e) => {
                let e = if several { e.context(format!("repository {} ({})", k + 1, repo.display())) } else { e };
                if failed.is_some() {
                    crate::log::report(&e);
                } else {
                    failed = Some(e);
                }
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if a.json {
        let v = if several { serde_json::json!({ "repositories": reports }) } else { reports.pop().unwrap_or_default() };
        say!("{v}");
    }
    Ok(())
}

/// What the server log should hear of one repository's push.
fn said(report: &sheaf_pg::wal::spool::PushReport, published: Result<usize, Error>, json: bool, repo: Option<&str>) {
    let at = repo.map(|r| format!(" ({r})")).unwrap_or_default();
    match published {
        Ok(0) => {}
        Ok(n) => eprintln!(
            "sheaf: WARNING{at}: the repository is reachable again; {n} WAL file(s) dropped by queue-max while it was not are recorded in it (sheaf info lists them). Take a new backup: recovery cannot cross the gap."
        ),
        Err(e) => eprintln!("sheaf: WARNING{at}: cannot record WAL dropped by queue-max in the repository yet: {e}"),
    }
    for f in &report.ahead_failed {
        eprintln!("sheaf{at}: look-ahead push of {} failed; the archiver will ask for it again: {}", f.name, f.error);
    }
    if let Some(e) = &report.spool_error {
        eprintln!("sheaf{at}: look-ahead is off: {e}");
    }
    if let Some(e) = &report.summary_error {
        eprintln!("sheaf: WARNING{at}: {e}; the segment is archived, and an incremental backup reads every page where summaries are missing (sheaf wal-summarize makes them)");
    }
    if !json && report.pushed.first().is_some_and(|p| p.already) {
        eprintln!("sheaf{at}: {} was archived already with the same content", report.name);
    }
}

/// Say loudly, in the server log, that a file was left out of the archive.
fn dropped(n: &DropNotice, spool: &sheaf_pg::wal::spool::Spool) {
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
