//! `sheaf consolidate`: an incremental's chain written as one new full backup in the repository
//! ([`sheaf_pg::repo::backup::consolidate_in_repo`]).

use sheaf_core::{BackupOptions, Error};

use crate::args::ConsolidateArgs;
use crate::context::Context;
use crate::output::mib;
use crate::progress::for_terminal as progress;

/// Run it.
///
/// # Errors
/// A full backup named, a chain that is not whole, and whatever writing the new backup meets.
pub fn run(ctx: &Context, a: ConsolidateArgs) -> Result<(), Error> {
    let (repo, _meta) = ctx.open_repo()?;
    let stripes = ctx.repo_stripes(a.stripes)?;
    let mut opts = BackupOptions::new(Vec::new());
    opts.codec = ctx.codec(a.compression.clone())?;
    opts.stop = Some(ctx.interrupt.stop_flag());
    let (report, record) = sheaf_pg::repo::backup::consolidate_in_repo(&repo, &a.set, stripes, &opts, a.threads, ctx.schemes()?, progress(a.json))?;
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serialises");
        v["record"] = serde_json::to_value(&record).expect("record serialises");
        println!("{v}");
    } else {
        println!(
            "consolidated into full backup {} in {:.2} s: {:.1} MiB held, {:.1} MiB written to {} stripe(s); {}",
            record.id,
            report.seconds,
            mib(report.bytes_held),
            mib(report.bytes_written),
            report.stripes,
            record.method.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}
