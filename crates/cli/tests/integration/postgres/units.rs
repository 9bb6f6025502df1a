//! The systemd units sheaf ships, each service's `ExecStart` run as the unit runs it (its user,
//! environment, working folder and hardening, emulated by [`crate::integration::units`]) against
//! a real cluster, instance `db1` with its settings in `/etc/sheaf/db1.toml`: every job does its
//! work under `ProtectSystem=strict` with only its state folder writable, and the daemons speak
//! systemd's notify protocol there.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sheaf_pg::drill::scratch::ScratchCluster;

use super::cluster::{give_to_server, pg_dir, Cluster};
use super::repo::{archive_now, json, ok};
use super::sheaf;
use crate::integration::common::{run, stderr, stdout, SHEAF};
use crate::integration::units;

/// One unit's text for instance db1 with the test's root in place of /.
fn unit(name: &str, root: &Path) -> String {
    let text = std::fs::read_to_string(units::folder().join(name)).unwrap();
    let r = root.display().to_string();
    units::instance(
        &text,
        "db1",
        &[("/var/lib/", &format!("{r}/var/lib/")), ("/var/log/", &format!("{r}/var/log/")), ("/etc/sheaf", &format!("{r}/etc/sheaf")), ("/usr/bin/sheaf", SHEAF)],
    )
}

/// Run a job's service to its end; its output.
fn job(name: &str, root: &Path) -> std::process::Output {
    let o = run(&mut units::exec_start(&unit(name, root), root, &[]));
    eprintln!("{name}: {}{}", stdout(&o), stderr(&o));
    o
}

/// The repository's backups, as info lists them: (id, type).
fn backups(repo: &Path) -> Vec<(String, String)> {
    let info = json(ok(run(sheaf().args(["info", "--repo", repo.to_str().unwrap(), "--json"])), "info"));
    info["backups"].as_array().unwrap().iter().map(|b| (b["id"].as_str().unwrap().to_string(), b["backup_type"].as_str().unwrap().to_string())).collect()
}

/// Wait for a notify message holding `what` on `socket`; every message seen.
fn heard(socket: &UnixDatagram, what: &str, said: &mut Vec<String>) -> String {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(m) = said.iter().find(|m| m.contains(what)) {
            return m.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no {what} from the daemon: {said:?}");
        if let Ok(n) = socket.recv(&mut buf) {
            said.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
}

/// A daemon's service started as its unit starts it, with NOTIFY_SOCKET and a watchdog.
fn daemon(name: &str, root: &Path, socket: &Path) -> Child {
    units::exec_start(&unit(name, root), root, &[("NOTIFY_SOCKET", socket.to_str().unwrap()), ("WATCHDOG_USEC", "2000000")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// SIGTERM, as systemctl stop sends it: STOPPING=1, then exit 0.
fn stop(mut child: Child, socket: &UnixDatagram, said: &mut Vec<String>) {
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    heard(socket, "STOPPING=1", said);
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
}

#[test]
fn every_unit_does_its_job_under_its_hardening() {
    assert!(sheaf_core::host::is_root(), "the units run as their user in a mount namespace of their own: the suite runs as root");
    // Not under /tmp, which PrivateTmp hides from the units.
    let root = tempfile::Builder::new().prefix("sheaf-units.").tempdir_in("/var/lib").unwrap();
    std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let r = root.path();
    let state = r.join("var/lib/sheaf/db1");
    std::fs::create_dir_all(&state).unwrap();
    pg_dir(&r.join("var/lib/sheaf"));
    pg_dir(&state);
    let repo = state.join("repo");
    let pg = r.join("pg");
    std::fs::create_dir_all(&pg).unwrap();
    let archive = format!("archive_command = '{SHEAF} wal-push %p --repo {}'", repo.display());
    let c = Cluster(ScratchCluster::create(Some(&pg), &[], &["archive_mode = on", &archive, "wal_level = replica"]).unwrap());
    ok(run(sheaf().args(["init", "--repo", repo.to_str().unwrap(), &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE TABLE t AS SELECT g AS id FROM generate_series(1, 10000) g");
    let etc = r.join("etc/sheaf");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("db1.toml"),
        format!(
            "repo = \"{}\"\npg-url = \"{}\"\nspool = \"{}\"\nretention-full = 1\nhook-post-backup = \"env > {}\"\nhook-post-drill = \"env > {}\"\nhook-post-expire = \"env > {}\"\n",
            repo.display(),
            c.url("postgres"),
            state.join("spool").display(),
            state.join("backup-hook").display(),
            state.join("drill-hook").display(),
            state.join("expire-hook").display()
        ),
    )
    .unwrap();

    // The scheduled jobs, in the order a week brings them.
    let o = job("sheaf-backup-full@.service", r);
    assert!(o.status.success());
    assert_eq!(backups(&repo).iter().map(|b| b.1.as_str()).collect::<Vec<_>>(), ["full"]);
    c.sql("postgres", "INSERT INTO t SELECT g FROM generate_series(1, 5000) g");
    archive_now(&c);
    assert!(job("sheaf-backup-incr@.service", r).status.success());
    assert_eq!(backups(&repo).iter().map(|b| b.1.as_str()).collect::<Vec<_>>(), ["full", "incr"]);
    let o = job("sheaf-verify@.service", r);
    assert!(o.status.success());
    assert!(stdout(&o).contains("2 backup"), "verify read both backups: {}", stdout(&o));
    let o = job("sheaf-drill@.service", r);
    assert!(o.status.success());
    assert!(stdout(&o).contains("PASSED"), "{}", stdout(&o));
    // The settings file's post-drill hook ran inside the unit's sandbox, with the drilled backup.
    let hook = std::fs::read_to_string(state.join("drill-hook")).unwrap();
    let drilled = backups(&repo)[0].0.clone();
    assert!(hook.contains("SHEAF_HOOK=post-drill") && hook.lines().any(|l| l.starts_with("SHEAF_BACKUP_ID=20")), "{hook}");
    assert!(backups(&repo).iter().any(|b| hook.contains(&format!("SHEAF_BACKUP_ID={}", b.0))), "{hook} names none of {drilled} ...");
    let o = job("sheaf-check@.service", r);
    assert!(stdout(&o).starts_with("SHEAF OK"), "{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success());
    let first = backups(&repo);
    assert!(job("sheaf-backup-full@.service", r).status.success());
    assert!(job("sheaf-expire@.service", r).status.success());
    let left = backups(&repo);
    assert!(std::fs::read_to_string(state.join("expire-hook")).unwrap().contains("SHEAF_STATUS=complete"));
    // Expire took the drilled backup's record with it: the next night's drill drills the new full.
    let o = job("sheaf-drill@.service", r);
    assert!(o.status.success() && stdout(&o).contains(&format!("drill of backup {}", left[0].0)), "{}", stdout(&o));
    assert_eq!(left.len(), 1, "retention-full = 1 keeps the newest full alone: {left:?}");
    assert!(!first.iter().any(|b| b.0 == left[0].0), "the new full is the one kept");
    // The runs are in the catalog the units name, in their state folder; `sheaf show` finds the
    // backup's run by its id in the repository, as `sheaf info` lists it.
    assert!(r.join("var/lib/sheaf/catalog.db").exists());
    let newest = backups(&repo).last().unwrap().0.clone();
    let hook = std::fs::read_to_string(state.join("backup-hook")).unwrap();
    assert!(hook.lines().any(|l| l == format!("SHEAF_BACKUP_ID={newest}")), "the post-backup hook gets the id info lists: {hook}");
    let shown = json(ok(run(sheaf().env("SHEAF_CATALOG", r.join("var/lib/sheaf/catalog.db")).args(["show", &newest, "--json"])), "show"));
    assert_eq!((shown["operation"].as_str(), shown["details"]["postgres"]["repository_id"].as_str()), (Some("backup"), Some(newest.as_str())), "{shown}");
    // The hardening is real: a repository outside ReadWritePaths cannot be written (until a
    // drop-in adds it), and sheaf says which file system refused.
    let outside = r.join("outside");
    pg_dir(&outside);
    ok(run(sheaf().args(["init", "--repo", outside.join("repo").to_str().unwrap(), &c.url("postgres")])), "init outside");
    let db2 = std::fs::read_to_string(etc.join("db1.toml")).unwrap().replace(&format!("repo = \"{}\"", repo.display()), &format!("repo = \"{}\"", outside.join("repo").display()));
    std::fs::write(etc.join("db1.toml"), &db2).unwrap();
    let o = job("sheaf-backup-full@.service", r);
    assert!(!o.status.success() && stderr(&o).contains("Read-only file system"), "{}", stderr(&o));
    std::fs::write(etc.join("db1.toml"), db2.replace(&format!("repo = \"{}\"", outside.join("repo").display()), &format!("repo = \"{}\"", repo.display()))).unwrap();

    // The daemons.
    let socket_path = r.join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    std::fs::set_permissions(&socket_path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut said = Vec::new();
    let receiver = daemon("sheaf-wal-receive@.service", r, &socket_path);
    let ready = heard(&socket, "READY=1", &mut said);
    assert!(ready.contains("STATUS=receiving WAL"), "{ready}");
    heard(&socket, "STATUS=streaming", &mut said);
    heard(&socket, "WATCHDOG=1", &mut said);
    stop(receiver, &socket, &mut said);

    let tls = etc.join("tls");
    ok(run(crate::integration::common::sheaf().args(["agent", "--init-certs", tls.to_str().unwrap()])), "certificates");
    for e in std::fs::read_dir(&tls).unwrap().flatten() {
        give_to_server(&e.path());
    }
    give_to_server(&tls);
    let port = sheaf_core::host::free_port().unwrap();
    std::fs::write(etc.join("agent.toml"), format!("agent-listen = \"127.0.0.1:{port}\"\nagent-pgdata = \"{}\"\ntls-dir = \"{}\"\n", c.data.display(), tls.display())).unwrap();
    let mut said = Vec::new();
    let agent = daemon("sheaf-agent.service", r, &socket_path);
    let ready = heard(&socket, "READY=1", &mut said);
    assert!(ready.contains(&format!("STATUS=serving {}", c.data.display())), "{ready}");
    heard(&socket, "WATCHDOG=1", &mut said);
    stop(agent, &socket, &mut said);

    // The monitoring kit names only metrics sheaf emits: every metric in the dashboard's queries,
    // the alert rules and their tests' series is in what `sheaf info --format prometheus` writes
    // for this repository, its server, its drills, the units' runs and the agent's certificates.
    let prom = ok(
        run(sheaf().env("SHEAF_CATALOG", r.join("var/lib/sheaf/catalog.db")).args([
            "info",
            "--repo",
            repo.to_str().unwrap(),
            "--format",
            "prometheus",
            &c.url("postgres"),
            "--tls-dir",
            tls.to_str().unwrap(),
        ])),
        "info --format prometheus",
    );
    let emitted: std::collections::BTreeSet<&str> = prom.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib");
    for file in ["grafana/sheaf.json", "prometheus/sheaf.rules.yml", "prometheus/sheaf.rules.test.yml"] {
        let text = std::fs::read_to_string(contrib.join(file)).unwrap();
        let named: std::collections::BTreeSet<String> =
            text.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).filter(|w| w.starts_with("sheaf_") && !w.ends_with('_')).map(str::to_string).collect();
        assert!(named.len() >= 5, "{file} names few metrics: {named:?}");
        let missing: Vec<&String> = named.iter().filter(|n| !emitted.contains(n.as_str())).collect();
        assert!(missing.is_empty(), "{file} names metrics sheaf does not emit: {missing:?}\n{prom}");
    }
    assert!(prom.contains(&format!("sheaf_runs_total{{repo=\"{}\",operation=\"backup\",status=\"complete\"}} 3", repo.display())), "{prom}");
    assert!(!prom.contains("status=\"failed\""), "the backup refused outside ReadWritePaths was into another repository: {prom}");
}
