//! `sheaf wal-summarize`: block summaries for archived segments that lack one
//! ([`sheaf_pg::repo::summaries::fill_in`]).

use sheaf_core::{Error, ErrorKind};

use crate::args::WalSummarizeArgs;
use crate::context::Context;

/// Run it.
///
/// # Errors
/// The repository's; segments that cannot be summarized, after the others are.
pub fn run(ctx: &Context, a: WalSummarizeArgs) -> Result<(), Error> {
    let (repo, meta) = ctx.open_repo()?;
    let r = sheaf_pg::repo::summaries::fill_in(&repo, &meta)?;
    if a.json {
        println!("{}", serde_json::to_value(&r).expect("report serialises"));
    } else {
        println!("summarized {} segment(s); {} had a summary already", r.made.len(), r.kept);
    }
    match r.failed.first() {
        None => Ok(()),
        Some(first) => Err(Error::new(
            ErrorKind::Corrupt,
            format!("{} segment(s) could not be summarized (incrementals read every page across them); the first: {first}", r.failed.len()),
        )),
    }
}
