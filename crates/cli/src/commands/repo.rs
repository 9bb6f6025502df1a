//! `sheaf repo`: the repository's own life. `repo upgrade`: after pg_upgrade, the new cluster
//! recorded as the next history ([`sheaf_pg::maintain::upgrade`]).

use sheaf_core::Error;
use sheaf_pg::repo::histories::major_text;

use crate::args::repo::{RepoAction, RepoCommandArgs};
use crate::context::Context;

/// Run it.
///
/// # Errors
/// As [`sheaf_pg::maintain::upgrade::upgrade`], for each repository given in turn.
pub fn run(ctx: &Context, a: RepoCommandArgs) -> Result<(), Error> {
    match a.action {
        RepoAction::Upgrade(u) => {
            let url = ctx.pg_url(u.url.clone())?;
            for place in ctx.repos_to_write()? {
                let done = sheaf_pg::maintain::upgrade::upgrade(&place, &url)?;
                let r = &done.record;
                if u.json {
                    say!(
                        "{}",
                        serde_json::json!({"repo": place.display(), "upgraded": !done.already, "history": done.history, "record": r, "from": done.from.to_string(), "from_version": done.from_version, "left_unfinished": done.left_unfinished})
                    );
                } else if done.already {
                    say!("{}: already records cluster {} (history {}): nothing to do", place.display(), r.system_identifier, done.history);
                } else {
                    say!(
                        "{}: recorded cluster {} (PostgreSQL {}) as history {}, upgraded from cluster {} (PostgreSQL {}); its WAL starts at {}",
                        place.display(),
                        r.system_identifier,
                        major_text(&r.server_version),
                        done.history,
                        done.from,
                        major_text(&done.from_version),
                        r.start_lsn
                    );
                    say!("wal-push and backup of the new cluster go into it from now on; take its first full backup now (sheaf backup --type full): until then, recovery of the new cluster has only the old cluster's backups, which restore to the old major");
                    for id in &done.left_unfinished {
                        say!("backup {id} of the old cluster was left unfinished: the new cluster's backups do not go on from it (they start its own history); sheaf expire removes it");
                    }
                }
            }
            Ok(())
        }
    }
}
