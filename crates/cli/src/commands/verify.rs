//! `sheaf verify`: a set read whole and checked (RESTORE VERIFYONLY), or with `--repo` everything
//! in a repository; recorded in the history catalog.

use std::time::Instant;

use sheaf_core::size::format_size;
use sheaf_core::Error;

use crate::args::VerifyArgs;
use crate::context::Context;
use crate::hooks::Hooks;
use crate::output::{mib, plural, rate};
use crate::progress::for_terminal as progress;
use crate::recorder::{recorded, Done};

/// Run it.
///
/// # Errors
/// What does not check out.
pub fn run(ctx: &Context, a: VerifyArgs) -> Result<(), Error> {
    let repo = if a.stripes.is_empty() { ctx.repo_given() } else { None };
    let start = sheaf_catalog::RunStart { operation: "verify".into(), stripes: a.stripes.clone(), repo, ..Default::default() };
    recorded(ctx.catalog(), start, &Hooks::none("verify"), || verify(ctx, a).map(Done::from))
}

fn verify(ctx: &Context, a: VerifyArgs) -> Result<serde_json::Value, Error> {
    if a.stripes.is_empty() {
        return verify_repo(ctx, &a);
    }
    if !a.repo.repo.is_empty() {
        return Err(Error::invalid("give stripes or --repo, not both"));
    }
    let set = ctx.open_stripes_lean(&a.stripes)?;
    let r = sheaf_core::verify(&set, a.threads, progress(a.json), ctx.interrupt.stop())?;
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["ok"] = serde_json::json!(true);
    if a.json {
        say!("{v}");
    } else {
        say!(
            "verified backup {}: {} stripe{}, {} frames, {:.1} MiB of data in {:.2} s ({:.1} MiB/s); the set is complete and every checksum matches",
            r.backup_id,
            r.stripes,
            plural(r.stripes),
            r.frames,
            mib(r.bytes_raw),
            r.seconds,
            rate(r.bytes_raw, r.seconds)
        );
    }
    Ok(v)
}

/// `sheaf verify --repo`: the checks are [`sheaf_pg::maintain::verify`]'s; here they are printed.
fn verify_repo(ctx: &Context, a: &VerifyArgs) -> Result<serde_json::Value, Error> {
    // Every repository given, each in full; the first failure is the command's, after all ran.
    let repos = ctx.open_repos()?;
    let several = repos.len() > 1;
    let (mut values, mut failed) = (Vec::new(), None);
    for (place, opened) in &repos {
        let one = match opened {
            Ok(repo) => verify_one(ctx, a, repo, several),
            Err(e) => Err(Error::new(e.kind(), format!("{}: {e}", place.display()))),
        };
        match one {
            Ok(v) => values.push(v),
            Err(e) => {
                if several {
                    eprintln!("sheaf: {e}");
                }
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if several {
        let v = serde_json::json!({ "repositories": values });
        if a.json {
            say!("{v}");
        }
        return Ok(v);
    }
    Ok(values.pop().unwrap_or_default())
}

/// One repository: each of its histories (one per cluster pg_upgrade made) verified in turn,
/// oldest first; the first failure is the repository's, after all ran.
fn verify_one(ctx: &Context, a: &VerifyArgs, repo: &sheaf_pg::repo::Repo, several: bool) -> Result<serde_json::Value, Error> {
    let histories = sheaf_pg::repo::histories::all(repo)?;
    if histories.len() == 1 {
        return verify_history(ctx, a, repo, several);
    }
    let (mut values, mut failed) = (Vec::new(), None);
    for h in &histories {
        if !a.json {
            say!("{}:", h.describe());
        }
        // Printed together below, as one repository's.
        match verify_history(ctx, a, &h.repo, true) {
            Ok(mut v) => {
                v["history"] = serde_json::json!(h.number);
                values.push(v);
            }
            Err(e) => {
                failed.get_or_insert(e.context(h.describe()));
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut v = values.last().cloned().unwrap_or_default();
    v["histories"] = serde_json::Value::Array(values);
    if a.json && !several {
        say!("{v}");
    }
    Ok(v)
}

fn verify_history(ctx: &Context, a: &VerifyArgs, repo: &sheaf_pg::repo::Repo, several: bool) -> Result<serde_json::Value, Error> {
    let t0 = Instant::now();
    let opts = sheaf_pg::maintain::verify::VerifyOptions { full: a.full, recheck_after: Some(a.recheck_after.as_secs()), stop: ctx.interrupt.stop().clone() };
    let check = sheaf_pg::maintain::verify::verify(repo, ctx.schemes()?, a.threads, &opts)?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut v = serde_json::to_value(&check).expect("check serialises");
    v["repo"] = serde_json::json!(repo.display());
    v["seconds"] = serde_json::json!(seconds);
    v["ok"] = serde_json::json!(check.ok());
    if a.json && !several {
        say!("{v}");
    } else if !a.json {
        for p in &check.problems {
            eprintln!("sheaf: {p}");
        }
        for w in &check.warnings {
            crate::log::warning(w);
        }
        let n = check.problems.len();
        let read = check.backups.iter().filter(|b| b.read).count();
        let unchanged = |read: usize, all: usize| if read == all { String::new() } else { format!(" ({read} read, {} unchanged since they last read back whole)", all - read) };
        say!(
            "verified repository {}: {} backup{}{}, {} WAL files{} ({}) in {seconds:.2} s, {} read; {}",
            repo.display(),
            check.backups.len(),
            plural(check.backups.len()),
            unchanged(read, check.backups.len()),
            check.wal_files,
            unchanged(check.wal_files_read, check.wal_files),
            format_size(check.wal_bytes),
            format_size(check.bytes_read),
            match n {
                0 if repo.meta().is_mariadb() => "every checksum matches (each backup holds the redo log it needs)".to_string(),
                0 => "every checksum matches and the WAL each backup needs is there".to_string(),
                n => format!("{n} problem{}", plural(n)),
            }
        );
        if let Some(h) = &check.horizon {
            say!("WAL before {} was removed by retention (sheaf expire, {}): a backup older than that needs only the WAL that makes it consistent", h.first_kept, h.set_at);
        }
    }
    match check.failure() {
        Some(e) => Err(e),
        None => Ok(v),
    }
}
