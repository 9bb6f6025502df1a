//! The runner: every permutation of the matrix, each repeat a backup, a verify and a restore (to
//! disk targets), each operation a child process of sheaf measured on its own; then the peers,
//! timed the same way. Every operation starts with nothing dirty (or a dropped cache) and is
//! timed until durable.
//!
//! [`run`] drives the sweep: `options` holds what it is asked, `prepare` makes the source ready,
//! `case` runs one sheaf permutation and `peer_case` one peer, `work` and `trash` look after the
//! folders, and `event` tells the caller how far it got.

mod case;
mod event;
mod incremental;
mod options;
mod peer_case;
mod prepare;
mod rewind;
mod trash;
mod work;

use std::path::PathBuf;
use std::time::Instant;

use sheaf_core::{Error, Result};
use sheaf_pg::drill::scratch;

use crate::matrix::BenchTarget;
use crate::measure;
use crate::peers::{self, BackRest, Peer, PeerRun};
use crate::results::{rows, BenchResult, RewindSample, RunInfo, Sample, Setting};
use crate::source::Source;
use crate::stats::summarize;
use case::Ctx;
use event::Clock;
use peer_case::{backrest_setup, backrest_teardown};
use prepare::prepare_source;
use trash::Trash;
use work::WorkDir;

pub use event::Event;
pub use options::{BenchOptions, Incremental};

/// The sheaf measured, as it names itself (`sheaf version --json`): its version, and the commit
/// and date it was built from, so that a report names what it measured.
fn sheaf_build(sheaf: &std::path::Path) -> String {
    let said = std::process::Command::new(sheaf).args(["version", "--json"]).output().ok().filter(|o| o.status.success());
    let v: Option<serde_json::Value> = said.and_then(|o| serde_json::from_slice(&o.stdout).ok());
    match v {
        // The day measured, after the commit, as every record under docs/bench names them.
        Some(v) => format!(
            "{}. Measured on commit {} ({}), built {}",
            v["version"].as_str().unwrap_or(env!("CARGO_PKG_VERSION")),
            v["commit"].as_str().unwrap_or("unknown"),
            &sheaf_core::time::utc_now()[..10],
            v["built"].as_str().unwrap_or("?")
        ),
        None => env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// A bench that ran, completely or not.
#[derive(Debug)]
pub struct Outcome {
    /// What was measured (all of it, or up to the failure).
    pub result: BenchResult,
    /// The sheaf operation that failed and stopped the sweep; the result holds the runs before it.
    pub failure: Option<Error>,
}

/// Refuse a target or restore folder inside a directory source: the backup would read its own
/// stripes, and restores would land in the data.
fn check_overlap(opts: &BenchOptions) -> Result<()> {
    let Source::Path(src) = &opts.source else { return Ok(()) };
    let Ok(src) = src.canonicalize() else { return Ok(()) };
    let dirs = opts.matrix.target.iter().flat_map(|t| t.dirs().to_vec());
    for d in dirs.chain(opts.restore_dir.clone()) {
        if d.canonicalize().is_ok_and(|d| d.starts_with(&src)) {
            return Err(Error::invalid(format!("{} is inside the source {}: the backups would read their own stripes; choose a folder outside it", d.display(), src.display())));
        }
    }
    Ok(())
}

/// Run the bench. `note` hears progress; the library prints nothing.
///
/// # Errors
/// Bad options, or the source or a target unusable before anything ran. A sheaf operation that
/// fails later stops the sweep and comes back in [`Outcome::failure`] with the runs before it;
/// peers that fail are warnings, their rows left out. [`sheaf_core::error::ErrorKind::Cancelled`]
/// once `opts.stop` was asked, when everything it made is gone.
pub fn run(opts: &BenchOptions, note: &dyn Fn(Event)) -> Result<Outcome> {
    let started = Instant::now();
    let started_at = sheaf_core::time::utc_now();
    let mut warnings: Vec<String> = Vec::new();
    let warn = |w: String, warnings: &mut Vec<String>| {
        note(Event::Warning(&w));
        warnings.push(w);
    };
    if opts.drop_caches {
        measure::drop_caches()?;
    }
    check_overlap(opts)?;
    let mut dir_targets: Vec<PathBuf> = Vec::new();
    for t in &opts.matrix.target {
        if let BenchTarget::Dir(d) = t {
            if !dir_targets.contains(&d[0]) {
                dir_targets.push(d[0].clone());
            }
        }
    }
    if matches!(opts.source, Source::Tpch(_)) && opts.peers.contains(&Peer::PgBasebackup) {
        // Installing PostgreSQL brings pg_basebackup: before looking for it.
        scratch::ensure_installed()?;
    }
    // Peers: only those that apply and are installed.
    let mut peers: Vec<Peer> = Vec::new();
    for &p in &opts.peers {
        let why = match (&opts.source, p) {
            (s, Peer::MariaBackup) if !s.is_mariadb() => Some("it backs up MariaDB servers, and the source is not one".to_string()),
            (s, Peer::PgBasebackup | Peer::PgBackRest | Peer::Tar) if s.is_mariadb() => Some("the source is a MariaDB server: its peer is mariadb-backup".to_string()),
            (Source::Path(_) | Source::Files { .. }, Peer::PgBasebackup | Peer::PgBackRest) => Some("it backs up PostgreSQL servers, and the source is a directory".to_string()),
            (Source::Url(_) | Source::Tpch(_), Peer::Tar) => Some("it is measured on directory sources (a running server's files are not consistent to tar)".to_string()),
            (Source::Url(_), Peer::PgBackRest) => Some("it must archive the server's WAL, which sheaf sets up only on the clusters it makes (--dataset tpch:SCALE)".to_string()),
            _ if dir_targets.is_empty() => Some("peers write to disk: give a directory in --target".to_string()),
            _ if peers::find(&p.program()).is_none() => Some(format!(
                "{} is not installed (Debian: apt-get install {})",
                p.program(),
                match p {
                    Peer::PgBackRest => "pgbackrest",
                    Peer::Tar => "tar",
                    Peer::PgBasebackup => "postgresql-client",
                    Peer::MariaBackup => "mariadb-backup",
                }
            )),
            _ => None,
        };
        match why {
            Some(why) => warn(format!("peer {} skipped: {why}", p.program()), &mut warnings),
            None => peers.push(p),
        }
    }
    // Unique across hosts sharing a target and across runs of this process.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let work_name = format!("sheaf-bench-{}-{nanos:08x}", std::process::id());
    // Work folders first: a missing target fails before a cluster is built and loaded.
    let mut works: Vec<WorkDir> = Vec::new();
    let parents = opts.matrix.target.iter().flat_map(|t| t.dirs().to_vec());
    // Restores from object storage land in --restore-dir, else the temporary folder.
    let s3_restores = opts.matrix.target.iter().any(|t| matches!(t, BenchTarget::S3(_))) && opts.restore_dir.is_none();
    let restores = opts.restore_dir.clone().or_else(|| s3_restores.then(std::env::temp_dir));
    for d in parents.chain(restores) {
        if !works.iter().any(|w| w.0 == d.join(&work_name)) {
            works.push(WorkDir::create(&d, &work_name)?);
        }
    }
    let backrest = peers.contains(&Peer::PgBackRest);
    let (src, home) = prepare_source(opts, backrest, &work_name, note)?;
    let cores = sheaf_core::host::available_cores();
    // pg_basebackup's runs before pgBackRest's, so that none of them shares the machine with
    // pgBackRest's WAL archiving.
    let mut peer_runs: Vec<PeerRun> = opts.matrix.compression.iter().flat_map(|c| peers::runs_for(&peers, c, cores)).collect();
    peer_runs.sort_by_key(|r| r.tool == "pgbackrest");
    let perms = opts.matrix.permutations();
    let total = (perms.len() + peer_runs.len() * dir_targets.len()) * opts.matrix.repeat;
    let mut ctx = Ctx {
        opts,
        src: &src,
        archiving: backrest,
        work_name: work_name.clone(),
        note,
        clock: Clock { start: Instant::now(), done: 0, total },
        trash: Trash::default(),
        archive: None,
        round: 0,
    };
    ctx.warm_up()?;
    let mut samples = Vec::new();
    let mut rewinds = Vec::new();
    let mut disk = Vec::new();
    let mut failure = None;
    if let Some(inc) = &opts.incremental {
        ctx.archiving = true;
        let dir = dir_targets.first().ok_or_else(|| Error::invalid("--type diff or incr needs a directory in --target"))?;
        let peers = incremental_peers(&ctx, &peer_runs, &mut warnings)?;
        // pgBackRest runs twice here (block and file level), and skipped peers not at all.
        let cycles = usize::from(inc.cycles());
        ctx.clock.total = (perms.len() * (cycles + usize::from(inc.rewind)) + peers.len() * cycles) * opts.matrix.repeat;
        let needs_summaries = peers.iter().any(|r| r.tool == "pg_basebackup");
        ctx.incremental_setup(&dir.join(&work_name).join("repo"), needs_summaries)?;
        failure = incremental_sweep(&mut ctx, inc, &perms, &peers, dir, home.as_ref().map(|h| h.0.as_path()), &mut samples, &mut rewinds, &mut warnings);
    }
    'sweep: for p in perms.iter().filter(|_| opts.incremental.is_none()) {
        for r in 1..=opts.matrix.repeat {
            ctx.announce(&format!("sheaf {}", p.name()), r);
            match ctx.sheaf_run(p, r) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    failure = Some(e);
                    break 'sweep;
                }
            }
            ctx.clock.done += 1;
        }
    }
    let sheaf_read: Vec<f64> = samples.iter().map(|s| s.bytes_read as f64).collect();
    let source_bytes = summarize(&sheaf_read).map_or(0, |s| s.median as u64);
    // The disk's rate for the full restores' bytes, once per repeat, in the same run.
    let full_bytes = samples.iter().filter(|s| s.setting.backup_type == "full" && s.restore.is_some()).map(|s| s.bytes_read).max();
    if let (None, Some(dir), Some(bytes)) = (&failure, dir_targets.first(), full_bytes) {
        for r in 1..=opts.matrix.repeat {
            match ctx.disk_probe(dir, bytes, r) {
                Ok(Some(d)) => disk.push(d),
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    let basebackup = peers::find("pg_basebackup");
    for dir in dir_targets.iter().filter(|_| failure.is_none() && opts.incremental.is_none()) {
        let mut backrest_ready: Option<Option<BackRest>> = None;
        for run in &peer_runs {
            let setting = Setting {
                tool: run.tool.to_string(),
                compression: run.codec.clone(),
                settings: run.settings(),
                stripes: 1,
                transfer_size: 0,
                buffer_count: None,
                target: dir.display().to_string(),
                backup_type: "full".into(),
            };
            let br = if run.tool.starts_with("pgbackrest") {
                // Set up on the first of its runs on this target, after pg_basebackup's.
                let ready = backrest_ready.get_or_insert_with(|| match (&home, &src.cluster) {
                    (Some(h), Some(c)) => match backrest_setup(c, &h.0, &dir.join(&work_name).join("pgbackrest"), None, &opts.stop) {
                        Ok(b) => Some(b),
                        Err(e) => {
                            warn(format!("peer pgbackrest skipped on {}: {e}", dir.display()), &mut warnings);
                            None
                        }
                    },
                    _ => None,
                });
                match ready {
                    Some(b) => Some(&*b),
                    None => {
                        ctx.clock.done += opts.matrix.repeat;
                        continue;
                    }
                }
            } else {
                None
            };
            for r in 1..=opts.matrix.repeat {
                ctx.announce(&format!("{} {} ({}) -> {}", run.tool, run.codec, run.settings(), dir.display()), r);
                ctx.clock.done += 1;
                let result = match br {
                    Some(br) => ctx.backrest_run(br, run, dir, r),
                    None if run.tool == "tar" => ctx.tar_run(run, dir, r),
                    None if run.tool == "mariadb-backup" => ctx.mariabackup_run(run, dir, r),
                    None => ctx.basebackup_run(basebackup.as_deref().expect("checked above"), run, dir, r),
                };
                match result {
                    Ok((size, backup, restore)) => samples.push(Sample {
                        setting: setting.clone(),
                        buffers_used: None,
                        repeat: r,
                        bytes_read: source_bytes,
                        size_bytes: size,
                        backup,
                        verify: None,
                        restore: Some(restore),
                        delta_restore: None,
                        consolidate: None,
                    }),
                    Err(e) => {
                        // Interrupted: no more peers, and the bench unwinds.
                        opts.stop.check()?;
                        samples.retain(|s| s.setting != setting);
                        warn(format!("{} {} left out: {e}", run.tool, run.settings()), &mut warnings);
                        ctx.clock.done += opts.matrix.repeat - r;
                        break;
                    }
                }
            }
        }
        if let (Some(Some(_)), Some(c)) = (&backrest_ready, &src.cluster) {
            backrest_teardown(c, None);
        }
    }
    // An interrupted bench reports nothing: its servers stop and its folders go as it unwinds.
    opts.stop.check()?;
    drop(works);
    drop(src);
    drop(home);
    if let Some(e) = &failure {
        warnings.push(format!("the sweep stopped early: {e}"));
    }
    let rows = rows(&samples, cores);
    Ok(Outcome {
        result: BenchResult {
            info: RunInfo {
                started: started_at,
                source: opts.source.describe(),
                cores,
                cache: if opts.drop_caches {
                    "dropped before every operation".into()
                } else {
                    "warm (an untimed read of the whole source first; each operation starts after sync, nothing dirty)".into()
                },
                repeats: opts.matrix.repeat,
                sheaf_version: sheaf_build(&opts.sheaf),
                seconds: started.elapsed().as_secs_f64(),
                warnings,
            },
            rows,
            samples,
            rewinds,
            disk,
        },
        failure,
    })
}

/// The peer runs that take incrementals: pgBackRest's, and pg_basebackup's plain one (with `-c
/// none`, on PostgreSQL 17 or later); the rest named in a warning.
fn incremental_peers(ctx: &Ctx, runs: &[PeerRun], warnings: &mut Vec<String>) -> Result<Vec<PeerRun>> {
    let mut out = Vec::new();
    let mut said = false;
    let mut warn = |w: String| {
        (ctx.note)(Event::Warning(&w));
        warnings.push(w);
    };
    let cluster = ctx.src.cluster.as_ref().expect("incrementals run on the bench's own cluster");
    let version: u32 = cluster.query("postgres", "SHOW server_version_num")?.trim().parse().unwrap_or(0);
    for r in runs {
        match r.tool {
            "pgbackrest" => {
                // Its block incremental (beta in 2.45) is the fair peer for sheaf's page-level
                // incrementals; its file-level one is measured too, named so.
                let mut block = r.clone();
                block.tool = "pgbackrest block";
                block.options.extend(["--repo1-bundle", "--repo1-block", "--beta"].map(String::from));
                out.push(block);
                out.push(PeerRun { tool: "pgbackrest file", ..r.clone() });
            }
            "pg_basebackup" if version >= 170_000 && !cluster.bin.join("pg_combinebackup").exists() => warn(format!(
                "peer pg_basebackup --incremental skipped: pg_combinebackup, which restores its chains, is not in {} (the npm servers of 16 and 17 have no client tools)",
                cluster.bin.display()
            )),
            "pg_basebackup" if version >= 170_000 => out.push(r.clone()),
            "pg_basebackup" => {
                warn(format!("peer pg_basebackup --incremental skipped: it needs PostgreSQL 17 or later, and the bench's cluster is {version} (SHEAF_PG=18 picks 18)"))
            }
            t if t.starts_with("pg_basebackup") && !said => {
                said = true;
                warn("pg_basebackup --incremental writes plain, uncompressed backups: it is measured beside sheaf's -c none only (add none to -c)".to_string());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Every sheaf permutation's cycles, then every peer's (see [`incremental`]); the first sheaf
/// failure stops the sweep and is returned; a peer that fails is a warning, its rows left out.
#[allow(clippy::too_many_arguments)]
fn incremental_sweep(
    ctx: &mut Ctx,
    inc: &Incremental,
    perms: &[crate::matrix::Permutation],
    peers: &[PeerRun],
    dir: &std::path::Path,
    home: Option<&std::path::Path>,
    samples: &mut Vec<Sample>,
    rewinds: &mut Vec<RewindSample>,
    warnings: &mut Vec<String>,
) -> Option<Error> {
    let repo = dir.join(&ctx.work_name).join("repo");
    let types = inc.labels().join(", ");
    for p in perms.iter().filter(|_| inc.cycles()) {
        for r in 1..=ctx.opts.matrix.repeat {
            ctx.announce(&format!("sheaf full, {types} {} ({})", p.name(), repo.display()), r);
            match ctx.sheaf_cycle(p, inc, &repo, dir, r) {
                Ok(s) => samples.extend(s),
                Err(e) => return Some(e),
            }
            ctx.clock.done += 1;
        }
    }
    for p in perms.iter().filter(|_| inc.rewind) {
        for r in 1..=ctx.opts.matrix.repeat {
            ctx.announce(&format!("a former primary put back: pg_rewind, and sheaf restore --delta {}", p.name()), r);
            match ctx.rewind_cycle(p, inc, dir, r) {
                Ok(s) => rewinds.push(s),
                Err(e) => return Some(e),
            }
            ctx.clock.done += 1;
        }
    }
    // What sheaf read, per type: the peers' rows show it too.
    let read = |t: &str, samples: &[Sample]| {
        let v: Vec<f64> = samples.iter().filter(|s| s.setting.backup_type == t).map(|s| s.bytes_read as f64).collect();
        summarize(&v).map_or(0, |s| s.median as u64)
    };
    let basebackup = peers::find("pg_basebackup");
    for run in peers.iter().filter(|_| inc.cycles()) {
        let cluster = ctx.src.cluster.as_ref().expect("incrementals run on the bench's own cluster");
        let br = if run.tool.starts_with("pgbackrest") {
            let Some(home) = home else { continue };
            match backrest_setup(cluster, home, &dir.join(&ctx.work_name).join("pgbackrest"), ctx.archive.as_deref(), &ctx.opts.stop) {
                Ok(b) => Some(b),
                Err(e) => {
                    let w = format!("peer pgbackrest skipped: {e}");
                    (ctx.note)(Event::Warning(&w));
                    warnings.push(w);
                    ctx.clock.done += ctx.opts.matrix.repeat;
                    continue;
                }
            }
        } else {
            None
        };
        let mut got = Vec::new();
        for r in 1..=ctx.opts.matrix.repeat {
            ctx.announce(&format!("{} {} ({}), full then {types}", run.tool, run.codec, run.settings()), r);
            ctx.clock.done += 1;
            let result = match (&br, basebackup.as_deref()) {
                (Some(br), _) => ctx.backrest_cycle(br, run, inc, dir, r),
                (None, Some(bin)) => ctx.basebackup_cycle(bin, inc, dir, r),
                (None, None) => Err(Error::new(sheaf_core::ErrorKind::Source, "pg_basebackup is not installed")),
            };
            match result {
                Ok(m) => got.extend(m.into_iter().map(|m| (r, m))),
                Err(e) => {
                    let w = format!("{} left out: {e}", run.tool);
                    (ctx.note)(Event::Warning(&w));
                    warnings.push(w);
                    ctx.clock.done += ctx.opts.matrix.repeat - r;
                    got.clear();
                    break;
                }
            }
        }
        if br.is_some() {
            backrest_teardown(cluster, ctx.archive.as_deref());
        }
        for (r, m) in got {
            if m.label == "full" && !inc.full_rows {
                continue;
            }
            samples.push(Sample {
                setting: Setting {
                    tool: if run.tool == "pg_basebackup" { "pg_basebackup -Fp".into() } else { run.tool.to_string() },
                    compression: run.codec.clone(),
                    settings: if run.tool == "pg_basebackup" { "--incremental, pg_combinebackup".into() } else { run.settings() },
                    stripes: 1,
                    transfer_size: 0,
                    buffer_count: None,
                    target: dir.display().to_string(),
                    backup_type: m.label.clone(),
                },
                buffers_used: None,
                repeat: r,
                bytes_read: m.bytes_read.unwrap_or_else(|| read(&m.label, samples)),
                size_bytes: m.size,
                backup: m.backup,
                verify: None,
                restore: Some(m.restore),
                delta_restore: m.delta,
                consolidate: None,
            });
        }
    }
    None
}
