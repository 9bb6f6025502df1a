//! `sheaf annotate`: a backup's annotations, edited or printed ([`sheaf_pg::repo::annotations`]),
//! in the first repository given.

use sheaf_core::Error;

use crate::args::AnnotateArgs;
use crate::context::Context;

/// Run it.
///
/// # Errors
/// No such finished backup, a change that does not parse, the repository's errors.
pub fn run(ctx: &Context, a: AnnotateArgs) -> Result<(), Error> {
    let (_, repo) = ctx.open_repos_to_write()?.into_iter().next().ok_or_else(|| Error::invalid("say which repository: --repo R (or SHEAF_REPO, or repo in the config file)"))?;
    let repo = repo?;
    let now = if a.changes.is_empty() {
        let repo = sheaf_pg::repo::histories::with_backup(&repo, &a.set)?;
        let records = sheaf_pg::repo::records::complete(&repo)?;
        sheaf_pg::repo::records::pick(&records, &sheaf_pg::repo::records::BackupRef::Id(a.set.clone()))?.annotations.clone()
    } else {
        sheaf_pg::maintain::annotate::annotate(&repo, &a.set, &a.changes)?
    };
    if a.json {
        say!("{}", serde_json::json!({ "id": a.set, "annotations": now }));
    } else if now.is_empty() {
        say!("{} has no annotations", a.set);
    } else {
        for (k, v) in &now {
            say!("{}: {k}={v}", a.set);
        }
    }
    Ok(())
}
