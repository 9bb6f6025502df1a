//! The typed context a command runs in, built once from the parsed flags (ripgrep's `hiargs`):
//! the settings (flags over `SHEAF_*` over the config file), the catalog's path, one S3 scheme
//! set (one runtime) for every `s3://` location, the encryption secret, the `--max-rate` limit
//! shared by every stripe, the repository; and [`Source`], what a backup reads, decided in one
//! place. Each piece is resolved when a command first asks for it, and then kept: an error comes
//! at the point the command meets it, as the flags' own order says.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sheaf_core::repo::Place;
use sheaf_core::storage::RateLimit;
use sheaf_core::{BackupSet, CodecSpec, Error, ErrorKind, Keys, Location, Result};
use sheaf_pg::repo::Repo;
use sheaf_pg::wal::spool::Spool;
use sheaf_s3::S3Schemes;

use crate::args::{S3Args, Shared};
use crate::interrupt::Interrupt;
use crate::settings::Settings;

/// What a backup reads: a running PostgreSQL server (a libpq URL), or a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `postgres://...` or `postgresql://...`.
    Postgres(String),
    /// Anything else: a directory.
    Directory(PathBuf),
}

impl Source {
    /// What `text` names.
    pub fn of(text: &str) -> Source {
        if sheaf_pg::connect::session::is_url(text) {
            Source::Postgres(text.to_string())
        } else {
            Source::Directory(PathBuf::from(text))
        }
    }

    /// `postgres` or `directory`, as the catalog records it.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Postgres(_) => "postgres",
            Source::Directory(_) => "directory",
        }
    }

    /// For messages and the catalog: the URL without its password, or the path.
    pub fn describe(&self) -> String {
        match self {
            Source::Postgres(url) => sheaf_pg::connect::session::redact(url),
            Source::Directory(p) => p.display().to_string(),
        }
    }
}

/// Everything a command needs beyond its own flags.
pub struct Context {
    /// The settings in force.
    pub settings: Settings,
    /// What an interrupt has asked for.
    pub interrupt: Interrupt,
    catalog: Option<PathBuf>,
    shared: Shared,
    schemes: OnceLock<S3Schemes>,
    keys: OnceLock<Option<Arc<Keys>>>,
    rate: OnceLock<Option<Arc<RateLimit>>>,
}

/// `cell`'s value, made by `make` the first time; an error is returned and nothing kept.
fn once<T>(cell: &OnceLock<T>, make: impl FnOnce() -> Result<T>) -> Result<&T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = make()?;
    Ok(cell.get_or_init(|| v))
}

impl Context {
    /// The context for a command with these shared flags.
    ///
    /// # Errors
    /// A config file that cannot be read or holds what sheaf does not know ([`Settings::load`]).
    pub fn new(catalog: Option<PathBuf>, config: Option<&Path>, shared: Shared, interrupt: Interrupt) -> Result<Context> {
        let settings = Settings::load(config)?;
        Ok(Context { settings, interrupt, catalog, shared, schemes: OnceLock::new(), keys: OnceLock::new(), rate: OnceLock::new() })
    }

    /// The history catalog's path, when `--catalog` gave one (else the catalog's default).
    pub fn catalog(&self) -> Option<&Path> {
        self.catalog.as_deref()
    }

    fn s3_flags_given(&self) -> &S3Args {
        self.shared.s3.as_ref().expect("only a command with the S3 flags reaches s3:// locations")
    }

    /// The S3 settings in force: the flags over `SHEAF_S3_*` over the config file.
    ///
    /// # Errors
    /// A switch whose value is not true or false.
    pub fn s3(&self) -> Result<S3Args> {
        let mut a = self.s3_flags_given().clone();
        let s = &self.settings;
        a.s3_endpoint = s.value("s3-endpoint", a.s3_endpoint);
        a.s3_region = s.value("s3-region", a.s3_region);
        a.s3_profile = s.value("s3-profile", a.s3_profile);
        a.s3_ca_bundle = s.value("s3-ca-bundle", a.s3_ca_bundle.map(|p| p.display().to_string())).map(PathBuf::from);
        a.s3_allow_http = s.switch("s3-allow-http", a.s3_allow_http)?;
        a.s3_path_style = s.switch("s3-path-style", a.s3_path_style)?;
        a.s3_kms_key_id = s.value("s3-kms-key-id", a.s3_kms_key_id);
        a.s3_sse_customer_key_file = s.value("s3-sse-customer-key-file", a.s3_sse_customer_key_file.map(|p| p.display().to_string())).map(PathBuf::from);
        if a.s3_kms_key_id.is_some() && a.s3_sse_customer_key_file.is_some() {
            return Err(Error::invalid("s3-kms-key-id and s3-sse-customer-key-file are both set: S3 encrypts an object one way, SSE-KMS or SSE-C; give one"));
        }
        Ok(a)
    }

    /// The same S3 settings as flags, for a command sheaf writes for later (restore_command) or
    /// starts (the prefetcher).
    ///
    /// # Errors
    /// As [`Context::s3`].
    pub fn s3_flags(&self) -> Result<Vec<String>> {
        let r = self.s3()?;
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
        add("s3-sse-customer-key-file", r.s3_sse_customer_key_file.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()).display().to_string()));
        if r.s3_allow_http {
            f.push("--s3-allow-http".into());
        }
        if r.s3_path_style {
            f.push("--s3-path-style".into());
        }
        Ok(f)
    }

    /// The one scheme set every location of this run is parsed with (one S3 runtime).
    ///
    /// # Errors
    /// S3 settings out of range.
    pub fn schemes(&self) -> Result<&S3Schemes> {
        once(&self.schemes, || {
            let r = self.s3()?;
            let given = self.s3_flags_given();
            let o = sheaf_s3::S3Options {
                endpoint: r.s3_endpoint.clone(),
                region: r.s3_region.clone(),
                allow_http: r.s3_allow_http,
                path_style: r.s3_path_style.then_some(true),
                profile: r.s3_profile.clone(),
                ca_bundle: r.s3_ca_bundle.clone(),
                part_size: given.s3_part_size,
                parts_in_flight: given.s3_parts_in_flight,
                read_ahead: given.s3_read_ahead,
                sse: match (&r.s3_kms_key_id, &r.s3_sse_customer_key_file) {
                    (Some(id), _) => sheaf_s3::Sse::Kms(id.clone()),
                    (None, Some(f)) => sheaf_s3::Sse::Customer(sheaf_core::crypto::read_key_file(f, "SSE-C key file")?),
                    (None, None) => sheaf_s3::Sse::None,
                },
                ..Default::default()
            };
            o.check()?;
            Ok(S3Schemes::new(o))
        })
    }

    /// The secret's sources as given or set: (key file, passphrase file, key command).
    fn key_sources(&self) -> (Option<PathBuf>, Option<PathBuf>, Option<String>) {
        let k = &self.shared.keys;
        let path = |key: &str, flag: &Option<PathBuf>| self.settings.value(key, flag.as_ref().map(|p| p.display().to_string())).map(PathBuf::from);
        (path("encryption-key-file", &k.encryption_key_file), path("passphrase-file", &k.passphrase_file), self.settings.value("key-command", k.key_command.clone()))
    }

    /// The keys given, if any: a key file, a passphrase file, a key command or SHEAF_PASSPHRASE
    /// (one of them).
    ///
    /// # Errors
    /// More than one secret, a file that cannot be read, a command that fails, a key that is not
    /// one.
    pub fn keys(&self) -> Result<Option<Arc<Keys>>> {
        once(&self.keys, || {
            let (key_file, pass_file, command) = self.key_sources();
            let env = std::env::var_os("SHEAF_PASSPHRASE").filter(|v| !v.is_empty());
            let given = usize::from(key_file.is_some()) + usize::from(pass_file.is_some()) + usize::from(command.is_some()) + usize::from(env.is_some());
            if given > 1 {
                return Err(Error::new(ErrorKind::Key, "more than one secret given (an encryption key file, a passphrase file, a key command, SHEAF_PASSPHRASE): give one"));
            }
            if let Some(v) = env {
                use std::os::unix::ffi::OsStringExt;
                return Ok(Some(Arc::new(Keys::from_passphrase(v.into_vec())?)));
            }
            load_keys(key_file, pass_file, command, "--key-command")
        })
        .cloned()
    }

    /// The keys of repository `n` (2 to 4) when it has its own (`repoN-encryption-key-file`,
    /// `repoN-passphrase-file` or `repoN-key-command`), else `None`: it takes the one key given.
    ///
    /// # Errors
    /// More than one given, a file that cannot be read, a key that is not one.
    fn own_keys(&self, n: usize) -> Result<Option<Arc<Keys>>> {
        let key_file = self.settings.value(&format!("repo{n}-encryption-key-file"), None).map(PathBuf::from);
        let pass_file = self.settings.value(&format!("repo{n}-passphrase-file"), None).map(PathBuf::from);
        let command = self.settings.value(&format!("repo{n}-key-command"), None);
        if usize::from(key_file.is_some()) + usize::from(pass_file.is_some()) + usize::from(command.is_some()) > 1 {
            return Err(Error::new(ErrorKind::Key, format!("repo{n} has more than one secret (encryption key file, passphrase file, key command): give one")));
        }
        load_keys(key_file, pass_file, command, &format!("repo{n}-key-command"))
    }

    /// Flags that give the same secret to another sheaf (restore_command, the prefetcher, the
    /// bench's runs): the files by absolute path, or the command. `None` when the secret came
    /// from SHEAF_PASSPHRASE, which no flag can carry safely.
    pub fn key_flags(&self) -> Option<Vec<String>> {
        let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p).display().to_string();
        match self.key_sources() {
            (Some(k), _, _) => Some(vec!["--encryption-key-file".into(), abs(k)]),
            (_, Some(p), _) => Some(vec!["--passphrase-file".into(), abs(p)]),
            (_, _, Some(c)) => Some(vec!["--key-command".into(), c]),
            _ if std::env::var_os("SHEAF_PASSPHRASE").is_some_and(|v| !v.is_empty()) => None,
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
        let url = self.settings.get("pg-url", None);
        let parts: Vec<(&str, (String, crate::settings::Origin))> =
            [("host", "pg-host"), ("host", "pg-socket-path"), ("port", "pg-port"), ("user", "pg-user"), ("dbname", "pg-database")]
                .into_iter()
                .filter_map(|(k, setting)| self.settings.get(setting, None).map(|v| (k, v)))
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
    /// A rate that is not a size.
    pub fn rate(&self) -> Result<Option<Arc<RateLimit>>> {
        once(&self.rate, || self.shared.rate.max_rate.map(RateLimit::new).transpose()).cloned()
    }

    /// Stripes of a backup into a repository: the flag, else `stripes` from the environment or
    /// the config file, else 1.
    ///
    /// # Errors
    /// A value that is not a number, naming where it came from.
    pub fn repo_stripes(&self, flag: Option<usize>) -> Result<usize> {
        match self.settings.get("stripes", flag.map(|s| s.to_string())) {
            Some((v, o)) => v.parse::<usize>().map_err(|_| Error::invalid(format!("stripes = '{v}' from {o}: give a number, 1 to 64"))),
            None => Ok(1),
        }
    }

    /// The codec in force: the flag, `SHEAF_COMPRESSION`, the config file, else zstd:low.
    ///
    /// # Errors
    /// A codec that does not parse, naming where it came from.
    pub fn codec(&self, flag: Option<String>) -> Result<CodecSpec> {
        match self.settings.get("compression", flag) {
            Some((v, origin)) => CodecSpec::parse(&v).map_err(|e| e.context(format!("compression from {origin}"))),
            None => Ok(CodecSpec::default()),
        }
    }

    /// The retention policy in force: `--keep-full`/`--keep-within`, else `retention-full` and
    /// `retention-within` from the environment or the config file (a flag given replaces both
    /// settings: the command line says the whole policy).
    ///
    /// # Errors
    /// A setting that does not parse, naming where it came from.
    pub fn retention(&self, keep_full: Option<usize>, keep_within: Option<std::time::Duration>) -> Result<sheaf_pg::maintain::expire::Retention> {
        let secs = |d: std::time::Duration| d.as_secs() as i64;
        if keep_full.is_some() || keep_within.is_some() {
            return Ok(sheaf_pg::maintain::expire::Retention { keep_full, keep_within: keep_within.map(secs) });
        }
        let keep_full = match self.settings.get("retention-full", None) {
            Some((v, o)) => Some(v.parse::<usize>().map_err(|_| Error::invalid(format!("retention-full = '{v}' from {o}: give a number of full backups, 1 or more")))?),
            None => None,
        };
        let keep_within = match self.settings.get("retention-within", None) {
            Some((v, o)) => Some(secs(sheaf_core::time::parse_duration(&v).map_err(|e| e.context(format!("retention-within from {o}")))?)),
            None => None,
        };
        Ok(sheaf_pg::maintain::expire::Retention { keep_full, keep_within })
    }

    /// `--parallel`, else the `parallel` setting, else 4. At most 64: each is a thread, and for
    /// wal-fetch a segment kept in pg_wal's filesystem.
    ///
    /// # Errors
    /// A value that is not 1 to 64.
    pub fn parallel(&self, flag: Option<usize>) -> Result<usize> {
        match self.settings.get("parallel", flag.map(|n| n.to_string())) {
            None => Ok(4),
            Some((v, origin)) => match v.parse::<usize>() {
                Ok(n) if (1..=64).contains(&n) => Ok(n),
                _ => Err(Error::invalid(format!("parallel from {origin}: '{v}': give 1 to 64"))),
            },
        }
    }

    /// The repository's location as given or set, if any.
    pub fn repo_given(&self) -> Option<String> {
        self.repos_given().into_iter().next()
    }

    /// Every repository given, in order: the `--repo` flags, else `repo`, `repo2`, `repo3` and
    /// `repo4` from the environment or the config file.
    pub fn repos_given(&self) -> Vec<String> {
        if !self.shared.repo.is_empty() {
            return self.shared.repo.clone();
        }
        ["repo", "repo2", "repo3", "repo4"].iter().filter_map(|k| self.settings.value(k, None)).collect()
    }

    /// The repository's location text, or the error that says where to give it.
    ///
    /// # Errors
    /// None given.
    pub fn repo_text(&self) -> Result<String> {
        self.repo_given().ok_or_else(|| {
            Error::invalid("no repository given: pass --repo DIR|s3://BUCKET/PREFIX|az://...|gs://..., set SHEAF_REPO, or put repo = \"...\" in the config file (see sheaf config)")
        })
    }

    /// The repository's place, with the keys given (nothing is read yet).
    ///
    /// # Errors
    /// No repository given, a location that does not parse, a bad secret.
    pub fn repo(&self) -> Result<Place> {
        let schemes = self.schemes()?;
        Ok(Place::at(&self.repo_text()?, schemes)?.with_keys(self.keys()?))
    }

    /// Every repository given ([`Context::repos_given`]), with the keys given (nothing is read
    /// yet); at least one.
    ///
    /// # Errors
    /// None given, more than four, a location that does not parse, a bad secret.
    pub fn repos(&self) -> Result<Vec<Place>> {
        let texts = self.repos_given();
        if texts.is_empty() {
            self.repo_text()?;
        }
        if texts.len() > 4 {
            return Err(Error::invalid(format!("{} repositories given: sheaf keeps up to 4 (repo .. repo4)", texts.len())));
        }
        let schemes = self.schemes()?;
        let keys = self.keys()?;
        // A repository from the config file or environment (not --repo) may have keys of its own.
        let from_settings = self.shared.repo.is_empty();
        texts
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let own = if from_settings && k > 0 { self.own_keys(k + 1)? } else { None };
                Ok(Place::at(t, schemes)?.with_keys(own.or_else(|| keys.clone())))
            })
            .collect()
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
                let opened = sheaf_pg::repo::meta::open(&place);
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

    /// The spool of this repository: one per location and endpoint, so that a marker never
    /// vouches for another repository.
    ///
    /// # Errors
    /// As [`Context::s3`].
    pub fn spool(&self, wal_dir: &Path, repo: &Place) -> Result<Spool> {
        let base = self.settings.value("spool", self.shared.spool.spool.as_ref().map(|p| p.display().to_string())).map(PathBuf::from);
        let endpoint = self.s3()?.s3_endpoint.unwrap_or_default();
        Ok(Spool::new(base.as_deref(), wal_dir, &format!("{} {endpoint}", repo.display())))
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

/// Keys from a key file, a passphrase file (its first line) or a key command, if one is given;
/// `command_name` names the command in errors (never its output, nor the command itself, which
/// may name where the secret lives).
pub fn load_keys(key_file: Option<PathBuf>, pass_file: Option<PathBuf>, command: Option<String>, command_name: &str) -> Result<Option<Arc<Keys>>> {
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
    }
}
