//! sheaf operated as a service (issue 52): the log (a file reopened on SIGHUP, JSON lines, the
//! journal's priorities, the run id that `sheaf list` shows), systemd's notify protocol from the
//! daemons, `sheaf version --verbose`.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::super::common::{run, s, sheaf_with_catalog, stderr, stdout, wait_for};

/// The id of the newest run `catalog` holds.
fn newest_run(catalog: &Path) -> i64 {
    let o = run(sheaf_with_catalog(catalog).args(["list", "--json", "--limit", "1"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    runs[0]["id"].as_i64().expect("a run id")
}

/// A backup slowed by --max-rate is sent SIGHUP after its log file was moved away (as logrotate
/// does): it is not interrupted, goes on into a new file at the path, and every line of the run in
/// both files carries the run id the catalog gives it.
#[test]
fn the_log_file_is_opened_again_on_sighup_and_carries_the_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 4 << 20, 3).unwrap();
    let catalog = dir.path().join("catalog.db");
    let log = dir.path().join("sheaf.log");
    let child = sheaf_with_catalog(&catalog)
        .args(["backup", s(&src), "--to", s(&dir.path().join("b.sheaf")), "--compression", "none", "--max-rate", "2MiB", "--log-file", s(&log)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the run's first log line", Duration::from_secs(20), || fs::read_to_string(&log).is_ok_and(|t| t.contains("started")));
    let rotated = dir.path().join("sheaf.log.1");
    fs::rename(&log, &rotated).unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::HUP).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "SIGHUP with a log file must not stop the backup: {}", stderr(&out));
    let id = newest_run(&catalog);
    let before = fs::read_to_string(&rotated).unwrap();
    let after = fs::read_to_string(&log).expect("a new log file at the path after SIGHUP");
    assert!(before.contains(&format!("run={id} sheaf: run {id} started")), "{before}");
    assert!(after.contains("run complete"), "the run's end goes into the new file: {after}");
    for line in before.lines().chain(after.lines()) {
        assert!(line.contains(&format!(" run={id} ")), "a line without the run id: {line}");
    }
    let mode = fs::metadata(&log).unwrap().mode() & 0o777;
    assert_eq!(mode & 0o007, 0, "the log is not for others to read: {mode:o}");
}

/// `--log-format json`: one object per line, with time, level, the run id and the fields; an
/// error ends the log at level ERROR.
#[test]
fn json_lines_with_the_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.db");
    let target = dir.path().join("full");
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("x"), b"x").unwrap();
    let src = dir.path().join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 1).unwrap();
    let b = dir.path().join("b.sheaf");
    assert!(run(sheaf_with_catalog(&catalog).args(["backup", s(&src), "--to", s(&b)])).status.success());
    let o = run(sheaf_with_catalog(&catalog).args(["restore", s(&b), "--to", s(&target), "--log-format", "json", "--log-level", "info"]));
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    let id = newest_run(&catalog);
    let lines: Vec<serde_json::Value> = stderr(&o).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["run"].as_i64() == Some(id) && l["time"].as_str().is_some_and(|t| t.ends_with('Z'))), "{lines:?}");
    assert_eq!(lines[0]["operation"], "restore");
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(last["message"].as_str().unwrap().contains("not empty"), "{last}");
    // The log is on stderr: the person's own copy of the error is not printed besides it.
    assert!(!stderr(&o).contains("sheaf: error:"), "{}", stderr(&o));
}

/// Under systemd (stderr is the journal's stream, as JOURNAL_STREAM says), lines go to stderr with
/// syslog's priority in front, so that the journal keeps their levels; without a --log-level, at
/// info. A JOURNAL_STREAM naming another stream (a child's redirected stderr) is not the journal.
#[test]
fn under_systemd_lines_carry_syslog_priorities() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.db");
    let err = dir.path().join("stderr");
    let file = fs::File::create(&err).unwrap();
    let meta = file.metadata().unwrap();
    let o = sheaf_with_catalog(&catalog)
        .args(["restore", s(&dir.path().join("missing.sheaf")), "--to", s(&dir.path().join("to"))])
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdin(Stdio::null())
        .stderr(file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let text = fs::read_to_string(&err).unwrap();
    assert!(text.lines().any(|l| l.starts_with("<6>") && l.contains("started")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("<3>") && l.contains("missing.sheaf")), "{text}");
    assert!(text.lines().all(|l| l.starts_with('<')), "every line has a priority: {text}");

    let o = sheaf_with_catalog(&catalog).args(["restore", s(&dir.path().join("missing.sheaf")), "--to", s(&dir.path().join("to"))]).env("JOURNAL_STREAM", "1:1").output().unwrap();
    assert!(stderr(&o).starts_with("sheaf: error:"), "{}", stderr(&o));
}

/// A settings file's log-level that is not a level is refused, naming the choices.
#[test]
fn a_wrong_log_level_setting_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sheaf.toml");
    fs::write(&conf, "log-level = \"loud\"\n").unwrap();
    let o = run(sheaf_with_catalog(&dir.path().join("c.db")).args(["--config", s(&conf), "list"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("log-level") && stderr(&o).contains("give error, warn, info, debug or trace"), "{}", stderr(&o));
}

/// The agent, a daemon, speaks systemd's notify protocol on NOTIFY_SOCKET: READY=1 with a STATUS
/// once it listens, WATCHDOG=1 while its loop goes round (WATCHDOG_USEC), STOPPING=1 on SIGTERM,
/// then exit 0.
#[test]
fn the_agent_notifies_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    let o = run(sheaf_with_catalog(&dir.path().join("c.db")).args(["agent", "--init-certs", s(&tls)]));
    assert!(o.status.success(), "{}", stderr(&o));
    let pgdata = dir.path().join("pgdata");
    fs::create_dir_all(pgdata.join("global")).unwrap();
    // The agent reads the system identifier from pg_control's first eight bytes.
    fs::write(pgdata.join("global/pg_control"), 7_341_234_u64.to_le_bytes().repeat(4)).unwrap();
    let socket_path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let child = Command::new(super::super::common::SHEAF)
        .env("SHEAF_CATALOG", dir.path().join("c.db"))
        .args(["agent", "--listen", "127.0.0.1:0", "--pgdata", s(&pgdata), "--tls-dir", s(&tls)])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "400000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    let mut buf = [0u8; 4096];
    let started = Instant::now();
    while !(said.iter().any(|m: &String| m.contains("READY=1")) && said.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2) {
        assert!(started.elapsed() < Duration::from_secs(20), "no READY and two WATCHDOG pings: {said:?}");
        let n = socket.recv(&mut buf).expect("a notify message");
        said.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let ready = said.iter().find(|m| m.contains("READY=1")).unwrap();
    assert!(ready.contains("STATUS=serving") && ready.contains(s(&pgdata)), "{ready}");
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let mut stopping = false;
    while let Ok(n) = socket.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `sheaf version --verbose` names the commit, the codecs' libraries and the crypto provider.
#[test]
fn version_verbose_names_the_build_and_its_libraries() {
    let o = run(Command::new(super::super::common::SHEAF).args(["version", "--verbose"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with(&format!("sheaf {}\n", env!("CARGO_PKG_VERSION"))), "{out}");
    for needle in ["commit:", "built:", "lz4_flex", "ISA-L", "libdeflate", "libzstd 1.", "ring", "rustls"] {
        assert!(out.contains(needle), "{needle} missing: {out}");
    }
    let v: serde_json::Value = serde_json::from_slice(&run(Command::new(super::super::common::SHEAF).args(["version", "--json"])).stdout).unwrap();
    assert_eq!(v["codecs"].as_array().unwrap().len(), 3);
}

/// Every unit in contrib/systemd passes `systemd-analyze verify` without a word (an instance of
/// each template, the binary where the package puts it replaced by this one); each job's service
/// has its timer (a calendar, Persistent, a randomized delay); every service has the same
/// hardening; the daemons are Type=notify with a watchdog.
#[test]
fn the_units_pass_systemd_analyze_verify() {
    use crate::integration::units;
    let dir = tempfile::tempdir().unwrap();
    let all = units::all();
    assert!(all.len() >= 14, "{all:?}");
    let mut names = Vec::new();
    for (name, text) in &all {
        fs::write(dir.path().join(name), text.replace("/usr/bin/sheaf", super::super::common::SHEAF)).unwrap();
        names.push(name.replace("@.", "@db1."));
    }
    let o = Command::new("systemd-analyze").arg("verify").arg("--man=no").args(&names).current_dir(dir.path()).output().expect("systemd-analyze (Debian's systemd package)");
    assert!(o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(), "{}{}", stdout(&o), stderr(&o));

    let hardening = |text: &str| -> Vec<String> {
        ["NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "RestrictSUIDSGID", "CapabilityBoundingSet", "UMask", "SystemCallArchitectures"]
            .iter()
            .map(|k| format!("{k}={}", units::value(text, "Service", k)))
            .collect()
    };
    let services: Vec<&(String, String)> = all.iter().filter(|(n, _)| n.ends_with(".service")).collect();
    let first = hardening(&services[0].1);
    for (name, text) in &services {
        assert_eq!(hardening(text), first, "{name}'s hardening differs");
        assert!(!units::values(text, "Service", "ReadWritePaths").is_empty(), "{name} says what it may write");
        match units::value(text, "Service", "Type").as_str() {
            "notify" => assert!(!units::value(text, "Service", "WatchdogSec").is_empty(), "{name}"),
            "oneshot" => {
                let timer = name.replace(".service", ".timer");
                let (_, t) = all.iter().find(|(n, _)| *n == timer).unwrap_or_else(|| panic!("{name} has no timer"));
                assert_eq!(units::value(t, "Timer", "Persistent"), "true", "{timer}");
                assert!(!units::value(t, "Timer", "RandomizedDelaySec").is_empty(), "{timer}");
                let cal = units::value(t, "Timer", "OnCalendar");
                let c = Command::new("systemd-analyze").args(["calendar", &cal]).output().unwrap();
                assert!(c.status.success(), "{timer}: {cal}: {}", stderr(&c));
            }
            other => panic!("{name}: Type={other}"),
        }
    }
}

/// The lines of the file a hook wrote `env` into, as NAME=VALUE.
fn hook_env(path: &Path) -> std::collections::BTreeMap<String, String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("SHEAF_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Hooks around a backup: the pre-hook runs first with the run id the catalog gives, the
/// post-hook after with the backup's id, their output goes into the log; a failing pre-hook stops
/// the backup before a stripe is written and the on-failure hook hears why; a failing post-hook is
/// a warning and the backup stands; a hook past --hook-timeout is stopped with what it started;
/// the settings file's hooks apply when no flag gives one.
#[test]
fn hooks_around_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let catalog = d.join("catalog.db");
    let src = d.join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 1).unwrap();
    let dump = |name: &str| format!("env > {}", d.join(name).display());
    let log = d.join("sheaf.log");

    let o = run(sheaf_with_catalog(&catalog).args(["backup", s(&src), "--to", s(&d.join("a.sheaf")), "--json", "--log-file", s(&log)]).args([
        "--pre-backup",
        &format!("{}; echo hello from the pre-hook", dump("pre")),
        "--post-backup",
        &dump("post"),
        "--on-failure",
        &dump("failure"),
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = newest_run(&catalog);
    let pre = hook_env(&d.join("pre"));
    assert_eq!(pre["SHEAF_RUN_ID"], id.to_string());
    assert_eq!((pre["SHEAF_HOOK"].as_str(), pre["SHEAF_OPERATION"].as_str(), pre["SHEAF_STATUS"].as_str()), ("pre-backup", "backup", "starting"));
    assert!(!pre.contains_key("SHEAF_BACKUP_ID"));
    let post = hook_env(&d.join("post"));
    assert_eq!(post["SHEAF_BACKUP_ID"], report["backup_id"].as_str().unwrap());
    assert_eq!((post["SHEAF_STATUS"].as_str(), post["SHEAF_RUN_ID"].as_str()), ("complete", id.to_string().as_str()));
    assert!(post["SHEAF_SECONDS"].parse::<f64>().is_ok());
    assert!(!d.join("failure").exists(), "no failure, no on-failure hook");
    let logged = fs::read_to_string(&log).unwrap();
    assert!(logged.lines().any(|l| l.contains(&format!("run={id} ")) && l.contains("hello from the pre-hook")), "{logged}");

    // A failing pre-hook: nothing written, the on-failure hook told why, the run failed.
    let b = d.join("b.sheaf");
    let o =
        run(sheaf_with_catalog(&catalog).args(["backup", s(&src), "--to", s(&b), "--pre-backup", "exit 3", "--on-failure", &dump("failure"), "--post-backup", &dump("post-b")]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("pre-backup hook failed (exit 3)") && stderr(&o).contains("did not start"), "{}", stderr(&o));
    assert!(!b.exists() && !d.join("post-b").exists());
    let failure = hook_env(&d.join("failure"));
    assert_eq!(failure["SHEAF_STATUS"], "failed");
    assert!(failure["SHEAF_ERROR"].contains("exit 3"), "{failure:?}");
    assert_eq!(failure["SHEAF_RUN_ID"], newest_run(&catalog).to_string());

    // The backup itself failing: the on-failure hook, with the backup's error.
    fs::remove_file(d.join("failure")).unwrap();
    let o = run(sheaf_with_catalog(&catalog).args(["backup", s(&d.join("no-such-folder")), "--to", s(&b), "--on-failure", &dump("failure")]));
    assert!(!o.status.success());
    assert!(hook_env(&d.join("failure"))["SHEAF_ERROR"].contains("no-such-folder"));

    // A failing post-hook: a warning; the backup stands.
    let o = run(sheaf_with_catalog(&catalog).args(["backup", s(&src), "--to", s(&b), "--post-backup", "echo nope >&2; exit 4"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: the post-backup hook failed (exit 4); the backup itself succeeded"), "{}", stderr(&o));
    assert!(stderr(&o).contains("nope"), "the hook's output is shown: {}", stderr(&o));
    assert!(run(sheaf_with_catalog(&catalog).args(["verify", s(&b)])).status.success());

    // Past its time limit: stopped, with the process it started.
    let pid_file = d.join("pid");
    let t0 = Instant::now();
    let o = run(sheaf_with_catalog(&catalog).args([
        "backup",
        s(&src),
        "--to",
        s(&d.join("c.sheaf")),
        "--hook-timeout",
        "1s",
        "--pre-backup",
        &format!("sleep 60 & echo $! > {}; wait", pid_file.display()),
    ]));
    assert_eq!(o.status.code(), Some(1));
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(stderr(&o).contains("ran past its limit of 1 s"), "{}", stderr(&o));
    let pid = fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || fs::read_to_string(format!("/proc/{pid}/stat")).unwrap().contains(") Z "), "the hook's sleep {pid} is still running");
    assert!(!d.join("c.sheaf").exists());

    // SIGTERM while a hook runs (its own process group, out of the terminal's reach): the hook
    // and what it started are stopped with the command, which exits 143.
    let pid_file = d.join("pid-term");
    let child = sheaf_with_catalog(&catalog)
        .args(["backup", s(&src), "--to", s(&d.join("t.sheaf")), "--pre-backup", &format!("sleep 60 & echo $! > {}; wait", pid_file.display())])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the hook to start", Duration::from_secs(20), || fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n')));
    let t0 = Instant::now();
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let pid = fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || fs::read_to_string(format!("/proc/{pid}/stat")).unwrap().contains(") Z "), "the hook's sleep {pid} outlived SIGTERM");
    assert!(!d.join("t.sheaf").exists());

    // From the settings file.
    let conf = d.join("sheaf.toml");
    fs::write(&conf, format!("hook-pre-backup = \"{}\"\n", dump("from-settings"))).unwrap();
    assert!(run(sheaf_with_catalog(&catalog).args(["--config", s(&conf), "backup", s(&src), "--to", s(&d.join("e.sheaf"))])).status.success());
    assert_eq!(hook_env(&d.join("from-settings"))["SHEAF_HOOK"], "pre-backup");

    // Around a restore, its own flags.
    let to = d.join("restored");
    let o = run(sheaf_with_catalog(&catalog).args(["restore", s(&b), "--to", s(&to), "--pre-restore", &dump("pre-restore"), "--post-restore", &dump("post-restore")]));
    assert!(o.status.success(), "{}", stderr(&o));
    let post = hook_env(&d.join("post-restore"));
    assert_eq!((post["SHEAF_HOOK"].as_str(), post["SHEAF_OPERATION"].as_str(), post["SHEAF_TARGET"].as_str()), ("post-restore", "restore", s(&to)));
    assert_eq!(hook_env(&d.join("pre-restore"))["SHEAF_RUN_ID"], newest_run(&catalog).to_string());
}

/// The alert rules in contrib/prometheus pass `promtool check rules` and their own unit tests
/// (`promtool test rules`: each alert fires when and for whom it should, and not before).
#[test]
fn the_alert_rules_pass_promtool() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/prometheus");
    let o = Command::new("promtool").args(["check", "rules", "sheaf.rules.yml"]).current_dir(&dir).output().expect("promtool (Debian's prometheus package)");
    assert!(o.status.success() && stdout(&o).contains("SUCCESS: 12 rules found"), "{}{}", stdout(&o), stderr(&o));
    let o = Command::new("promtool").args(["test", "rules", "sheaf.rules.test.yml"]).current_dir(&dir).output().unwrap();
    assert!(o.status.success() && stdout(&o).contains("SUCCESS"), "{}{}", stdout(&o), stderr(&o));
}

/// A key file others may read is used with a warning (as libpq warns of a .pgpass so open); one
/// only its owner reads, without a word.
#[test]
fn a_key_file_others_can_read_is_warned_of() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 1).unwrap();
    let key = dir.path().join("k");
    fs::write(&key, [7u8; 32]).unwrap();
    let catalog = dir.path().join("c.db");
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        fs::set_permissions(&key, fs::Permissions::from_mode(mode)).unwrap();
        let o = run(sheaf_with_catalog(&catalog).args(["backup", s(&src), "--to", s(&dir.path().join(format!("{mode:o}.sheaf"))), "--encryption-key-file", s(&key)]));
        assert!(o.status.success(), "{}", stderr(&o));
        let said = stderr(&o).contains(&format!("group or others may read it (mode {mode:04o})"));
        assert_eq!(said, warned, "mode {mode:o}: {}", stderr(&o));
    }
}

/// `sheaf check ... | true`: the reader gone, the exit status is still the verdict (critical, 2),
/// not 0.
#[test]
fn check_exits_with_its_verdict_when_nobody_reads_it() {
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let dir = tempfile::tempdir().unwrap();
    let o = sheaf_with_catalog(&dir.path().join("c.db"))
        .args(["check", "--repo", s(&dir.path().join("absent")), "postgres://nobody@127.0.0.1:1/postgres"])
        .stdin(Stdio::null())
        .stdout(std::process::Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Without a server to check against, the finding names the server, not the repository.
    let o = run(sheaf_with_catalog(&dir.path().join("c.db"))
        .args(["check", "--repo", s(dir.path())])
        .env_remove("PGHOST")
        .env_remove("PGDATABASE")
        .env_remove("PGSERVICE")
        .env_remove("PGHOSTADDR"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).lines().nth(1).is_some_and(|l| l.starts_with("CRITICAL server") && l.contains("no PostgreSQL server given")), "{}", stdout(&o));
}

/// Every benchmark record under docs/bench that holds figures names the commit it was measured on
/// and the date, and the commit is one of this repository's (where its history is here).
#[test]
fn every_bench_record_names_its_commit_and_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut records = Vec::new();
    let mut dirs = vec![root.join("docs/bench")];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                records.push(p);
            }
        }
    }
    let figure = |t: &str| t.contains('×') || t.contains("MB/s") || t.contains("MiB/s") || t.contains("GiB/s") || t.contains("x faster");
    let history = root.join(".git").exists();
    let mut checked = 0;
    for p in records {
        let text = fs::read_to_string(&p).unwrap();
        if !figure(&text) {
            continue;
        }
        let at = text.find("Measured on commit ").unwrap_or_else(|| panic!("{}: figures without 'Measured on commit HASH (DATE)'", p.display()));
        let rest = &text[at + "Measured on commit ".len()..];
        let hash: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
        assert!(hash.len() >= 7, "{}: no commit hash after 'Measured on commit'", p.display());
        let date = rest[hash.len()..].trim_start().strip_prefix('(').map(|d| d.chars().take(10).collect::<String>()).unwrap_or_default();
        assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-' && date.starts_with("20"), "{}: no (YYYY-MM-DD) after the commit", p.display());
        if history {
            let known = Command::new("git").args(["cat-file", "-e", &format!("{hash}^{{commit}}")]).current_dir(&root).status().map(|s| s.success());
            // A shallow clone may lack old commits: only a hash git refuses outright is wrong.
            let shallow = root.join(".git/shallow").exists();
            assert!(known.unwrap_or(true) || shallow, "{}: commit {hash} is not in this repository", p.display());
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} records with figures found");
}
