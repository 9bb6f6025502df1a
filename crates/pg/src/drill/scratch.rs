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

/// The environment variable that picks the server scratch clusters run on: a major version
/// (`SHEAF_PG=18`) or a bin directory (`SHEAF_PG=/usr/lib/postgresql/15/bin`).
pub const SERVER_VAR: &str = "SHEAF_PG";

/// Where scripts/install-deps.sh installs servers that Debian does not package, as
/// `postgresql-N/bin`: a folder the `postgres` user can read when run as root, else the user's cache.
fn sheaf_installs() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/opt/sheaf")];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".cache/sheaf"));
    }
    roots
}

/// The places a major version's bin directory may be, in the order they are tried.
fn candidates(major: u32) -> Vec<PathBuf> {
    let mut c = vec![PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"))];
    c.extend(sheaf_installs().into_iter().map(|r| r.join(format!("postgresql-{major}/bin"))));
    c
}

/// The bin directory scratch clusters use: the one [`SERVER_VAR`] names, else the newest of
/// Debian's servers (/usr/lib/postgresql/N/bin).
///
/// # Errors
/// [`SERVER_VAR`] naming a version or folder with no server in it, saying where it looked.
pub fn chosen_bin_dir() -> Result<Option<PathBuf>> {
    let has_server = |p: &Path| p.join("initdb").exists() && p.join("postgres").exists();
    match std::env::var(SERVER_VAR) {
        Ok(v) if !v.trim().is_empty() => {
            let v = v.trim();
            if let Ok(major) = v.parse::<u32>() {
                let tried = candidates(major);
                return match tried.iter().find(|p| has_server(p)) {
                    Some(p) => Ok(Some(p.clone())),
                    None => Err(err(format!(
                        "{SERVER_VAR}={v}: no PostgreSQL {major} server in {}: install it (scripts/install-deps.sh installs 15 and 18) or point {SERVER_VAR} at a bin directory",
                        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                    ))),
                };
            }
            let p = PathBuf::from(v);
            if has_server(&p) {
                Ok(Some(p))
            } else {
                Err(err(format!("{SERVER_VAR}={v}: no initdb and postgres in that folder: give a major version (18) or a server's bin directory")))
            }
        }
        _ => {
            let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
                .filter(|(_, p)| has_server(p))
                .collect();
            dirs.sort();
            Ok(dirs.pop().map(|(_, p)| p))
        }
    }
}

/// The major version of the server in bin directory `bin` (`postgres --version`), if it runs.
pub fn server_major(bin: &Path) -> Option<u32> {
    let out = Command::new(bin.join("postgres")).arg("--version").output().ok()?;
    // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(2)?.split(['.', 'b', 'r']).next()?.parse().ok()
}

/// The bin directory of a PostgreSQL `major` server: `given` (which must hold that version), else
/// the first of `pg_config --bindir`, Debian's /usr/lib/postgresql/N/bin, RHEL's /usr/pgsql-N/bin
/// and the folders scripts/install-deps.sh installs into whose `postgres --version` is `major`.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming the version and every place looked at, when none holds it.
pub fn server_bin_for(major: u32, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(g) = given {
        return match server_major(g) {
            Some(m) if m == major => Ok(g.to_path_buf()),
            Some(m) => Err(Error::invalid(format!("--pg-bin {}: that is PostgreSQL {m}, the backup is of PostgreSQL {major}: give a {major} server's bin directory", g.display()))),
            None => Err(Error::invalid(format!("--pg-bin {}: no postgres that runs in that folder: give a PostgreSQL {major} server's bin directory", g.display()))),
        };
    }
    let mut tried: Vec<PathBuf> = Vec::new();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !dir.is_empty() {
            tried.push(PathBuf::from(dir));
        }
    }
    tried.push(PathBuf::from(format!("/usr/lib/postgresql/{major}/bin")));
    tried.push(PathBuf::from(format!("/usr/pgsql-{major}/bin")));
    tried.extend(candidates(major).into_iter().skip(1));
    match tried.iter().find(|p| server_major(p) == Some(major)) {
        Some(p) => Ok(p.clone()),
        None => Err(Error::invalid(format!(
            "the backup is of PostgreSQL {major}, and no PostgreSQL {major} server was found (looked in {}): install it (Debian: apt-get install postgresql-{major}) or give its bin directory with --pg-bin",
            tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The bin directory scratch clusters use, when there is one ([`chosen_bin_dir`] without its error).
pub fn bin_dir() -> Option<PathBuf> {
    chosen_bin_dir().ok().flatten()
}

/// The server's bin directory, installing Debian's PostgreSQL first when missing and we are root.
///
/// # Errors
/// When it is missing and cannot be installed, with the command that would install it; when
/// [`SERVER_VAR`] names a server that is not there.
pub fn ensure_installed() -> Result<PathBuf> {
    if let Some(b) = chosen_bin_dir()? {
        return Ok(b);
    }
    if !sheaf_core::host::is_root() {
        return Err(err("PostgreSQL is not installed: run `sudo apt-get install postgresql` (or make test / make demo as root)"));
    }
    let ok = |c: &mut Command| c.stdout(Stdio::null()).stderr(Stdio::null()).status().map(|s| s.success()).unwrap_or(false);
    let installed = ok(Command::new("apt-get").arg("update").arg("-qq"))
        && ok(Command::new("apt-get").args(["install", "-y", "-qq", "postgresql", "postgresql-client"]).env("DEBIAN_FRONTEND", "noninteractive"));
    match (installed, bin_dir()) {
        (true, Some(b)) => Ok(b),
        _ => Err(err("could not install PostgreSQL with apt-get install postgresql: install it by hand")),
    }
}

/// The uid and gid a scratch server runs as.
///
/// # Errors
/// As root, when there is no `postgres` user.
pub fn server_owner() -> Result<(u32, u32)> {
    if !sheaf_core::host::is_root() {
        return Ok(sheaf_core::host::effective_ids());
    }
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output().map_err(|e| err(format!("id: {e}")))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| err("no postgres user: install Debian's postgresql package, which creates it"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// A command run as the server's user.
pub fn as_server_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if sheaf_core::host::is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

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
        let bin = ensure_installed()?;
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
