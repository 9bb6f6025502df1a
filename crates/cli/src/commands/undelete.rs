//! `sheaf undelete`: make what a locked repository's lock kept readable again after a wipe
//! ([`sheaf_pg::maintain::undelete`]).

use sheaf_core::{Error, ErrorKind};
use sheaf_pg::maintain::undelete;

use crate::args::UndeleteArgs;
use crate::context::Context;

/// Run it. The repository's own `repo.json` may be hidden too, so nothing of it is read first.
///
/// # Errors
/// A repository that keeps no versions, a time that does not parse; some tops that could not be
/// removed (each is named).
pub fn run(ctx: &Context, a: UndeleteArgs) -> Result<(), Error> {
    let repo = ctx.repo()?;
    let since = a.since.as_deref().map(|t| sheaf_pg::restore::pitr::parse_time_as("--since", t)).transpose()?.map(|ms| ms.div_euclid(1000));
    let plan = undelete::plan_undelete(&repo, since)?;
    if a.dry_run {
        if a.json {
            say!("{}", serde_json::json!({ "dry_run": true, "remove": plan.remove, "revealed": plan.revealed }));
        } else {
            for (name, version) in &plan.remove {
                say!("would remove version {version} of {name}");
            }
            say!("would make {} object{} readable again in {}", plan.revealed.len(), if plan.revealed.len() == 1 { "" } else { "s" }, repo.display());
        }
        return Ok(());
    }
    let report = undelete::undelete(&repo, &plan)?;
    if a.json {
        say!("{}", serde_json::to_value(&report).expect("report serialises"));
    } else {
        say!(
            "removed {} version{} on top ({}): {} object{} of {} readable again{}",
            report.removed,
            if report.removed == 1 { "" } else { "s" },
            if since.is_some() { "delete markers and overwrites" } else { "delete markers" },
            report.revealed.len(),
            if report.revealed.len() == 1 { "" } else { "s" },
            repo.display(),
            if report.revealed.is_empty() { "" } else { "; check them with sheaf verify --repo" }
        );
        for s in &report.stuck {
            say!("could not undo: {s}");
        }
    }
    if report.stuck.is_empty() {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Target, format!("{} object{} could not be brought back (named above)", report.stuck.len(), if report.stuck.len() == 1 { "" } else { "s" })))
    }
}
