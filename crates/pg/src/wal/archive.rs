//! WAL archiving into a repository: `archive_command = 'sheaf wal-push %p'` and
//! `restore_command = 'sheaf wal-fetch %f %p'`.
//!
//! A pushed file is compressed, checksummed and published whole ([`sheaf_core::blob`]) at
//! `wal/TIMELINE/NAME.wal` ([`crate::repo::paths::wal_object`]); success is reported only once it is durable. A segment's first page
//! names its cluster, which must be the repository's. Pushing what is already archived with the
//! same content succeeds (the archiver retries after a crash); different content under the same
//! name is refused loudly and never overwritten.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use crate::repo::Repo;
use sheaf_core::blob::{copy_blob, same_content, BlobInfo};
use sheaf_core::retry::Backoff;
use sheaf_core::whole::{Durability, WholeFile};
use sheaf_core::{CodecSpec, Error, ErrorKind, Result};

use crate::cluster::system::SystemId;
use crate::cluster::walname::{WalFile, WalKind};
use crate::repo::meta::foreign;
use crate::repo::paths;
use crate::wal::read::long_header_system_id;

/// What a push did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Pushed {
    /// The file's name.
    pub name: String,
    /// True when it was archived already with the same content.
    pub already: bool,
    /// The object, when written now.
    pub info: Option<BlobInfo>,
}

/// The system identifier of the WAL segment at `path`, from its first page's long header; `None`
/// for a file too short or without one.
fn segment_system_id(path: &Path) -> Result<Option<SystemId>> {
    let mut page = [0u8; 40];
    let mut f = File::open(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot open {}", path.display()), e))?;
    if f.read_exact(&mut page).is_err() {
        return Ok(None);
    }
    Ok(long_header_system_id(&page))
}

/// Archive the file at `path` (as PostgreSQL's `%p`) into the repository.
///
/// # Errors
/// A name PostgreSQL does not archive, a segment of another cluster or of the wrong size,
/// different content already archived under the name, and the store's errors.
pub fn push(repo: &Repo, path: &Path, codec: CodecSpec) -> Result<Pushed> {
    let meta = repo.meta();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let wal = WalFile::parse(&name, meta.wal_segment_size).ok_or_else(|| {
        Error::invalid(format!("{}: not a file PostgreSQL archives (a WAL segment, .partial, .history or .backup file); archive_command passes %p", path.display()))
    })?;
    let len = std::fs::metadata(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?.len();
    if wal.kind == WalKind::Segment && len != meta.wal_segment_size {
        return Err(Error::invalid(format!(
            "{} is {len} bytes, but the repository's cluster has {}-byte WAL segments: is archive_command pointed at the right repository?",
            path.display(),
            meta.wal_segment_size
        )));
    }
    if matches!(wal.kind, WalKind::Segment | WalKind::Partial) {
        if let Some(id) = segment_system_id(path)? {
            if id != meta.system_identifier {
                // WAL of a cluster an upgrade left behind (archived late, at its last shutdown)
                // still goes to its own history: it only lengthens what recovers there.
                return match crate::repo::histories::of_cluster(repo, id)? {
                    Some(h) => push(&h.repo, path, codec),
                    None => Err(foreign(repo, &format!("WAL file {name}"), id)),
                };
            }
        }
    }
    let object = paths::wal_object(&name);
    let open = || File::open(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot open {}", path.display()), e));
    let archived = |repo: &Repo| -> Result<Pushed> {
        let src = repo.open(&object)?;
        if same_content(src.as_ref(), repo.keys(), &mut open()?, &name)? {
            tracing::info!(wal = name.as_str(), "archived already with the same content");
            return Ok(Pushed { name: name.clone(), already: true, info: None });
        }
        Err(Error::new(
            ErrorKind::Target,
            format!(
                "{} already holds a different {name}: refusing to overwrite archived WAL. Two clusters may archive into one repository, or a restored cluster reuses a timeline; give each cluster its own repository, and compare the two files before moving the archived one aside",
                repo.describe(&object)
            ),
        ))
    };
    if repo.exists(&object)? {
        return archived(repo);
    }
    match repo.put(&object, &mut open()?, codec, false, &path.display().to_string()) {
        Ok(info) => {
            tracing::info!(wal = name.as_str(), "archived");
            Ok(Pushed { name, already: false, info: Some(info) })
        }
        // Another writer storing the same name (wal-receive and archive_command both keep a
        // segment or a history file, or two archivers retry one): once it has published the
        // object, ours counts as archived if the two match.
        Err(e) if e.is_transient() => {
            BUSY_WAIT.run(|_| if repo.exists(&object)? { archived(repo) } else { Err(e.again()) }).map_err(|e| e.context(format!("cannot archive {name}")))
        }
        Err(e) => Err(e.context(format!("cannot archive {name}"))),
    }
}

/// How long [`push`] waits for another writer of the same name to publish it: 30 s, looking
/// every 100 ms.
const BUSY_WAIT: Backoff = Backoff::new(300, std::time::Duration::from_millis(100), std::time::Duration::from_millis(100));

/// The temporary name [`fetch`] writes `name` under, beside it.
pub fn fetch_tmp_name(name: &str) -> String {
    format!(".{name}.sheaf-fetch")
}

/// Restore archived `name` (PostgreSQL's `%f`) to `dest` (`%p`), checked, written under a temporary
/// name and renamed. `Ok(None)` when the archive does not hold it (the end of the archive, as
/// PostgreSQL expects to find it). With `durable`, the file is on disk before it is renamed: the
/// prefetcher does so, because PostgreSQL fsyncs every restored segment as it keeps it in pg_wal,
/// and that fsync then finds nothing left to write.
///
/// # Errors
/// A name PostgreSQL does not ask for, damage in the object, I/O on `dest`.
pub fn fetch(repo: &Repo, name: &str, dest: &Path, durable: bool) -> Result<Option<BlobInfo>> {
    let meta = repo.meta();
    WalFile::parse(name, meta.wal_segment_size).ok_or_else(|| Error::invalid(format!("{name}: not a WAL file name (restore_command passes %f, then %p)")))?;
    fetch_object(repo, &paths::wal_object(name), dest, durable)
}

/// Restore the WAL object `object` to `dest` as [`fetch`] does; `Ok(None)` when there is none.
///
/// # Errors
/// As [`fetch`].
pub fn fetch_object(repo: &Repo, object: &str, dest: &Path, durable: bool) -> Result<Option<BlobInfo>> {
    let src = match repo.open(object) {
        Ok(s) => s,
        Err(e) if e.kind() == ErrorKind::Incomplete => return Ok(None),
        Err(e) => return Err(e),
    };
    let tmp = fetch_tmp_name(dest.file_name().and_then(|n| n.to_str()).unwrap_or("wal"));
    // Without `durable`, PostgreSQL makes the file durable itself; it is never seen half-written.
    // With it (the prefetcher), the data only: a segment whose name a crash lost is fetched again.
    let mut file = WholeFile::create_named(dest, &tmp, 0o666, ErrorKind::Target)?.sync(if durable { Durability::DataOnly } else { Durability::RenameOnly });
    let info = copy_blob(src.as_ref(), repo.keys(), &mut file, &dest.display().to_string())?;
    file.flush().map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", dest.display()), e))?;
    file.commit()?;
    Ok(Some(info))
}
