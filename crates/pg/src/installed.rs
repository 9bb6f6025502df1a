//! The PostgreSQL installed on this host: each major version's programs (Debian's, RHEL's,
//! `pg_config`'s, the ones scripts/install-deps.sh installs, or a folder given), and the user its
//! servers run as. Restore reads a major's own parameter list here; drills, demos and tests start
//! their scratch servers from here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
