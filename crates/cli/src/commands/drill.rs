//! `sheaf drill`: a backup restored, started, recovered and checked on a scratch server
//! ([`sheaf_pg::drill::run`]), its verdict and times printed and recorded in the repository and the
//! history catalog.

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::drill::run::{DrillOptions, Pick};
use sheaf_pg::repo::drills::{drill_object, DrillRecord};
use sheaf_pg::repo::records::BackupRef;
use sheaf_pg::restore::pitr::{TargetAction, TimelineTarget};

use crate::args::DrillArgs;
use crate::context::Context;
use crate::hooks::Hooks;
use crate::progress::for_terminal as progress;
use crate::recorder::{recorded, Done};

/// Run it.
///
/// # Errors
/// A refusal (no such backup, no server of its version, a folder in use, no room), or the drill's
/// failure: [`sheaf_core::ErrorKind::Corrupt`] for damage or a failed check,
/// [`sheaf_core::ErrorKind::Incomplete`] for missing WAL.
pub fn run(ctx: &Context, a: DrillArgs) -> Result<(), Error> {
    let repos = ctx.repos_given();
    let start = sheaf_catalog::RunStart {
        operation: "drill".into(),
        source: repos.first().cloned(),
        label: a.set.as_ref().map(ToString::to_string).or_else(|| a.annotation.as_ref().map(|c| format!("{}={}", c.key, c.value.as_deref().unwrap_or_default()))),
        repo: repos.first().cloned(),
        ..Default::default()
    };
    let hooks = Hooks::new(&ctx.settings, ctx.interrupt.stop(), a.hooks.clone()).with("SHEAF_REPO", repos.first().cloned().unwrap_or_default());
    recorded(ctx.catalog(), start, &hooks, || drill(ctx, &a))
}

fn drill(ctx: &Context, a: &DrillArgs) -> Result<Done, Error> {
    let (_, repo) = ctx.open_repos()?.into_iter().next().ok_or_else(|| Error::invalid("say which repository: --repo R (or SHEAF_REPO, or repo in the config file)"))?;
    let repo = repo?;
    let set = a.set.clone().or_else(|| a.annotation.as_ref().map(crate::args::annotated));
    let pick = match (&set, a.random) {
        (Some(which), _) => Pick::Named(which.clone()),
        (None, true) => Pick::Random,
        (None, false) => Pick::Named(BackupRef::Latest),
    };
    let request = a.targets.request(None, TargetAction::Promote, TimelineTarget::Latest);
    let work = match &a.to {
        Some(dir) => dir.clone(),
        None => sheaf_pg::drill::run::default_work(ctx.spool_dir().and_then(std::path::Path::parent)),
    };
    let opts = DrillOptions {
        pick,
        request,
        work,
        pg_bin: a.pg_bin.clone(),
        check_sql: a.check_sql.clone(),
        check_db: a.check_db.clone(),
        keep: a.keep,
        timeout: a.timeout,
        threads: a.threads,
        stop: ctx.interrupt.stop().clone(),
    };
    let record = if repo.meta().is_mariadb() {
        sheaf_mariadb::drill::drill(&repo, ctx.schemes()?, &opts, progress(a.json))?
    } else {
        sheaf_pg::drill::run::drill(&repo, ctx.schemes()?, &opts, || super::restore::restore_command(ctx, repo.place()), progress(a.json))?
    };
    let mut v = serde_json::to_value(&record).expect("record serialises");
    v["repo"] = serde_json::json!(repo.display());
    v["backup_id"] = serde_json::json!(record.backup);
    v["seconds"] = serde_json::json!(record.phases.total_seconds);
    v["bytes_written"] = serde_json::json!(record.bytes_restored);
    if a.json {
        say!("{v}");
    } else {
        summary(&record, repo.display());
    }
    match sheaf_pg::drill::run::failure_error(&record) {
        Some(e) => Err(e),
        None => Ok(Done::from(v)),
    }
}

fn summary(r: &DrillRecord, repo: &str) {
    say!("drill of backup {} ({}) to {}: {}", r.backup, r.backup_type, r.target, if r.passed { "PASSED" } else { "FAILED" });
    let p = &r.phases;
    say!("  restore  {:>9.2} s  ({} written)", p.restore_seconds, format_size(r.bytes_restored));
    let replayed = match (&r.reached_lsn, r.wal_bytes_replayed) {
        (Some(lsn), Some(b)) => format!("  ({} of WAL replayed, to {lsn}{})", format_size(b), r.timeline.map(|t| format!(" on timeline {t}")).unwrap_or_default()),
        _ => String::new(),
    };
    say!("  recovery {:>9.2} s{replayed}", p.recovery_seconds);
    let passed = r.checks.iter().filter(|c| c.ok).count();
    say!("  checks   {:>9.2} s  ({passed} of {} passed)", p.checks_seconds, r.checks.len());
    say!("  total    {:>9.2} s  (the recovery time, measured)", p.total_seconds);
    for c in &r.checks {
        say!("    {} {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.check, c.detail);
    }
    if let Some(f) = &r.failure {
        say!("first failure: {f}");
    }
    if let Some(k) = &r.kept {
        say!("kept: the restored cluster is in {k} (stopped)");
    }
    say!("recorded as {} in {repo}", drill_object(&r.id, &r.backup));
}
