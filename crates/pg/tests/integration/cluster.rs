//! A throwaway PostgreSQL cluster: initdb in a temp dir (data checksums on), a free port, its own
//! socket directory; run as `postgres` when the tests run as root; stopped when dropped.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).filter(|p| p.join("initdb").exists()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.pop().expect("PostgreSQL server binaries not found under /usr/lib/postgresql: run `make test`, which installs Debian's postgresql")
}

pub fn is_root() -> bool {
    // SAFETY: trivial libc call.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid the server runs as.
pub fn pg_owner() -> (u32, u32) {
    if is_root() {
        let out = Command::new("id").args(["-u", "postgres"]).output().expect("id");
        let uid = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a postgres user (Debian's package creates it)");
        let out = Command::new("id").args(["-g", "postgres"]).output().expect("id");
        (uid, String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
    } else {
        // SAFETY: trivial libc calls.
        unsafe { (libc::geteuid(), libc::getegid()) }
    }
}

/// A command run as the server's user.
pub fn as_pg(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A folder the server's user may use.
pub fn pg_dir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    let (uid, gid) = pg_owner();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Cluster {
    pub base: tempfile::TempDir,
    pub data: PathBuf,
    pub sock: PathBuf,
    pub port: u16,
    pub bin: PathBuf,
    running: bool,
}

impl Cluster {
    /// initdb with data checksums and `settings` appended to postgresql.conf, then start.
    pub fn new(initdb_args: &[&str], settings: &[&str]) -> Cluster {
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (data, sock) = (base.path().join("data"), base.path().join("sock"));
        pg_dir(&data);
        pg_dir(&sock);
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = bin_dir();
        let out = as_pg(bin.join("initdb"))
            .args(["-D"])
            .arg(&data)
            .args(["--data-checksums", "-A", "trust", "-U", "postgres"])
            .args(initdb_args)
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let mut conf = format!(
            "\nport = {port}\nunix_socket_directories = '{}'\nlisten_addresses = '127.0.0.1'\nfsync = off\nshared_buffers = 32MB\n",
            sock.display()
        );
        for s in settings {
            conf.push_str(s);
            conf.push('\n');
        }
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).unwrap();
        text.push_str(&conf);
        std::fs::write(&conf_path, text).unwrap();
        let mut c = Cluster { base, data, sock, port, bin, running: false };
        c.start();
        c
    }

    /// A cluster over an existing data directory (a restore), on a new port.
    pub fn over(data: &Path, sock: &Path) -> Cluster {
        let base = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).unwrap();
        text.push_str(&format!("\nport = {port}\nunix_socket_directories = '{}'\nlisten_addresses = ''\n", sock.display()));
        std::fs::write(&conf_path, text).unwrap();
        let mut c = Cluster { base, data: data.to_path_buf(), sock: sock.to_path_buf(), port, bin: bin_dir(), running: false };
        c.start();
        c
    }

    pub fn log(&self) -> PathBuf {
        self.sock.join(format!("server-{}.log", self.port))
    }

    pub fn start(&mut self) {
        let out = as_pg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.log()).unwrap_or_default()
        );
        self.running = true;
    }

    pub fn stop(&mut self) {
        let _ = as_pg(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-m", "fast", "-w", "stop"]).output();
        self.running = false;
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@localhost:{}/{db}?host={}", self.port, self.sock.display())
    }

    /// Run SQL with psql; return trimmed, unaligned output. Panics on failure.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = self.psql(db, sql);
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn psql(&self, db: &str, sql: &str) -> Output {
        as_pg(self.bin.join("psql"))
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db, "-c", sql])
            .output()
            .unwrap()
    }

    pub fn tool(&self, name: &str) -> Command {
        let mut c = as_pg(self.bin.join(name));
        c.arg("-h").arg(&self.sock).args(["-p", &self.port.to_string(), "-U", "postgres"]);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let _ = as_pg(self.bin.join("pg_ctl")).arg("-D").arg(&self.data).args(["-m", "immediate", "-w", "stop"]).output();
        }
    }
}

pub fn sheaf() -> Command {
    // The CLI binary is built by the workspace's test run; find it beside this test binary.
    let mut p = std::env::current_exe().unwrap();
    p.pop();
    if p.ends_with("deps") {
        p.pop();
    }
    let bin = p.join("sheaf");
    assert!(bin.exists(), "{} not built: run the workspace's tests (cargo test --workspace)", bin.display());
    Command::new(bin)
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
