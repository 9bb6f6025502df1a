//! `sheaf wal-fetch`: PostgreSQL's restore_command. One file from the repository (or from the
//! prefetch spool, a rename), and a background prefetcher started to keep the next ones ready.

use std::path::PathBuf;

use sheaf_core::repo::Place;
use sheaf_core::{Error, ErrorKind};
use sheaf_pg::cluster::walname::{is_segment_name, wal_dir};
use sheaf_pg::wal::fetch::Recovered;
use sheaf_pg::wal::spool::Spool;

use crate::args::WalFetchArgs;
use crate::context::Context;
use crate::exit::{self, Outcome};

/// Run it. PostgreSQL reads any exit below 126 as "not in the archive" and, outside standby mode,
/// ends recovery there and promotes: a damaged or unreachable archive would cut recovery short
/// without a word. So a file the archive does not hold exits 1 quietly (the archive's end), and any
/// other failure is printed here and exits 255, which stops recovery instead; a standby
/// (standby.signal in the data directory, its working directory) retries by itself, so there the
/// usual exit codes serve.
pub fn run(ctx: &Context, a: WalFetchArgs) -> Outcome {
    match fetch(ctx, &a) {
        Ok(true) => Outcome::Success,
        Ok(false) => Outcome::Status(exit::WAL_FETCH_END),
        Err(e) => {
            crate::log::report(&e);
            let standby = std::path::Path::new("standby.signal").exists();
            Outcome::Status(if standby { exit::code(e.kind()) } else { exit::WAL_FETCH_STOP })
        }
    }
}

/// `Ok(false)`: not in the archive.
fn fetch(ctx: &Context, a: &WalFetchArgs) -> Result<bool, Error> {
    let parallel = ctx.parallel(a.parallel)?;
    // The prefetch spool and its prefetcher follow the first repository that can be read (with
    // several, one that is away would only fill the prefetcher's log).
    // With one repository, nothing is read for this choice: restore_command runs per segment.
    let repos = ctx.repos()?;
    let readable = if repos.len() > 1 { repos.iter().position(|r| sheaf_pg::repo::meta::open(r).is_ok()).unwrap_or(0) } else { 0 };
    let repo = repos.into_iter().nth(readable).expect("at least one");
    let spool = if parallel > 1 { Some(ctx.spool(wal_dir(&a.dest), &repo)) } else { None };
    if a.prefetch {
        let spool = spool.ok_or_else(|| Error::invalid("--prefetch needs --parallel 2 or more"))?;
        // The server that asked, if one runs: the prefetcher stops when it does.
        let server = sheaf_pg::wal::spool::RecoveringServer::of_destination(&a.dest);
        let meta = sheaf_pg::repo::meta::open_for(&repo, sheaf_pg::repo::meta::cluster_here())?;
        let r = sheaf_pg::wal::spool::prefetch(&meta, &spool, parallel, std::time::Duration::from_secs(10), &server)?;
        for e in &r.errors {
            eprintln!("sheaf: prefetch: {e}");
        }
        if a.json {
            say!("{}", serde_json::to_value(&r).expect("report serialises"));
        }
        return Ok(true);
    }
    // A prefetched segment is a rename: no repository access at all.
    let t0 = std::time::Instant::now();
    // The spool only speeds things up: trouble with it means a fetch from the repository.
    let from_spool = match &spool {
        Some(s) => s.serve(&a.name, &a.dest).unwrap_or_else(|e| {
            eprintln!("sheaf: prefetch spool not used: {e}");
            false
        }),
        None => false,
    };
    let mut from_receiver = false;
    let info = if from_spool {
        None
    } else {
        match sheaf_pg::wal::fetch::fetch_for_recovery(&ctx.repos()?, sheaf_pg::repo::meta::cluster_here(), &a.name, &a.dest, &|m| eprintln!("sheaf: {m}"))? {
            Recovered::Archived(info) => Some(info),
            // Not archived whole: a receiver on this host may hold more of it than the repository
            // does (it hands its spool over when it starts again; until then, it is here).
            other => {
                from_receiver = from_receiver_spool(ctx, a, &repo)?;
                match other {
                    _ if from_receiver => None,
                    Recovered::Streamed(info) => Some(info),
                    _ => return Ok(false),
                }
            }
        }
    };
    if let Some(spool) = spool.as_ref().filter(|s| is_segment_name(&a.name) && !s.prefetcher_running()) {
        if let Err(e) = start_prefetcher(ctx, a, &repo, parallel, spool) {
            eprintln!("sheaf: prefetch is off: {e}");
        }
    }
    if a.json {
        say!("{}", serde_json::json!({"name": a.name, "from_spool": from_spool, "from_receiver": from_receiver, "info": info, "seconds": t0.elapsed().as_secs_f64()}));
    }
    Ok(true)
}

/// The segment `a.name` from the spool of a `wal-receive` on this host (the same `spool` setting,
/// the same first repository): complete and not yet uploaded, or the one being received, which
/// holds everything the receiver reported flushed (a synchronous standby's returned commits). Put
/// at `a.dest` whole; whether it was there.
fn from_receiver_spool(ctx: &Context, a: &WalFetchArgs, repo: &Place) -> Result<bool, Error> {
    if !is_segment_name(&a.name) || ctx.spool_dir().is_none() {
        return Ok(false);
    }
    let dir = ctx.spool(std::path::Path::new("."), repo).dir().join("receive");
    let Some(src) = [dir.join(&a.name), dir.join(format!("{}.partial", a.name))].into_iter().find(|p| p.is_file()) else { return Ok(false) };
    let mut from = std::fs::File::open(&src).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", src.display()), e))?;
    // PostgreSQL fsyncs what restore_command gives it.
    let mut to = sheaf_core::whole::WholeFile::create_with(&a.dest, 0o600, ErrorKind::Target)?.sync(sheaf_core::whole::Durability::RenameOnly);
    std::io::copy(&mut from, &mut to).map_err(|e| Error::io(ErrorKind::Target, format!("cannot copy {} to {}", src.display(), a.dest.display()), e))?;
    to.commit()?;
    eprintln!("sheaf: {} from the receiver's spool ({}): the repository does not hold it whole", a.name, src.display());
    Ok(true)
}

/// Start `sheaf wal-fetch --prefetch` in the background, detached from PostgreSQL's startup
/// process (it exits at once if one is running already; its errors go to prefetch.log in the spool).
fn start_prefetcher(ctx: &Context, a: &WalFetchArgs, repo: &Place, parallel: usize, spool: &Spool) -> Result<(), Error> {
    use std::os::unix::process::CommandExt;
    let exe = ctx.exe()?;
    sheaf_core::whole::create_dirs(spool.dir()).map_err(|e| Error::io(ErrorKind::Io, format!("cannot create {}", spool.dir().display()), e))?;
    let log_path = spool.dir().join("prefetch.log");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot create {}", log_path.display()), e))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(c) = ctx.config_flag() {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("wal-fetch").arg(&a.name).arg(std::path::absolute(&a.dest).unwrap_or_else(|_| a.dest.clone()));
    cmd.args(["--prefetch", "--parallel", &parallel.to_string(), "--repo", repo.display()]);
    cmd.arg("--spool").arg(spool_base(spool));
    cmd.args(ctx.s3_flags());
    // The secret's file, if one was named (SHEAF_PASSPHRASE the prefetcher inherits).
    cmd.args(ctx.key_flags().unwrap_or_default());
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(log).process_group(0);
    cmd.spawn().map_err(|e| Error::io(ErrorKind::Io, "cannot start the WAL prefetcher", e))?;
    Ok(())
}

/// The folder a spool was made under (its parent), for the prefetcher to find the same one.
fn spool_base(spool: &Spool) -> PathBuf {
    let base = spool.dir().parent().unwrap_or(spool.dir());
    std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf())
}
