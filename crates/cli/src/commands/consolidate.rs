//! `sheaf consolidate`: an incremental's chain written as one new full backup in the repository
//! ([`sheaf_pg::backup::repo::consolidate_in_repo`]), in each repository given that holds it.

use sheaf_core::{BackupOptions, Error, ErrorKind};
use sheaf_pg::repo::Repo;

use sheaf_pg::repo::records::BackupRef;

use crate::args::{ConsolidateArgs, RepoTarget};
use crate::context::Context;
use crate::output::mib;
use crate::progress::for_terminal as progress;

/// Run it.
///
/// # Errors
/// A full backup named, a chain that is not whole, no repository holding the backup, and
/// whatever writing the new backup meets.
pub fn run(ctx: &Context, a: ConsolidateArgs) -> Result<(), Error> {
    let repos = ctx.open_repos_to_write()?;
    let several = repos.len() > 1;
    let stripes = ctx.repo_stripes(a.stripes)?;
    let mut opts = BackupOptions::new(Vec::new());
    opts.codec = ctx.codec(a.compression);
    opts.stop = ctx.interrupt.stop().clone();
    opts.keep_superseded_pct = a.keep_superseded;
    // Which repositories: the one --repo-target names, all, or (by default) those that hold the
    // backup named (latest: the first).
    let picked: Vec<usize> = match a.repo_target {
        None if a.set == BackupRef::Latest => vec![0],
        None => (0..repos.len()).collect(),
        Some(target) => ctx.repo_targets(target)?,
    };
    let explicit = matches!(a.repo_target, Some(RepoTarget::Nth(_))) || !several;
    let mut chosen: Vec<Repo> = Vec::new();
    let mut unread: Option<Error> = None;
    for (k, (place, opened)) in repos.into_iter().enumerate().filter(|(k, _)| picked.contains(k)) {
        let repo = match opened {
            Ok(r) => r,
            Err(e) if explicit => return Err(e),
            Err(e) => {
                eprintln!("sheaf: repository {} ({}) cannot be read and is left out: {e}", k + 1, place.display());
                unread.get_or_insert(e);
                continue;
            }
        };
        // A backup named by id is consolidated where it is; elsewhere there is nothing to do.
        if !explicit && a.set != BackupRef::Latest && sheaf_pg::repo::records::pick(&sheaf_pg::repo::records::complete(&repo)?, &a.set).is_err() {
            if !a.json {
                say!("{} is not in {}: nothing to do there", a.set, repo.display());
            }
            continue;
        }
        chosen.push(repo);
    }
    if chosen.is_empty() {
        return Err(unread.unwrap_or_else(|| Error::new(ErrorKind::InvalidInput, format!("no backup {} in any repository given (sheaf info lists them)", a.set))));
    }
    let mut json = Vec::new();
    for repo in &chosen {
        let (report, record) = sheaf_pg::backup::repo::consolidate_in_repo(repo, &a.set, stripes, &opts, a.threads, ctx.schemes()?, progress(a.json)).map_err(|e| {
            if several {
                e.context(format!("repository {}", repo.display()))
            } else {
                e
            }
        })?;
        if a.json {
            let mut v = serde_json::to_value(&report).expect("report serialises");
            v["record"] = serde_json::to_value(&record).expect("record serialises");
            if several {
                v["repo"] = serde_json::json!(repo.display());
            }
            json.push(v);
        } else {
            say!(
                "consolidated into full backup {}{} in {:.2} s: {:.1} MiB held, {:.1} MiB written to {} stripe(s), {} of {} frames copied as stored (not compressed again), keeping {:.1} MiB that newer backups replaced; {}",
                record.id,
                if several { format!(" in {}", repo.display()) } else { String::new() },
                report.seconds,
                mib(report.bytes_held),
                mib(report.bytes_written),
                report.stripes,
                report.stored_chunks,
                report.frames,
                mib(report.superseded_bytes),
                record.method.as_deref().unwrap_or_default()
            );
        }
    }
    if a.json {
        say!("{}", if several { serde_json::json!({ "repositories": json }) } else { json.pop().unwrap_or_default() });
    }
    Ok(())
}
