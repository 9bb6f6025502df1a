//! A MariaDB server of sheaf's own on a private socket: over a restored data directory for its
//! crash recovery (the restore's prepare, a drill), or made afresh with `mariadb-install-db` (the
//! tests' throwaway servers). It runs as the data directory's owner; as root, a new one's owner
//! is the `mysql` user Debian's package makes. Dropped, it is shut down.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use sheaf_core::{Error, ErrorKind, Result};

/// How long a server may take to start (crash recovery of a long backup's redo log included) or
/// stop.
const WAIT: Duration = Duration::from_secs(3600);

fn err(m: impl Into<String>) -> Error {
    Error::new(ErrorKind::Source, m)
}

/// A program of MariaDB's: `SHEAF_<NAME>` (upper case, `-` as `_`), else the PATH, else
/// `/usr/sbin` and `/usr/bin` (Debian puts mariadbd in /usr/sbin, off a user's PATH).
pub fn program(name: &str) -> Result<PathBuf> {
    let env = format!("SHEAF_{}", name.to_ascii_uppercase().replace('-', "_"));
    sheaf_core::host::find_program(&env, name, name)
        .or_else(|| ["/usr/sbin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.is_file()))
        .ok_or_else(|| err(format!("{name} is not installed (looked at ${env}, the PATH, /usr/sbin and /usr/bin): install Debian's mariadb-server, or name it with {env}")))
}

/// The ids the server of `dir` runs as: its owner, or (for a folder of root's, as root) the
/// `mysql` user.
fn owner(dir: &Path) -> Result<(u32, u32)> {
    let m = std::fs::metadata(dir).map_err(|e| Error::io(ErrorKind::Io, format!("cannot look at {}", dir.display()), e))?;
    if m.uid() != 0 || !sheaf_core::host::is_root() {
        return Ok((m.uid(), m.gid()));
    }
    mysql_user()
}

/// The `mysql` user's ids (Debian's mariadb-server makes it).
///
/// # Errors
/// No such user.
pub fn mysql_user() -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id").args([flag, "mysql"]).output().map_err(|e| err(format!("id: {e}")))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| err("there is no mysql user: install Debian's mariadb-server, which makes it"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// `program` run as `ids` (through setpriv when sheaf is root and they are another user's).
fn as_user(program: &Path, ids: (u32, u32)) -> Command {
    if sheaf_core::host::is_root() && ids.0 != 0 {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", ids.0)).arg(format!("--regid={}", ids.1)).arg("--clear-groups").arg("--").arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A scratch server: its data directory, socket and process.
pub struct Scratch {
    /// The data directory.
    pub data: PathBuf,
    /// Where its socket, pid file and error log are.
    pub run: PathBuf,
    ids: (u32, u32),
    settings: Vec<String>,
    child: Option<Child>,
    /// Its process's id (0 when it is not running), for [`Scratch::stop_with`]'s hook.
    pid: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Kills it when the command is asked to stop ([`Scratch::stop_with`]).
    on_stop: Option<sheaf_core::stop::OnAsk>,
    /// The folder of a server made afresh, removed with it.
    _base: Option<tempfile::TempDir>,
}

impl Scratch {
    /// A new server: `mariadb-install-db` into a fresh temporary folder, started with `settings`
    /// (`--innodb-log-file-size=64M` and the like).
    ///
    /// # Errors
    /// MariaDB is not installed, or the server does not start (its log's end quoted).
    pub fn create(settings: &[&str]) -> Result<Scratch> {
        let base = tempfile::Builder::new().prefix("sheaf-mariadb.").tempdir().map_err(|e| Error::io(ErrorKind::Io, "cannot make a folder for a scratch server", e))?;
        let ids = if sheaf_core::host::is_root() { mysql_user()? } else { sheaf_core::host::effective_ids() };
        std::os::unix::fs::chown(base.path(), Some(ids.0), Some(ids.1)).map_err(|e| Error::io(ErrorKind::Io, "cannot give the scratch folder to the server's user", e))?;
        let data = base.path().join("data");
        let out = as_user(&program("mariadb-install-db")?, ids)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .output()
            .map_err(|e| err(format!("mariadb-install-db: {e}")))?;
        if !out.status.success() {
            return Err(err(format!("mariadb-install-db failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))));
        }
        let mut s = Scratch {
            run: base.path().to_path_buf(),
            data,
            ids,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            pid: Default::default(),
            on_stop: None,
            _base: Some(base),
        };
        s.start()?;
        Ok(s)
    }

    /// A server over the data directory `data` (not started), its socket and log in `run`.
    ///
    /// # Errors
    /// The folder cannot be looked at.
    pub fn over(data: &Path, run: &Path, settings: &[&str]) -> Result<Scratch> {
        let ids = owner(data)?;
        Ok(Scratch {
            data: data.to_path_buf(),
            run: run.to_path_buf(),
            ids,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            pid: Default::default(),
            on_stop: None,
            _base: None,
        })
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.run.join("mysqld.sock")
    }

    /// Its error log.
    pub fn log(&self) -> PathBuf {
        self.run.join("mysqld.err")
    }

    /// The URL sheaf backs it up by: root over the socket.
    pub fn url(&self) -> String {
        format!("mariadb://root@localhost/?socket={}", self.socket().display())
    }

    /// The lines of its error log that say `[ERROR]`.
    pub fn errors(&self) -> Vec<String> {
        std::fs::read_to_string(self.log()).unwrap_or_default().lines().filter(|l| l.contains("[ERROR]")).map(str::to_string).collect()
    }

    /// The end of its error log, for messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Start it and wait until it answers (crash recovery done).
    ///
    /// # Errors
    /// It exits or does not answer within five minutes (its log's end quoted).
    pub fn start(&mut self) -> Result<()> {
        let mut cmd = as_user(&program("mariadbd")?, self.ids);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--log-error={}", self.log().display()))
            .arg(format!("--pid-file={}", self.run.join("mysqld.pid").display()))
            .arg("--skip-networking")
            .args(&self.settings);
        if sheaf_core::host::is_root() && self.ids.0 == 0 {
            cmd.arg("--user=root");
        }
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| err(format!("cannot start mariadbd: {e}")))?;
        self.pid.store(child.id(), std::sync::atomic::Ordering::Release);
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(|e| err(format!("mariadbd: {e}")))? {
                return Err(err(format!("mariadbd on {} exited ({status}) before it answered; the end of {}:\n{}", self.data.display(), self.log().display(), self.log_tail())));
            }
            // Answering, even with a refusal (the restored server's root may have a password):
            // recovery is done.
            if matches!(self.connect(), Ok(_) | Err(mysql::Error::MySqlError(_))) {
                break;
            }
            if t0.elapsed() > WAIT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!(
                    "mariadbd on {} did not answer within {} s; the end of {}:\n{}",
                    self.data.display(),
                    WAIT.as_secs(),
                    self.log().display(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
        Ok(())
    }

    fn connect(&self) -> std::result::Result<mysql::Conn, mysql::Error> {
        connect_at(&self.socket())
    }

    /// Run `sql`: see [`sql_at`].
    ///
    /// # Errors
    /// It cannot connect, or the statement fails.
    pub fn sql(&self, sql: &str) -> Result<String> {
        sql_at(&self.socket(), sql)
    }

    /// Shut it down cleanly (SIGTERM) and wait for it.
    ///
    /// # Errors
    /// It does not stop within five minutes.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        self.pid.store(0, std::sync::atomic::Ordering::Release);
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(|e| err(format!("mariadbd: {e}")))? {
                if status.success() {
                    return Ok(());
                }
                return Err(err(format!("mariadbd on {} did not shut down cleanly ({status}); the end of {}:\n{}", self.data.display(), self.log().display(), self.log_tail())));
            }
            if t0.elapsed() > WAIT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!("mariadbd on {} did not stop within {} s", self.data.display(), WAIT.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill it at once when `stop` is asked (Ctrl-C, SIGTERM), for as long as it lives: what
    /// waits on it then fails at once, and the command unwinds (dropping it).
    pub fn stop_with(&mut self, stop: &sheaf_core::stop::Stop) {
        let pid = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(self.child.as_ref().map_or(0, Child::id)));
        self.pid = pid.clone();
        self.on_stop = Some(stop.on_ask(move || {
            let p = pid.load(std::sync::atomic::Ordering::Acquire);
            if let Some(pid) = rustix::process::Pid::from_raw(p as i32).filter(|_| p != 0) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }));
    }

    /// Kill it at once (SIGKILL): a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.pid.store(0, std::sync::atomic::Ordering::Release);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn connect_at(socket: &Path) -> std::result::Result<mysql::Conn, mysql::Error> {
    let opts = mysql::OptsBuilder::new().user(Some("root")).socket(Some(socket.display().to_string())).prefer_socket(true);
    mysql::Conn::new(opts)
}

/// Run `sql` as root on the server at `socket`: the first column of each row, tab-joined rows on
/// lines (NULL as `NULL`).
///
/// # Errors
/// It cannot connect, or the statement fails.
pub fn sql_at(socket: &Path, sql: &str) -> Result<String> {
    let mut c = connect_at(socket).map_err(|e| err(format!("cannot connect to the server at {}: {e}", socket.display())))?;
    let rows: Vec<mysql::Row> = c.query(sql).map_err(|e| err(format!("{sql}: {e}")))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (0..r.len())
                .map(|i| match r.as_ref(i) {
                    Some(mysql::Value::NULL) | None => "NULL".to_string(),
                    Some(mysql::Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                    Some(v) => v.as_sql(true).trim_matches('\'').to_string(),
                })
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n"))
}
