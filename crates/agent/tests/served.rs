//! Repositories served by the agent (`--serve-repo`) to clients on its allow-list, reached as
//! `sheaf://HOST:PORT/NAME` through [`ServedSchemes`]: the storage conformance suite every store
//! passes, and what a client granted `repos=` only is refused (and the agent logs, by name).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sheaf_agent::certs;
use sheaf_agent::repos::{Change, Guard, ServedRepos};
use sheaf_agent::{Agent, AgentConfig, ServedSchemes};
use sheaf_core::storage::conformance::{check_store, payload};
use sheaf_core::storage::{Schemes, Store, WriteOptions};
use sheaf_core::ErrorKind;

/// A layout where `wal/` is kept: nothing there replaced or removed, and `*.lock` removable.
struct KeepWal;

impl Guard for KeepWal {
    fn refuses(&self, change: Change, name: &str, _: &dyn Fn(&str) -> bool) -> Option<String> {
        match change {
            Change::Create => None,
            Change::Delete if name.ends_with(".lock") => None,
            _ if name.starts_with("wal/") => Some("archived WAL is kept".into()),
            Change::Replace => None,
            Change::Delete => Some("only locks are removed".into()),
        }
    }
}

struct Site {
    _dir: tempfile::TempDir,
    repos: PathBuf,
    tls: PathBuf,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    stop: sheaf_core::stop::Stop,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.ask();
    }
}

/// An agent serving repositories `a` and `b` (folders under `repos`), its client's line in
/// allowed-clients followed by `grants`.
fn site(grants: &str) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let repos = dir.path().join("repos");
    for r in ["a", "b"] {
        std::fs::create_dir_all(repos.join(r)).unwrap();
    }
    let tls = dir.path().join("tls");
    certs::init(&tls, &[]).unwrap();
    let allowed = std::fs::read_to_string(tls.join(certs::ALLOWED)).unwrap().replace(" client.pem\n", &format!(" db-host-1 {grants}\n"));
    std::fs::write(tls.join(certs::ALLOWED), allowed).unwrap();
    let served = ServedRepos::new(&[("a".into(), repos.join("a")), ("b".into(), repos.join("b"))], Arc::new(KeepWal)).unwrap();
    let agent = Agent::bind(&AgentConfig { listen: "127.0.0.1:0".into(), pgdata: None, repos: served, tls_dir: tls.clone(), max_connections: 16, threads: 1 }).unwrap();
    let addr = format!("127.0.0.1:{}", agent.local_addr().unwrap().port());
    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = sheaf_core::stop::Stop::new();
    let (l, s) = (log.clone(), stop.clone());
    std::thread::spawn(move || agent.serve(s, Arc::new(move |m: &str| l.lock().unwrap().push(m.to_string())), Default::default()));
    Site { _dir: dir, repos, tls, addr, log, stop }
}

fn store(s: &Site, tls: Option<&Path>) -> Arc<dyn Store> {
    let schemes = ServedSchemes::new(tls.map(Path::to_path_buf), std::time::Duration::from_secs(20));
    schemes.resolve("sheaf", &s.addr, "a/repo.json").unwrap().0
}

fn put(store: &dyn Store, name: &str, bytes: &[u8], overwrite: bool) -> sheaf_core::Result<()> {
    let mut sink = store.create(name, &WriteOptions { overwrite, ..Default::default() })?;
    sink.write_all(bytes)?;
    sink.sync()?;
    sink.publish()
}

#[test]
fn a_served_repository_passes_the_storage_conformance_suite() {
    let s = site("manage=a");
    let st = store(&s, Some(&s.tls));
    check_store(st.clone(), "a/conformance", 9 << 20);
    // What was published is in the served folder, under the name the client gave.
    put(st.as_ref(), "a/wal/00000001/x.wal", &payload(70_000), false).unwrap();
    assert_eq!(std::fs::read(s.repos.join("a/wal/00000001/x.wal")).unwrap(), payload(70_000));
    assert!(std::fs::read_dir(s.repos.join("a/wal/00000001")).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("partial")), "no temporary file left");
}

#[test]
fn a_client_gets_only_what_its_grant_says_and_refusals_are_logged_by_name() {
    let s = site("repos=a");
    let st = store(&s, Some(&s.tls));
    put(st.as_ref(), "a/wal/00000001/x.wal", b"segment", false).unwrap();
    put(st.as_ref(), "a/backups/1.lock", b"lock", false).unwrap();
    put(st.as_ref(), "a/retention.json", b"{}", false).unwrap();
    put(st.as_ref(), "a/retention.json", b"{\"again\":1}", true).unwrap();
    st.delete("a/backups/1.lock").unwrap();
    assert!(!s.repos.join("a/backups/1.lock").exists());

    // Archived WAL is neither replaced nor removed by a client without manage=.
    let e = put(st.as_ref(), "a/wal/00000001/x.wal", b"other bytes", true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(e.to_string().contains("archived WAL is kept") && e.to_string().contains("manage=a"), "{e}");
    let e = st.delete("a/wal/00000001/x.wal").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert_eq!(std::fs::read(s.repos.join("a/wal/00000001/x.wal")).unwrap(), b"segment", "the segment stands");

    // A name taken is the store's own error, kept across the wire.
    let e = put(st.as_ref(), "a/wal/00000001/x.wal", b"segment", false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");

    // Another repository on the same agent is not this client's.
    let e = st.list("b/").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    let e = put(st.as_ref(), "b/repo.json", b"{}", false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(!s.repos.join("b/repo.json").exists());
    // An unknown repository is an error, never "no such object" (a wal-fetch would take that for
    // the end of the archive), and the names served are not told.
    let e = st.list("c/").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("no repository named 'c'") && !e.to_string().contains("'a'"), "{e}");
    let e = st.exists("c/repo.json").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");

    // Names out of the repository are refused before anything is touched.
    for bad in ["a/../b/repo.json", "a//x", "a/./x"] {
        let e = put(st.as_ref(), bad, b"x", false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Denied, "{bad}: {e}");
    }

    let log = s.log.lock().unwrap().join("\n");
    let refused = |what: &str| log.lines().any(|l| l.contains("db-host-1 (SHA-256 ") && l.contains(&format!("refused: {what}")));
    assert!(refused("a/wal/00000001/x.wal: archived WAL is kept"), "{log}");
    assert!(refused("b/") && log.contains("not granted repository 'b'"), "{log}");
    assert!(refused("a: '../b/repo.json' is not an object's name"), "names out of the repository are logged too: {log}");

    // Without the client's certificate folder, the location names the flag.
    let schemes = ServedSchemes::new(None, std::time::Duration::from_secs(5));
    let e = schemes.resolve("sheaf", &s.addr, "a/repo.json").unwrap_err();
    assert!(e.to_string().contains("--tls-dir"), "{e}");
}

#[test]
fn a_write_the_agent_cannot_finish_leaves_nothing_and_says_why() {
    let s = site("repos=a");
    let st = store(&s, Some(&s.tls));
    // Refused at create (another repository), before a byte is sent.
    let e = st.create("b/backups/x/x_1.sheaf", &WriteOptions::default()).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    // A write dropped before publish leaves no file behind, and the connection serves again.
    let mut sink = st.create("a/backups/y/y_1.sheaf", &WriteOptions::default()).unwrap();
    sink.write_all(&payload(1 << 20)).unwrap();
    drop(sink);
    let left: Vec<String> = walk(&s.repos.join("a"));
    assert!(left.iter().all(|n| !n.contains("y_1")), "{left:?}");
    put(st.as_ref(), "a/backups/z.json", b"{}", false).unwrap();
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[test]
fn folders_that_overlap_are_not_served_and_a_database_host_reads_no_cluster_files() {
    let dir = tempfile::tempdir().unwrap();
    let (outer, inner) = (dir.path().join("r"), dir.path().join("r/inner"));
    std::fs::create_dir_all(&inner).unwrap();
    let e = ServedRepos::new(&[("a".into(), outer.clone()), ("b".into(), inner)], Arc::new(KeepWal)).unwrap_err();
    assert!(e.to_string().contains("one inside the other"), "{e}");
    let e = ServedRepos::new(&[("../x".into(), outer)], Arc::new(KeepWal)).unwrap_err();
    assert!(e.to_string().contains("name the repository"), "{e}");

    // An agent that serves a cluster's files and a repository: a certificate granted the
    // repository reads none of the cluster's files.
    let pgdata = dir.path().join("data");
    std::fs::create_dir_all(pgdata.join("global")).unwrap();
    std::fs::write(pgdata.join("global/pg_control"), 42_u64.to_le_bytes().repeat(4)).unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let tls = dir.path().join("tls");
    certs::init(&tls, &[]).unwrap();
    let allowed = std::fs::read_to_string(tls.join(certs::ALLOWED)).unwrap().replace(" client.pem\n", " db-host-2 repos=a\n");
    std::fs::write(tls.join(certs::ALLOWED), allowed).unwrap();
    let served = ServedRepos::new(&[("a".into(), repo)], Arc::new(KeepWal)).unwrap();
    let agent =
        Agent::bind(&AgentConfig { listen: "127.0.0.1:0".into(), pgdata: Some(pgdata.clone()), repos: served, tls_dir: tls.clone(), max_connections: 4, threads: 1 }).unwrap();
    let addr = format!("127.0.0.1:{}", agent.local_addr().unwrap().port());
    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = sheaf_core::stop::Stop::new();
    let (l, st) = (log.clone(), stop.clone());
    std::thread::spawn(move || agent.serve(st, Arc::new(move |m: &str| l.lock().unwrap().push(m.to_string())), Default::default()));
    let mut c = sheaf_agent::AgentClient::connect(&addr, &tls).unwrap();
    let e = c.stat(&pgdata.join("global/pg_control").display().to_string()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(e.to_string().contains("granted repositories, not the cluster's files"), "{e}");
    let schemes = ServedSchemes::new(Some(tls), std::time::Duration::from_secs(20));
    let store = schemes.resolve("sheaf", &addr, "a/repo.json").unwrap().0;
    put(store.as_ref(), "a/repo.json", b"{}", false).unwrap();
    stop.ask();
    assert!(log.lock().unwrap().iter().any(|l| l.contains("db-host-2 (SHA-256 ") && l.contains("refused: db-host-2 is granted repositories")), "{:?}", log.lock().unwrap());
}

/// A resumable write whose client went silent (a network cut: the agent has not seen its
/// connection end) is ended by the connection that takes the object over once it has sent nothing
/// for a few seconds: what it wrote stays, is read back whole, and the silent write's next request
/// is told why it failed. One still writing is not ended: the take-over waits, then is refused.
#[test]
fn a_take_over_ends_a_resumable_write_whose_client_went_silent() {
    let s = site("repos=a");
    let name = "a/backups/q/q_1.sheaf";
    let resumable = WriteOptions { keep_unfinished: true, ..Default::default() };
    let bytes = payload(3 << 20);
    let mut silent = store(&s, Some(&s.tls)).create(name, &resumable).unwrap();
    silent.write_all(&bytes).unwrap();
    silent.sync().unwrap();

    // Another client (its own connections): at once, the write is still held by a connection
    // that sent bytes a moment ago.
    let other = store(&s, Some(&s.tls));
    let started = std::time::Instant::now();
    let u = other.resume(name, &resumable).unwrap().expect("taken over once the write was silent");
    assert!(started.elapsed() >= std::time::Duration::from_secs(4), "not before it was silent: {:?}", started.elapsed());
    match u.holds() {
        sheaf_core::storage::Holding::Bytes(src) => {
            let mut back = vec![0u8; src.len() as usize];
            src.read_exact_at(&mut back, 0).unwrap();
            assert!(back == bytes, "what the silent write sent is kept whole ({} bytes of {})", back.len(), bytes.len());
        }
        sheaf_core::storage::Holding::Parts(_) => panic!("a folder's stripe is bytes"),
    }
    assert!(s.log.lock().unwrap().iter().any(|l| l.contains("ended another connection's write")), "{:?}", s.log.lock().unwrap());
    let e = silent.publish().unwrap_err();
    assert!(e.to_string().contains("took this unfinished object over"), "{e}");
    drop(silent);
    let mut w = u.go_on(bytes.len() as u64).unwrap();
    w.write_all(b"end").unwrap();
    w.publish().unwrap();
    assert_eq!(std::fs::metadata(s.repos.join("a/backups/q/q_1.sheaf")).unwrap().len(), bytes.len() as u64 + 3);

    // A write that goes on sending is never ended: the take-over is refused after its wait.
    let busy = "a/backups/r/r_1.sheaf";
    let mut live = store(&s, Some(&s.tls)).create(busy, &resumable).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let writer = std::thread::spawn(move || {
        while !d.load(std::sync::atomic::Ordering::Relaxed) {
            live.write_all(&[7u8; 4096]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        live.publish()
    });
    let e = other.resume(busy, &resumable).err().expect("refused while it is written");
    assert!(e.to_string().contains("being written by another process"), "{e}");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap().expect("the live write publishes");
}
