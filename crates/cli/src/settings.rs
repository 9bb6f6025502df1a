//! Settings in one place: a flag wins over a `SHEAF_*` environment variable, which wins over the
//! config file (`--config`, else `SHEAF_CONFIG`, else the user's `~/.config/sheaf/sheaf.toml` over
//! `/etc/sheaf/sheaf.toml`). So `archive_command = 'sheaf wal-push %p'` stays short, and
//! `sheaf config` says what is in force and where each value came from.
//!
//! Each source is read once, when sheaf starts, into [`Values`]: typed by serde, every value
//! parsed as the flag of the same name is, an unknown key refused with the nearest known one. A
//! command asks for a value through its typed [`Key`] and gets the flag's, else the environment's,
//! else the files', with where it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{Deserializer, Error as _, Visitor};
use serde::Deserialize;
use sheaf_core::manifest::BackupType;
use sheaf_core::{CodecSpec, Error, ErrorKind};

/// A value a setting holds: parsed from text (the environment's, a file's string) or from TOML's
/// own number or boolean, read as its text.
pub trait Value: Sized {
    /// The value `text` gives, or why it gives none (the fix included).
    fn parse(text: &str) -> Result<Self, String>;
}

impl Value for String {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(text.to_string())
    }
}

impl Value for sheaf_s3::StorageClass {
    fn parse(text: &str) -> Result<Self, String> {
        text.parse().map_err(|e: sheaf_core::Error| e.message().to_string())
    }
}

impl Value for PathBuf {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
}

impl Value for bool {
    fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err("give true or false".into()),
        }
    }
}

impl Value for usize {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim().parse().map_err(|_| "give a whole number".into())
    }
}

impl Value for u16 {
    fn parse(text: &str) -> Result<Self, String> {
        text.trim().parse().map_err(|_| "give a port number, 1 to 65535".into())
    }
}

impl Value for CodecSpec {
    fn parse(text: &str) -> Result<Self, String> {
        CodecSpec::parse(text).map_err(|e| e.message().to_string())
    }
}

impl Value for BackupType {
    fn parse(text: &str) -> Result<Self, String> {
        BackupType::parse(text).map_err(|e| e.message().to_string())
    }
}

impl Value for Duration {
    fn parse(text: &str) -> Result<Self, String> {
        sheaf_core::time::parse_duration(text).map_err(|e| e.message().to_string())
    }
}

/// A number of bytes: `65536`, `64KiB`, `16MiB`, as every size flag takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl Value for Size {
    fn parse(text: &str) -> Result<Self, String> {
        sheaf_core::size::parse_size(text).map(Size).map_err(|e| e.message().to_string())
    }
}

/// How much the log says (`--log-level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// And what went wrong without failing the run.
    Warn,
    /// And each run's start and end, and its main steps (the default).
    Info,
    /// And each file, segment and connection.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The subscriber's filter for it.
    pub fn filter(self) -> tracing_subscriber::filter::LevelFilter {
        use tracing_subscriber::filter::LevelFilter;
        match self {
            LogLevel::Error => LevelFilter::ERROR,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Trace => LevelFilter::TRACE,
        }
    }
}

/// How each line is written (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-29T10:15:00.250Z  INFO run=42 sheaf_pg::backup: message key=value`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl Value for LogLevel {
    fn parse(text: &str) -> Result<Self, String> {
        <LogLevel as clap::ValueEnum>::from_str(text, true).map_err(|_| format!("'{text}': give error, warn, info, debug or trace"))
    }
}

impl Value for LogFormat {
    fn parse(text: &str) -> Result<Self, String> {
        <LogFormat as clap::ValueEnum>::from_str(text, true).map_err(|_| format!("'{text}': give text or json"))
    }
}

/// serde's side of [`Value`]: a string, a number or a boolean, parsed as the value's text.
fn value<'de, D: Deserializer<'de>, T: Value>(d: D) -> Result<Option<T>, D::Error> {
    struct Text;
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a single value (a string, a number or true/false)")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    let text = d.deserialize_any(Text)?;
    T::parse(&text).map(Some).map_err(D::Error::custom)
}

/// A setting a command reads: its name (the config file's key; `SHEAF_` and the name upper-cased
/// in the environment) and where [`Values`] holds it.
pub struct Key<T: 'static> {
    /// The config file's key.
    pub name: &'static str,
    get: fn(&Values) -> Option<&T>,
}

// A name and a function: copied whatever `T` is (a derive would ask `T: Copy`).
impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Key<T> {}

/// The settings: [`Values`] (one field per key, typed), [`KEYS`] (each key with what it is for)
/// and one [`Key`] constant per key, from one list.
macro_rules! settings {
    ($( $konst:ident $field:ident : $ty:ty = $name:literal, $what:literal; )*) => {
        /// What a config file, or the `SHEAF_*` environment, sets: typed, `None` where it says
        /// nothing.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Values {
            $(
                #[serde(rename = $name, default, deserialize_with = "value")]
                $field: Option<$ty>,
            )*
        }

        /// Every key the file and the environment may set, with what it is for.
        pub const KEYS: &[(&str, &str)] = &[$(($name, $what),)*];

        $(
            #[doc = concat!("`", $name, "`: ", $what, ".")]
            pub const $konst: Key<$ty> = Key {
                name: $name,
                get: {
                    fn get(v: &Values) -> Option<&$ty> {
                        v.$field.as_ref()
                    }
                    get
                },
            };
        )*
    };
}

settings! {
    REPO repo: String = "repo", "the repository: a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX, sftp://USER@HOST/PATH or sheaf://HOST:PORT/NAME";
    REPO2 repo2: String = "repo2", "a second repository: wal-push archives to every one, wal-fetch and restore fall back to it";
    REPO3 repo3: String = "repo3", "a third repository (as repo2)";
    REPO4 repo4: String = "repo4", "a fourth repository (as repo2)";
    REPO2_ENCRYPTION_KEY_FILE repo2_encryption_key_file: PathBuf = "repo2-encryption-key-file", "repo2's own encryption key file (else the one key given)";
    REPO2_PASSPHRASE_FILE repo2_passphrase_file: PathBuf = "repo2-passphrase-file", "repo2's own passphrase file (else the one key given)";
    REPO3_ENCRYPTION_KEY_FILE repo3_encryption_key_file: PathBuf = "repo3-encryption-key-file", "repo3's own encryption key file";
    REPO3_PASSPHRASE_FILE repo3_passphrase_file: PathBuf = "repo3-passphrase-file", "repo3's own passphrase file";
    REPO4_ENCRYPTION_KEY_FILE repo4_encryption_key_file: PathBuf = "repo4-encryption-key-file", "repo4's own encryption key file";
    REPO4_PASSPHRASE_FILE repo4_passphrase_file: PathBuf = "repo4-passphrase-file", "repo4's own passphrase file";
    REPO2_KEY_COMMAND repo2_key_command: String = "repo2-key-command", "repo2's own key command (as key-command)";
    REPO3_KEY_COMMAND repo3_key_command: String = "repo3-key-command", "repo3's own key command";
    REPO4_KEY_COMMAND repo4_key_command: String = "repo4-key-command", "repo4's own key command";
    PG_URL pg_url: String = "pg-url", "the cluster's connection, when a command is given none: a libpq URL or keyword/value string (libpq's environment, service file and .pgpass apply)";
    PG_HOST pg_host: String = "pg-host", "the cluster's host name or address, instead of pg-url (as pgBackRest's pg1-host... with libpq's meaning)";
    PG_PORT pg_port: u16 = "pg-port", "the cluster's port, instead of pg-url";
    PG_SOCKET_PATH pg_socket_path: PathBuf = "pg-socket-path", "the folder of the cluster's Unix socket, instead of pg-url (as pgBackRest's pg1-socket-path)";
    PG_USER pg_user: String = "pg-user", "the role to connect as, instead of pg-url";
    PG_DATABASE pg_database: String = "pg-database", "the database to connect to, instead of pg-url";
    COMPRESSION compression: CodecSpec = "compression", "codec for backups and WAL (zstd:low by default)";
    STRIPES stripes: usize = "stripes", "stripes per backup into the repository";
    TYPE backup_type: BackupType = "type", "backup type into the repository: full, diff or incr";
    RETENTION_FULL retention_full: usize = "retention-full", "expire: keep the newest N full backups (as --keep-full)";
    RETENTION_WITHIN retention_within: Duration = "retention-within", "expire: keep what recovers to any moment this far back, e.g. 14d (as --keep-within)";
    RETENTION_ARCHIVE retention_archive: usize = "retention-archive", "expire: keep WAL for point-in-time recovery from the newest N fulls on; older ones keep only what makes them consistent (as --keep-archive)";
    REPO2_RETENTION_FULL repo2_retention_full: usize = "repo2-retention-full", "repo2's own retention-full (a repository's own retention keys say its whole policy)";
    REPO2_RETENTION_WITHIN repo2_retention_within: Duration = "repo2-retention-within", "repo2's own retention-within";
    REPO2_RETENTION_ARCHIVE repo2_retention_archive: usize = "repo2-retention-archive", "repo2's own retention-archive";
    REPO3_RETENTION_FULL repo3_retention_full: usize = "repo3-retention-full", "repo3's own retention-full";
    REPO3_RETENTION_WITHIN repo3_retention_within: Duration = "repo3-retention-within", "repo3's own retention-within";
    REPO3_RETENTION_ARCHIVE repo3_retention_archive: usize = "repo3-retention-archive", "repo3's own retention-archive";
    REPO4_RETENTION_FULL repo4_retention_full: usize = "repo4-retention-full", "repo4's own retention-full";
    REPO4_RETENTION_WITHIN repo4_retention_within: Duration = "repo4-retention-within", "repo4's own retention-within";
    REPO4_RETENTION_ARCHIVE repo4_retention_archive: usize = "repo4-retention-archive", "repo4's own retention-archive";
    EXPIRE_AUTO expire_auto: bool = "expire-auto", "backup into a repository: run expire with the retention above after each successful backup (true/false)";
    PARALLEL parallel: usize = "parallel", "wal-push: segments pushed at once (look-ahead); wal-fetch: segments fetched ahead";
    QUEUE_MAX queue_max: Size = "queue-max", "wal-push: most WAL waiting in pg_wal before segments are dropped from the archive";
    SPOOL spool: PathBuf = "spool", "where wal-push and wal-fetch keep their look-ahead";
    ENCRYPTION_KEY_FILE encryption_key_file: PathBuf = "encryption-key-file", "encryption key file: 32 random bytes (see --encryption-key-file)";
    PASSPHRASE_FILE passphrase_file: PathBuf = "passphrase-file", "file holding the encryption passphrase (see --passphrase-file)";
    KEY_COMMAND key_command: String = "key-command", "a program that prints the encryption key or passphrase (see --key-command)";
    AGENT agent: String = "agent", "backup: read the cluster's files through the sheaf agent at HOST:PORT";
    TLS_DIR tls_dir: PathBuf = "tls-dir", "agent, and backup through one: the folder sheaf agent --init-certs made";
    AGENT_LISTEN agent_listen: String = "agent-listen", "agent: ADDR:PORT to serve on";
    AGENT_PGDATA agent_pgdata: PathBuf = "agent-pgdata", "agent: the data directory it serves";
    AGENT_SERVE_REPO agent_serve_repo: String = "agent-serve-repo", "agent on a backup host: the repositories it serves, NAME=PATH[,NAME=PATH...] (see --serve-repo)";
    S3_ENDPOINT s3_endpoint: String = "s3-endpoint", "S3-compatible endpoint URL";
    S3_REGION s3_region: String = "s3-region", "S3 region";
    S3_PROFILE s3_profile: String = "s3-profile", "AWS profile for credentials";
    S3_CA_BUNDLE s3_ca_bundle: PathBuf = "s3-ca-bundle", "PEM certificates to trust for the endpoint";
    S3_ALLOW_HTTP s3_allow_http: bool = "s3-allow-http", "allow a plain-HTTP endpoint (true/false)";
    S3_PATH_STYLE s3_path_style: bool = "s3-path-style", "path-style addressing (true/false)";
    S3_KMS_KEY_ID s3_kms_key_id: String = "s3-kms-key-id", "SSE-KMS: the KMS key S3 encrypts with (see --s3-kms-key-id)";
    S3_ROLE_ARN s3_role_arn: String = "s3-role-arn", "an IAM role assumed on top of the credentials the chain gives (see --s3-role-arn)";
    S3_STORAGE_CLASS s3_storage_class: sheaf_s3::StorageClass = "s3-storage-class", "the S3 storage class of stripes and WAL (see --s3-storage-class)";
    SFTP_KNOWN_HOSTS sftp_known_hosts: PathBuf = "sftp-known-hosts", "the known_hosts file an SFTP server's key must be in (see --sftp-known-hosts)";
    SFTP_KEY_FILE sftp_key_file: PathBuf = "sftp-key-file", "the private key sheaf logs in to SFTP servers with (see --sftp-key-file)";
    SFTP_NO_FSYNC sftp_no_fsync: bool = "sftp-no-fsync", "accept an SFTP server without fsync@openssh.com (true/false)";
    HOOK_PRE_BACKUP hook_pre_backup: String = "hook-pre-backup", "a command run before each backup (see --pre-backup)";
    HOOK_POST_BACKUP hook_post_backup: String = "hook-post-backup", "a command run after each successful backup (see --post-backup)";
    HOOK_PRE_RESTORE hook_pre_restore: String = "hook-pre-restore", "a command run before each restore";
    HOOK_POST_RESTORE hook_post_restore: String = "hook-post-restore", "a command run after each successful restore";
    HOOK_PRE_DRILL hook_pre_drill: String = "hook-pre-drill", "a command run before each drill";
    HOOK_POST_DRILL hook_post_drill: String = "hook-post-drill", "a command run after each drill that passed";
    HOOK_PRE_EXPIRE hook_pre_expire: String = "hook-pre-expire", "a command run before each expire";
    HOOK_POST_EXPIRE hook_post_expire: String = "hook-post-expire", "a command run after each successful expire";
    HOOK_ON_FAILURE hook_on_failure: String = "hook-on-failure", "a command run when a backup, restore, drill or expire fails (SHEAF_ERROR says why)";
    HOOK_TIMEOUT hook_timeout: Duration = "hook-timeout", "how long a hook may run before it is stopped and counted as failed (5m by default)";
    LOG_LEVEL log_level: LogLevel = "log-level", "how much the log says: error, warn, info (the default), debug or trace";
    LOG_FILE log_file: PathBuf = "log-file", "append the log to this file (opened again on SIGHUP, for logrotate)";
    LOG_FORMAT log_format: LogFormat = "log-format", "the log's lines: text or json";
    S3_SSE_CUSTOMER_KEY_FILE s3_sse_customer_key_file: PathBuf = "s3-sse-customer-key-file", "SSE-C: the file holding the key S3 encrypts with (see --s3-sse-customer-key-file)";
}

/// A repository after the first: its location's key, and those of the secret of its own it may
/// have.
pub struct MoreRepo {
    /// Which: 2, 3 or 4.
    pub n: usize,
    pub repo: Key<String>,
    pub key_file: Key<PathBuf>,
    pub pass_file: Key<PathBuf>,
    pub command: Key<String>,
    /// Its own retention: full backups, window, archive.
    pub retention: (Key<usize>, Key<Duration>, Key<usize>),
}

/// `repo2` .. `repo4`.
pub const MORE_REPOS: [MoreRepo; 3] = [
    MoreRepo {
        n: 2,
        repo: REPO2,
        key_file: REPO2_ENCRYPTION_KEY_FILE,
        pass_file: REPO2_PASSPHRASE_FILE,
        command: REPO2_KEY_COMMAND,
        retention: (REPO2_RETENTION_FULL, REPO2_RETENTION_WITHIN, REPO2_RETENTION_ARCHIVE),
    },
    MoreRepo {
        n: 3,
        repo: REPO3,
        key_file: REPO3_ENCRYPTION_KEY_FILE,
        pass_file: REPO3_PASSPHRASE_FILE,
        command: REPO3_KEY_COMMAND,
        retention: (REPO3_RETENTION_FULL, REPO3_RETENTION_WITHIN, REPO3_RETENTION_ARCHIVE),
    },
    MoreRepo {
        n: 4,
        repo: REPO4,
        key_file: REPO4_ENCRYPTION_KEY_FILE,
        pass_file: REPO4_PASSPHRASE_FILE,
        command: REPO4_KEY_COMMAND,
        retention: (REPO4_RETENTION_FULL, REPO4_RETENTION_WITHIN, REPO4_RETENTION_ARCHIVE),
    },
];

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The command line.
    Flag,
    /// An environment variable (its name).
    Env(String),
    /// A config file.
    File(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag => f.write_str("command line"),
            Origin::Env(v) => write!(f, "environment ({v})"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One source of settings, read: a config file, or the environment.
struct Layer {
    /// The file, or `None` for the environment.
    file: Option<PathBuf>,
    values: Values,
    /// What it says, as written, for `sheaf config`.
    text: BTreeMap<String, String>,
}

impl Layer {
    fn origin(&self, key: &str) -> Origin {
        match &self.file {
            Some(p) => Origin::File(p.clone()),
            None => Origin::Env(env_name(key)),
        }
    }
}

/// The settings in force apart from flags: the config files read and the environment, typed.
pub struct Settings {
    /// Lowest first: `/etc`'s file, the user's (or the one named), the environment.
    layers: Vec<Layer>,
    /// The file named by --config or SHEAF_CONFIG, if one was.
    pub explicit: Option<PathBuf>,
}

fn env_name(key: &str) -> String {
    format!("SHEAF_{}", key.to_ascii_uppercase().replace('-', "_"))
}

impl Settings {
    /// Read the config files, the one named (`--config`, else `SHEAF_CONFIG`), which must exist,
    /// or else `/etc/sheaf/sheaf.toml` and the user's where they exist; and the `SHEAF_*`
    /// variables of the keys.
    ///
    /// # Errors
    /// A named file that is missing, a file that is not TOML, a key sheaf does not know (a typo
    /// would otherwise be ignored silently), a value that does not parse, each naming where.
    pub fn load(flag: Option<&Path>) -> Result<Settings, Error> {
        Settings::load_with(flag, |k| std::env::var_os(k))
    }

    /// [`Settings::load`] with an environment other than the process's (tests).
    fn load_with(flag: Option<&Path>, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Settings, Error> {
        let named = flag.map(Path::to_path_buf).or_else(|| env("SHEAF_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from));
        let mut layers = Vec::new();
        match &named {
            Some(p) => layers.push(read(p)?),
            None => {
                let mut candidates = vec![PathBuf::from("/etc/sheaf/sheaf.toml")];
                let user = env("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")));
                if let Some(u) = user {
                    candidates.push(u.join("sheaf/sheaf.toml"));
                }
                for p in candidates {
                    if p.is_file() {
                        layers.push(read(&p)?);
                    }
                }
            }
        }
        let mut table = toml::Table::new();
        for (key, _) in KEYS {
            let var = env_name(key);
            if let Some(v) = env(&var).filter(|v| !v.is_empty()) {
                let v = v.into_string().map_err(|_| Error::invalid(format!("{var} is not UTF-8 text: give it as text")))?;
                table.insert(key.to_string(), toml::Value::String(v));
            }
        }
        layers.push(layer(table, None)?);
        Ok(Settings { layers, explicit: named })
    }

    /// The value of `key`: the flag's if given, else the environment's, else the last file's;
    /// with where it came from.
    pub fn get<T: Clone>(&self, key: &Key<T>, flag: Option<T>) -> Option<(T, Origin)> {
        if let Some(v) = flag {
            return Some((v, Origin::Flag));
        }
        self.layers.iter().rev().find_map(|l| (key.get)(&l.values).map(|v| (v.clone(), l.origin(key.name))))
    }

    /// The value of `key` alone ([`Settings::get`]).
    pub fn value<T: Clone>(&self, key: &Key<T>, flag: Option<T>) -> Option<T> {
        self.get(key, flag).map(|(v, _)| v)
    }

    /// A switch: on when the flag is given, else as the environment or a file says, else off.
    pub fn switch(&self, key: &Key<bool>, flag: bool) -> bool {
        flag || self.value(key, None).unwrap_or(false)
    }

    /// What the source in force says of the key named `name`, as written there, and where.
    pub fn shown(&self, name: &str) -> Option<(String, Origin)> {
        self.layers.iter().rev().find_map(|l| l.text.get(name).map(|v| (v.clone(), l.origin(name))))
    }

    /// The files read.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.layers.iter().filter_map(|l| l.file.as_deref())
    }
}

fn read(path: &Path) -> Result<Layer, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound { ": it does not exist (check --config or SHEAF_CONFIG)" } else { "" };
        Error::io(ErrorKind::InvalidInput, format!("cannot read config file {}{hint}", path.display()), e)
    })?;
    let table: toml::Table = text.parse().map_err(|e| Error::invalid(format!("config file {} is not valid TOML: {e}", path.display())))?;
    layer(table, Some(path))
}

/// A source's table read into [`Values`]; `file` is `None` for the environment. Each key is
/// checked alone first, so that an error names it and where it is set.
fn layer(table: toml::Table, file: Option<&Path>) -> Result<Layer, Error> {
    let place = |k: &str| match file {
        Some(p) => format!("config file {}: '{k}'", p.display()),
        None => env_name(k),
    };
    let mut text = BTreeMap::new();
    for (k, v) in &table {
        if !KEYS.iter().any(|(known, _)| known == k) {
            return Err(Error::invalid(unknown(k, &place(k))));
        }
        if v.is_table() || v.is_array() {
            return Err(Error::invalid(format!("{} takes a single value", place(k))));
        }
        let shown = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let one: toml::Table = [(k.clone(), v.clone())].into_iter().collect();
        Values::deserialize(toml::Value::Table(one)).map_err(|e| Error::invalid(format!("{} = '{shown}': {}", place(k), e.message().trim_end())))?;
        text.insert(k.clone(), shown);
    }
    let values = Values::deserialize(toml::Value::Table(table)).map_err(|e| Error::invalid(format!("{}: {}", place("settings"), e.message().trim_end())))?;
    Ok(Layer { file: file.map(Path::to_path_buf), values, text })
}

/// Why `key` is refused: a secret (which sheaf never takes in its settings), else a key sheaf does
/// not know, with the nearest it does.
fn unknown(key: &str, place: &str) -> String {
    let secretish = ["secret", "password", "passphrase", "access-key", "token"].iter().any(|s| key.contains(s));
    if secretish {
        return format!(
            "{place}: sheaf takes no secrets in its config (a passphrase goes in passphrase-file or SHEAF_PASSPHRASE); S3 credentials come from the AWS chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ~/.aws/credentials (s3-profile picks a profile), a web identity, container credentials or the instance profile; s3-role-arn assumes a role on top"
        );
    }
    let nearest = KEYS.iter().map(|(k, _)| (strsim::damerau_levenshtein(key, k), *k)).min().filter(|(d, k)| *d <= 2.max(k.len() / 3));
    match nearest {
        Some((_, k)) => format!("{place} is not a setting sheaf knows: did you mean '{k}'? (sheaf config lists them all)"),
        None => format!("{place} is not a setting sheaf knows; sheaf config lists them all"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file: &Path, env: &[(&str, &str)]) -> Result<Settings, Error> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load_with(Some(file), move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.into()))
    }

    #[test]
    fn values_are_typed_and_the_flag_wins_over_the_environment_over_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.toml");
        std::fs::write(&p, "repo = '/srv/repo'\nstripes = 2\nexpire-auto = true\ntype = 'incr'\nretention-within = '14d'\nqueue-max = '1GiB'\n").unwrap();
        let s = load(&p, &[("SHEAF_STRIPES", "3"), ("SHEAF_S3_ALLOW_HTTP", "yes")]).unwrap();
        assert_eq!(s.get(&REPO, None), Some(("/srv/repo".to_string(), Origin::File(p.clone()))));
        assert_eq!(s.get(&STRIPES, None), Some((3, Origin::Env("SHEAF_STRIPES".into()))));
        assert_eq!(s.get(&STRIPES, Some(5)), Some((5, Origin::Flag)));
        assert_eq!(s.value(&TYPE, None), Some(BackupType::Incr));
        assert_eq!(s.value(&RETENTION_WITHIN, None), Some(Duration::from_secs(14 * 86400)));
        assert_eq!(s.value(&QUEUE_MAX, None), Some(Size(1 << 30)));
        assert!(s.switch(&EXPIRE_AUTO, false) && s.switch(&S3_ALLOW_HTTP, false) && !s.switch(&S3_PATH_STYLE, false));
        assert_eq!(s.value(&PG_URL, None), None);
        // As written, for sheaf config.
        assert_eq!(s.shown("stripes"), Some(("3".into(), Origin::Env("SHEAF_STRIPES".into()))));
        assert_eq!(s.shown("retention-within"), Some(("14d".into(), Origin::File(p.clone()))));
    }

    #[test]
    fn a_key_sheaf_does_not_know_is_refused_with_the_nearest_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.toml");
        let refused = |text: &str| {
            std::fs::write(&p, text).unwrap();
            load(&p, &[]).err().expect("refused").to_string()
        };
        assert!(refused("rep = '/srv/repo'\n").contains("'rep' is not a setting sheaf knows: did you mean 'repo'?"));
        assert!(refused("retention-ful = 2\n").contains("did you mean 'retention-full'?"));
        assert!(refused("s3-endpont = 'x'\n").contains("did you mean 's3-endpoint'?"));
        assert!(!refused("colour = 'blue'\n").contains("did you mean"));
        assert!(refused("s3-secret-access-key = 'x'\n").contains("no secrets"));
        assert!(refused("repo = ['a', 'b']\n").contains("takes a single value"));
        assert!(refused("stripes = 'two'\n").contains("'stripes' = 'two': give a whole number"));
        assert!(refused("expire-auto = 'sometimes'\n").contains("give true or false"));
        assert!(refused("compression = 'zip'\n").contains("'compression' = 'zip'"));
        assert!(refused("type = 'weekly'\n").contains("full, diff"));
        assert!(load(&d.path().join("none.toml"), &[]).err().unwrap().to_string().contains("does not exist"));
    }

    #[test]
    fn an_environment_value_that_does_not_parse_names_its_variable() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.toml");
        std::fs::write(&p, "").unwrap();
        let e = load(&p, &[("SHEAF_PARALLEL", "many")]).err().expect("refused").to_string();
        assert!(e.contains("SHEAF_PARALLEL = 'many': give a whole number"), "{e}");
        let e = load(&p, &[("SHEAF_PG_PORT", "99999")]).err().expect("refused").to_string();
        assert!(e.contains("SHEAF_PG_PORT"), "{e}");
    }

    #[test]
    fn every_key_has_a_field_and_a_purpose() {
        // A table with every key deserialises (no key lacks its field) and names each once.
        let mut names: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len());
        assert!(KEYS.iter().all(|(_, what)| !what.is_empty()));
        let all: toml::Table = KEYS.iter().map(|(k, _)| (k.to_string(), toml::Value::String(sample(k).into()))).collect();
        let s = layer(all, None).unwrap();
        assert_eq!(s.text.len(), KEYS.len());
        for m in &MORE_REPOS {
            for k in [m.repo.name, m.key_file.name, m.pass_file.name, m.command.name, m.retention.0.name, m.retention.1.name, m.retention.2.name] {
                assert!(k.starts_with(&format!("repo{}", m.n)) && KEYS.iter().any(|(n, _)| *n == k), "{k}");
            }
        }
    }

    fn sample(key: &str) -> &'static str {
        match key {
            "pg-port" | "stripes" | "parallel" => "2",
            k if k.ends_with("retention-full") || k.ends_with("retention-archive") => "2",
            "compression" => "lz4",
            "type" => "full",
            k if k.ends_with("retention-within") => "1d",
            "hook-timeout" => "1d",
            "log-level" => "debug",
            "log-format" => "json",
            "s3-storage-class" => "standard_ia",
            "queue-max" => "1GiB",
            "expire-auto" | "s3-allow-http" | "s3-path-style" | "sftp-no-fsync" => "true",
            _ => "x",
        }
    }
}
