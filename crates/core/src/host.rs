//! Facts about this machine and this process that the pipelines and their callers ask for: cores,
//! our user and group ids, whether another process is alive, the CPU and memory we have used, and
//! the free space of a filesystem. One small room, so that no pipeline stage reaches for the
//! operating system on its own; the calls go through rustix where it has them.

use std::path::Path;

/// Cores available to this process (its CPU affinity, cgroup quota aside), at least 1.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Whether we run with an effective user id of 0 (owners can be restored, and the like).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Our effective user and group ids: what a file we create is owned by.
pub fn effective_ids() -> (u32, u32) {
    (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw())
}

/// Our real user and group ids.
pub fn real_ids() -> (u32, u32) {
    (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw())
}

/// The name of user `uid` as /etc/passwd gives it, else `uid N`: for messages about who owns a
/// file (no NSS lookup: a name from a directory service shows as its number).
pub fn user_name(uid: u32) -> String {
    let found = std::fs::read_to_string("/etc/passwd").ok().and_then(|t| {
        t.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
        })
    });
    found.unwrap_or_else(|| format!("uid {uid}"))
}

/// This machine's name (the kernel's), else `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".into())
}

/// `user@host` of this process, for records of who did something.
pub fn who() -> String {
    format!("{}@{}", user_name(effective_ids().0), host_name())
}

/// The owner (user id) of `path`, or of the nearest folder above it that exists.
pub fn owner_of(path: &Path) -> Option<(u32, std::path::PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    path.ancestors().find_map(|p| std::fs::symlink_metadata(p).ok().map(|m| (m.uid(), p.to_path_buf())))
}

/// A port on 127.0.0.1 that was free a moment ago (for a throwaway server: a scratch cluster, a
/// test's object store).
///
/// # Errors
/// When no port can be bound at all.
pub fn free_port() -> std::io::Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port())
}

/// The first file named `name` in a folder of the PATH.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// Where a helper program is, looked for as sheaf's scripts install them: the file the
/// environment variable `env` names, else `~/.cache/sheaf/CACHED` (where `scripts/install-deps.sh`
/// puts what no package provides), else `name` on the PATH.
pub fn find_program(env: &str, cached: &str, name: &str) -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/sheaf").join(cached));
    home.filter(|p| p.is_file()).or_else(|| on_path(name))
}

/// Whether process `pid` runs (signal 0 reaches it, or it exists but belongs to someone else),
/// a zombie not counted: a process killed whose parent died too stays one where nothing reaps
/// orphans (a container whose first process is not an init), and it does nothing any more.
pub fn process_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    let exists = match rustix::process::test_kill_process(p) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    };
    // /proc/PID/stat: "PID (COMM) STATE ...", COMM may hold spaces and parentheses.
    let zombie = || std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z'))).unwrap_or(false);
    exists && !zombie()
}

/// This process's CPU seconds so far (user, system) and its peak resident set in bytes.
pub fn process_usage() -> (f64, f64, u64) {
    // rustix has no getrusage. SAFETY: getrusage only fills the zeroed struct it is given, and
    // RUSAGE_SELF cannot fail.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    // ru_maxrss also counts the memory of the process that forked us, up to our exec (Linux keeps
    // the old address space's high-water mark): a sheaf started by a large parent would report
    // the parent's size. VmHWM is the peak of our own address space.
    let peak = resident(std::process::id(), true).unwrap_or(u.ru_maxrss.max(0) as u64 * 1024);
    (t(u.ru_utime), t(u.ru_stime), peak)
}

/// Process `pid`'s resident set in bytes from `/proc/PID/status`: now (`VmRSS`), or with `peak`
/// its high-water mark since exec (`VmHWM`); `None` when it cannot be read (not Linux, or gone).
pub fn resident(pid: u32, peak: bool) -> Option<u64> {
    let key = if peak { "VmHWM:" } else { "VmRSS:" };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes free to this user on the filesystem of `dir`, and its device; `None` if it cannot say.
pub fn free_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let st = rustix::fs::statvfs(dir).ok()?;
    Some((dev, st.f_bavail.saturating_mul(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_are_sane() {
        assert!(available_cores() >= 1);
        assert!(process_alive(std::process::id()));
        // Past the kernel's largest pid: nobody.
        assert!(!process_alive(4_194_305));
        assert!(!process_alive(u32::MAX));
        // A child that has exited and is not waited for yet is a zombie: not running.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while process_alive(pid) {
            assert!(std::time::Instant::now() < deadline, "an exited child counts as running");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap()).is_ok(), "still a zombie");
        child.wait().unwrap();
        assert_eq!(is_root(), effective_ids().0 == 0);
        let (user, system, peak) = process_usage();
        assert!(user >= 0.0 && system >= 0.0 && peak > 0);
        let d = tempfile::tempdir().unwrap();
        let (dev, _) = free_space(d.path()).expect("a temporary folder's filesystem answers");
        assert_eq!(dev, std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(d.path()).unwrap()));
        assert!(free_space(&d.path().join("not-there")).is_none());
    }
}
