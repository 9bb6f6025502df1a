//! Throwaway PostgreSQL clusters for `sheaf demo`, `sheaf bench` and the tests: initdb into a temp
//! dir with data checksums, a free port, a socket directory of its own, run as `postgres` when sheaf
//! runs as root (initdb refuses root), stopped and removed when dropped.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sheaf_core::stop::{OnAsk, Stop};
use sheaf_core::{Error, ErrorKind, Result};

fn err(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Io, what)
}

pub use crate::installed::{as_server_user, bin_dir, chosen_bin_dir, ensure_installed, server_bin_for, server_major, server_owner, SERVER_VAR};

/// Create `path` (and parents) owned by the server's user, mode 0700.
///
/// # Errors
/// I/O errors.
pub fn server_dir(path: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::io(ErrorKind::Io, format!("cannot prepare {}", path.display()), e);
    std::fs::create_dir_all(path).map_err(io)?;
    let (uid, gid) = server_owner()?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

fn free_port() -> Result<u16> {
    sheaf_core::host::free_port().map_err(|e| err(format!("no free port on 127.0.0.1: {e}")))
}

/// A running scratch cluster.
pub struct ScratchCluster {
    /// The temp dir holding it (removed on drop for clusters this made).
    pub base: tempfile::TempDir,
    /// Data directory.
    pub data: PathBuf,
    /// Socket directory.
    pub sock: PathBuf,
    /// Port.
    pub port: u16,
    /// Server bin directory.
    pub bin: PathBuf,
    /// The role tools and URLs connect as.
    pub user: String,
    /// While it runs: the hook that stops it when its command is asked to stop
    /// ([`ScratchCluster::stop_with`]).
    on_stop: Option<OnAsk>,
    /// How long `start` waits for the server to accept connections, in seconds.
    start_timeout: u64,
    running: bool,
}

impl ScratchCluster {
    /// initdb (data checksums on) under a new temp dir in `parent` (or the system's), append
    /// `settings` to postgresql.conf, start. `initdb_args` go to initdb; `--no-data-checksums`
    /// among them leaves page checksums off on every major (initdb has the option from 18 on).
    ///
    /// # Errors
    /// PostgreSQL missing, initdb or start failing (with the server log).
    pub fn create(parent: Option<&Path>, initdb_args: &[&str], settings: &[&str]) -> Result<ScratchCluster> {
        Self::create_on(ensure_installed()?, parent, initdb_args, settings)
    }

    /// [`ScratchCluster::create`] with the server in bin directory `bin` (another major than the
    /// one scratch clusters use: a pg_upgrade's new cluster).
    ///
    /// # Errors
    /// As [`ScratchCluster::create`].
    pub fn create_on(bin: PathBuf, parent: Option<&Path>, initdb_args: &[&str], settings: &[&str]) -> Result<ScratchCluster> {
        let base = match parent {
            Some(p) => tempfile::Builder::new().prefix("sheaf-pg.").tempdir_in(p),
            None => tempfile::Builder::new().prefix("sheaf-pg.").tempdir(),
        }
        .map_err(|e| err(format!("cannot make a temp dir: {e}")))?;
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).map_err(|e| err(e.to_string()))?;
        let (data, sock) = (base.path().join("data"), base.path().join("sock"));
        server_dir(&data)?;
        server_dir(&sock)?;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o755)).map_err(|e| err(e.to_string()))?;
        let no_sums = initdb_args.contains(&"--no-data-checksums");
        let sums = match (no_sums, server_major(&bin)) {
            (false, _) => Some("--data-checksums"),
            (true, Some(m)) if m >= 18 => Some("--no-data-checksums"),
            (true, _) => None,
        };
        let out = as_server_user(bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(sums)
            .args(["-A", "trust", "-U", "postgres"])
            .args(initdb_args.iter().filter(|a| **a != "--no-data-checksums"))
            .output()
            .map_err(|e| err(format!("initdb: {e}")))?;
        if !out.status.success() {
            return Err(err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        let port = free_port()?;
        let mut conf =
            format!("\nport = {port}\nunix_socket_directories = '{}'\nlisten_addresses = '127.0.0.1'\nfsync = off\nshared_buffers = 64MB\nmax_wal_size = 1GB\n", sock.display());
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        append(&data.join("postgresql.conf"), &conf)?;
        let mut c = ScratchCluster { base, data, sock, port, bin, user: "postgres".into(), on_stop: None, start_timeout: 120, running: false };
        c.start()?;
        Ok(c)
    }

    /// A streaming hot standby of `primary`, made by `pg_basebackup -R -X stream` into a temp dir
    /// of its own, on a new port with its own socket directory, `settings` appended, each
    /// tablespace at `tablespaces`' new location (old location, new location), and started.
    ///
    /// # Errors
    /// pg_basebackup or start-up failing.
    pub fn standby_of(primary: &ScratchCluster, tablespaces: &[(PathBuf, PathBuf)], settings: &[&str]) -> Result<ScratchCluster> {
        Self::standby_in(None, primary, tablespaces, settings)
    }

    /// [`ScratchCluster::standby_of`], its temp dir in `parent` (else the system's).
    ///
    /// # Errors
    /// pg_basebackup or start-up failing.
    pub fn standby_in(parent: Option<&Path>, primary: &ScratchCluster, tablespaces: &[(PathBuf, PathBuf)], settings: &[&str]) -> Result<ScratchCluster> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("sheaf-standby.");
        let base = match parent {
            Some(p) => builder.tempdir_in(p),
            None => builder.tempdir(),
        }
        .map_err(|e| err(format!("cannot make a temp dir: {e}")))?;
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).map_err(|e| err(e.to_string()))?;
        let (data, sock) = (base.path().join("data"), base.path().join("sock"));
        server_dir(&data)?;
        server_dir(&sock)?;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o755)).map_err(|e| err(e.to_string()))?;
        let mut cmd = primary.tool("pg_basebackup");
        cmd.arg("-D").arg(&data).args(["-R", "-X", "stream", "-c", "fast"]);
        for (old, new) in tablespaces {
            server_dir(new)?;
            cmd.arg(format!("--tablespace-mapping={}={}", old.display(), new.display()));
        }
        let out = cmd.output().map_err(|e| err(format!("pg_basebackup: {e}")))?;
        if !out.status.success() {
            return Err(err(format!("pg_basebackup -R failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        // A newer pg_basebackup (18's beside the npm servers of 16) writes connection options the
        // server's own libpq refuses: sslnegotiation came with 17.
        if server_major(&primary.bin).is_some_and(|m| m < 17) {
            let auto = data.join("postgresql.auto.conf");
            let mut text = std::fs::read_to_string(&auto).map_err(|e| err(format!("{}: {e}", auto.display())))?;
            while let Some(at) = text.find("sslnegotiation=") {
                let rest = &text[at..];
                let end = rest.find([' ', '\'', '\n']).unwrap_or(rest.len());
                let end = if rest[end..].starts_with(' ') { end + 1 } else { end };
                text.replace_range(at..at + end, "");
            }
            std::fs::write(&auto, text).map_err(|e| err(format!("{}: {e}", auto.display())))?;
        }
        let port = free_port()?;
        let mut conf = format!("\nport = {port}\nunix_socket_directories = '{}'\n", sock.display());
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        append(&data.join("postgresql.conf"), &conf)?;
        let mut c = ScratchCluster { base, data, sock, port, bin: primary.bin.clone(), user: "postgres".into(), on_stop: None, start_timeout: 120, running: false };
        c.start()?;
        Ok(c)
    }

    /// Promote a standby (`pg_ctl promote`, waiting until it is a primary).
    ///
    /// # Errors
    /// pg_ctl's message.
    pub fn promote(&self) -> Result<()> {
        let out = as_server_user(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-w", "promote"]).output().map_err(|e| err(format!("pg_ctl: {e}")))?;
        if !out.status.success() {
            return Err(err(format!("pg_ctl promote: {}", String::from_utf8_lossy(&out.stderr))));
        }
        Ok(())
    }

    /// Start a cluster over an existing data directory (a restore) on a new port, sockets in `sock`.
    ///
    /// # Errors
    /// Start-up failing (with the server log).
    pub fn over(data: &Path, sock: &Path) -> Result<ScratchCluster> {
        let bin = ensure_installed()?;
        let base = tempfile::tempdir().map_err(|e| err(e.to_string()))?;
        let port = free_port()?;
        append(&data.join("postgresql.conf"), &format!("\nport = {port}\nunix_socket_directories = '{}'\nlisten_addresses = ''\n", sock.display()))?;
        let mut c =
            ScratchCluster { base, data: data.to_path_buf(), sock: sock.to_path_buf(), port, bin, user: "postgres".into(), on_stop: None, start_timeout: 120, running: false };
        c.start()?;
        Ok(c)
    }

    /// A server over a restored data directory with the binaries in `bin`, connected to as
    /// `user`: on a new port, its socket in `sock`, no TCP listener, and `settings` appended to
    /// postgresql.auto.conf (which wins over postgresql.conf). Stopped when `stop` is asked, from
    /// before it starts (a recovery's start can be long); started, waiting up to `timeout` for
    /// connections.
    ///
    /// # Errors
    /// Start-up failing (with the server log's tail).
    pub fn over_restore(bin: PathBuf, data: &Path, sock: &Path, user: &str, settings: &[String], stop: &Stop, timeout: std::time::Duration) -> Result<ScratchCluster> {
        let base = tempfile::tempdir().map_err(|e| err(e.to_string()))?;
        let port = free_port()?;
        let mut lines = format!("port = {port}\nunix_socket_directories = '{}'\nlisten_addresses = ''\n", sock.display());
        for s in settings {
            lines.push_str(s);
            lines.push('\n');
        }
        crate::cluster::conf::append_settings(data, "a scratch server over this restore", &lines)?;
        let mut c = ScratchCluster {
            base,
            data: data.to_path_buf(),
            sock: sock.to_path_buf(),
            port,
            bin,
            user: user.to_string(),
            on_stop: None,
            start_timeout: timeout.as_secs().max(1),
            running: false,
        };
        c.stop_with(stop);
        c.start()?;
        Ok(c)
    }

    /// Whether its postmaster still runs (a server that shut itself down, at a recovery target
    /// with `shutdown` or on a FATAL error, does not).
    pub fn alive(&self) -> bool {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).unwrap_or_default();
        text.lines().next().and_then(|l| l.trim().parse::<u32>().ok()).is_some_and(sheaf_core::host::process_alive)
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(n).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// The server log.
    pub fn log(&self) -> PathBuf {
        self.sock.join(format!("server-{}.log", self.port))
    }

    /// Start and wait until it accepts connections.
    ///
    /// # Errors
    /// With the server log's tail.
    pub fn start(&mut self) -> Result<()> {
        let out = as_server_user(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-t", &self.start_timeout.to_string(), "start"])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| err(format!("pg_ctl: {e}")))?;
        if !out.status.success() {
            // pg_ctl gave up waiting, or the server exited: either way, not left running.
            let _ = as_server_user(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-m", "immediate", "-w", "stop"]).output();
            return Err(err(format!("the server in {} did not start: {}{}", self.data.display(), String::from_utf8_lossy(&out.stderr), self.log_tail(8))));
        }
        self.running = true;
        Ok(())
    }

    /// Stop (fast shutdown).
    pub fn stop(&mut self) {
        let _ = as_server_user(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-m", "fast", "-w", "stop"]).output();
        self.running = false;
        self.on_stop = None;
    }

    /// What stops it at once (immediate shutdown), for a hook run when its command is asked to
    /// stop: a query or tool waiting on it then fails at once.
    pub fn stopper(&self) -> impl FnOnce() + Send + 'static {
        let (bin, data) = (self.bin.clone(), self.data.clone());
        move || {
            let _ = as_server_user(bin.join("pg_ctl")).arg("-D").arg(&data).args(["-m", "immediate", "-w", "stop"]).output();
        }
    }

    /// Stop it when `stop` is asked, for as long as it runs (its command then unwinds, and drops
    /// it).
    pub fn stop_with(&mut self, stop: &Stop) {
        self.on_stop = Some(stop.on_ask(self.stopper()));
    }

    /// A URL for database `db` over the socket.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{}@localhost:{}/{db}?host={}", self.user, self.port, self.sock.display())
    }

    /// psql's raw output for `sql`.
    pub fn psql(&self, db: &str, sql: &str) -> Output {
        self.tool("psql").args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql]).output().unwrap_or_else(|e| Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(1 << 8),
            stdout: vec![],
            stderr: e.to_string().into_bytes(),
        })
    }

    /// Run `sql`; trimmed, unaligned output.
    ///
    /// # Errors
    /// psql's error message.
    pub fn query(&self, db: &str, sql: &str) -> Result<String> {
        let out = self.psql(db, sql);
        if !out.status.success() {
            return Err(err(format!("psql: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A client tool (psql, pgbench, pg_amcheck...) pointed at this server.
    pub fn tool(&self, name: &str) -> Command {
        let mut c = as_server_user(self.bin.join(name));
        c.arg("-h").arg(&self.sock).args(["-p", &self.port.to_string(), "-U", &self.user]);
        c
    }
}

fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| Error::io(ErrorKind::Io, format!("cannot write {}", path.display()), e))
}

impl Drop for ScratchCluster {
    fn drop(&mut self) {
        if self.running {
            let _ = as_server_user(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-m", "immediate", "-w", "stop"]).output();
        }
    }
}
