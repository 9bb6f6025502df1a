//! sheaf under real Patroni (from PyPI) with a real etcd (Debian's) on loopback, both started and
//! stopped here, with the member configuration docs/patroni.md shows (read from it): a
//! three-member cluster archiving into a sheaf repository; its replicas made by sheaf from the
//! repository, also after one's data is removed; a switchover and a failover with the old
//! leader rejoining, pgbench writing throughout, every member's tables equal to the leader's at
//! the end; and a new cluster bootstrapped by Patroni from the repository to a restore point,
//! holding exactly the rows before it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::cluster::{pg_dir, server_tempdir};
use super::repo::ok;
use crate::integration::common::{run, server_catalog, wait_for, SHEAF};

/// Patroni's venv, as scripts/install-deps.sh makes it.
fn patroni_bin() -> PathBuf {
    let roots = [PathBuf::from("/opt/sheaf/patroni"), PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/sheaf/patroni")];
    roots.iter().map(|r| r.join("bin")).find(|b| b.join("patroni").exists()).unwrap_or_else(|| panic!("no Patroni in {roots:?}: run scripts/install-deps.sh (make test does)"))
}

/// A command run as the server's user when the test is root (`setpriv` execs it: killing the
/// child kills the program), with a home of its own.
fn as_server(program: &Path, home: &Path) -> Command {
    let mut c = if sheaf_core::host::is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    c.env("HOME", home);
    c
}

/// A process stopped (SIGTERM, then SIGKILL after 60 s) when dropped.
struct Proc(Option<Child>);

impl Proc {
    fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let t0 = std::time::Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Patroni member: its configuration file, data directory, ports, log.
struct Member {
    name: String,
    config: PathBuf,
    data: PathBuf,
    pg_port: u16,
    rest_port: u16,
    log: PathBuf,
    proc: Proc,
}

/// The setting shared by every member and what they run.
struct Site {
    base: tempfile::TempDir,
    repo: PathBuf,
    bin: PathBuf,
    patroni: PathBuf,
    etcd_port: u16,
    _etcd: Proc,
}

/// The member configuration docs/patroni.md shows (its first YAML block), with `{{...}}` filled.
fn template() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/patroni.md")).unwrap();
    yaml_blocks(&doc).into_iter().next().expect("docs/patroni.md holds the member configuration")
}

fn yaml_blocks(doc: &str) -> Vec<String> {
    doc.split("```yaml\n").skip(1).map(|b| b.split("```").next().unwrap().to_string()).collect()
}

fn port() -> u16 {
    sheaf_core::host::free_port().unwrap()
}

impl Site {
    fn new() -> Site {
        let base = server_tempdir("sheaf-patroni.");
        let repo = base.path().join("repo");
        pg_dir(&repo);
        let bin = sheaf_pg::installed::chosen_bin_dir().unwrap().expect("a PostgreSQL server");
        let (etcd_port, peer) = (port(), port());
        let etcd_dir = base.path().join("etcd");
        let etcd = Command::new("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(&etcd_dir)
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{etcd_port}"), "--advertise-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}"), "--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("e1=http://127.0.0.1:{peer}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(base.path().join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd (Debian's etcd-server: scripts/install-deps.sh installs it)");
        let etcd = Proc(Some(etcd));
        wait_for("etcd to take connections", Duration::from_secs(60), || std::net::TcpStream::connect(("127.0.0.1", etcd_port)).is_ok());
        Site { base, repo, bin, patroni: patroni_bin(), etcd_port, _etcd: etcd }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.base.path().join(p)
    }

    /// A member of `scope` named `name` (not started), with `bootstrap` lines put under the
    /// template's `bootstrap:` (the second YAML block of docs/patroni.md, for a new cluster).
    fn member(&self, scope: &str, name: &str, bootstrap: Option<&str>, values: &[(&str, &str)]) -> Member {
        let dir = self.path(name);
        pg_dir(&dir);
        let sock = dir.join("sock");
        pg_dir(&sock);
        let (rest, pg_port) = (port(), port());
        let data = dir.join("data");
        let mut text = template();
        if let Some(b) = bootstrap {
            let lines: String = b.lines().skip(1).map(|l| format!("{l}\n")).collect();
            text = text.replacen("bootstrap:\n", &format!("bootstrap:\n{lines}"), 1);
        }
        let mut fill: Vec<(&str, String)> = vec![
            ("SCOPE", scope.into()),
            ("NAME", name.into()),
            ("REST_PORT", rest.to_string()),
            ("ETCD_PORT", self.etcd_port.to_string()),
            ("SHEAF", SHEAF.into()),
            ("REPO", self.repo.display().to_string()),
            ("PG_PORT", pg_port.to_string()),
            ("DATA", data.display().to_string()),
            ("PG_BIN", self.bin.display().to_string()),
            ("PGPASS", dir.join("pgpass").display().to_string()),
            ("SOCK", sock.display().to_string()),
        ];
        fill.extend(values.iter().map(|(k, v)| (*k, v.to_string())));
        for (k, v) in fill {
            text = text.replace(&format!("{{{{{k}}}}}"), &v);
        }
        assert!(!text.contains("{{"), "a value left unfilled: {text}");
        let config = dir.join("patroni.yml");
        std::fs::write(&config, text).unwrap();
        std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        Member { name: name.into(), config, data, pg_port, rest_port: rest, log: dir.join("patroni.log"), proc: Proc(None) }
    }

    fn start(&self, m: &mut Member) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&m.log).unwrap();
        let child = as_server(&self.patroni.join("patroni"), m.data.parent().unwrap()).arg(&m.config).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        m.proc = Proc(Some(child));
    }

    /// The scope `m` belongs to, as `m`'s REST API tells it (`GET /cluster`, what `patronictl
    /// list` shows, without starting a Python each time): (member, role, state) each; empty while
    /// `m` does not answer.
    fn list(&self, m: &Member) -> Vec<(String, String, String)> {
        let v: serde_json::Value = serde_json::from_str(&http_get(m.rest_port, "/cluster").unwrap_or_default()).unwrap_or_default();
        v["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (r["name"].as_str().unwrap_or_default().to_string(), r["role"].as_str().unwrap_or_default().to_string(), r["state"].as_str().unwrap_or_default().to_string()))
            .collect()
    }

    /// Wait until `cond` holds, looking every half second; past `limit`, fail with what each of
    /// `members` logged and etcd's log, so that a run that went wrong on another machine says why.
    fn wait(&self, what: &str, limit: Duration, members: &[&Member], mut cond: impl FnMut() -> bool) {
        let t0 = std::time::Instant::now();
        while !cond() {
            if t0.elapsed() > limit {
                let mut logs = String::new();
                for m in members {
                    logs += &format!("\n--- {} ({}) ---\n{}", m.name, m.log.display(), tail(&m.log, 60));
                }
                logs += &format!("\n--- etcd ---\n{}", tail(&self.path("etcd.log"), 20));
                panic!("waited {limit:?} for {what}; the scope as the first member sees it: {:?}{logs}", self.list(members[0]));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Wait until `leader` leads and every one of `replicas` streams from the scope's leader, as
    /// the first of `members` (which must be up) sees it.
    fn wait_shape(&self, members: &[&Member], leader: &str, replicas: &[&str]) {
        self.wait(&format!("{leader} leading, {replicas:?} streaming"), Duration::from_secs(240), members, || {
            let l = self.list(members[0]);
            let leads = l.iter().any(|(n, r, s)| n == leader && r == "leader" && s == "running");
            leads && replicas.iter().all(|name| l.iter().any(|(n, r, s)| n == name && (r.contains("replica") || r.contains("standby")) && s == "streaming"))
        });
    }

    /// The scope's leader now.
    fn leader(&self, any: &Member) -> Option<String> {
        self.list(any).into_iter().find(|(_, r, s)| r == "leader" && s == "running").map(|(n, _, _)| n)
    }

    fn psql(&self, port: u16, db: &str, sql: &str) -> String {
        let o = Command::new(self.bin.join("psql")).args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-Atq", "-d", db, "-c", sql]).output().unwrap();
        assert!(o.status.success(), "{sql} on port {port}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// sheaf as the server's user, as Patroni and the archiver run it (the repository is theirs).
    fn sheaf(&self) -> Command {
        let mut c = as_server(Path::new(SHEAF), self.base.path());
        c.env("SHEAF_CATALOG", server_catalog());
        c
    }

    fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }
}

/// The body of `GET path` from Patroni's REST API on `port`, whatever its status; `None` when it
/// does not answer within five seconds.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// The last `n` lines of the file at `p` (what there is of it).
fn tail(p: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Each pgbench table's rows, hashed in order: equal on members that hold the same data.
fn fingerprint(site: &Site, port: u16) -> String {
    ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history", "marks"]
        .iter()
        .map(|t| site.psql(port, "app", &format!("SELECT '{t}:' || count(*) || ':' || coalesce(md5(string_agg(x::text, ',' ORDER BY x::text)), '') FROM {t} x")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// pgbench against whichever member leads, again and again, until `stop`: a run cut by a
/// switchover or a failover ends and the next starts on the new leader.
fn load(site: &Site, ports: &[u16], stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u32> {
    let pgbench = site.bin.join("pgbench");
    let hosts = vec!["127.0.0.1"; ports.len()].join(",");
    let conn = format!("host={hosts} port={} user=postgres dbname=app target_session_attrs=read-write", ports.iter().map(u16::to_string).collect::<Vec<_>>().join(","));
    std::thread::spawn(move || {
        let mut runs = 0;
        while !stop.load(Ordering::Relaxed) {
            let _ = Command::new(&pgbench).args(["-n", "-c", "2", "-T", "2", &conn]).stdout(Stdio::null()).stderr(Stdio::null()).status();
            runs += 1;
        }
        runs
    })
}

fn created_by_sheaf(m: &Member) -> usize {
    std::fs::read_to_string(&m.log).unwrap_or_default().matches("replica has been created using sheaf").count()
}

#[test]
fn patroni_builds_its_replicas_and_new_clusters_from_the_repository() {
    let site = Site::new();
    let scope = format!("sheaf{}", std::process::id());
    let mut m1 = site.member(&scope, "m1", None, &[]);
    let mut m2 = site.member(&scope, "m2", None, &[]);
    let mut m3 = site.member(&scope, "m3", None, &[]);
    site.start(&mut m1);
    site.wait("m1 to bootstrap and lead", Duration::from_secs(240), &[&m1], || site.leader(&m1).as_deref() == Some("m1"));
    let p1 = site.url(m1.pg_port);
    ok(run(site.sheaf().args(["init", "--repo", site.repo.to_str().unwrap(), &p1])), "init");
    site.psql(m1.pg_port, "postgres", "CREATE DATABASE app");
    ok(run(Command::new(site.bin.join("pgbench")).args(["-i", "-s", "2", "-q", "-h", "127.0.0.1", "-p", &m1.pg_port.to_string(), "-U", "postgres", "app"])), "pgbench -i");
    site.psql(m1.pg_port, "app", "CREATE TABLE marks (id int, batch int)");
    ok(run(site.sheaf().args(["backup", &p1, "--repo", site.repo.to_str().unwrap()])), "backup of the leader");

    // The replicas come from the repository, by sheaf (no pg_basebackup in the methods).
    site.start(&mut m2);
    site.start(&mut m3);
    site.wait_shape(&[&m1, &m2, &m3], "m1", &["m2", "m3"]);
    for m in [&m2, &m3] {
        assert_eq!(created_by_sheaf(m), 1, "{} made by sheaf: {}", m.name, std::fs::read_to_string(&m.log).unwrap_or_default());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer = load(&site, &[m1.pg_port, m2.pg_port, m3.pg_port], stop.clone());

    // A replica's data removed: Patroni makes it again with sheaf, and it streams.
    m3.proc.stop();
    std::fs::remove_dir_all(&m3.data).unwrap();
    site.start(&mut m3);
    site.wait_shape(&[&m1, &m2, &m3], "m1", &["m2", "m3"]);
    assert_eq!(created_by_sheaf(&m3), 2, "m3 made again by sheaf: {}", std::fs::read_to_string(&m3.log).unwrap_or_default());

    // A switchover to m2, then a failover away from it (its Patroni and server killed); the old
    // leader rejoins through pg_rewind.
    ok(run(Command::new(site.patroni.join("patronictl")).arg("-c").arg(&m1.config).args(["switchover", "--leader", "m1", "--candidate", "m2", "--force"])), "switchover");
    site.wait_shape(&[&m1, &m2, &m3], "m2", &["m1", "m3"]);
    let postmaster = std::fs::read_to_string(m2.data.join("postmaster.pid")).unwrap().lines().next().unwrap().trim().to_string();
    m2.proc.kill();
    let _ = Command::new("kill").args(["-9", &postmaster]).status();
    site.wait("a new leader after m2's failure", Duration::from_secs(180), &[&m1, &m3], || site.leader(&m1).is_some_and(|l| l != "m2"));
    let leader = site.leader(&m1).unwrap();
    let other = if leader == "m1" { "m3" } else { "m1" };
    site.start(&mut m2);
    site.wait_shape(&[&m1, &m2, &m3], &leader, &["m2", other]);
    let rejoined = std::fs::read_to_string(&m2.log).unwrap_or_default();
    assert!(rejoined.contains("pg_rewind") || created_by_sheaf(&m2) == 2, "the old leader rejoined through pg_rewind or sheaf: {rejoined}");

    stop.store(true, Ordering::Relaxed);
    let runs = writer.join().unwrap();
    assert!(runs >= 3, "pgbench ran throughout ({runs} runs)");
    let leader_port = [&m1, &m2, &m3].iter().find(|m| m.name == leader).unwrap().pg_port;
    let lsn = site.psql(leader_port, "postgres", "SELECT pg_current_wal_insert_lsn()");
    for m in [&m1, &m2, &m3] {
        wait_for(&format!("{} to replay to {lsn}", m.name), Duration::from_secs(120), || {
            m.name == leader || site.psql(m.pg_port, "postgres", &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'")) == "t"
        });
    }
    let expected = fingerprint(&site, leader_port);
    assert!(expected.contains("pgbench_history:") && !expected.contains("pgbench_history:0:"), "pgbench wrote: {expected}");
    for m in [&m1, &m2, &m3] {
        assert_eq!(fingerprint(&site, m.pg_port), expected, "{} equals the leader", m.name);
    }

    // A new cluster, bootstrapped by Patroni from the repository to a restore point: the rows
    // before it, and none after.
    site.psql(leader_port, "app", "INSERT INTO marks SELECT g, 1 FROM generate_series(1, 100) g");
    site.psql(leader_port, "postgres", "SELECT pg_create_restore_point('before_the_mistake')");
    site.psql(leader_port, "app", "INSERT INTO marks SELECT g, 2 FROM generate_series(1, 50) g");
    let segment = site.psql(leader_port, "postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    wait_for(&format!("{segment} archived"), Duration::from_secs(60), || {
        site.psql(leader_port, "postgres", "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") >= segment
    });
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/patroni.md")).unwrap();
    let bootstrap = yaml_blocks(&doc).into_iter().nth(1).expect("docs/patroni.md holds the bootstrap method");
    let mut fresh = site.member(&format!("{scope}new"), "m4", Some(&bootstrap), &[("RESTORE_POINT", "before_the_mistake")]);
    site.start(&mut fresh);
    site.wait("the new cluster to bootstrap from the repository and lead", Duration::from_secs(240), &[&fresh], || site.leader(&fresh).as_deref() == Some("m4"));
    assert_eq!(site.psql(fresh.pg_port, "app", "SELECT string_agg(batch || ':' || n, ',' ORDER BY batch) FROM (SELECT batch, count(*) n FROM marks GROUP BY batch) b"), "1:100");
    assert_eq!(site.psql(fresh.pg_port, "postgres", "SHOW archive_mode"), "off", "it does not archive into the repository it came from");
    let system = |port: u16| site.psql(port, "postgres", "SELECT system_identifier FROM pg_control_system()");
    assert_eq!(
        system(fresh.pg_port),
        system(leader_port),
        "restored from the repository (initdb would make another system): {}",
        std::fs::read_to_string(&fresh.log).unwrap_or_default()
    );
    for m in [&mut m1, &mut m2, &mut m3, &mut fresh] {
        m.proc.stop();
    }
}
