//! Hooks around a job (backup, restore, drill, expire): a command run before it (`--pre-JOB`),
//! after it succeeded (`--post-JOB`), or when it failed (`--on-failure`), with the run's facts in
//! its environment. A failing pre-hook stops the job before it touches anything; a failing
//! post-hook is a warning and the job's result stands; every hook has a time limit, and its output
//! goes into the log line by line.
//!
//! The environment: `SHEAF_HOOK` (`pre-backup`, `post-backup`, `on-failure`), `SHEAF_OPERATION`,
//! `SHEAF_RUN_ID` (the catalog's, as `sheaf list` shows it), `SHEAF_REPO`, `SHEAF_SOURCE`,
//! `SHEAF_STATUS` (`starting`, `complete`, `failed`), and after the job `SHEAF_BACKUP_ID` (the
//! backup's id in the repository, else the set's), `SHEAF_SET_ID`, `SHEAF_SECONDS`, and on a
//! failure `SHEAF_ERROR`.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sheaf_core::stop::Stop;
use sheaf_core::{Error, ErrorKind, Result};

use crate::args::HookFlags;
use crate::settings::{self, Key, Settings};

/// What a finished job reports, for the post-hook's ids.
pub trait Report {
    /// The report as `--json` prints it.
    fn json(&self) -> &serde_json::Value;
}

impl Report for serde_json::Value {
    fn json(&self) -> &serde_json::Value {
        self
    }
}

/// How long a hook may run unless told.
const DEFAULT_LIMIT: Duration = Duration::from_secs(300);

/// A job's hooks, resolved from its flags over the settings, and the facts known before it runs.
pub struct Hooks {
    job: &'static str,
    pre: Option<String>,
    post: Option<String>,
    failure: Option<String>,
    limit: Duration,
    facts: Vec<(&'static str, String)>,
    /// The command's stop: Ctrl-C or SIGTERM ends a running hook (in a process group of its own,
    /// the terminal's signal does not reach it) as it ends the job.
    stop: Stop,
}

impl Hooks {
    /// The hooks `flags` and the settings give the job.
    pub fn new(settings: &Settings, stop: &Stop, flags: impl Into<HookFlags>) -> Hooks {
        let f: HookFlags = flags.into();
        let (pre, post): (&Key<String>, &Key<String>) = match f.job {
            "backup" => (&settings::HOOK_PRE_BACKUP, &settings::HOOK_POST_BACKUP),
            "restore" => (&settings::HOOK_PRE_RESTORE, &settings::HOOK_POST_RESTORE),
            "drill" => (&settings::HOOK_PRE_DRILL, &settings::HOOK_POST_DRILL),
            _ => (&settings::HOOK_PRE_EXPIRE, &settings::HOOK_POST_EXPIRE),
        };
        Hooks {
            job: f.job,
            pre: settings.value(pre, f.pre).filter(|c| !c.trim().is_empty()),
            post: settings.value(post, f.post).filter(|c| !c.trim().is_empty()),
            failure: settings.value(&settings::HOOK_ON_FAILURE, f.on_failure).filter(|c| !c.trim().is_empty()),
            limit: settings.value(&settings::HOOK_TIMEOUT, f.timeout).unwrap_or(DEFAULT_LIMIT),
            facts: Vec::new(),
            stop: stop.clone(),
        }
    }

    /// No hooks (a job that has none, as verify).
    pub fn none(job: &'static str) -> Hooks {
        Hooks { job, pre: None, post: None, failure: None, limit: DEFAULT_LIMIT, facts: Vec::new(), stop: Stop::default() }
    }

    /// A fact every hook of this job gets (`SHEAF_REPO`, `SHEAF_SOURCE`).
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Hooks {
        self.facts.push((name, value.into()));
        self
    }

    /// Run `job` between the hooks; `run` is the catalog's run id, when the run is recorded.
    ///
    /// # Errors
    /// The job's; or, when the pre-hook failed, that (and the job did not run).
    pub fn around<T: Report>(&self, run: Option<i64>, job: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut env = self.facts.clone();
        env.push(("SHEAF_OPERATION", self.job.to_string()));
        if let Some(id) = run {
            env.push(("SHEAF_RUN_ID", id.to_string()));
        }
        if let Some(cmd) = &self.pre {
            let name = format!("pre-{}", self.job);
            if let Err(why) = self.run(&name, cmd, &with(&env, &[("SHEAF_STATUS", "starting".into())])) {
                let e =
                    Error::new(ErrorKind::Io, format!("the {name} hook {why}: the {} did not start (--pre-{}, or hook-pre-{} in the config file)", self.job, self.job, self.job));
                self.failed(&env, &e, None);
                return Err(e);
            }
        }
        let t0 = Instant::now();
        let r = job();
        let seconds = format!("{:.3}", t0.elapsed().as_secs_f64());
        match &r {
            Ok(done) => {
                if let Some(cmd) = &self.post {
                    let name = format!("post-{}", self.job);
                    let mut after = with(&env, &[("SHEAF_STATUS", "complete".into()), ("SHEAF_SECONDS", seconds)]);
                    after.extend(ids(done));
                    if let Err(why) = self.run(&name, cmd, &after) {
                        crate::log::warning(format_args!("the {name} hook {why}; the {} itself succeeded", self.job));
                    }
                }
            }
            Err(e) => self.failed(&env, e, Some(seconds)),
        }
        r
    }

    /// The on-failure hook, for the job's error `e`.
    fn failed(&self, env: &[(&'static str, String)], e: &Error, seconds: Option<String>) {
        let Some(cmd) = &self.failure else { return };
        let mut failed = with(env, &[("SHEAF_STATUS", "failed".into()), ("SHEAF_ERROR", e.to_string())]);
        failed.extend(seconds.map(|s| ("SHEAF_SECONDS", s)));
        if let Err(why) = self.run("on-failure", cmd, &failed) {
            crate::log::warning(format_args!("the on-failure hook {why}"));
        }
    }

    /// Run one hook to its end or its limit; why it failed, if it did.
    fn run(&self, name: &str, cmd: &str, env: &[(&'static str, String)]) -> std::result::Result<(), String> {
        tracing::info!(target: "sheaf", hook = name, "running the {name} hook: {cmd}");
        let mut child = Command::new("sh")
            .args(["-c", cmd])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("SHEAF_HOOK", name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that a time limit stops whatever it started too.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("could not be started ({e})"))?;
        let readers: Vec<_> =
            [child.stdout.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>), child.stderr.take().map(|e| Box::new(e) as Box<dyn std::io::Read + Send>)]
                .into_iter()
                .flatten()
                .map(|out| {
                    let name = name.to_string();
                    std::thread::spawn(move || {
                        for line in BufReader::new(out).lines().map_while(std::result::Result::ok) {
                            crate::log::note(&format!("sheaf: {name} hook"), &line);
                        }
                    })
                })
                .collect();
        let t0 = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if self.stop.asked() => break Err("was stopped: the command was interrupted".to_string()),
                Ok(None) if t0.elapsed() < self.limit => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => break Err(format!("ran past its limit of {} s and was stopped (--hook-timeout)", self.limit.as_secs())),
                Err(e) => return Err(format!("could not be waited for ({e})")),
            }
        };
        let status = match status {
            Ok(s) => s,
            Err(why) => {
                stop_group(&mut child);
                for r in readers {
                    let _ = r.join();
                }
                return Err(why);
            }
        };
        for r in readers {
            let _ = r.join();
        }
        match status.code() {
            Some(0) => Ok(()),
            Some(code) => Err(format!("failed (exit {code})")),
            None => Err("was killed by a signal".into()),
        }
    }
}

/// SIGTERM to the hook's process group, SIGKILL 5 s later if it is still there.
fn stop_group(child: &mut std::process::Child) {
    let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) else { return };
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let _ = child.wait();
}

/// `env` and `more`.
fn with(env: &[(&'static str, String)], more: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    env.iter().chain(more).cloned().collect()
}

/// The ids a finished job reports: the backup's in the repository (else the set's) and the set's.
fn ids(done: &impl Report) -> Vec<(&'static str, String)> {
    let text = |k: &str| done.json().pointer(k).and_then(|v| v.as_str()).map(str::to_string);
    let mut out = Vec::new();
    let set = text("/backup_id");
    // A backup into a repository: its id there; a drill: the backup it drilled; else the set's.
    if let Some(id) = text("/postgres/repository_id").or(text("/mariadb/repository_id")).or(text("/backup")).or(set.clone()) {
        out.push(("SHEAF_BACKUP_ID", id));
    }
    if let Some(set) = set {
        out.push(("SHEAF_SET_ID", set));
    }
    out
}
