//! Measuring one operation: a child process's wall time, its own CPU (user + system of the process
//! tree, from `wait4`), its peak RSS, and the whole host's CPU over the same interval (from
//! `/proc/stat`), which also counts work done for it by others, such as a PostgreSQL server
//! compressing for pg_basebackup.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sheaf_core::stop::Stop;
use sheaf_core::{Error, ErrorKind, Result};

/// What one operation cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Wall seconds, including the final `sync` (every operation is timed until durable).
    pub seconds: f64,
    /// User CPU seconds of the process and the children it waited for.
    pub user_seconds: f64,
    /// System CPU seconds, likewise.
    pub system_seconds: f64,
    /// Peak memory, bytes: the largest sum of resident sets over the process and its descendants,
    /// sampled every 10 ms (the process's own high-water mark if larger); 0 if it ended first.
    pub peak_rss_bytes: u64,
    /// The host's busy share of all cores over the operation, percent.
    pub host_cpu_pct: f64,
}

impl Cost {
    /// (user + system) / (wall × cores), percent: the operation's own CPU.
    pub fn cpu_pct(&self, cores: usize) -> f64 {
        crate::stats::cpu_percent(self.user_seconds, self.system_seconds, self.seconds, cores)
    }
}

/// What a finished child left.
#[derive(Debug)]
pub struct Finished {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Its cost.
    pub cost: Cost,
}

impl Finished {
    /// Whether it exited with 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// An error naming `what` with the child's exit status and the tail of its stderr.
    pub fn failure(&self, what: &str) -> Error {
        let tail: Vec<&str> = self.stderr.lines().rev().take(6).collect();
        let status = self.code.map_or_else(|| "was killed by a signal".to_string(), |c| format!("exited with {c}"));
        let kind = match self.code {
            Some(2) => ErrorKind::InvalidInput,
            Some(6) => ErrorKind::NoSpace,
            _ => ErrorKind::Io,
        };
        Error::new(kind, format!("{what} {status}: {}", tail.into_iter().rev().collect::<Vec<_>>().join("\n")))
    }
}

/// The CPUs this process may run on (its affinity set), which `cores` counts too.
fn allowed_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        let Ok(set) = rustix::thread::sched_getaffinity(None) else { return Vec::new() };
        (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    })
}

/// Busy and total jiffies of the CPUs this process may use, from `/proc/stat`.
fn host_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cpus = allowed_cpus();
    let (mut busy, mut total) = (0, 0);
    for line in text.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")) {
        let mut f = line.split_whitespace();
        let Some(id) = f.next().and_then(|n| n[3..].parse::<usize>().ok()) else { continue };
        if !cpus.is_empty() && !cpus.contains(&id) {
            continue;
        }
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 5 {
            continue;
        }
        // user nice system idle iowait irq softirq steal (guest time is already in user).
        let t: u64 = v.iter().take(8).sum();
        busy += t - v[3] - v[4];
        total += t;
    }
    (total > 0).then_some((busy, total))
}

/// `pid` and its descendants.
fn tree(pid: u32, out: &mut Vec<u32>) {
    out.push(pid);
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        tree(c, out);
    }
}

/// One sample of a process tree's memory: the sum of its processes' resident sets (pgBackRest's
/// workers, a pipeline's stages), or the root's own high-water mark if that is larger.
fn tree_rss(pid: u32) -> u64 {
    let mut pids = Vec::new();
    tree(pid, &mut pids);
    let rss = |p: u32, peak: bool| sheaf_core::host::resident(p, peak).unwrap_or(0);
    let sum: u64 = pids.iter().map(|&p| rss(p, false)).sum();
    sum.max(rss(pid, true))
}

/// Flush every dirty page of every filesystem, so that the next operation starts with nothing
/// dirty and one that does not flush (a tar extract) pays for its own writes.
pub fn sync_all() {
    rustix::fs::sync();
}

/// Drop the page cache, dentries and inodes (needs root): a cold-cache run.
///
/// # Errors
/// When `/proc/sys/vm/drop_caches` cannot be written, with what to do.
pub fn drop_caches() -> Result<()> {
    sync_all();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("--drop-caches: cannot write /proc/sys/vm/drop_caches ({e}): run as root on a host (not a container) that allows it, or leave the cache warm"),
        )
    })
}

/// The child being measured while it is not reaped, shared with the hook that stops it: cleared
/// before it is reaped, so that the hook never signals a process id the system gave to another.
type Unreaped = std::sync::Arc<std::sync::Mutex<Option<u32>>>;

/// Send `signal` to the child, when it is not reaped yet; whether it was not.
fn signal(child: &Unreaped, signal: rustix::process::Signal) -> bool {
    let pid = *child.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = pid.and_then(|p| i32::try_from(p).ok()).and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(p, signal);
    }
    pid.is_some()
}

/// What stops a measured child when the bench is asked to stop: SIGTERM, then SIGKILL after 5 s if
/// it is still there.
fn stopper(child: &Unreaped) -> impl FnOnce() + Send + 'static {
    let child = child.clone();
    move || {
        if signal(&child, rustix::process::Signal::TERM) {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_secs(5));
                signal(&child, rustix::process::Signal::KILL);
            });
        }
    }
}

/// Run `cmd` to the end, with stdout and stderr captured, then `sync`; measure all of it. Asked,
/// `stop` ends it (SIGTERM, then SIGKILL), and no child starts once it was.
///
/// # Errors
/// When it cannot be started; [`ErrorKind::Cancelled`] once `stop` was asked.
pub fn run(mut cmd: Command, stop: &Stop) -> Result<Finished> {
    let shown = format!("{cmd:?}");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    stop.check()?;
    let host0 = host_jiffies();
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| Error::new(ErrorKind::Io, format!("cannot start {shown}: {e}")))?;
    let unreaped: Unreaped = std::sync::Arc::new(std::sync::Mutex::new(Some(child.id())));
    let _hook = stop.on_ask(stopper(&unreaped));
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    // Both pipes drain at once, so a child that fills one while we read the other cannot stall.
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    // ru_maxrss would also count our own size (Linux keeps the forking process's high-water mark
    // until exec): sample the child's and its descendants' own address spaces instead.
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(tree_rss(pid));
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            peak
        })
    };
    let mut stdout = Vec::new();
    let _ = out.read_to_end(&mut stdout);
    let stderr = err_reader.join().unwrap_or_default();
    // The pipes close at exit: one last sample can still find a child that closed them early.
    let last = tree_rss(pid);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let sampled = sampler.join().unwrap_or(0).max(last);
    // Wait for it to exit without reaping it, and forget it, before it is reaped: from then on the
    // hook cannot signal its id.
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        while let Err(rustix::io::Errno::INTR) =
            rustix::process::waitid(rustix::process::WaitId::Pid(p), rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT)
        {}
    }
    unreaped.lock().unwrap_or_else(|p| p.into_inner()).take();
    // std's Child has no rusage: reap it ourselves with wait4. Its rusage includes the children it
    // waited for (a shell's pipeline, pgBackRest's worker processes).
    let pid = pid as libc::pid_t;
    let mut status = 0;
    // SAFETY: all zeros is a valid rusage (plain integers).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // (rustix has no wait4 with rusage.)
        // SAFETY: wait4 only writes the status and rusage it is given, both live locals; the pid
        // is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    if r != pid {
        return Err(Error::new(ErrorKind::Io, format!("wait4 on {shown}: {}", std::io::Error::last_os_error())));
    }
    sync_all();
    let seconds = t0.elapsed().as_secs_f64();
    let host_cpu_pct = match (host0, host_jiffies()) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => 100.0 * (b1 - b0) as f64 / (t1 - t0) as f64,
        _ => 0.0,
    };
    let tv = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    let code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    Ok(Finished {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        cost: Cost { seconds, user_seconds: tv(ru.ru_utime), system_seconds: tv(ru.ru_stime), peak_rss_bytes: sampled, host_cpu_pct },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child_and_its_children() {
        // A shell whose children burn CPU and hold 64 MiB: both must be counted.
        let mut c = Command::new("sh");
        c.args(["-c", "head -c 67108864 /dev/zero | sha256sum >/dev/null; dd if=/dev/zero of=/dev/null bs=64M count=16 2>/dev/null; echo out; echo err >&2; exit 3"]);
        let f = run(c, &Stop::new()).unwrap();
        assert_eq!(f.code, Some(3));
        assert!(!f.ok());
        assert_eq!(f.stdout, "out\n");
        assert_eq!(f.stderr, "err\n");
        assert!(f.cost.seconds > 0.0);
        assert!(f.cost.user_seconds + f.cost.system_seconds > 0.0, "{:?}", f.cost);
        assert!(f.cost.peak_rss_bytes >= 60 << 20, "peak RSS of a child that held 64 MiB: {:?}", f.cost);
        assert!(f.cost.peak_rss_bytes < 200 << 20, "not the test process's size: {:?}", f.cost);
        assert!((0.0..=100.0).contains(&f.cost.host_cpu_pct));
        let e = f.failure("the test shell");
        assert!(e.to_string().contains("exited with 3: err"), "{e}");
    }

    #[test]
    fn a_child_is_not_charged_for_its_parent() {
        // This process grows by 256 MiB; a small child must not report it (ru_maxrss would).
        let big = vec![1u8; 256 << 20];
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 0.2"]);
        let f = run(c, &Stop::new()).unwrap();
        assert!(big.iter().step_by(4096).all(|&b| b == 1));
        assert!(f.cost.peak_rss_bytes > 0 && f.cost.peak_rss_bytes < 64 << 20, "{:?}", f.cost);
    }

    #[test]
    fn a_missing_program_is_named() {
        let e = run(Command::new("/nonexistent/sheaf-nope"), &Stop::new()).unwrap_err();
        assert!(e.to_string().contains("sheaf-nope"), "{e}");
    }

    /// Whether a child of this process runs the program `name` (from /proc).
    fn child_running(name: &str) -> bool {
        let me = std::process::id().to_string();
        std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...
            let Some((comm, rest)) = stat.split_once(") ").map(|(a, b)| (a.rsplit_once('(').map_or("", |(_, c)| c), b)) else { return false };
            comm == name && rest.split(' ').nth(1) == Some(me.as_str())
        })
    }

    #[test]
    fn a_stop_ends_the_child_and_starts_no_other() {
        let stop = Stop::new();
        let asker = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Once the child runs: asked before, run() would start nothing (another test).
                let t0 = Instant::now();
                while !child_running("sleep") {
                    assert!(t0.elapsed() < std::time::Duration::from_secs(30), "the child never started");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                stop.ask();
            })
        };
        let t0 = Instant::now();
        let mut c = Command::new("sleep");
        c.arg("60");
        let f = run(c, &stop).unwrap();
        asker.join().unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "ended by the stop, not by its own end");
        assert_eq!(f.code, None, "killed by a signal");
        let again = run(Command::new("true"), &stop).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::Cancelled);
    }
}
