//! `sheaf expire`: old backups and the WAL no kept backup needs removed, by policy
//! ([`sheaf_pg::maintain::expire`]).

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::maintain::expire;

use crate::args::ExpireArgs;
use crate::context::{Context, KeepFlags};
use crate::hooks::Hooks;
use crate::output::plural;

/// Run it.
///
/// # Errors
/// No policy, a repository that cannot be read, an object that cannot be removed; with `--set`,
/// a backup that no repository given holds, or one that may not go.
pub fn run(ctx: &Context, a: ExpireArgs) -> Result<(), Error> {
    let flags = KeepFlags { full: a.keep_full, within: a.keep_within, archive: a.keep_archive };
    // Each repository's policy, resolved before any is touched: one that is wrong fails the
    // command before anything goes.
    let policies = ctx.repos_given().iter().map(|r| ctx.retention(Some(r), &flags)).collect::<Result<Vec<_>, Error>>()?;
    // A dry run changes nothing: no hooks around it.
    let hooks = if a.dry_run { Hooks::none("expire") } else { Hooks::new(&ctx.settings, ctx.interrupt.stop(), a.hooks.clone()).with("SHEAF_REPO", ctx.repos_given().join(" ")) };
    hooks.around(None, || expire_all(ctx, &a, &policies).map(|()| serde_json::json!({}))).map(drop)
}

/// Expire every repository given, each by its policy. With `--set`, a repository that does not
/// hold the backup is passed over; none holding it is the error.
fn expire_all(ctx: &Context, a: &ExpireArgs, policies: &[expire::Retention]) -> Result<(), Error> {
    let now = sheaf_core::time::now_ms() / 1000;
    let mut failed = None;
    let repos = if a.dry_run { ctx.open_repos()? } else { ctx.open_repos_to_write()? };
    let several = repos.len() > 1;
    let (mut missing, mut held) = (None, false);
    for ((place, opened), keep) in repos.into_iter().zip(policies) {
        // A repository that cannot be opened is a failure, never one without the backup.
        let e = match opened.map(|repo| one(a, &repo, keep, now, several)) {
            Ok(Ok(())) => {
                held = true;
                continue;
            }
            Ok(Err(e)) if a.set.is_some() && e.kind() == sheaf_core::ErrorKind::NotFound => {
                if several {
                    say!("{}: {e}", place.display());
                }
                missing = Some(e);
                continue;
            }
            Ok(Err(e)) | Err(e) => e,
        };
        let e = if several { e.context(place.display()) } else { e };
        if failed.is_some() {
            crate::log::report(&e);
        } else {
            failed = Some(e);
        }
    }
    if let (Some(e), false, None) = (missing, held, &failed) {
        return Err(e);
    }
    failed.map_or(Ok(()), Err)
}

/// One repository: planned, carried out unless a dry run, said (headed by its name when there
/// are `several`; each history headed by its cluster when it has more than one).
fn one(a: &ExpireArgs, repo: &sheaf_pg::repo::Repo, keep: &expire::Retention, now: i64, several: bool) -> Result<(), Error> {
    let plans = match &a.set {
        Some(id) => expire::plan_remove_all(repo, id, keep, now)?,
        None => expire::plan_all(repo, keep, now)?,
    };
    if !a.dry_run {
        for p in &plans {
            expire::expire(&p.history.repo, &p.plan)?;
        }
    }
    if a.json {
        let mut v = plans_json(&plans);
        v["dry_run"] = serde_json::json!(a.dry_run);
        v["repo"] = serde_json::json!(repo.display());
        say!("{v}");
        return Ok(());
    }
    if several {
        say!("{}:", repo.display());
    }
    say_plans(&plans, a.dry_run);
    Ok(())
}

/// Plans as JSON: the one history's plan, with `histories` (each history's number, cluster and
/// plan) when the repository has several.
pub fn plans_json(plans: &[expire::HistoryPlan]) -> serde_json::Value {
    let Some(newest) = plans.last() else { return serde_json::json!({}) };
    let mut v = serde_json::to_value(&newest.plan).expect("plan serialises");
    if plans.len() > 1 || newest.history.number > 1 {
        v["histories"] = plans
            .iter()
            .map(|p| serde_json::json!({"history": p.history.number, "cluster": p.history.repo.meta().system_identifier.to_string(), "server_version": p.history.repo.meta().server_version, "plan": p.plan}))
            .collect();
    }
    v
}

/// Plans in lines: each history headed by its cluster when there are several.
pub fn say_plans(plans: &[expire::HistoryPlan], dry_run: bool) {
    for p in plans {
        if plans.len() > 1 {
            say!("{}:", p.history.describe());
        }
        say_plan(&p.plan, dry_run);
    }
}

/// What a plan removed (or would, on a dry run) and kept, in lines.
pub fn say_plan(plan: &expire::ExpirePlan, dry_run: bool) {
    let verb = if dry_run { "would remove" } else { "removed" };
    let removed = format!(
        "{verb} {} backup{}{}, {} WAL files ({})",
        plan.removed.len(),
        plural(plan.removed.len()),
        if plan.removed.is_empty() { String::new() } else { format!(" ({})", joined(&plan.removed)) },
        plan.wal_removed,
        format_size(plan.wal_bytes)
    );
    if plan.kept.is_empty() && plan.wal_kept_from.is_none() && plan.pinned.is_empty() && plan.locked.is_empty() && plan.running.is_empty() {
        // An older history than the one that backs up now, of which the policy keeps nothing.
        say!("{removed}: the policy keeps nothing of this history, and newer ones hold the newest backups");
        say!("{verb} {} in {} objects", format_size(plan.bytes), plan.objects.len());
        return;
    }
    say!(
        "{removed}; kept {} backup{} ({}) and WAL from {}",
        plan.kept.len(),
        plural(plan.kept.len()),
        joined(&plan.kept),
        plan.wal_kept_from.as_deref().unwrap_or("the start (no backup to anchor it)")
    );
    if !plan.unfinished.is_empty() {
        say!("{verb} unfinished backup{} left by a crash: {}", plural(plan.unfinished.len()), joined(&plan.unfinished));
    }
    if !plan.running.is_empty() {
        say!("left alone, still being written: {}", joined(&plan.running));
    }
    if !plan.consistent_only.is_empty() {
        say!("kept without point-in-time recovery past their end (archive retention: only the WAL that makes each consistent): {}", joined(&plan.consistent_only));
    }
    if !plan.pinned.is_empty() {
        say!("kept, pinned by sheaf keep (with the WAL each needs to be consistent): {}", plan.pinned.join(", "));
    }
    if !plan.locked.is_empty() {
        say!("left in place, still locked (expire removes each once its lock runs out): {}", plan.locked.join(", "));
    }
    if let Some(u) = plan.wal_locked_until {
        say!("left {} older WAL file{} in place, locked until {} at the latest", plan.wal_locked, plural(plan.wal_locked as usize), sheaf_core::time::utc(u));
    }
    if !plan.unprotected.is_empty() {
        say!(
            "warning: {} kept backup{} no longer locked ({}): anyone with the repository's credentials can delete {}; the lock is shorter than what the policy keeps",
            plan.unprotected.len(),
            plural(plan.unprotected.len()),
            joined(&plan.unprotected),
            if plan.unprotected.len() == 1 { "it" } else { "them" }
        );
    }
    say!("{verb} {} in {} objects", format_size(plan.bytes), plan.objects.len());
}

/// Backup ids for a line of text.
fn joined(ids: &[sheaf_pg::repo::id::BackupId]) -> String {
    ids.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
}
