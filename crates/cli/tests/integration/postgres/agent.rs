//! Backups from a backup host: `sheaf agent` serves a real cluster's files, and `sheaf backup
//! --agent` runs where those files cannot be seen (a mount namespace of its own with the data
//! directory hidden under an empty tmpfs, when the suite runs as root), so every byte comes
//! through the agent. A full backup compressed on the agent and an incremental compressed here
//! restore to clusters that start with pgbench's balances agreeing and pg_amcheck clean; an
//! agent killed mid-read fails the backup clearly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{pg_dir, Cluster};
use super::repo::{archive_now, json, ok, recover, setup};
use super::sheaf;
use crate::integration::common::{assert_fails, has_bytes, run, server_catalog, stderr, wait_while_running, SHEAF};

/// `sheaf agent` serving `data`, as the server's user; stopped on drop.
pub(super) struct AgentProc {
    child: Child,
    pub(super) addr: String,
    log: PathBuf,
}

impl AgentProc {
    pub(super) fn start(data: &Path, tls: &Path, log: PathBuf) -> AgentProc {
        let port = sheaf_core::testing::free_port();
        Self::start_at(data, tls, log, &format!("127.0.0.1:{port}"), None)
    }

    /// Serving on `addr`, inside network namespace `netns` when given.
    pub(super) fn start_at(data: &Path, tls: &Path, log: PathBuf, addr: &str, netns: Option<&str>) -> AgentProc {
        let addr = addr.to_string();
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "runuser", "-u", "postgres", "--", SHEAF]);
                c
            }
            None => sheaf_pg::drill::scratch::as_server_user(SHEAF),
        };
        let child =
            cmd.args(["agent", "--listen", &addr, "--pgdata", data.to_str().unwrap(), "--tls-dir", tls.to_str().unwrap()]).stdout(Stdio::null()).stderr(out).spawn().unwrap();
        let t0 = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "the agent did not listen: {}", std::fs::read_to_string(&log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(50));
        }
        AgentProc { child, addr, log }
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kill it (and the runuser around it).
    pub(super) fn kill(&mut self) {
        let _ = Command::new("pkill").args(["-KILL", "-f", &format!("agent --listen {}", self.addr)]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Certificates in `base/tls` (readable by the agent's user; the agent's naming `names` too) and
/// the backup host's copy of its three files in `base/host`.
pub(super) fn certificates(base: &Path, names: &[&str]) -> (PathBuf, PathBuf) {
    let tls = base.join("tls");
    let made = run(sheaf().args(["agent", "--init-certs", tls.to_str().unwrap()]).args(names.iter().flat_map(|n| ["--name", n])));
    assert!(made.status.success(), "{}", stderr(&made));
    let host = base.join("host");
    std::fs::create_dir_all(&host).unwrap();
    for f in ["ca.pem", "client.pem", "client.key"] {
        std::fs::copy(tls.join(f), host.join(f)).unwrap();
    }
    // The agent and the backup host's sheaf both run as the cluster's user here.
    let (uid, gid) = sheaf_pg::drill::scratch::server_owner().unwrap();
    for dir in [&tls, &host] {
        for e in std::fs::read_dir(dir).unwrap() {
            std::os::unix::fs::chown(e.unwrap().path(), Some(uid), Some(gid)).unwrap();
        }
        std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    }
    (tls, host)
}

/// `sheaf ARGS` on the "backup host": in a mount namespace of its own where `hidden` (the data
/// directory) is an empty tmpfs, so that nothing is read there; as the repository's owner (the
/// cluster's user here), made root only to mount.
pub(super) fn on_backup_host(hidden: &Path) -> Command {
    let mut c = if sheaf_core::host::is_root() {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c", r#"mount -t tmpfs hidden "$0" && exec runuser -u postgres -- "$@""#]).arg(hidden).arg(SHEAF);
        c
    } else {
        Command::new(SHEAF)
    };
    c.env("SHEAF_CATALOG", server_catalog());
    c
}

/// The cluster's URL over TCP (its socket directory may be out of reach of the backup host).
pub(super) fn tcp_url(c: &Cluster) -> String {
    format!("postgres://postgres@127.0.0.1:{}/postgres", c.port)
}

#[test]
fn a_backup_host_reads_the_cluster_through_the_agent() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let (tls, host) = certificates(base.path(), &[]);
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "app"])), "pgbench -i");
    let agent = AgentProc::start(&c.data, &tls, base.path().join("agent.log"));
    let url = tcp_url(&c);
    let mut load = c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let through = |extra: &[&str]| {
        let mut cmd = on_backup_host(&c.data);
        cmd.args(["backup", &url, "--repo", r, "--agent", &agent.addr, "--tls-dir", host.to_str().unwrap(), "--json"]).args(extra);
        json(ok(run(&mut cmd), &format!("backup through the agent {extra:?}")))
    };
    // The full one compressed on the agent's host, the incremental here.
    let full = through(&["--compress-on", "agent", "-c", "zstd:low"]);
    assert!(full["bytes_read"].as_u64().unwrap() > 20 << 20, "{full}");
    std::thread::sleep(Duration::from_millis(1500));
    let incr = through(&["--type", "incr", "--check-changes"]);
    assert_eq!(incr["postgres"]["backup_type"], "incr", "{incr}");
    let _ = load.kill();
    let _ = load.wait();
    // Waits for each to exit (pg_terminate_backend's timeout): no commit is in flight after it.
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
    let balances = c.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers)");
    archive_now(&c);

    for (name, id) in [("full", &full), ("incr", &incr)] {
        let id = id["postgres"]["repository_id"].as_str().unwrap();
        let alone = recover(&repo, &base.path().join(name), &["--set", id, "--target", "immediate"]);
        let b = alone.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(tbalance) FROM pgbench_tellers)");
        assert_eq!(b, "t", "{name}: pgbench's balances disagree");
        let o = run(alone.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
        assert!(o.status.success(), "{name}: pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
    }
    let end = recover(&repo, &base.path().join("end"), &[]);
    assert_eq!(end.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers)"), balances);
    assert!(!agent.log().contains("refused"), "{}", agent.log());
}

#[test]
fn an_agent_killed_mid_read_or_of_another_cluster_fails_the_backup_clearly() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let (tls, host) = certificates(base.path(), &[]);
    let url = tcp_url(&c);
    let h = host.to_str().unwrap();

    // Without the certificates' folder.
    let o = run(on_backup_host(&c.data).args(["backup", &url, "--repo", r, "--agent", "127.0.0.1:1"]));
    assert_fails(&o, 2, &["--agent needs --tls-dir"]);
    // Compressing on an agent that is not named, or at a level it cannot keep.
    let o = run(on_backup_host(&c.data).args(["backup", &url, "--repo", r, "--compress-on", "agent"]));
    assert_fails(&o, 2, &["--compress-on agent needs --agent"]);
    // Nothing listening.
    let o = run(on_backup_host(&c.data).args(["backup", &url, "--repo", r, "--agent", "127.0.0.1:1", "--tls-dir", h]));
    assert_fails(&o, 7, &["agent at 127.0.0.1:1", "cannot connect"]);

    // An agent serving another cluster.
    let other = Cluster::new(&[], &[]);
    let wrong = AgentProc::start(&other.data, &tls, base.path().join("wrong.log"));
    let o = run(on_backup_host(&c.data).args(["backup", &url, "--repo", r, "--agent", &wrong.addr, "--tls-dir", h, "--pgdata", other.data.to_str().unwrap()]));
    assert_fails(&o, 2, &["holds cluster", "is cluster"]);
    let o = run(on_backup_host(&c.data).args(["backup", &url, "--repo", r, "--agent", &wrong.addr, "--tls-dir", h, "--compress-on", "agent", "-c", "auto"]));
    assert_fails(&o, 2, &["compresses at one level", "not auto"]);
    drop(wrong);

    // Killed mid-read: the backup dials again a bounded number of times, then fails, keeping nothing.
    let mut agent = AgentProc::start(&c.data, &tls, base.path().join("agent.log"));
    let out = base.path().join("stripes");
    pg_dir(&out);
    let stripe = out.join("a.sheaf");
    let backup = on_backup_host(&c.data)
        .args(["backup", &url, "--to", stripe.to_str().unwrap(), "--agent", &agent.addr, "--tls-dir", h, "--compression", "none", "--max-rate", "8MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut backup = backup;
    wait_while_running(&mut backup, "the backup reading through the agent", || has_bytes(&out, ".partial"));
    agent.kill();
    let o = backup.wait_with_output().unwrap();
    assert_fails(&o, 7, &[&format!("agent at {}", agent.addr), "gave up after 3 new connections"]);
    assert!(std::fs::read_dir(&out).unwrap().next().is_none(), "no stripe or partial left behind");
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    assert_eq!(info["backups"].as_array().unwrap().len(), 0);
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "no slot left");
}

/// A "database host" network namespace joined by a veth pair shaped by htb
/// (`scripts/remote-link.sh`), torn down on drop.
struct Link {
    ns: String,
    n: u32,
}

fn remote_link(args: &[&str]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/remote-link.sh");
    Command::new("bash").arg(script).args(args).output().unwrap()
}

impl Link {
    fn up(rate: &str) -> Link {
        let n = 100 + std::process::id() % 150;
        let ns = format!("sheaf-test-{n}");
        remote_link(&["down", &ns, &n.to_string()]);
        let o = remote_link(&["up", &ns, &n.to_string(), rate]);
        assert!(o.status.success(), "remote-link.sh up: {}", stderr(&o));
        Link { ns, n }
    }

    fn there(&self) -> String {
        format!("10.77.{}.2", self.n)
    }

    /// Cut the link (this side's end down: packets go nowhere, new connections fail) or mend it.
    fn set(&self, up: bool) {
        let o = Command::new("ip").args(["link", "set", &format!("shf{}h", self.n), if up { "up" } else { "down" }]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        remote_link(&["down", &self.ns, &self.n.to_string()]);
    }
}

#[test]
fn a_link_cut_mid_read_is_dialled_again_within_a_bound_then_fails_clearly() {
    if !sheaf_core::host::is_root() {
        return sheaf_core::testing::missing("a network namespace needs root");
    }
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(c.tool("pgbench").args(["-i", "-s", "3", "-q", "app"])), "pgbench -i");
    // 5 MB/s: the backup's 50 MB take about ten seconds on the link.
    let link = Link::up("40mbit");
    let addr = format!("{}:7400", link.there());
    let (tls, host) = certificates(base.path(), &[&link.there()]);
    let agent = AgentProc::start_at(&c.data, &tls, base.path().join("agent.log"), &addr, Some(&link.ns));
    let url = tcp_url(&c);
    let backup = |to: &[&str]| {
        on_backup_host(&c.data)
            .args(["backup", &url, "--agent", &addr, "--tls-dir", host.to_str().unwrap(), "--agent-timeout", "3", "--json"])
            .args(to)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // Cut for 5 s mid-read: the read waits out --agent-timeout, dials again (refused while the
    // link is down, then through), resumes where it stood, and the backup restores whole.
    let mut running = backup(&["--repo", r]);
    wait_while_running(&mut running, "the backup reading through the agent", || partial_bytes(std::path::Path::new(r)) >= 4 << 20);
    link.set(false);
    std::thread::sleep(Duration::from_secs(5));
    link.set(true);
    let done = json(ok(running.wait_with_output().unwrap(), "backup across a cut of 5 s"));
    assert!(done["seconds"].as_f64().unwrap() > 5.0, "the cut fell inside the backup: {done}");
    let back = recover(&repo, &base.path().join("back"), &["--set", done["postgres"]["repository_id"].as_str().unwrap(), "--target", "immediate"]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM pgbench_accounts"), "300000");
    let o = run(back.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
    drop(back);

    // Cut for good: three new connections, then a failure naming the agent and the cause, and
    // nothing left that looks like a backup.
    let out = base.path().join("stripes");
    pg_dir(&out);
    let mut running = backup(&["--to", out.join("a.sheaf").to_str().unwrap()]);
    wait_while_running(&mut running, "the backup reading through the agent", || partial_bytes(&out) >= 4 << 20);
    link.set(false);
    let t0 = Instant::now();
    let o = running.wait_with_output().unwrap();
    assert_fails(&o, 7, &[&format!("agent at {addr}"), "gave up after 3 new connections"]);
    assert!(t0.elapsed() < Duration::from_secs(30), "bounded: {:?}", t0.elapsed());
    assert!(std::fs::read_dir(&out).unwrap().next().is_none(), "no stripe or partial left behind");
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "no slot left");
    drop(agent);
}

/// The bytes a backup has written so far into the stripes it has not finished (`*.partial`) under
/// `dir`: once past the first few MiB, it is reading data files, past its listing's start.
fn partial_bytes(dir: &std::path::Path) -> u64 {
    let mut todo = vec![dir.to_path_buf()];
    let mut n = 0;
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                todo.push(e.path());
            } else if e.file_name().to_string_lossy().ends_with(".partial") {
                n += meta.len();
            }
        }
    }
    n
}
