//! Settings in one place: a flag wins over a `SHEAF_*` environment variable, which wins over the
//! config file (`--config`, else `SHEAF_CONFIG`, else the user's `~/.config/sheaf/sheaf.toml` over
//! `/etc/sheaf/sheaf.toml`). So `archive_command = 'sheaf wal-push %p'` stays short, and
//! `sheaf config` says what is in force and where each value came from.

use std::path::{Path, PathBuf};

use sheaf_core::{Error, ErrorKind};

/// Every key the file and the environment may set, with what it is for.
pub const KEYS: &[(&str, &str)] = &[
    ("repo", "the repository: a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX or gs://BUCKET/PREFIX"),
    ("repo2", "a second repository: wal-push archives to every one, wal-fetch and restore fall back to it"),
    ("repo3", "a third repository (as repo2)"),
    ("repo4", "a fourth repository (as repo2)"),
    ("repo2-encryption-key-file", "repo2's own encryption key file (else the one key given)"),
    ("repo2-passphrase-file", "repo2's own passphrase file (else the one key given)"),
    ("repo3-encryption-key-file", "repo3's own encryption key file"),
    ("repo3-passphrase-file", "repo3's own passphrase file"),
    ("repo4-encryption-key-file", "repo4's own encryption key file"),
    ("repo4-passphrase-file", "repo4's own passphrase file"),
    ("repo2-key-command", "repo2's own key command (as key-command)"),
    ("repo3-key-command", "repo3's own key command"),
    ("repo4-key-command", "repo4's own key command"),
    ("pg-url", "the cluster's connection, when a command is given none: a libpq URL or keyword/value string (libpq's environment, service file and .pgpass apply)"),
    ("pg-host", "the cluster's host name or address, instead of pg-url (as pgBackRest's pg1-host... with libpq's meaning)"),
    ("pg-port", "the cluster's port, instead of pg-url"),
    ("pg-socket-path", "the folder of the cluster's Unix socket, instead of pg-url (as pgBackRest's pg1-socket-path)"),
    ("pg-user", "the role to connect as, instead of pg-url"),
    ("pg-database", "the database to connect to, instead of pg-url"),
    ("compression", "codec for backups and WAL (zstd:low by default)"),
    ("stripes", "stripes per backup into the repository"),
    ("type", "backup type into the repository: full, diff or incr"),
    ("retention-full", "expire: keep the newest N full backups (as --keep-full)"),
    ("retention-within", "expire: keep what recovers to any moment this far back, e.g. 14d (as --keep-within)"),
    ("expire-auto", "backup into a repository: run expire with the retention above after each successful backup (true/false)"),
    ("parallel", "wal-push: segments pushed at once (look-ahead); wal-fetch: segments fetched ahead"),
    ("queue-max", "wal-push: most WAL waiting in pg_wal before segments are dropped from the archive"),
    ("spool", "where wal-push and wal-fetch keep their look-ahead"),
    ("encryption-key-file", "encryption key file: 32 random bytes (see --encryption-key-file)"),
    ("passphrase-file", "file holding the encryption passphrase (see --passphrase-file)"),
    ("key-command", "a program that prints the encryption key or passphrase (see --key-command)"),
    ("agent", "backup: read the cluster's files through the sheaf agent at HOST:PORT"),
    ("tls-dir", "agent, and backup through one: the folder sheaf agent --init-certs made"),
    ("agent-listen", "agent: ADDR:PORT to serve on"),
    ("agent-pgdata", "agent: the data directory it serves"),
    ("s3-endpoint", "S3-compatible endpoint URL"),
    ("s3-region", "S3 region"),
    ("s3-profile", "AWS profile for credentials"),
    ("s3-ca-bundle", "PEM certificates to trust for the endpoint"),
    ("s3-allow-http", "allow a plain-HTTP endpoint (true/false)"),
    ("s3-path-style", "path-style addressing (true/false)"),
    ("s3-kms-key-id", "SSE-KMS: the KMS key S3 encrypts with (see --s3-kms-key-id)"),
    ("s3-sse-customer-key-file", "SSE-C: the file holding the key S3 encrypts with (see --s3-sse-customer-key-file)"),
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

/// The config files read and what they hold.
pub struct Settings {
    files: Vec<(PathBuf, toml::Table)>,
    /// The file named by --config or SHEAF_CONFIG, if one was.
    pub explicit: Option<PathBuf>,
}

fn env_name(key: &str) -> String {
    format!("SHEAF_{}", key.to_ascii_uppercase().replace('-', "_"))
}

impl Settings {
    /// Read the config files: the one named (`--config`, else `SHEAF_CONFIG`), which must exist; or
    /// else `/etc/sheaf/sheaf.toml` and the user's, where they exist.
    ///
    /// # Errors
    /// A named file that is missing, a file that is not TOML, a key sheaf does not know (a typo
    /// would otherwise be ignored silently), a value of the wrong type.
    pub fn load(flag: Option<&Path>) -> Result<Settings, Error> {
        let named = flag.map(Path::to_path_buf).or_else(|| std::env::var_os("SHEAF_CONFIG").map(PathBuf::from));
        let mut files = Vec::new();
        match &named {
            Some(p) => files.push((p.clone(), read(p)?)),
            None => {
                let mut candidates = vec![PathBuf::from("/etc/sheaf/sheaf.toml")];
                let user = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
                if let Some(u) = user {
                    candidates.push(u.join("sheaf/sheaf.toml"));
                }
                for p in candidates {
                    if p.is_file() {
                        files.push((p.clone(), read(&p)?));
                    }
                }
            }
        }
        Ok(Settings { files, explicit: named })
    }

    /// The value of `key`: the flag's if given, else the environment's, else the last file's.
    pub fn get(&self, key: &str, flag: Option<String>) -> Option<(String, Origin)> {
        if let Some(v) = flag {
            return Some((v, Origin::Flag));
        }
        let var = env_name(key);
        if let Ok(v) = std::env::var(&var) {
            if !v.is_empty() {
                return Some((v, Origin::Env(var)));
            }
        }
        self.files.iter().rev().find_map(|(p, t)| t.get(key).map(|v| (v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()), Origin::File(p.clone()))))
    }

    /// The value of `key` alone.
    pub fn value(&self, key: &str, flag: Option<String>) -> Option<String> {
        self.get(key, flag).map(|(v, _)| v)
    }

    /// A switch: the flag if set, else `true`/`false` from the environment or a file.
    ///
    /// # Errors
    /// A value other than true or false.
    pub fn switch(&self, key: &str, flag: bool) -> Result<bool, Error> {
        if flag {
            return Ok(true);
        }
        match self.get(key, None) {
            None => Ok(false),
            Some((v, origin)) => match v.as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(Error::invalid(format!("{key} = '{v}' in {origin}: give true or false"))),
            },
        }
    }

    /// The files read.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }
}

fn read(path: &Path) -> Result<toml::Table, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound { ": it does not exist (check --config or SHEAF_CONFIG)" } else { "" };
        Error::io(ErrorKind::InvalidInput, format!("cannot read config file {}{hint}", path.display()), e)
    })?;
    let table: toml::Table = text.parse().map_err(|e| Error::invalid(format!("config file {} is not valid TOML: {e}", path.display())))?;
    for (k, v) in &table {
        if !KEYS.iter().any(|(known, _)| known == k) {
            let secretish = ["secret", "password", "passphrase", "access-key", "token"].iter().any(|s| k.contains(s));
            return Err(Error::invalid(if secretish {
                format!(
                    "config file {}: '{k}': sheaf takes no secrets in its config (a passphrase goes in passphrase-file or SHEAF_PASSPHRASE); S3 credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or ~/.aws/credentials (s3-profile picks a profile)",
                    path.display()
                )
            } else {
                format!("config file {}: unknown setting '{k}'; known: {}", path.display(), KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "))
            }));
        }
        if v.is_table() || v.is_array() {
            return Err(Error::invalid(format!("config file {}: '{k}' takes a single value", path.display())));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_checked_for_typos_and_secrets() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.toml");
        std::fs::write(&p, "repo = '/srv/repo'\nstripes = 2\n").unwrap();
        let s = Settings::load(Some(&p)).unwrap();
        assert_eq!(s.get("repo", None).unwrap(), ("/srv/repo".to_string(), Origin::File(p.clone())));
        assert_eq!(s.value("stripes", None).as_deref(), Some("2"));
        assert_eq!(s.get("repo", Some("x".into())).unwrap().1, Origin::Flag);
        std::fs::write(&p, "rep = '/srv/repo'\n").unwrap();
        assert!(Settings::load(Some(&p)).err().unwrap().to_string().contains("unknown setting 'rep'"));
        std::fs::write(&p, "s3-secret-access-key = 'x'\n").unwrap();
        assert!(Settings::load(Some(&p)).err().unwrap().to_string().contains("no secrets"));
        assert!(Settings::load(Some(&d.path().join("none.toml"))).err().unwrap().to_string().contains("does not exist"));
    }
}
