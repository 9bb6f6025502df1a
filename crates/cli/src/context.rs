//! The typed context a command runs in, resolved once from the parsed flags and the settings
//! when the command starts (ripgrep's low-level args becoming its high-level args): the settings
//! (flags over `SHEAF_*` over the config file), the catalog's path, one S3 scheme set (one
//! runtime) for every `s3://` location, the encryption secret, the `--max-rate` limit shared by
//! every stripe, the repositories given with their keys, the spool; and [`Source`], what a backup
//! reads, decided in one place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sheaf_core::repo::Place;
use sheaf_core::storage::RateLimit;
use sheaf_core::{BackupSet, CodecSpec, Error, ErrorKind, Keys, Location, Result};
use sheaf_pg::repo::Repo;
use sheaf_pg::wal::spool::Spool;
use sheaf_s3::S3Schemes;
use sheaf_sftp::SftpSchemes;

use sheaf_core::manifest::BackupType;

use crate::args::{RepoTarget, S3Args, Shared};
use crate::interrupt::Interrupt;
use crate::settings::{self, Origin, Settings};

/// What a backup reads: a running PostgreSQL server (a libpq URL), or a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `postgres://...` or `postgresql://...`.
    Postgres(String),
    /// `mariadb://...` (or `mysql://...`).
    MariaDb(String),
    /// Anything else: a directory.
    Directory(PathBuf),
}

impl Source {
    /// What `text` names.
    pub fn of(text: &str) -> Source {
        if sheaf_pg::connect::session::is_url(text) {
            Source::Postgres(text.to_string())
        } else if sheaf_mariadb::url::is_url(text) {
            Source::MariaDb(text.to_string())
        } else {
            Source::Directory(PathBuf::from(text))
        }
    }

    /// `postgres` or `directory`, as the catalog records it.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Postgres(_) => "postgres",
            Source::MariaDb(_) => "mariadb",
            Source::Directory(_) => "directory",
        }
    }

    /// For messages and the catalog: the URL without its password, or the path.
    pub fn describe(&self) -> String {
        match self {
            Source::Postgres(url) => sheaf_pg::connect::session::redact(url),
            Source::MariaDb(url) => sheaf_mariadb::url::redact(url),
            Source::Directory(p) => p.display().to_string(),
        }
    }
}

/// The encryption secret's sources in force (a flag, else its setting), for this command and for
/// the commands it writes or starts.
#[derive(Clone, Debug, Default)]
struct Secret {
    key_file: Option<PathBuf>,
    pass_file: Option<PathBuf>,
    command: Option<String>,
    /// SHEAF_PASSPHRASE was given (the passphrase itself, which no flag carries on).
    from_env: bool,
}

/// The retention flags as given (`--keep-full`, `--keep-within`, `--keep-archive`).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepFlags {
    pub full: Option<usize>,
    pub within: Option<std::time::Duration>,
    pub archive: Option<usize>,
}

/// A repository given: its location, and the keys it is opened with.
struct Given {
    text: String,
    keys: Result<Option<Arc<Keys>>>,
}

/// Everything a command needs beyond its own flags, resolved once when the command starts: the
/// settings, the S3 settings and the one scheme set (one runtime) for every `s3://` location, the
/// encryption secret, the `--max-rate` limit shared by every stripe, the repositories given (each
/// with its keys), the spool. Nothing is resolved later, nothing cached: a value that could not be
/// resolved keeps its error, which the command meets where it first needs the value (so a
/// command that needs no secret is not stopped by a key command that fails).
pub struct Context {
    /// The settings in force.
    pub settings: Settings,
    /// What an interrupt has asked for.
    pub interrupt: Interrupt,
    catalog: Option<PathBuf>,
    /// The S3 settings: the flags over the settings (`None`: the command reaches no `s3://`).
    s3: Option<S3Args>,
    schemes: Result<AllSchemes>,
    secret: Secret,
    keys: Result<Option<Arc<Keys>>>,
    rate: Result<Option<Arc<RateLimit>>>,
    repos: Vec<Given>,
    spool: Option<PathBuf>,
}

impl Context {
    /// The context for a command with these shared flags.
    ///
    /// # Errors
    /// None today: what cannot be resolved keeps its error for the command to meet.
    pub fn new(catalog: Option<PathBuf>, settings: Settings, shared: Shared, interrupt: Interrupt) -> Result<Context> {
        let s3 = shared.s3.map(|flags| s3_settings(&settings, flags));
        let schemes = schemes(s3.as_ref());
        let (secret, keys) = match &shared.keys {
            Some(flags) => {
                let secret = Secret {
                    key_file: settings.value(&settings::ENCRYPTION_KEY_FILE, flags.encryption_key_file.clone()),
                    pass_file: settings.value(&settings::PASSPHRASE_FILE, flags.passphrase_file.clone()),
                    command: settings.value(&settings::KEY_COMMAND, flags.key_command.clone()),
                    from_env: std::env::var_os("SHEAF_PASSPHRASE").is_some_and(|v| !v.is_empty()),
                };
                let keys = secret_keys(&secret);
                (secret, keys)
            }
            None => (Secret::default(), Ok(None)),
        };
        let rate = shared.rate.max_rate.map(RateLimit::new).transpose();
        let repos = if !shared.repo.is_empty() {
            shared.repo.into_iter().map(|text| Given { text, keys: keys.as_ref().map(Clone::clone).map_err(Error::again) }).collect()
        } else {
            // From the settings, repo2 .. repo4 may have keys of their own.
            let first = settings.value(&settings::REPO, None).map(|text| Given { text, keys: keys.as_ref().map(Clone::clone).map_err(Error::again) });
            let more = settings::MORE_REPOS.iter().filter_map(|more| {
                let text = settings.value(&more.repo, None)?;
                let own = if shared.keys.is_some() { own_keys(&settings, more) } else { Ok(None) };
                let keys = match own {
                    Ok(None) => keys.as_ref().map(Clone::clone).map_err(Error::again),
                    other => other,
                };
                Some(Given { text, keys })
            });
            first.into_iter().chain(more).collect()
        };
        let spool = settings.value(&settings::SPOOL, shared.spool.spool);
        Ok(Context { settings, interrupt, catalog, s3, schemes, secret, keys, rate, repos, spool })
    }

    /// The history catalog's path, when `--catalog` gave one (else the catalog's default).
    pub fn catalog(&self) -> Option<&Path> {
        self.catalog.as_deref()
    }

    /// The same S3 settings as flags, for a command sheaf writes for later (restore_command) or
    /// starts (the prefetcher).
    pub fn s3_flags(&self) -> Vec<String> {
        let Some(r) = &self.s3 else { return Vec::new() };
        let mut f = Vec::new();
        let mut add = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                f.push(format!("--{k}"));
                f.push(v);
            }
        };
        add("s3-endpoint", r.s3_endpoint.clone());
        add("s3-region", r.s3_region.clone());
        add("s3-profile", r.s3_profile.clone());
        add("s3-ca-bundle", r.s3_ca_bundle.as_ref().map(|p| p.display().to_string()));
        add("s3-kms-key-id", r.s3_kms_key_id.clone());
        add("s3-role-arn", r.s3_role_arn.clone());
        add("s3-storage-class", r.s3_storage_class.map(|c| c.as_str().to_string()));
        add("sftp-known-hosts", r.sftp.sftp_known_hosts.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()));
        add("sftp-key-file", r.sftp.sftp_key_file.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()));
        add("tls-dir", r.agent_tls.tls_dir.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()));
        add("s3-sse-customer-key-file", r.s3_sse_customer_key_file.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()));
        if r.s3_allow_http {
            f.push("--s3-allow-http".into());
        }
        if r.s3_path_style {
            f.push("--s3-path-style".into());
        }
        if r.sftp.sftp_no_fsync {
            f.push("--sftp-no-fsync".into());
        }
        f
    }

    /// The one scheme set every location of this run is parsed with (one S3 runtime).
    ///
    /// # Errors
    /// S3 settings out of range or at odds, an SSE-C key file that cannot be read.
    pub fn schemes(&self) -> Result<&AllSchemes> {
        self.schemes.as_ref().map_err(Error::again)
    }

    /// The keys given, if any: a key file, a passphrase file, a key command or SHEAF_PASSPHRASE
    /// (one of them).
    ///
    /// # Errors
    /// More than one secret, a file that cannot be read, a command that fails, a key that is not
    /// one.
    pub fn keys(&self) -> Result<Option<Arc<Keys>>> {
        self.keys.as_ref().map(Clone::clone).map_err(Error::again)
    }

    /// Flags that give the same secret to another sheaf (restore_command, the prefetcher, the
    /// bench's runs): the files by absolute path, or the command. `None` when the secret came
    /// from SHEAF_PASSPHRASE, which no flag can carry safely.
    pub fn key_flags(&self) -> Option<Vec<String>> {
        let abs = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string();
        match &self.secret {
            Secret { key_file: Some(k), .. } => Some(vec!["--encryption-key-file".into(), abs(k)]),
            Secret { pass_file: Some(p), .. } => Some(vec!["--passphrase-file".into(), abs(p)]),
            Secret { command: Some(c), .. } => Some(vec!["--key-command".into(), c.clone()]),
            Secret { from_env: true, .. } => None,
            _ => Some(Vec::new()),
        }
    }

    /// The cluster's connection: `given` (a command's argument), else `pg-url`, else a keyword/value
    /// string of `pg-host`, `pg-port`, `pg-socket-path`, `pg-user` and `pg-database` (from the
    /// environment as SHEAF_PG_URL, SHEAF_PG_HOST, ... or the config file), else, when PGSERVICE,
    /// PGHOST, PGHOSTADDR or PGDATABASE is set, libpq's defaults (an empty connection string).
    ///
    /// # Errors
    /// None given anywhere; pg-url and the pg-* keywords both; pg-host and pg-socket-path both.
    pub fn pg_url(&self, given: Option<String>) -> Result<String> {
        if let Some(g) = given {
            return Ok(g);
        }
        let s = &self.settings;
        let url = s.get(&settings::PG_URL, None);
        let text = |(v, o): (String, Origin)| (v, o);
        let parts: Vec<(&str, (String, Origin))> = [
            ("host", s.get(&settings::PG_HOST, None).map(text)),
            ("host", s.get(&settings::PG_SOCKET_PATH, None).map(|(p, o)| (p.display().to_string(), o))),
            ("port", s.get(&settings::PG_PORT, None).map(|(p, o)| (p.to_string(), o))),
            ("user", s.get(&settings::PG_USER, None).map(text)),
            ("dbname", s.get(&settings::PG_DATABASE, None).map(text)),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        if let Some((u, o)) = &url {
            if sheaf_pg::connect::conninfo::parse(u).map_err(|e| e.context(format!("pg-url ({o})")))?.iter().any(|(k, _)| k == "password") {
                return Err(Error::invalid(format!(
                    "pg-url ({o}) holds a password: sheaf takes no secrets in its settings; put it in ~/.pgpass (or the file PGPASSFILE names, mode 0600) as libpq does"
                )));
            }
        }
        match (url, parts.is_empty()) {
            (Some((u, _)), true) => Ok(u),
            (Some((_, o)), false) => Err(Error::invalid(format!(
                "pg-url ({o}) and {} are both set: give the connection one way (pg-url, or the pg-* keywords)",
                parts.iter().map(|(_, (_, o))| o.to_string()).collect::<Vec<_>>().join(", ")
            ))),
            (None, false) => {
                if parts.iter().filter(|(k, _)| *k == "host").count() > 1 {
                    return Err(Error::invalid("pg-host and pg-socket-path are both set: the server is reached over TCP (pg-host) or its Unix socket (pg-socket-path), give one"));
                }
                let pairs: Vec<(&str, &str)> = parts.iter().map(|(k, (v, _))| (*k, v.as_str())).collect();
                Ok(sheaf_pg::connect::conninfo::keyword_string(&pairs))
            }
            // As psql: the environment may name the server by itself.
            (None, true) if ["PGSERVICE", "PGHOST", "PGHOSTADDR", "PGDATABASE"].iter().any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty())) => Ok(String::new()),
            (None, true) => Err(Error::invalid(
                "no PostgreSQL server given: give its URL (postgres://USER@HOST/DB) or keyword/value string (host=... dbname=...), or set pg-url (or pg-host, pg-port, pg-socket-path, pg-user, pg-database) in the config file or as SHEAF_PG_URL ...",
            )),
        }
    }

    /// The `--max-rate` limit, one for every stripe and object of this run, if one was asked for.
    ///
    /// # Errors
    /// A rate out of range.
    pub fn rate(&self) -> Result<Option<Arc<RateLimit>>> {
        self.rate.as_ref().map(Clone::clone).map_err(Error::again)
    }

    /// Stripes of a backup into a repository: the flag, else `stripes` from the environment or
    /// the config file, else 1.
    ///
    /// # Errors
    /// A number out of range, naming where it came from.
    pub fn repo_stripes(&self, flag: Option<usize>) -> Result<usize> {
        match self.settings.get(&settings::STRIPES, flag) {
            Some((n, _)) if (1..=64).contains(&n) => Ok(n),
            Some((n, o)) => Err(Error::invalid(format!("stripes = {n} from {o}: give 1 to 64"))),
            None => Ok(1),
        }
    }

    /// The codec in force: the flag, `SHEAF_COMPRESSION`, the config file, else zstd:low.
    pub fn codec(&self, flag: Option<CodecSpec>) -> CodecSpec {
        self.settings.value(&settings::COMPRESSION, flag).unwrap_or_default()
    }

    /// The backup type into a repository: the flag, `SHEAF_TYPE`, the config file, else full.
    pub fn backup_type(&self, flag: Option<BackupType>) -> BackupType {
        self.settings.value(&settings::TYPE, flag).unwrap_or_default()
    }

    /// The retention policy in force for the repository at `repo` (its location as given):
    /// `--keep-full`/`--keep-within`/`--keep-archive` when any is given (the command line says the
    /// whole policy), else that repository's own keys when it is `repo2` .. `repo4` of the settings
    /// and any of its `repoN-retention-*` is set (they say its whole policy), else
    /// `retention-full`, `retention-within` and `retention-archive`.
    ///
    /// # Errors
    /// A number of 0, naming the key and where it came from.
    pub fn retention(&self, repo: Option<&str>, flags: &KeepFlags) -> Result<sheaf_pg::maintain::expire::Retention> {
        use sheaf_pg::maintain::expire::Retention;
        let secs = |d: std::time::Duration| d.as_secs() as i64;
        if flags.full.is_some() || flags.within.is_some() || flags.archive.is_some() {
            return Ok(Retention { keep_full: flags.full, keep_within: flags.within.map(secs), keep_archive: flags.archive });
        }
        let (full, within, archive) = repo
            .and_then(|text| settings::MORE_REPOS.iter().find(|m| self.settings.value(&m.repo, None).as_deref() == Some(text)))
            .map(|m| m.retention)
            .filter(|(f, w, a)| self.settings.get(f, None).is_some() || self.settings.get(w, None).is_some() || self.settings.get(a, None).is_some())
            .unwrap_or((settings::RETENTION_FULL, settings::RETENTION_WITHIN, settings::RETENTION_ARCHIVE));
        let count = |key: &settings::Key<usize>, what: &str| match self.settings.get(key, None) {
            Some((0, o)) => Err(Error::invalid(format!("{} = 0 from {o}: give a number of full backups {what}, 1 or more", key.name))),
            other => Ok(other.map(|(n, _)| n)),
        };
        Ok(Retention {
            keep_full: count(&full, "to keep")?,
            keep_within: self.settings.value(&within, None).map(secs),
            keep_archive: count(&archive, "whose WAL is kept for point-in-time recovery")?,
        })
    }

    /// expire-auto: the retention to apply after a backup into the repository at `repo`, when
    /// `--expire-auto` or the setting says so.
    ///
    /// # Errors
    /// expire-auto on with no retention set; as [`Context::retention`].
    pub fn expire_auto(&self, flag: bool, repo: Option<&str>) -> Result<Option<sheaf_pg::maintain::expire::Retention>> {
        if !self.settings.switch(&settings::EXPIRE_AUTO, flag) {
            return Ok(None);
        }
        let keep = self.retention(repo, &KeepFlags::default())?;
        if keep.keep_full.is_none() && keep.keep_within.is_none() && keep.keep_archive.is_none() {
            return Err(Error::invalid(
                "expire-auto is on but no retention is set: set retention-full (e.g. 2), retention-within (e.g. 14d) and/or retention-archive (e.g. 2) in the config file (or the repository's own repoN-retention-*), or turn expire-auto off",
            ));
        }
        Ok(Some(keep))
    }

    /// `--parallel`, else the `parallel` setting, else 4. At most 64: each is a thread, and for
    /// wal-fetch a segment kept in pg_wal's filesystem.
    ///
    /// # Errors
    /// A value that is not 1 to 64.
    pub fn parallel(&self, flag: Option<usize>) -> Result<usize> {
        match self.settings.get(&settings::PARALLEL, flag) {
            None => Ok(4),
            Some((n, _)) if (1..=64).contains(&n) => Ok(n),
            Some((n, origin)) => Err(Error::invalid(format!("parallel from {origin}: {n}: give 1 to 64"))),
        }
    }

    /// `--queue-max`, else the `queue-max` setting: the most WAL waiting before wal-push drops.
    pub fn queue_max(&self, flag: Option<u64>) -> Option<u64> {
        self.settings.value(&settings::QUEUE_MAX, flag.map(settings::Size)).map(|s| s.0)
    }

    /// The agent a backup reads through (`--agent`, else `agent`), with the folder of its
    /// certificates (`--tls-dir`, else `tls-dir`).
    ///
    /// # Errors
    /// An agent without the folder.
    pub fn agent(&self, flag: Option<String>, tls_dir: Option<PathBuf>) -> Result<Option<(String, PathBuf)>> {
        let Some(addr) = self.settings.value(&settings::AGENT, flag) else { return Ok(None) };
        let tls = self.tls_dir(tls_dir).ok_or_else(|| {
            Error::invalid("--agent needs --tls-dir DIR (or tls-dir in the config file): the folder with ca.pem, client.pem and client.key from sheaf agent --init-certs")
        })?;
        Ok(Some((addr, tls)))
    }

    /// The agent's certificates' folder: `--tls-dir`, else `tls-dir`.
    pub fn tls_dir(&self, flag: Option<PathBuf>) -> Option<PathBuf> {
        self.settings.value(&settings::TLS_DIR, flag)
    }

    /// The repository's location as given or set, if any.
    pub fn repo_given(&self) -> Option<String> {
        self.repos.first().map(|g| g.text.clone())
    }

    /// Every repository given, in order: the `--repo` flags, else `repo`, `repo2`, `repo3` and
    /// `repo4` from the environment or the config file.
    pub fn repos_given(&self) -> Vec<String> {
        self.repos.iter().map(|g| g.text.clone()).collect()
    }

    /// The positions (from 0) of the repositories `target` names among those given.
    ///
    /// # Errors
    /// A position past the last one given.
    pub fn repo_targets(&self, target: RepoTarget) -> Result<Vec<usize>> {
        target.positions(self.repos.len().max(1))
    }

    /// The repository's place, with the keys given (nothing is read yet).
    ///
    /// # Errors
    /// No repository given, a location that does not parse, a bad secret.
    pub fn repo(&self) -> Result<Place> {
        self.repos()?.into_iter().next().ok_or_else(no_repository)
    }

    /// Every repository given ([`Context::repos_given`]), with its keys (nothing is read yet); at
    /// least one.
    ///
    /// # Errors
    /// None given, more than four, a location that does not parse, a bad secret.
    pub fn repos(&self) -> Result<Vec<Place>> {
        if self.repos.is_empty() {
            return Err(no_repository());
        }
        if self.repos.len() > 4 {
            return Err(Error::invalid(format!("{} repositories given: sheaf keeps up to 4 (repo .. repo4)", self.repos.len())));
        }
        let schemes = self.schemes()?;
        self.repos.iter().map(|g| Ok(Place::at(&g.text, schemes)?.with_keys(g.keys.as_ref().map(Clone::clone).map_err(Error::again)?))).collect()
    }

    /// Every repository given that this command writes into, each opened as
    /// [`Context::open_repos`] opens it, refused before anything is written when another user
    /// owns it ([`Place::check_writer`]).
    ///
    /// # Errors
    /// As [`Context::open_repos`]; [`sheaf_core::ErrorKind::Denied`] for another user's.
    pub fn open_repos_to_write(&self) -> Result<Vec<(Place, Result<Repo>)>> {
        let repos = self.open_repos()?;
        for (r, _) in &repos {
            r.check_writer()?;
        }
        Ok(repos)
    }

    /// Every repository given that this command writes into ([`Context::repos`]), each refused
    /// when another user owns it ([`Place::check_writer`]).
    ///
    /// # Errors
    /// As [`Context::repos`]; [`sheaf_core::ErrorKind::Denied`] for another user's.
    pub fn repos_to_write(&self) -> Result<Vec<Place>> {
        let repos = self.repos()?;
        for r in &repos {
            r.check_writer()?;
        }
        Ok(repos)
    }

    /// Every repository given, each opened (what it holds read), held to `--max-rate`: one result
    /// per repository, so that one unreachable leaves the others usable.
    ///
    /// # Errors
    /// As [`Context::repos`].
    pub fn open_repos(&self) -> Result<Vec<(Place, Result<Repo>)>> {
        let rate = self.rate()?;
        Ok(self
            .repos()?
            .into_iter()
            .map(|place| {
                let place = match &rate {
                    Some(limit) => place.throttled(limit),
                    None => place,
                };
                // Either kind: the commands that are PostgreSQL's refuse a MariaDB server's.
                let opened = sheaf_pg::repo::meta::open_any(&place);
                (place, opened)
            })
            .collect())
    }

    /// `serve` on the first repository given that can serve it, as a restore picks one: a
    /// repository that cannot be read, or for which `serve` fails (no such backup, a damaged
    /// record or set), is passed over for the next, which stderr says; the last one's error is
    /// final. `serve` must only read.
    ///
    /// # Errors
    /// As [`Context::open_repos`]; the last repository's error.
    pub fn first_repo_serving<T>(&self, mut serve: impl FnMut(&Repo) -> Result<T>) -> Result<T> {
        let repos = self.open_repos()?;
        let n = repos.len();
        let mut last = None;
        for (k, (place, opened)) in repos.iter().enumerate() {
            let attempt = match opened {
                Err(e) => Err(Error::new(e.kind(), e.to_string())),
                Ok(repo) => serve(repo),
            };
            match attempt {
                Ok(v) => return Ok(v),
                Err(e) if k + 1 < n => {
                    eprintln!("sheaf: repository {} ({}) cannot serve this, trying the next: {e}", k + 1, place.display());
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("no repository given")))
    }

    /// The locations `texts` name (`s3://` ones through the schemes), held to `--max-rate`.
    ///
    /// # Errors
    /// A location that does not parse.
    pub fn locations(&self, texts: &[String]) -> Result<Vec<Location>> {
        let rate = self.rate()?;
        let schemes = self.schemes()?;
        texts
            .iter()
            .map(|t| {
                Location::parse(t, schemes).map(|l| match &rate {
                    Some(r) => l.throttled(r),
                    None => l,
                })
            })
            .collect()
    }

    /// The backup set the stripes given on the command line belong to, read with the keys given
    /// (an encrypted set needs them) and held to `--max-rate`.
    ///
    /// # Errors
    /// As [`Context::locations`] and [`BackupSet::open_with`].
    pub fn open_stripes(&self, texts: &[String]) -> Result<BackupSet> {
        let stripes = self.locations(texts)?;
        BackupSet::open_with(&stripes, self.schemes()?, self.keys()?.as_deref())
    }

    /// [`Context::open_stripes`] for a pass over every frame: entries and index stay out of
    /// memory ([`BackupSet::open_lean`]).
    ///
    /// # Errors
    /// As [`Context::open_stripes`].
    pub fn open_stripes_lean(&self, texts: &[String]) -> Result<BackupSet> {
        let stripes = self.locations(texts)?;
        BackupSet::open_lean(&stripes, self.schemes()?, self.keys()?.as_deref())
    }

    /// The spool folder given (`--spool`, else `spool`), if one was.
    pub fn spool_dir(&self) -> Option<&Path> {
        self.spool.as_deref()
    }

    /// The spool of this repository: one per location and endpoint, so that a marker never
    /// vouches for another repository.
    pub fn spool(&self, wal_dir: &Path, repo: &Place) -> Spool {
        let endpoint = self.s3.as_ref().and_then(|s| s.s3_endpoint.clone()).unwrap_or_default();
        Spool::new(self.spool.as_deref(), wal_dir, &format!("{} {endpoint}", repo.display()))
    }

    /// This sheaf's executable, for the commands it writes or starts.
    ///
    /// # Errors
    /// When the system will not say.
    pub fn exe(&self) -> Result<PathBuf> {
        std::env::current_exe().map_err(|e| Error::io(ErrorKind::Io, "cannot find the sheaf executable", e))
    }

    /// `--config` as another sheaf needs it, by absolute path, when one was named.
    pub fn config_flag(&self) -> Option<PathBuf> {
        self.settings.explicit.as_ref().map(|c| std::path::absolute(c).unwrap_or_else(|_| c.clone()))
    }
}

fn no_repository() -> Error {
    Error::invalid("no repository given: pass --repo DIR|s3://BUCKET/PREFIX|az://...|gs://...|sftp://USER@HOST/PATH, set SHEAF_REPO, or put repo = \"...\" in the config file (see sheaf config)")
}

/// The S3 settings in force: the flags over `SHEAF_S3_*` over the config file.
fn s3_settings(s: &Settings, mut a: S3Args) -> S3Args {
    a.s3_endpoint = s.value(&settings::S3_ENDPOINT, a.s3_endpoint);
    a.s3_region = s.value(&settings::S3_REGION, a.s3_region);
    a.s3_profile = s.value(&settings::S3_PROFILE, a.s3_profile);
    a.s3_ca_bundle = s.value(&settings::S3_CA_BUNDLE, a.s3_ca_bundle);
    a.s3_allow_http = s.switch(&settings::S3_ALLOW_HTTP, a.s3_allow_http);
    a.s3_path_style = s.switch(&settings::S3_PATH_STYLE, a.s3_path_style);
    a.s3_kms_key_id = s.value(&settings::S3_KMS_KEY_ID, a.s3_kms_key_id);
    a.s3_sse_customer_key_file = s.value(&settings::S3_SSE_CUSTOMER_KEY_FILE, a.s3_sse_customer_key_file);
    a.s3_role_arn = s.value(&settings::S3_ROLE_ARN, a.s3_role_arn);
    a.s3_storage_class = s.value(&settings::S3_STORAGE_CLASS, a.s3_storage_class);
    a.sftp.sftp_known_hosts = s.value(&settings::SFTP_KNOWN_HOSTS, a.sftp.sftp_known_hosts);
    a.sftp.sftp_key_file = s.value(&settings::SFTP_KEY_FILE, a.sftp.sftp_key_file);
    a.sftp.sftp_no_fsync = s.switch(&settings::SFTP_NO_FSYNC, a.sftp.sftp_no_fsync);
    a.agent_tls.tls_dir = s.value(&settings::TLS_DIR, a.agent_tls.tls_dir);
    a
}

/// Every scheme a location may have: S3 and its kin (`s3://`, `az://`, `gs://`), `sftp://`, and
/// `sheaf://` (a repository a backup host's agent serves).
pub struct AllSchemes {
    s3: S3Schemes,
    sftp: SftpSchemes,
    served: sheaf_agent::ServedSchemes,
}

impl sheaf_core::Schemes for AllSchemes {
    fn resolve(&self, scheme: &str, bucket: &str, key: &str) -> Result<(Arc<dyn sheaf_core::Store>, String)> {
        match scheme {
            "sftp" => self.sftp.resolve(scheme, bucket, key),
            "sheaf" => self.served.resolve(scheme, bucket, key),
            _ => self.s3.resolve(scheme, bucket, key),
        }
    }
}

/// The one scheme set for these settings (`None`: the command reaches no remote store).
fn schemes(s3: Option<&S3Args>) -> Result<AllSchemes> {
    let sftp = SftpSchemes::new(s3.map_or_else(sheaf_sftp::SftpOptions::default, |r| sheaf_sftp::SftpOptions {
        known_hosts: r.sftp.sftp_known_hosts.clone(),
        key_file: r.sftp.sftp_key_file.clone(),
        no_fsync: r.sftp.sftp_no_fsync,
    }));
    let served = sheaf_agent::ServedSchemes::new(s3.and_then(|r| r.agent_tls.tls_dir.clone()), sheaf_agent::client::TIMEOUT);
    Ok(AllSchemes { s3: s3_schemes(s3)?, sftp, served })
}

/// The S3 schemes for these settings.
fn s3_schemes(s3: Option<&S3Args>) -> Result<S3Schemes> {
    let Some(r) = s3 else { return Ok(S3Schemes::new(sheaf_s3::S3Options::default())) };
    if r.s3_kms_key_id.is_some() && r.s3_sse_customer_key_file.is_some() {
        return Err(Error::invalid("s3-kms-key-id and s3-sse-customer-key-file are both set: S3 encrypts an object one way, SSE-KMS or SSE-C; give one"));
    }
    let o = sheaf_s3::S3Options {
        endpoint: r.s3_endpoint.clone(),
        region: r.s3_region.clone(),
        allow_http: r.s3_allow_http,
        path_style: r.s3_path_style.then_some(true),
        profile: r.s3_profile.clone(),
        ca_bundle: r.s3_ca_bundle.clone(),
        part_size: r.s3_part_size,
        parts_in_flight: r.s3_parts_in_flight,
        read_ahead: r.s3_read_ahead,
        sse: match (&r.s3_kms_key_id, &r.s3_sse_customer_key_file) {
            (Some(id), _) => sheaf_s3::Sse::Kms(id.clone()),
            (None, Some(f)) => sheaf_s3::Sse::Customer(sheaf_core::crypto::read_key_file(f, "SSE-C key file")?),
            (None, None) => sheaf_s3::Sse::None,
        },
        role_arn: r.s3_role_arn.clone(),
        storage_class: r.s3_storage_class,
        ..Default::default()
    };
    o.check()?;
    Ok(S3Schemes::new(o))
}

/// The keys the secret gives, if any (one of a key file, a passphrase file, a key command and
/// SHEAF_PASSPHRASE).
fn secret_keys(s: &Secret) -> Result<Option<Arc<Keys>>> {
    let given = usize::from(s.key_file.is_some()) + usize::from(s.pass_file.is_some()) + usize::from(s.command.is_some()) + usize::from(s.from_env);
    if given > 1 {
        return Err(Error::new(ErrorKind::Key, "more than one secret given (an encryption key file, a passphrase file, a key command, SHEAF_PASSPHRASE): give one"));
    }
    if s.from_env {
        use std::os::unix::ffi::OsStringExt;
        let v = std::env::var_os("SHEAF_PASSPHRASE").unwrap_or_default();
        return Ok(Some(Arc::new(Keys::from_passphrase(v.into_vec())?)));
    }
    load_keys(s.key_file.clone(), s.pass_file.clone(), s.command.clone(), "--key-command")
}

/// The keys of repository `n` (2 to 4) when it has its own (`repoN-encryption-key-file`,
/// `repoN-passphrase-file` or `repoN-key-command`), else `None`: it takes the one key given.
fn own_keys(s: &Settings, more: &settings::MoreRepo) -> Result<Option<Arc<Keys>>> {
    let n = more.n;
    let (key_file, pass_file, command) = (s.value(&more.key_file, None), s.value(&more.pass_file, None), s.value(&more.command, None));
    if usize::from(key_file.is_some()) + usize::from(pass_file.is_some()) + usize::from(command.is_some()) > 1 {
        return Err(Error::new(ErrorKind::Key, format!("repo{n} has more than one secret (encryption key file, passphrase file, key command): give one")));
    }
    load_keys(key_file, pass_file, command, &format!("repo{n}-key-command"))
}

/// A secret's file that group or others may read is used, with a warning, by libpq's rule for a
/// `~/.pgpass` (0600 or less; 0640 or less when root owns it), which libpq warns of and ignores;
/// sheaf cannot ignore it (the backup or the archive would fail), so it only warns.
fn warn_if_readable_by_others(file: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if let Ok(meta) = std::fs::metadata(file) {
        let mode = meta.permissions().mode() & 0o777;
        let allowed = if meta.uid() == 0 { 0o640 } else { 0o600 };
        if mode & !allowed != 0 {
            crate::log::warning(format_args!(
                "{} holds an encryption secret and group or others may read it (mode {mode:04o}): whoever reads it reads every backup; chmod 600 it (or 640 owned by root, for a group that needs it, as libpq allows of .pgpass)",
                file.display()
            ));
        }
    }
}

/// The keys of another repository a command reaches (`copy --to-repo`, `check --compare-repo`):
/// its own secret when one of `key_file`, `pass_file` or `command` is given (`command_name` names
/// the command in errors), else the secret given for --repo.
///
/// # Errors
/// As [`load_keys`] and [`Context::keys`].
pub fn other_keys(ctx: &Context, key_file: Option<PathBuf>, pass_file: Option<PathBuf>, command: Option<String>, command_name: &str) -> Result<Option<Arc<Keys>>> {
    if key_file.is_some() || pass_file.is_some() || command.is_some() {
        return load_keys(key_file, pass_file, command, command_name);
    }
    ctx.keys()
}

/// Keys from a key file, a passphrase file (its first line) or a key command, if one is given;
/// `command_name` names the command in errors (never its output, nor the command itself, which
/// may name where the secret lives).
pub fn load_keys(key_file: Option<PathBuf>, pass_file: Option<PathBuf>, command: Option<String>, command_name: &str) -> Result<Option<Arc<Keys>>> {
    for f in key_file.iter().chain(&pass_file) {
        warn_if_readable_by_others(f);
    }
    let keys = if let Some(f) = key_file {
        Keys::from_key_file(&f)?
    } else if let Some(f) = pass_file {
        let text = zeroize::Zeroizing::new(std::fs::read(&f).map_err(|e| Error::io(ErrorKind::Key, format!("cannot read the passphrase file {}", f.display()), e))?);
        let line = text.split(|&b| b == b'\n').next().unwrap_or_default().to_vec();
        Keys::from_passphrase(line).map_err(|e| Error::new(ErrorKind::Key, format!("{}: {}", f.display(), e.message())))?
    } else if let Some(c) = command {
        Keys::from_printed(run_key_command(&c, command_name)?, command_name)?
    } else {
        return Ok(None);
    };
    Ok(Some(Arc::new(keys)))
}

/// Run a key command with `sh -c` and take what it prints (at most 64 KiB); its messages go to
/// our stderr.
fn run_key_command(command: &str, name: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::io(ErrorKind::Key, format!("cannot run the key command ({name}) with sh"), e))?;
    // Room for all of it up front: no reallocation leaves a copy of the secret behind.
    let mut out = Vec::with_capacity((64 << 10) + 1);
    let read = child.stdout.take().expect("piped").take(64 << 10).read_to_end(&mut out);
    let status = child.wait().map_err(|e| Error::io(ErrorKind::Key, format!("the key command ({name}) could not be waited for"), e))?;
    let out = zeroize::Zeroizing::new(out);
    read.map_err(|e| Error::io(ErrorKind::Key, format!("cannot read what the key command ({name}) printed"), e))?;
    if !status.success() {
        return Err(Error::new(ErrorKind::Key, format!("the key command ({name}) failed ({status}); its messages, if any, are above")));
    }
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_decided_by_its_scheme() {
        assert_eq!(Source::of("postgresql://u@h/db").kind(), "postgres");
        assert_eq!(Source::of("postgres://u:pw@h/db").describe(), "postgres://u@h/db");
        assert_eq!(Source::of("/srv/data"), Source::Directory(PathBuf::from("/srv/data")));
        assert_eq!(Source::of("postgres.d").kind(), "directory");
        assert_eq!(Source::of("mariadb://backup:pw@localhost/?socket=/run/mysqld/mysqld.sock").describe(), "mariadb://backup:***@localhost/?socket=/run/mysqld/mysqld.sock");
    }
}
