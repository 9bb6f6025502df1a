//! Power cuts (issue 36): sheaf's commands run with the repository, the spool and the history
//! catalog on a file system that loses power (`sheaf-crashfs`), which is cut at random moments;
//! after each cut the file system is mounted again and what every acknowledged command promised
//! is checked. SIGKILL alone cannot find a missing fsync (the kernel keeps the page cache when a
//! process dies); dropping what was never made durable does.
//!
//! `CRASH_POINTS` sets the cuts per workload (the suite's short run: 24; `make crash`: 200) and
//! `CRASH_SEED` replays a run (each test prints the seed it used); with `CRASH_HOLD` set, a run that
//! found a loss keeps its mount up for 10 minutes, to look at what was left.

pub mod receive;
pub mod repo;
pub mod wal_push;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use sheaf_crashfs::{CrashFs, Cut, CutReport};

/// Cut the power (or kill) now, ending the command running if any: what the cut left, and how
/// that command ended.
pub type CutNow<'a> = dyn FnMut(&mut Rng, Option<Child>) -> (CutReport, Option<ExitStatus>) + 'a;

/// Cuts per workload: `CRASH_POINTS`, else the suite's short run of 24.
pub fn points() -> usize {
    points_or(24)
}

/// `CRASH_POINTS`, else `short`: for a workload whose every cut is checked by a restore that
/// starts a server (seconds each), the suite's short run makes fewer.
pub fn points_or(short: usize) -> usize {
    std::env::var("CRASH_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(short)
}

/// xorshift64*, seeded from `CRASH_SEED` or the clock.
pub struct Rng(u64);

impl Rng {
    pub fn new(workload: &str) -> Rng {
        let seed = std::env::var("CRASH_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
        eprintln!("crash {workload}: CRASH_SEED={seed}");
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// What one workload's run found: the figures the issue asks for, printed as one line.
#[derive(Default)]
pub struct Report {
    pub workload: String,
    /// Power cuts made.
    pub points: usize,
    /// Of those, cuts that landed while a command ran.
    pub mid_command: usize,
    /// Items acknowledged (a command that exited 0) before a cut.
    pub acknowledged: usize,
    /// Acknowledged items missing or different after a cut: the goal is 0.
    pub lost: Vec<String>,
    /// Repositories that sheaf could not carry on with after a cut (a command refused, verify
    /// failed) and would need a hand repair: the goal is 0.
    pub repairs: Vec<String>,
    /// Changes dropped by the cuts, and kept by their random prefixes.
    /// What `verify --repo` flagged that is not damage (with why), listed in the report.
    pub flagged: Vec<String>,
    pub dropped: usize,
    pub kept: usize,
    pub torn: usize,
}

impl Report {
    pub fn new(workload: &str) -> Report {
        Report { workload: workload.into(), ..Report::default() }
    }

    pub fn cut(&mut self, r: CutReport, mid: bool) {
        self.points += 1;
        self.mid_command += usize::from(mid);
        self.dropped += r.pending - r.kept;
        self.kept += r.kept;
        self.torn += usize::from(r.torn);
    }

    /// Print the line, append it to `CRASH_REPORT` when set (`make crash` gathers them), and fail
    /// on any loss or repair.
    pub fn finish(&self) {
        let mut line = format!(
            "{}: {} power cuts ({} during a command), {} acknowledged, {} lost, {} needing repair, {} flagged by verify; {} unsynced changes dropped, {} kept by prefixes, {} torn writes",
            self.workload,
            self.points,
            self.mid_command,
            self.acknowledged,
            self.lost.len(),
            self.repairs.len(),
            self.flagged.len(),
            self.dropped,
            self.kept,
            self.torn
        );
        for l in self.lost.iter().chain(&self.repairs).chain(self.flagged.iter().take(3)) {
            let _ = write!(line, "\n  {l}");
        }
        eprintln!("{line}");
        if let Some(p) = std::env::var_os("CRASH_REPORT") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(p).unwrap();
            writeln!(f, "{line}").unwrap();
        }
        if (!self.lost.is_empty() || !self.repairs.is_empty()) && std::env::var_os("CRASH_HOLD").is_some() {
            // Time to look at what was left (the mount stays up) before it is cleaned away.
            eprintln!("CRASH_HOLD: holding for 10 minutes");
            std::thread::sleep(Duration::from_secs(600));
        }
        assert!(self.lost.is_empty() && self.repairs.is_empty(), "{line}");
        assert!(self.points > 0 && self.acknowledged > 0, "the workload ran: {line}");
    }
}

/// A power-loss file system mounted for one workload, with the rest of its scratch space.
pub struct Rig {
    pub dir: tempfile::TempDir,
    fs: Option<CrashFs>,
    mnt: PathBuf,
}

impl Rig {
    /// Mounted, or None (saying why) where this host cannot mount FUSE; CI must.
    pub fn new() -> Option<Rig> {
        let dir = tempfile::Builder::new().prefix("sheaf-crash").tempdir().unwrap();
        let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
        std::fs::create_dir(&backing).unwrap();
        std::fs::create_dir(&mnt).unwrap();
        match CrashFs::mount(&backing, &mnt) {
            Ok(fs) => Some(Rig { dir, fs: Some(fs), mnt }),
            Err(e) => {
                sheaf_core::testing::missing(&format!("cannot mount the power-loss file system (FUSE: /dev/fuse, root or fusermount3): {e}"));
                None
            }
        }
    }

    /// The mount: what lives here is cut with the power.
    pub fn root(&self) -> &Path {
        &self.mnt
    }

    fn fs(&mut self) -> &mut CrashFs {
        self.fs.as_mut().expect("mounted")
    }

    /// Lose power now, with a random crash state: SIGKILL `child` and every other process using
    /// the mount (power loss ends them all), mount again, and say how `child` ended (an exit 0
    /// that came after the cut still counts as acknowledged: whatever it did past the cut failed).
    pub fn cut(&mut self, rng: &mut Rng, child: Option<Child>) -> (CutReport, Option<ExitStatus>) {
        let r = self.power_off(rng);
        let status = child.map(|mut c| {
            let _ = c.kill();
            c.wait().unwrap()
        });
        self.power_on();
        (r, status)
    }

    /// The first half of [`Rig::cut`]: from here every operation on the mount fails.
    pub fn power_off(&mut self, rng: &mut Rng) -> CutReport {
        let how = if rng.below(2) == 0 { Cut::Clean } else { Cut::Prefix { seed: rng.below(u64::MAX) } };
        self.fs().cut(how)
    }

    /// The second half: every process still using the mount killed, and mounted again.
    pub fn power_on(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            kill_users(&self.mnt);
            match self.fs().remount() {
                Ok(()) => return,
                // EBUSY: a process killed is not yet gone.
                Err(e) if e.raw_os_error() == Some(16) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => panic!("mount again after a power cut: {e}"),
            }
        }
    }

    /// Remove everything on the mount, durably.
    pub fn wipe(&mut self) {
        for e in std::fs::read_dir(&self.mnt).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
        std::fs::File::open(&self.mnt).unwrap().sync_all().unwrap();
    }
}

impl Drop for Rig {
    /// Whatever the workload left using the mount goes, then the mount, before the folder holding
    /// it is removed (never through it): no mount outlives the test.
    fn drop(&mut self) {
        kill_users(&self.mnt);
        drop(self.fs.take());
    }
}

/// SIGKILL every process (but this one) with a file, its working folder or its root under `mnt`,
/// as `fuser -km` does.
fn kill_users(mnt: &Path) {
    let me = std::process::id().to_string();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let under = |l: &Path| std::fs::read_link(l).is_ok_and(|t| t.starts_with(mnt));
        let uses =
            under(&p.path().join("cwd")) || under(&p.path().join("root")) || std::fs::read_dir(p.path().join("fd")).into_iter().flatten().flatten().any(|fd| under(&fd.path()));
        if uses {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
        }
    }
}

/// A MinIO of its own with bucket `crash`, and the environment that sheaf and the server's
/// commands reach it with: a config file in `dir` (readable by the cluster's user) naming the
/// endpoint, and the credentials.
pub fn minio(dir: &Path) -> (sheaf_s3::testing::Minio, Vec<(String, String)>) {
    use std::os::unix::fs::PermissionsExt;
    let minio = sheaf_s3::testing::Minio::start();
    minio.create_bucket("crash");
    let config = dir.join("sheaf.toml");
    std::fs::write(&config, format!("s3-endpoint = \"{}\"\ns3-allow-http = true\n", minio.endpoint())).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut env: Vec<(String, String)> = minio.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    env.push(("SHEAF_CONFIG".into(), config.display().to_string()));
    (minio, env)
}

/// Wait for `child` until `deadline`: how it ended (with its standard error when piped), or the
/// child back when it still runs.
pub fn wait_until(mut child: Child, deadline: Instant) -> Result<(ExitStatus, String), Child> {
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return Ok((s, err));
        }
        if Instant::now() >= deadline {
            return Err(child);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
