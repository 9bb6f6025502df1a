//! The repository's commands: `init`, `wal-push`, `wal-fetch`, `info`, `expire`, `config`, and the
//! `--repo` side of `backup`, `restore` and `verify`. Flags are parsed here; the work is in
//! `sheaf_pg::{repo, archive, pitr}`.

use std::path::PathBuf;

use clap::Args;
use sheaf_core::repo::Repo;
use sheaf_core::size::{format_size, parse_size};
use sheaf_core::{BackupSet, CodecSpec, Error, ErrorKind, Location};
use sheaf_pg::repo::{BackupRecord, Found, RepoMeta};
use sheaf_pg::spool::Spool;

use crate::settings::{Settings, KEYS};
use crate::S3Args;

/// Where the repository is: `--repo`, else `SHEAF_REPO`, else `repo` in the config file.
#[derive(Args, Clone, Default)]
pub struct RepoArg {
    /// The repository: a folder or s3://BUCKET/PREFIX. Default: SHEAF_REPO, else `repo` in the
    /// config file.
    #[arg(long, value_name = "REPO")]
    pub repo: Option<String>,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// The secret an encrypted backup or repository is read and written with. Never a flag's value:
/// a key or passphrase on the command line would show in `ps` and shell history.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "Encryption (AES-256-GCM after compression)")]
pub struct KeyArgs {
    /// Encrypt with the key in FILE: 32 random bytes (or 64 hex digits). Make one with
    /// `head -c 32 /dev/urandom > FILE` and keep a copy away from the backups: without it nothing
    /// can be restored. Also needed to restore, verify or read an encrypted repository. Default:
    /// SHEAF_ENCRYPTION_KEY_FILE, else encryption-key-file in the config file.
    #[arg(long, value_name = "FILE")]
    pub encryption_key_file: Option<PathBuf>,
    /// Encrypt with the passphrase in FILE (its first line), stretched with Argon2id (64 MiB, 3
    /// passes) and a salt of the backup's or repository's own. SHEAF_PASSPHRASE in the environment
    /// gives the passphrase itself. Default: SHEAF_PASSPHRASE_FILE, else passphrase-file in the
    /// config file.
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

impl KeyArgs {
    fn files(&self, settings: &Settings) -> (Option<PathBuf>, Option<PathBuf>) {
        let path = |key: &str, flag: &Option<PathBuf>| settings.value(key, flag.as_ref().map(|p| p.display().to_string())).map(PathBuf::from);
        (path("encryption-key-file", &self.encryption_key_file), path("passphrase-file", &self.passphrase_file))
    }

    /// The keys given, if any: a key file, a passphrase file, or SHEAF_PASSPHRASE (one of them).
    pub fn keys(&self, settings: &Settings) -> Result<Option<std::sync::Arc<sheaf_core::Keys>>, Error> {
        let (key_file, pass_file) = self.files(settings);
        let env = std::env::var_os("SHEAF_PASSPHRASE").filter(|v| !v.is_empty());
        let given = usize::from(key_file.is_some()) + usize::from(pass_file.is_some()) + usize::from(env.is_some());
        if given > 1 {
            return Err(Error::new(
                ErrorKind::Key,
                "more than one secret given (an encryption key file, a passphrase file, SHEAF_PASSPHRASE): give one",
            ));
        }
        let keys = if let Some(f) = key_file {
            sheaf_core::Keys::from_key_file(&f)?
        } else if let Some(f) = pass_file {
            let text = std::fs::read(&f).map_err(|e| Error::io(ErrorKind::Key, format!("cannot read the passphrase file {}", f.display()), e))?;
            let line = text.split(|&b| b == b'\n').next().unwrap_or_default().to_vec();
            sheaf_core::Keys::from_passphrase(line).map_err(|e| Error::new(ErrorKind::Key, format!("{}: {}", f.display(), e.message())))?
        } else if let Some(v) = env {
            use std::os::unix::ffi::OsStringExt;
            sheaf_core::Keys::from_passphrase(v.into_vec())?
        } else {
            return Ok(None);
        };
        Ok(Some(std::sync::Arc::new(keys)))
    }

    /// Flags that give the same secret to another sheaf (restore_command): the files by absolute
    /// path. `None` when the secret came from SHEAF_PASSPHRASE, which no flag can carry safely.
    pub fn flags(&self, settings: &Settings) -> Option<Vec<String>> {
        let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p).display().to_string();
        match self.files(settings) {
            (Some(k), _) => Some(vec!["--encryption-key-file".into(), abs(k)]),
            (_, Some(p)) => Some(vec!["--passphrase-file".into(), abs(p)]),
            _ if std::env::var_os("SHEAF_PASSPHRASE").is_some_and(|v| !v.is_empty()) => None,
            _ => Some(Vec::new()),
        }
    }
}

impl RepoArg {
    /// The repository's location text, or the error that says where to give it.
    pub fn text(&self, settings: &Settings) -> Result<String, Error> {
        settings.value("repo", self.repo.clone()).ok_or_else(|| {
            Error::invalid("no repository given: pass --repo DIR|s3://BUCKET/PREFIX, set SHEAF_REPO, or put repo = \"...\" in the config file (see sheaf config)")
        })
    }

    /// The repository's place, with the keys given (nothing is read yet).
    pub fn place(&self, settings: &Settings, schemes: &dyn sheaf_core::Schemes) -> Result<Repo, Error> {
        Ok(Repo::at(&self.text(settings)?, schemes)?.with_keys(self.keys.keys(settings)?))
    }

    /// The repository and what it holds, its bytes held to `rate` where one is given.
    pub fn open(&self, settings: &Settings, s3: &S3Args) -> Result<(Repo, RepoMeta), Error> {
        self.open_at(settings, s3, None)
    }

    /// [`RepoArg::open`] with every byte to and from the repository held to `rate` (`--max-rate`).
    pub fn open_at(&self, settings: &Settings, s3: &S3Args, rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>) -> Result<(Repo, RepoMeta), Error> {
        let schemes = s3.schemes(settings)?;
        let mut repo = self.place(settings, &schemes)?;
        if let Some(limit) = rate {
            repo = repo.throttled(limit);
        }
        let meta = sheaf_pg::repo::open(&repo)?;
        Ok((repo, meta))
    }
}

#[derive(Args)]
pub struct InitArgs {
    /// The cluster the repository is for (its system identifier is recorded), as a libpq URL.
    pub url: String,
    #[command(flatten)]
    pub repo: RepoArg,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct WalPushArgs {
    /// The WAL file to archive: PostgreSQL's %p (archive_command = 'sheaf wal-push %p').
    pub path: PathBuf,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Codec for archived WAL. Default: SHEAF_COMPRESSION, the config file, else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]")]
    pub compression: Option<String>,
    /// Look-ahead: push this segment and up to N-1 `.ready` ones after it at once, so the
    /// archiver's next calls return at once. Default: SHEAF_PARALLEL, the config file, else 4.
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// When a push fails and more than SIZE of WAL waits in pg_wal, report success anyway so
    /// PostgreSQL can recycle the segment, keeping pg_wal from filling the disk. The segment is then
    /// NOT archived: recovery cannot pass it until the next backup (the gap is recorded and shown
    /// by sheaf info). Default: no bound (archiving waits, pg_wal grows).
    #[arg(long, value_name = "SIZE")]
    pub queue_max: Option<String>,
    #[command(flatten)]
    pub spool: SpoolArg,
    /// Print what was done as JSON (archive_command output goes to the server log).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

/// Where look-ahead and prefetch keep their files.
#[derive(Args, Clone, Default)]
pub struct SpoolArg {
    /// Spool folder for look-ahead markers and prefetched WAL. Default: SHEAF_SPOOL, the config
    /// file, else .sheaf inside pg_wal (same filesystem, so prefetched segments are renamed into
    /// place).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
}

impl SpoolArg {
    /// The spool of this repository: one per location and endpoint, so that a marker never vouches
    /// for another repository.
    fn get(&self, settings: &Settings, wal_dir: &std::path::Path, repo: &Repo, s3: &S3Args) -> Result<Spool, Error> {
        let base = settings.value("spool", self.spool.as_ref().map(|p| p.display().to_string())).map(PathBuf::from);
        let endpoint = s3.resolved(settings)?.s3_endpoint.unwrap_or_default();
        Ok(Spool::new(base.as_deref(), wal_dir, &format!("{} {endpoint}", repo.display())))
    }
}

/// `--parallel`, else the `parallel` setting, else 4. At most 64: each is a thread, and for
/// wal-fetch a segment kept in pg_wal's filesystem.
fn parallel(settings: &Settings, flag: Option<usize>) -> Result<usize, Error> {
    match settings.get("parallel", flag.map(|n| n.to_string())) {
        None => Ok(4),
        Some((v, origin)) => match v.parse::<usize>() {
            Ok(n) if (1..=64).contains(&n) => Ok(n),
            _ => Err(Error::invalid(format!("parallel from {origin}: '{v}': give 1 to 64"))),
        },
    }
}

#[derive(Args)]
pub struct WalFetchArgs {
    /// The WAL file PostgreSQL wants: %f (restore_command = 'sheaf wal-fetch %f %p').
    pub name: String,
    /// Where to put it: %p.
    pub dest: PathBuf,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Prefetch: after serving a segment, keep the next N fetched and checked in the spool by a
    /// background process, so replay never waits on the repository. 1 turns it off. Default:
    /// SHEAF_PARALLEL, the config file, else 4.
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    #[command(flatten)]
    pub spool: SpoolArg,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run as the background prefetcher (started by wal-fetch itself).
    #[arg(long, hide = true)]
    pub prefetch: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct ExpireArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Keep the newest N finished backups.
    #[arg(long, value_name = "N")]
    pub keep_full: Option<usize>,
    /// Keep what recovers to any moment this far back (e.g. 14d, 36h, 90m): every backup that ends
    /// inside it, and the newest one before it.
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<String>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct ConfigArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The `--repo` side of `sheaf restore`: which backup, and where recovery stops.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "From a repository (point-in-time recovery)")]
pub struct RecoveryArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// The backup: an id as `sheaf info` lists it, or `latest`. Default: the newest that is
    /// consistent before the target.
    #[arg(long, value_name = "ID")]
    pub set: Option<String>,
    /// Recover to this moment, with its zone: '2026-11-22 10:15:00+00'.
    #[arg(long, value_name = "TIMESTAMP")]
    pub target_time: Option<String>,
    /// Recover to this LSN, e.g. 0/3000060.
    #[arg(long, value_name = "LSN")]
    pub target_lsn: Option<String>,
    /// Recover to a restore point made with pg_create_restore_point('NAME').
    #[arg(long, value_name = "NAME")]
    pub target_name: Option<String>,
    /// `immediate`: stop as soon as the backup is consistent.
    #[arg(long, value_name = "immediate", value_parser = ["immediate"])]
    pub target: Option<String>,
    /// What the server does at the target: promote (open for writes on a new timeline), pause
    /// (read-only, to look first: then SELECT pg_wal_replay_resume()), or shutdown.
    #[arg(long, value_name = "ACTION", default_value = "promote", value_parser = ["promote", "pause", "shutdown"])]
    pub target_action: String,
    /// The timeline to follow: latest, current (the backup's) or a number.
    #[arg(long, value_name = "TIMELINE", default_value = "latest")]
    pub target_timeline: String,
}

impl RecoveryArgs {
    /// Whether any repository-only flag was given.
    pub fn any_target(&self) -> bool {
        self.set.is_some() || self.target_time.is_some() || self.target_lsn.is_some() || self.target_name.is_some() || self.target.is_some()
    }
}

/// The codec in force: the flag, `SHEAF_COMPRESSION`, the config file, else zstd:low.
pub fn codec(settings: &Settings, flag: Option<String>) -> Result<CodecSpec, Error> {
    match settings.get("compression", flag) {
        Some((v, origin)) => CodecSpec::parse(&v).map_err(|e| e.context(format!("compression from {origin}"))),
        None => Ok(CodecSpec::default()),
    }
}

pub fn init(a: InitArgs, settings: &Settings) -> Result<(), Error> {
    let schemes = a.s3.schemes(settings)?;
    let repo = a.repo.place(settings, &schemes)?;
    let meta = sheaf_pg::repo::init(&repo, &a.url)?;
    println!(
        "created {}repository {} for cluster {} (PostgreSQL {}, {} WAL segments)",
        if repo.keys().is_some() { "encrypted (AES-256-GCM) " } else { "" },
        repo.display(),
        meta.system_identifier,
        meta.server_version,
        format_size(meta.wal_segment_size)
    );
    if repo.keys().is_some() {
        println!("keep the key or passphrase safe and apart from the repository: without it nothing in it can be read; archive_command and restores need it too");
    }
    println!("next: archive_command = 'sheaf wal-push %p --repo {}' and archive_mode = on, then sheaf backup {} --repo {}", repo.display(), sheaf_pg::server::redact(&a.url), repo.display());
    Ok(())
}

/// The folder PostgreSQL's %p lives in (pg_wal, as archive_command and restore_command see it).
fn wal_dir(p: &std::path::Path) -> &std::path::Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."))
}

pub fn wal_push(a: WalPushArgs, settings: &Settings) -> Result<(), Error> {
    let spec = codec(settings, a.compression.clone())?;
    let parallel = parallel(settings, a.parallel)?;
    let queue_max = match settings.get("queue-max", a.queue_max.clone()) {
        Some((v, origin)) => Some(parse_size(&v).map_err(|e| e.context(format!("queue-max from {origin}")))?),
        None => None,
    };
    let repo = a.repo.place(settings, &a.s3.schemes(settings)?)?;
    let wal_dir = wal_dir(&a.path);
    let spool = a.spool.get(settings, wal_dir, &repo, &a.s3)?;
    let t0 = std::time::Instant::now();
    // Pushed already by an earlier call's look-ahead: answered without the repository, so an
    // outage that starts now cannot fail (or, under --queue-max, drop) what is archived.
    let report = if spool.take_pushed(&a.path) {
        let name = a.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        sheaf_pg::spool::PushReport { name, from_spool: true, pushed: Vec::new(), ahead_failed: Vec::new(), spool_error: None }
    } else {
        let outcome = sheaf_pg::repo::open(&repo).and_then(|meta| sheaf_pg::spool::push_ahead(&repo, &meta, &spool, &a.path, spec, parallel));
        match outcome {
            Ok(r) => r,
            Err(e) => return drop_or_fail(e, queue_max, &a.path, &spool),
        }
    };
    match if report.from_spool { Ok(0) } else { sheaf_pg::spool::publish_dropped(&repo, &spool) } {
        Ok(0) => {}
        Ok(n) => eprintln!(
            "sheaf: WARNING: the repository is reachable again; {n} WAL file(s) dropped by queue-max while it was not are recorded in it (sheaf info lists them). Take a new backup: recovery cannot cross the gap."
        ),
        Err(e) => eprintln!("sheaf: WARNING: cannot record WAL dropped by queue-max in the repository yet: {e}"),
    }
    for f in &report.ahead_failed {
        eprintln!("sheaf: look-ahead push of {} failed; the archiver will ask for it again: {}", f.name, f.error);
    }
    if let Some(e) = &report.spool_error {
        eprintln!("sheaf: look-ahead is off: {e}");
    }
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serialises");
        v["seconds"] = serde_json::json!(t0.elapsed().as_secs_f64());
        println!("{v}");
    } else if report.pushed.first().is_some_and(|p| p.already) {
        eprintln!("sheaf: {} was archived already with the same content", report.name);
    }
    Ok(())
}

/// A failed push under `--queue-max`: when more WAL than the bound waits in pg_wal, drop the file
/// (report success, so PostgreSQL recycles it), say so loudly in the server log, and record it.
fn drop_or_fail(e: Error, queue_max: Option<u64>, path: &std::path::Path, spool: &Spool) -> Result<(), Error> {
    let Some(max) = queue_max else { return Err(e) };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Only whole segments free space; a history or backup file is tiny and recovery needs it.
    if !sheaf_pg::spool::is_segment_name(&name) {
        return Err(e);
    }
    let Ok((files, bytes)) = sheaf_pg::spool::pending_wal(wal_dir(path)) else { return Err(e) };
    if bytes <= max {
        return Err(e.context(format!("{} of WAL waits in pg_wal ({files} files), under queue-max {}", format_size(bytes), format_size(max))));
    }
    let d = sheaf_pg::spool::Dropped {
        name: name.clone(),
        at: sheaf_core::time::utc_now(),
        pending_bytes: bytes,
        queue_max: max,
        error: e.to_string(),
    };
    let recorded = match sheaf_pg::spool::record_dropped(spool, &d) {
        Ok(()) => format!("recorded in {}", spool.dir().display()),
        Err(re) => format!("and NOT recorded ({re})"),
    };
    eprintln!(
        "sheaf: WARNING: {name} DROPPED from the archive, {recorded}: {} of WAL waits in pg_wal ({files} files), over queue-max {}, and the push failed: {e}. Point-in-time recovery cannot pass {name}; once the repository is back, take a new backup.",
        format_size(bytes),
        format_size(max)
    );
    Ok(())
}

/// `Ok(false)`: not in the archive (exit 1 quietly, as PostgreSQL expects at the archive's end).
pub fn wal_fetch(a: WalFetchArgs, settings: &Settings) -> Result<bool, Error> {
    let parallel = parallel(settings, a.parallel)?;
    let repo = a.repo.place(settings, &a.s3.schemes(settings)?)?;
    let spool = if parallel > 1 { Some(a.spool.get(settings, wal_dir(&a.dest), &repo, &a.s3)?) } else { None };
    if a.prefetch {
        let spool = spool.ok_or_else(|| Error::invalid("--prefetch needs --parallel 2 or more"))?;
        let meta = sheaf_pg::repo::open(&repo)?;
        let r = sheaf_pg::spool::prefetch(&repo, &meta, &spool, parallel, std::time::Duration::from_secs(10))?;
        for e in &r.errors {
            eprintln!("sheaf: prefetch: {e}");
        }
        if a.json {
            println!("{}", serde_json::to_value(&r).expect("report serialises"));
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
    let info = if from_spool {
        None
    } else {
        let meta = sheaf_pg::repo::open(&repo)?;
        match sheaf_pg::archive::fetch(&repo, &meta, &a.name, &a.dest, false)? {
            Some(info) => Some(info),
            None => return Ok(false),
        }
    };
    if let Some(spool) = spool.as_ref().filter(|s| sheaf_pg::spool::is_segment_name(&a.name) && !s.prefetcher_running()) {
        if let Err(e) = start_prefetcher(&a, &repo, settings, parallel, spool) {
            eprintln!("sheaf: prefetch is off: {e}");
        }
    }
    if a.json {
        println!("{}", serde_json::json!({"name": a.name, "from_spool": from_spool, "info": info, "seconds": t0.elapsed().as_secs_f64()}));
    }
    Ok(true)
}

/// Start `sheaf wal-fetch --prefetch` in the background, detached from PostgreSQL's startup
/// process (it exits at once if one is running already; its errors go to prefetch.log in the spool).
fn start_prefetcher(a: &WalFetchArgs, repo: &Repo, settings: &Settings, parallel: usize, spool: &Spool) -> Result<(), Error> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| Error::io(ErrorKind::Io, "cannot find the sheaf executable", e))?;
    std::fs::create_dir_all(spool.dir()).map_err(|e| Error::io(ErrorKind::Io, format!("cannot create {}", spool.dir().display()), e))?;
    let log_path = spool.dir().join("prefetch.log");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot create {}", log_path.display()), e))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(c) = &settings.explicit {
        cmd.arg("--config").arg(std::path::absolute(c).unwrap_or_else(|_| c.clone()));
    }
    cmd.arg("wal-fetch").arg(&a.name).arg(std::path::absolute(&a.dest).unwrap_or_else(|_| a.dest.clone()));
    cmd.args(["--prefetch", "--parallel", &parallel.to_string(), "--repo", repo.display()]);
    cmd.arg("--spool").arg(spool_base(spool));
    cmd.args(a.s3.resolved(settings)?.as_flags());
    // The secret's file, if one was named (SHEAF_PASSPHRASE the prefetcher inherits).
    cmd.args(a.repo.keys.flags(settings).unwrap_or_default());
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(log).process_group(0);
    cmd.spawn().map_err(|e| Error::io(ErrorKind::Io, "cannot start the WAL prefetcher", e))?;
    Ok(())
}

/// The folder a spool was made under (its parent), for the prefetcher to find the same one.
fn spool_base(spool: &Spool) -> PathBuf {
    let base = spool.dir().parent().unwrap_or(spool.dir());
    std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf())
}

pub fn info(a: InfoArgs, settings: &Settings) -> Result<(), Error> {
    let (repo, meta) = a.repo.open(settings, &a.s3)?;
    let found = sheaf_pg::repo::backups(&repo)?;
    let files = sheaf_pg::repo::archived(&repo, &meta)?;
    let ranges = sheaf_pg::repo::ranges(&files);
    let wal_bytes: u64 = files.iter().map(|(_, s)| s).sum();
    let backup_bytes: u64 = found.iter().filter_map(|f| if let Found::Complete(r) = f { Some(r.bytes_written) } else { None }).sum();
    let dropped = sheaf_pg::spool::dropped(&repo)?;
    let gaps: Vec<serde_json::Value> = ranges
        .windows(2)
        .filter(|w| w[0].timeline == w[1].timeline)
        .map(|w| serde_json::json!({"timeline": w[0].timeline, "after": w[0].last, "before": w[1].first}))
        .collect();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "repo": repo.display(), "meta": meta, "backups": found, "wal": ranges, "gaps": gaps,
                "wal_files": files.len(), "wal_bytes": wal_bytes, "backup_bytes": backup_bytes, "dropped": dropped,
            })
        );
        return Ok(());
    }
    println!("repository {}: cluster {} (PostgreSQL {}), created {}", repo.display(), meta.system_identifier, meta.server_version, meta.created);
    println!();
    println!("{:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>6} {:<10} {:>3}  label", "backup", "start (UTC)", "stop (UTC)", "tl", "LSN start .. stop", "read", "stored", "ratio", "codec", "str");
    for f in &found {
        match f {
            Found::Complete(r) => println!(
                "{:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>6.2} {:<10} {:>3}  {}",
                r.id,
                r.start_time,
                r.stop_time,
                r.timeline,
                format!("{} .. {}", r.start_lsn, r.stop_lsn),
                format_size(r.bytes_read),
                format_size(r.bytes_written),
                r.ratio(),
                r.compression,
                r.stripes.len(),
                r.label.as_deref().unwrap_or("")
            ),
            Found::Unfinished { id, running, .. } => {
                println!("{id:<18} {}", if *running { "running (its writer is still at work)" } else { "UNFINISHED: left by a crash; sheaf expire removes it" })
            }
        }
    }
    println!();
    if ranges.is_empty() {
        println!("WAL archive: empty (set archive_command = 'sheaf wal-push %p' and archive_mode = on)");
    }
    for r in &ranges {
        println!("WAL timeline {}: {} .. {} ({} segments)", r.timeline, r.first, r.last, r.segments);
    }
    for g in &gaps {
        println!("WAL GAP on timeline {}: nothing between {} and {}: recovery cannot cross it", g["timeline"], g["after"].as_str().unwrap_or(""), g["before"].as_str().unwrap_or(""));
    }
    for d in &dropped {
        println!("WAL DROPPED: {} at {} by wal-push --queue-max {} ({} waiting): {}", d.name, d.at, format_size(d.queue_max), format_size(d.pending_bytes), d.error);
    }
    let n = found.iter().filter(|f| matches!(f, Found::Complete(_))).count();
    println!(
        "total: {n} backup{} ({}), {} WAL files ({})",
        if n == 1 { "" } else { "s" },
        format_size(backup_bytes),
        files.len(),
        format_size(wal_bytes)
    );
    Ok(())
}

/// `14d`, `36h`, `90m`, `600s`, `2w` in seconds.
pub fn parse_duration(text: &str) -> Result<i64, Error> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().map_err(|_| Error::invalid(format!("--keep-within '{text}': write a number and a unit, e.g. 14d, 36h, 90m")))?;
    let mult = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(Error::invalid(format!("--keep-within '{text}': units are s, m, h, d, w (e.g. 14d)"))),
    };
    if n == 0 {
        return Err(Error::invalid(format!("--keep-within '{text}': give a span longer than zero")));
    }
    Ok(n * mult)
}

pub fn expire(a: ExpireArgs, settings: &Settings) -> Result<(), Error> {
    let (repo, meta) = a.repo.open(settings, &a.s3)?;
    let keep = sheaf_pg::repo::Retention { keep_full: a.keep_full, keep_within: a.keep_within.as_deref().map(parse_duration).transpose()? };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let plan = sheaf_pg::repo::plan_expire(&repo, &meta, &keep, now)?;
    if !a.dry_run {
        sheaf_pg::repo::expire(&repo, &plan)?;
    }
    if a.json {
        let mut v = serde_json::to_value(&plan).expect("plan serialises");
        v["dry_run"] = serde_json::json!(a.dry_run);
        println!("{v}");
        return Ok(());
    }
    let verb = if a.dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} backup{}{}, {} WAL files ({}); kept {} backup{} ({}) and WAL from {}",
        plan.removed.len(),
        if plan.removed.len() == 1 { "" } else { "s" },
        if plan.removed.is_empty() { String::new() } else { format!(" ({})", plan.removed.join(", ")) },
        plan.wal_removed,
        format_size(plan.wal_bytes),
        plan.kept.len(),
        if plan.kept.len() == 1 { "" } else { "s" },
        plan.kept.join(", "),
        plan.wal_kept_from.as_deref().unwrap_or("the start (no backup to anchor it)")
    );
    if !plan.unfinished.is_empty() {
        println!("{verb} unfinished backup{} left by a crash: {}", if plan.unfinished.len() == 1 { "" } else { "s" }, plan.unfinished.join(", "));
    }
    if !plan.running.is_empty() {
        println!("left alone, still being written: {}", plan.running.join(", "));
    }
    println!("{verb} {} in {} objects", format_size(plan.bytes), plan.objects.len());
    Ok(())
}

pub fn config(a: ConfigArgs, settings: &Settings) -> Result<(), Error> {
    type Row<'a> = (String, Option<(String, String)>, &'a str);
    let rows: Vec<Row> = KEYS
        .iter()
        .map(|(k, what)| (k.to_string(), settings.get(k, None).map(|(v, o)| (v, o.to_string())), *what))
        .collect();
    let files: Vec<String> = settings.files().map(|p| p.display().to_string()).collect();
    let aws: Vec<(&str, String)> = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_PROFILE"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (*k, if k.contains("SECRET") || k.contains("TOKEN") || k.contains("KEY_ID") { mask(&v) } else { v })))
        .collect();
    if a.json {
        let settings: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(k, v, _)| (k.clone(), v.as_ref().map_or(serde_json::Value::Null, |(v, o)| serde_json::json!({"value": v, "from": o}))))
            .collect();
        let aws: serde_json::Map<String, serde_json::Value> = aws.into_iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
        println!("{}", serde_json::json!({"files": files, "settings": settings, "aws_environment": aws}));
        return Ok(());
    }
    println!("config files read: {}", if files.is_empty() { "none (/etc/sheaf/sheaf.toml, ~/.config/sheaf/sheaf.toml)".to_string() } else { files.join(", ") });
    for (k, v, what) in &rows {
        match v {
            Some((v, o)) => println!("{k:<14} = {v:<40} from {o}"),
            None => println!("{k:<14}   {:<40} ({what})", "(not set)"),
        }
    }
    for (k, v) in aws {
        println!("{k:<22} {v}  (environment, read by the S3 client)");
    }
    Ok(())
}

fn mask(v: &str) -> String {
    if v.len() <= 4 {
        "****".into()
    } else {
        format!("{}****", &v[..2])
    }
}

/// `sheaf backup ... --repo`: the set goes under the repository's `backups/`.
#[allow(clippy::too_many_arguments)]
pub fn backup_into(
    repo_arg: &RepoArg,
    s3: &S3Args,
    settings: &Settings,
    pg: &sheaf_pg::PgBackupOptions,
    opts: &sheaf_core::BackupOptions,
    stripes: Option<usize>,
    rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>,
    progress: std::sync::Arc<dyn sheaf_core::Progress>,
) -> Result<(sheaf_pg::PgBackupReport, BackupRecord), Error> {
    let (repo, meta) = repo_arg.open_at(settings, s3, rate)?;
    let stripes = match settings.get("stripes", stripes.map(|s| s.to_string())) {
        Some((v, o)) => v.parse::<usize>().map_err(|_| Error::invalid(format!("stripes = '{v}' from {o}: give a number, 1 to 64")))?,
        None => 1,
    };
    sheaf_pg::repo::backup_to_repo(&repo, &meta, pg, opts, stripes, progress)
}

/// A backup of the repository, opened (its id as `sheaf info` lists it, or `latest`).
pub fn open_backup(
    repo_arg: &RepoArg,
    s3: &S3Args,
    settings: &Settings,
    id: &str,
    rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>,
) -> Result<BackupSet, Error> {
    let (repo, _) = repo_arg.open_at(settings, s3, rate)?;
    let records = sheaf_pg::repo::complete(&repo)?;
    let record = sheaf_pg::repo::pick(&records, id)?;
    let stripes: Vec<Location> = record.stripes.iter().map(|n| repo.location(n)).collect();
    BackupSet::open_with(&stripes, &s3.schemes(settings)?, repo.keys())
}

/// `sheaf restore --repo`: choose the backup, check the archive reaches the target, restore, and
/// write the recovery settings.
pub fn restore_from(
    r: &RecoveryArgs,
    s3: &S3Args,
    settings: &Settings,
    opts: sheaf_pg::PgRestoreOptions,
    rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>,
    progress: std::sync::Arc<dyn sheaf_core::Progress>,
) -> Result<(sheaf_core::RestoreReport, sheaf_pg::pitr::Plan), Error> {
    let (repo, meta) = r.repo.open_at(settings, s3, rate)?;
    let records = sheaf_pg::repo::complete(&repo)?;
    let chosen = r.set.as_deref().map(|id| sheaf_pg::repo::pick(&records, id)).transpose()?;
    let target = sheaf_pg::pitr::target_from(r.target_time.as_deref(), r.target_lsn.as_deref(), r.target_name.as_deref(), r.target.is_some())?;
    let recovery = sheaf_pg::pitr::Recovery { target, action: r.target_action.clone(), timeline: r.target_timeline.clone() };
    let plan = sheaf_pg::pitr::plan(&repo, &meta, &records, chosen, &recovery)?;
    let schemes = s3.schemes(settings)?;
    let stripes: Vec<Location> = plan.backup.stripes.iter().map(|n| repo.location(n)).collect();
    let set = BackupSet::open_with(&stripes, &schemes, repo.keys())?;
    if set.manifest.backup_id != plan.backup.backup_id {
        return Err(Error::corrupt(format!(
            "backup {}: its stripes hold backup {}, its record says {} (the repository is damaged)",
            plan.backup.id, set.manifest.backup_id, plan.backup.backup_id
        )));
    }
    // Built before the long restore: a restored cluster without its recovery settings would not
    // recover.
    let command = restore_command(&repo, settings, s3, &r.repo.keys)?;
    let report = sheaf_pg::restore_postgres(&set, &opts, progress)?;
    sheaf_pg::pitr::write_recovery(&opts.target, &command, &recovery)?;
    Ok((report, plan))
}

/// The restore_command a restored cluster runs: this sheaf, by absolute path, with the settings
/// that found the repository (no secrets: credentials stay in the environment or ~/.aws).
fn restore_command(repo: &Repo, settings: &Settings, s3: &S3Args, keys: &KeyArgs) -> Result<String, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::io(ErrorKind::Io, "cannot find the sheaf executable", e))?;
    let q = sheaf_pg::pitr::shell_quote;
    let mut parts = vec![q(&exe.display().to_string()), "wal-fetch".into(), "%f".into(), "%p".into()];
    if let Some(c) = &settings.explicit {
        let c = std::path::absolute(c).unwrap_or_else(|_| c.clone());
        parts.push("--config".into());
        parts.push(q(&c.display().to_string()));
    }
    parts.push("--repo".into());
    parts.push(q(repo.display()));
    for f in s3.resolved(settings)?.as_flags() {
        parts.push(q(&f));
    }
    if repo.keys().is_some() {
        match keys.flags(settings) {
            Some(flags) => parts.extend(flags.iter().map(|f| q(f))),
            None => {
                return Err(Error::new(
                    ErrorKind::Key,
                    "the restored server's restore_command needs the passphrase too, and SHEAF_PASSPHRASE cannot be written into its settings: give the passphrase with --passphrase-file FILE (a file the server's user can read), or a key file",
                ))
            }
        }
    }
    Ok(parts.join(" "))
}

/// `sheaf verify --repo`: every finished backup read and checked, every archived WAL file read and
/// checked, and the WAL each backup needs from its start to the end of its timeline present.
pub fn verify_repo(
    repo_arg: &RepoArg,
    s3: &S3Args,
    settings: &Settings,
    threads: Option<usize>,
    rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>,
    json: bool,
) -> Result<serde_json::Value, Error> {
    let t0 = std::time::Instant::now();
    let (repo, meta) = repo_arg.open_at(settings, s3, rate)?;
    let schemes = s3.schemes(settings)?;
    let found = sheaf_pg::repo::backups(&repo)?;
    let files = sheaf_pg::repo::archived(&repo, &meta)?;
    let mut problems = Vec::new();
    let mut wal_missing = false;
    let mut checked = Vec::new();
    for f in &found {
        let Found::Complete(r) = f else { continue };
        let stripes: Vec<Location> = r.stripes.iter().map(|n| repo.location(n)).collect();
        let outcome = BackupSet::open_with(&stripes, &schemes, repo.keys()).and_then(|set| sheaf_core::verify(&set, threads, std::sync::Arc::new(sheaf_core::NoProgress)));
        match outcome {
            Ok(v) => checked.push(serde_json::json!({"id": r.id, "frames": v.frames, "bytes": v.bytes_raw})),
            Err(e) => problems.push(format!("backup {}: {e}", r.id)),
        }
        if let (Some(start), Some(last)) = (
            sheaf_pg::archive::WalFile::parse(&r.start_wal, meta.wal_segment_size),
            files.iter().filter(|(w, _)| w.timeline == r.timeline && w.kind == sheaf_pg::archive::WalKind::Segment).map(|(w, _)| w.segno).max(),
        ) {
            let gaps = sheaf_pg::repo::missing(&files, r.timeline, start.segno, last, meta.wal_segment_size);
            if !gaps.is_empty() {
                wal_missing = true;
                problems.push(format!(
                    "backup {}: {} WAL segment{} missing after its start ({}{}): recovery from it stops there",
                    r.id,
                    gaps.len(),
                    if gaps.len() == 1 { " is" } else { "s are" },
                    gaps.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                    if gaps.len() > 3 { ", ..." } else { "" }
                ));
            }
        }
    }
    let mut wal_bytes = 0;
    for (w, _) in &files {
        let object = sheaf_pg::archive::object_name(&w.name);
        let r = repo.open(&object).and_then(|src| sheaf_core::blob::read_blob(src.as_ref(), repo.keys(), &mut |_| Ok(())));
        match r {
            Ok(info) => wal_bytes += info.raw_len,
            Err(e) => problems.push(format!("WAL {}: {e}", w.name)),
        }
    }
    let v = serde_json::json!({
        "repo": repo.display(), "backups": checked, "wal_files": files.len(), "wal_bytes": wal_bytes,
        "problems": problems, "seconds": t0.elapsed().as_secs_f64(), "ok": problems.is_empty(),
    });
    if json {
        println!("{v}");
    } else {
        for p in &problems {
            eprintln!("sheaf: {p}");
        }
        println!(
            "verified repository {}: {} backup{}, {} WAL files ({}) in {:.2} s; {}",
            repo.display(),
            checked.len(),
            if checked.len() == 1 { "" } else { "s" },
            files.len(),
            format_size(wal_bytes),
            t0.elapsed().as_secs_f64(),
            if problems.is_empty() { "every checksum matches and the WAL each backup needs is there".to_string() } else { format!("{} problem{}", problems.len(), if problems.len() == 1 { "" } else { "s" }) }
        );
    }
    if let Some(first) = problems.first() {
        let kind = if wal_missing { ErrorKind::Incomplete } else { ErrorKind::Corrupt };
        return Err(Error::new(kind, format!("the repository has {} problem{}; the first: {first}", problems.len(), if problems.len() == 1 { "" } else { "s" })));
    }
    Ok(v)
}
