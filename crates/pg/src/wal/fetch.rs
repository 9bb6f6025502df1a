//! PostgreSQL's `restore_command` rule over one or more repositories ([`fetch_for_recovery`]):
//! a WAL file archived whole, else what `sheaf wal-receive` streamed of it, else the archive's
//! end; a repository that cannot be read is passed over for the next, and said.

use std::path::Path;

use sheaf_core::blob::BlobInfo;
use sheaf_core::repo::Place;
use sheaf_core::{Error, Result};

use crate::cluster::system::SystemId;
use crate::wal::archive::fetch;

/// What [`fetch_for_recovery`] found of a file PostgreSQL asked for.
#[derive(Debug)]
pub enum Recovered {
    /// Archived whole: restored.
    Archived(BlobInfo),
    /// Not archived whole, but `sheaf wal-receive` streamed part of it: that part restored
    /// (replay goes up to its end).
    Streamed(BlobInfo),
    /// No repository that answered holds it: the archive's end, as PostgreSQL expects to find it.
    End,
}

/// PostgreSQL's `restore_command` rule over one or more repositories, each read at the history
/// of cluster `cluster` (the restored cluster's: [`crate::repo::meta::open_for`]): `name` from the first that
/// holds it archived whole, else from the first that holds what `wal-receive` streamed of it,
/// else the archive's end. A repository that cannot be read (away, damaged) is passed over for
/// the next and said through `say`; when none that answered holds the file but one could not be
/// asked, that is said loudly too (it may hold it), and it is still the end; when none could be
/// asked at all, it is an error, so that recovery stops rather than ends early.
///
/// # Errors
/// Every repository's failure, the first given; I/O on `dest`.
pub fn fetch_for_recovery(repos: &[Place], cluster: Option<SystemId>, name: &str, dest: &Path, say: &dyn Fn(&str)) -> Result<Recovered> {
    let several = repos.len() > 1;
    let mut failed: Option<Error> = None;
    let mut open = Vec::new();
    for (k, place) in repos.iter().enumerate() {
        let got = crate::repo::meta::open_for(place, cluster).and_then(|repo| fetch(&repo, name, dest, false).map(|i| (i, repo)));
        match got {
            Ok((Some(info), _)) => return Ok(Recovered::Archived(info)),
            Ok((None, repo)) => open.push(repo),
            Err(e) => {
                if several {
                    say(&format!("repository {} ({}) passed over for {name}: {e}", k + 1, place.display()));
                }
                failed.get_or_insert(e);
            }
        }
    }
    let answered = !open.is_empty();
    for repo in &open {
        if let Some(info) = crate::wal::receive::fetch_streamed(repo, name, dest)? {
            say(&format!("{name} is not archived whole: served what sheaf wal-receive streamed of it"));
            return Ok(Recovered::Streamed(info));
        }
    }
    match failed {
        Some(e) if several && answered => {
            say(&format!("WARNING: no repository that answered holds {name}, so recovery takes it as the archive's end; a repository that could not be asked may hold it: {e}"));
            Ok(Recovered::End)
        }
        Some(e) => Err(e),
        None => Ok(Recovered::End),
    }
}
