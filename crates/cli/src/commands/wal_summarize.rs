//! `sheaf wal-summarize`: block summaries for archived segments that lack one
//! ([`sheaf_pg::wal::summaries::fill_in`]), in every repository given.

use sheaf_core::{Error, ErrorKind};

use crate::args::WalSummarizeArgs;
use crate::context::Context;

/// Run it: in each repository given, each on its own (one that cannot be read is said and left
/// for the others).
///
/// # Errors
/// A repository that cannot be read; segments that cannot be summarized, after the others are.
pub fn run(ctx: &Context, a: WalSummarizeArgs) -> Result<(), Error> {
    let repos = ctx.open_repos_to_write()?;
    let several = repos.len() > 1;
    let mut json = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut unread: Option<Error> = None;
    for (repo, opened) in repos {
        let at = if several { format!(" in {}", repo.display()) } else { String::new() };
        let r = match opened.and_then(|r| sheaf_pg::wal::summaries::fill_in(&r, ctx.interrupt.stop())) {
            Ok(r) => r,
            Err(e) if several => {
                eprintln!("sheaf: repository {} cannot be read and is left out: {e}", repo.display());
                unread.get_or_insert(e.context(format!("repository {}", repo.display())));
                continue;
            }
            Err(e) => return Err(e),
        };
        if a.json {
            let mut v = serde_json::to_value(&r).expect("report serialises");
            v["repo"] = serde_json::json!(repo.display());
            json.push(v);
        } else {
            say!("summarized {} segment(s){at}; {} had a summary already", r.made.len(), r.kept);
        }
        failed.extend(r.failed.iter().map(|f| format!("{f}{at}")));
    }
    if a.json {
        say!("{}", if several { serde_json::json!({ "repositories": json }) } else { json.pop().unwrap_or_default() });
    }
    if let Some(first) = failed.first() {
        return Err(Error::new(ErrorKind::Corrupt, format!("{} segment(s) could not be summarized (incrementals read every page across them); the first: {first}", failed.len())));
    }
    unread.map_or(Ok(()), Err)
}
