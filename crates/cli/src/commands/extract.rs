//! `sheaf extract`: one relation's files, or one page of it, out of a PostgreSQL backup (from
//! stripes or a repository); the work is [`sheaf_pg::restore::extract`]'s.

use sheaf_core::size::format_size;
use sheaf_core::Error;

use crate::args::ExtractArgs;
use crate::context::Context;
use crate::output::plural;

/// Run it.
///
/// # Errors
/// A relation or page the backup does not hold, damage in what is read; a page whose checksum
/// does not match ([`sheaf_core::ErrorKind::Corrupt`], after it is written).
pub fn run(ctx: &Context, a: ExtractArgs) -> Result<(), Error> {
    // From the first repository that has the backup and reads (as a restore falls back).
    let sets = if a.stripes.is_empty() {
        let schemes = ctx.schemes()?;
        ctx.first_repo_serving(|repo| sheaf_pg::repo::records::open_backup_chain(repo, &a.set, schemes, false))?
    } else {
        if !a.repo.repo.is_empty() {
            return Err(Error::invalid("give stripes or --repo, not both"));
        }
        vec![ctx.open_stripes(&a.stripes)?]
    };
    let opts = sheaf_pg::restore::extract::ExtractOptions { relation: a.relation, database: a.database, block: a.block, dest: a.to.clone(), stop: ctx.interrupt.stop().clone() };
    let r = sheaf_pg::restore::extract::extract(&sets.iter().collect::<Vec<_>>(), &opts)?;
    if a.json {
        say!("{}", serde_json::to_value(&r).expect("report serialises"));
    } else {
        let read = format!("read {} of the set's {} in {:.3} s", format_size(r.bytes_read), format_size(r.set_bytes), r.seconds);
        match &r.page {
            Some(p) => say!(
                "page {} of {} (database {}, {}) to {}: LSN {}, checksum {}; {read}",
                p.block,
                r.relation,
                r.database,
                r.path,
                a.to.join(&r.files[0]).display(),
                p.lsn,
                p.checksum
            ),
            None => say!(
                "extracted {} (database {}, {}): {} file{} ({}) to {}; {read}",
                r.relation,
                r.database,
                r.path,
                r.files.len(),
                plural(r.files.len()),
                format_size(r.bytes_written),
                a.to.display()
            ),
        }
    }
    if let Some(p) = r.page.as_ref().filter(|p| p.checksum.starts_with("mismatch")) {
        return Err(Error::corrupt(format!("page {} of {}: checksum {} (the page is written for inspection)", p.block, r.relation, p.checksum)));
    }
    Ok(())
}
