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
