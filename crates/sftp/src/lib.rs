//! sheaf-sftp: stripes and repositories on a host reached over SSH's file transfer protocol
//! (`sftp://USER@HOST[:PORT]/PATH`), as pgBackRest's SFTP repositories: a backup host that holds
//! the repository and offers nothing but `sshd`.
//!
//! - The server is who it says: its host key is checked against a known_hosts file
//!   (`--sftp-known-hosts FILE`, else `~/.ssh/known_hosts`); an unknown host or another key is
//!   refused, naming the fingerprint (SHA256, as `ssh` prints it) and how to add it.
//! - sheaf is who it says: a key file (`--sftp-key-file FILE`) or the keys an ssh-agent holds
//!   (`SSH_AUTH_SOCK`); never a password.
//! - What is written is durable before it is published: each file is written under a temporary
//!   name, fsynced by the server (OpenSSH's `fsync@openssh.com`; a server without it is refused
//!   unless `--sftp-no-fsync`), and renamed into place. SFTP version 3's rename does not replace an
//!   existing file, so publishing under a taken name fails instead of overwriting; a replacement
//!   (records that are rewritten) removes the old file first.
//!
//! Built on libssh2 (the `ssh2` crate): a blocking client that fits the [`Store`] trait's calls.
//! Connections are kept in a small pool per host, one per stripe being written or read at a time.

mod store;
mod target;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sheaf_core::{Error, Result, Schemes, Store};

pub use store::SftpStore;
pub use target::Target;

/// What the command line and settings say about SFTP.
#[derive(Clone, Debug, Default)]
pub struct SftpOptions {
    /// The known_hosts file the server's key must be in; `None`: `~/.ssh/known_hosts`.
    pub known_hosts: Option<PathBuf>,
    /// The private key to authenticate with; `None`: the ssh-agent's keys.
    pub key_file: Option<PathBuf>,
    /// Publish without `fsync@openssh.com` (a server without it).
    pub no_fsync: bool,
}

/// Reads one environment variable (the process's, or a test's).
type Env = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves `sftp://USER@HOST[:PORT]/PATH`: one store (and connection pool) per user, host and
/// port. PATH is absolute on the server.
pub struct SftpSchemes {
    options: SftpOptions,
    env: Env,
    stores: Mutex<HashMap<String, Arc<SftpStore>>>,
}

impl SftpSchemes {
    /// Stores configured by `options` and the process's environment (`HOME`, `USER`,
    /// `SSH_AUTH_SOCK`).
    pub fn new(options: SftpOptions) -> Self {
        Self::with_env(options, |k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// As [`SftpSchemes::new`] with another environment (tests).
    pub fn with_env(options: SftpOptions, env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        SftpSchemes { options, env: Box::new(env), stores: Mutex::new(HashMap::new()) }
    }

    /// The known_hosts file in force.
    fn known_hosts(&self) -> Result<PathBuf> {
        match &self.options.known_hosts {
            Some(p) => Ok(p.clone()),
            None => (self.env)("HOME")
                .map(|h| PathBuf::from(h).join(".ssh/known_hosts"))
                .ok_or_else(|| Error::invalid("no known_hosts file to check the server's key against: HOME is not set; pass --sftp-known-hosts FILE")),
        }
    }
}

impl Schemes for SftpSchemes {
    fn resolve(&self, scheme: &str, authority: &str, key: &str) -> Result<(Arc<dyn Store>, String)> {
        if scheme != "sftp" {
            return Err(Error::invalid(format!("{scheme}:// is not SFTP")));
        }
        let target = Target::parse(authority, (self.env)("USER").or_else(|| (self.env)("LOGNAME")).as_deref())?;
        let id = format!("{}@{}:{}", target.user, target.host, target.port);
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = stores.get(&id) {
            return Ok((s.clone(), format!("/{key}")));
        }
        let settings = store::Settings {
            target,
            known_hosts: self.known_hosts()?,
            key_file: self.options.key_file.clone(),
            agent: (self.env)("SSH_AUTH_SOCK").is_some(),
            fsync: !self.options.no_fsync,
            timeout: Duration::from_secs(60),
        };
        let s = Arc::new(SftpStore::connect(settings)?);
        stores.insert(id, s.clone());
        Ok((s, format!("/{key}")))
    }
}
