//! What every module of the suite needs: the `sheaf` binary with a history catalog of the suite's
//! own (never the user's), and shorthands for its output.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub const SHEAF: &str = env!("CARGO_BIN_EXE_sheaf");

/// One history catalog for the whole suite, in a folder anyone may write (some tests run sheaf as
/// another user).
pub fn catalog() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let d = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
        d
    });
    Box::leak(d.path().join("catalog.db").into_boxed_path())
}

/// The catalog of the commands the PostgreSQL suite runs as the cluster's user, beside
/// [`catalog`] (a catalog made by one user is not another's to write).
pub fn server_catalog() -> &'static Path {
    Box::leak(catalog().with_file_name("catalog-server.db").into_boxed_path())
}

/// `sheaf`, recording into `catalog`.
pub fn sheaf_with_catalog(catalog: &Path) -> Command {
    let mut c = Command::new(SHEAF);
    c.env("SHEAF_CATALOG", catalog);
    c
}

/// `sheaf`, recording into the suite's [`catalog`].
pub fn sheaf() -> Command {
    sheaf_with_catalog(catalog())
}

/// Run `cmd` to the end with nothing on its standard input.
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run sheaf")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `o` failed with exit `code`, and its message holds every one of `needles`.
pub fn assert_fails(o: &Output, code: i32, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit code; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

/// Wait until `cond` holds, looking every 20 ms; fail naming `what` after `limit`. Where a test
/// needs a moment to have come (a server's statistic, a file written, a process mid-way), it
/// waits for that, never for a guess at how long it takes.
pub fn wait_for(what: &str, limit: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`wait_for`] while `child` runs: it must still be running once `cond` holds (what the test
/// does next needs it mid-way), within two minutes.
pub fn wait_while_running(child: &mut std::process::Child, what: &str, mut cond: impl FnMut() -> bool) {
    wait_for(what, std::time::Duration::from_secs(120), || {
        assert!(child.try_wait().unwrap().is_none(), "the command ended before {what}: make it slower");
        cond()
    });
}

/// The names under `dir`, recursively, relative to it.
pub fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
            out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

/// Whether a file under `dir` (recursively) whose name ends with `suffix` holds bytes: a
/// stripe being written (`.partial`) has begun.
pub fn has_bytes(dir: &Path, suffix: &str) -> bool {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                todo.push(e.path());
            } else if e.file_name().to_string_lossy().ends_with(suffix) && meta.len() > 0 {
                return true;
            }
        }
    }
    false
}
