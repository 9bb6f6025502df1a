//! `sheaf expire`: old backups and the WAL no kept backup needs removed, by policy
//! ([`sheaf_pg::maintain::expire`]).

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::maintain::expire;

use crate::args::ExpireArgs;
use crate::context::Context;
use crate::hooks::Hooks;
use crate::output::plural;

/// Run it.
///
/// # Errors
/// No policy, a repository that cannot be read, an object that cannot be removed.
pub fn run(ctx: &Context, a: ExpireArgs) -> Result<(), Error> {
    // The same policy in every repository given; one that cannot be read fails the command after
    // the others are done.
    let keep = ctx.retention(a.keep_full, a.keep_within)?;
    // A dry run changes nothing: no hooks around it.
    let hooks = if a.dry_run { Hooks::none("expire") } else { Hooks::new(&ctx.settings, ctx.interrupt.stop(), a.hooks.clone()).with("SHEAF_REPO", ctx.repos_given().join(" ")) };
    hooks.around(None, || expire_all(ctx, &a, &keep).map(|()| serde_json::json!({}))).map(drop)
}

/// Expire every repository given by the one policy.
fn expire_all(ctx: &Context, a: &ExpireArgs, keep: &expire::Retention) -> Result<(), Error> {
    let now = sheaf_core::time::now_ms() / 1000;
    let mut failed = None;
    let repos = if a.dry_run { ctx.open_repos()? } else { ctx.open_repos_to_write()? };
    let several = repos.len() > 1;
    for (place, opened) in repos {
        let r = opened.and_then(|repo| one(a, &repo, keep, now));
        if let Err(e) = r {
            let e = if several { e.context(place.display()) } else { e };
            if failed.is_some() {
                crate::log::report(&e);
            } else {
                failed = Some(e);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

fn one(a: &ExpireArgs, repo: &sheaf_pg::repo::Repo, keep: &expire::Retention, now: i64) -> Result<(), Error> {
    let plan = expire::plan_expire(repo, keep, now)?;
    if !a.dry_run {
        expire::expire(repo, &plan)?;
    }
    if a.json {
        let mut v = serde_json::to_value(&plan).expect("plan serialises");
        v["dry_run"] = serde_json::json!(a.dry_run);
        v["repo"] = serde_json::json!(repo.display());
        say!("{v}");
        return Ok(());
    }
    say_plan(&plan, a.dry_run);
    Ok(())
}

/// What a plan removed (or would, on a dry run) and kept, in lines.
pub fn say_plan(plan: &expire::ExpirePlan, dry_run: bool) {
    let verb = if dry_run { "would remove" } else { "removed" };
    say!(
        "{verb} {} backup{}{}, {} WAL files ({}); kept {} backup{} ({}) and WAL from {}",
        plan.removed.len(),
        plural(plan.removed.len()),
        if plan.removed.is_empty() { String::new() } else { format!(" ({})", joined(&plan.removed)) },
        plan.wal_removed,
        format_size(plan.wal_bytes),
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
