//! The agent on 127.0.0.1 with certificates made as `sheaf agent --init-certs` makes them: what
//! it serves, and what it refuses (paths out of the cluster, certificates not on its list or
//! expired, a client of another CA, a client that speaks no TLS).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use sheaf_agent::repos::ServedRepos;
use sheaf_agent::{certs, proto};
use sheaf_agent::{Agent, AgentClient, AgentConfig};
use sheaf_core::ErrorKind;
use time::{Duration, OffsetDateTime};

struct Fixture {
    _dir: tempfile::TempDir,
    pgdata: PathBuf,
    tablespace: PathBuf,
    tls: PathBuf,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    stop: sheaf_core::stop::Stop,
    reload: Arc<AtomicBool>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.ask();
    }
}

/// A data directory (with a tablespace link out of it and a symlink to /etc), certificates, and
/// an agent serving it.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let pgdata = dir.path().join("data");
    let tablespace = dir.path().join("space");
    std::fs::create_dir_all(pgdata.join("global")).unwrap();
    std::fs::create_dir_all(pgdata.join("base/5")).unwrap();
    std::fs::create_dir_all(pgdata.join("pg_tblspc")).unwrap();
    std::fs::create_dir_all(tablespace.join("PG_15_202209061/5")).unwrap();
    std::fs::write(pgdata.join("global/pg_control"), 7_341_234_u64.to_le_bytes().repeat(4)).unwrap();
    std::fs::write(pgdata.join("base/5/16384"), (0..3 * 8192).map(|i| (i % 251) as u8).collect::<Vec<u8>>()).unwrap();
    std::fs::write(tablespace.join("PG_15_202209061/5/16400"), b"in the tablespace").unwrap();
    std::os::unix::fs::symlink(&tablespace, pgdata.join("pg_tblspc/16399")).unwrap();
    std::os::unix::fs::symlink("/etc", pgdata.join("etc")).unwrap();
    std::fs::write(dir.path().join("secret"), b"outside").unwrap();
    let tls = dir.path().join("tls");
    certs::init(&tls, &[]).unwrap();
    let agent =
        Agent::bind(&AgentConfig { listen: "127.0.0.1:0".into(), pgdata: Some(pgdata.clone()), repos: ServedRepos::none(), tls_dir: tls.clone(), max_connections: 8, threads: 2 })
            .unwrap();
    let addr = format!("127.0.0.1:{}", agent.local_addr().unwrap().port());
    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = sheaf_core::stop::Stop::new();
    let (l, s, reload) = (log.clone(), stop.clone(), agent.reload_flag());
    std::thread::spawn(move || agent.serve(s, Arc::new(move |m: &str| l.lock().unwrap().push(m.to_string())), Default::default()));
    Fixture { _dir: dir, pgdata, tablespace, tls, addr, log, stop, reload }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn it_serves_the_cluster_s_files_and_nothing_outside() {
    let f = fixture();
    let mut c = AgentClient::connect(&f.addr, &f.tls).unwrap();
    assert_eq!(c.hello.system_identifier, "7341234");
    assert!(c.hello.roots.iter().any(|r| Path::new(r) == f.tablespace.canonicalize().unwrap()), "{:?}", c.hello.roots);

    let (listed, warnings) = c.list(&p(&f.pgdata)).unwrap();
    assert!(warnings.is_empty());
    let names: Vec<&str> = listed.iter().map(|l| l.entry.path.as_str()).collect();
    for want in ["", "global/pg_control", "base/5/16384", "pg_tblspc/16399", "etc"] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let link = listed.iter().find(|l| l.entry.path == "pg_tblspc/16399").unwrap();
    assert_eq!(link.entry.target.as_deref(), Some(p(&f.tablespace).as_str()), "links are listed, not followed");
    let stat = c.stat(&p(&f.pgdata.join("base/5/16384"))).unwrap();
    assert_eq!(stat.entry.size, 3 * 8192);

    // A range, whole, and past the end.
    let mut buf = vec![0u8; 8192];
    assert_eq!(c.read_at(&p(&f.pgdata.join("base/5/16384")), 8192, &mut buf).unwrap(), 8192);
    assert!(buf.iter().enumerate().all(|(i, b)| *b == ((8192 + i) % 251) as u8));
    let mut all = Vec::new();
    let end = c.read(&p(&f.pgdata.join("base/5/16384")), 0, u64::MAX, |d| {
        all.extend_from_slice(d);
        Ok(())
    });
    let end = end.unwrap();
    assert_eq!((all.len(), end.read, end.size_at_open, end.changed), (3 * 8192, 3 * 8192, 3 * 8192, false));
    // Through the tablespace's link, and in the tablespace itself.
    let mut t = vec![0u8; 64];
    let n = c.read_at(&p(&f.pgdata.join("pg_tblspc/16399/PG_15_202209061/5/16400")), 0, &mut t).unwrap();
    assert_eq!(&t[..n], b"in the tablespace");
    assert_eq!(c.list(&p(&f.tablespace)).unwrap().0.len(), 4);

    // Out of the cluster: .., a symlink out, a relative path, a plain absolute path elsewhere.
    let out = f.pgdata.parent().unwrap();
    for (path, why) in [
        (format!("{}/base/../../secret", p(&f.pgdata)), "outside the cluster's directories"),
        (format!("{}/etc/passwd", p(&f.pgdata)), "outside the cluster's directories"),
        ("base/5/16384".to_string(), "absolute path"),
        (p(&out.join("secret")), "outside the cluster's directories"),
    ] {
        let e = c.read_at(&path, 0, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Denied, "{path}: {e}");
        assert!(!e.is_transient(), "a refusal is not tried again: {e}");
        assert!(e.to_string().contains(why), "{path}: {e}");
    }
    assert!(c.list(&p(out)).unwrap_err().to_string().contains("outside"));
    assert!(c.stat(&format!("{}/etc/passwd", p(&f.pgdata))).unwrap_err().to_string().contains("outside"));
    let e = c.read_at(&p(&f.pgdata.join("base/5/nothing")), 0, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // The connection is still good after every refusal.
    assert_eq!(c.stat(&p(&f.pgdata.join("global/pg_control"))).unwrap().entry.size, 32);
}

#[test]
fn a_listing_streams_in_tree_order_as_this_host_s_walk_gives_it_and_names_come_without_stats() {
    use sheaf_core::source::Files;
    let f = fixture();
    // More entries than one list frame carries, and an unlogged relation's init fork.
    for i in 0..2500 {
        std::fs::write(f.pgdata.join(format!("base/5/{}", 20000 + i)), b"x").unwrap();
    }
    std::fs::write(f.pgdata.join("base/5/20000_init"), b"").unwrap();
    let files = sheaf_agent::AgentFiles::connect(&f.addr, &f.tls).unwrap();
    let seen = |l: sheaf_core::Result<sheaf_core::source::Listed>| {
        let l = l.unwrap();
        (l.entry, l.abs, l.dev, l.ino, l.nlink)
    };
    for root in [&f.pgdata, &f.tablespace] {
        let mut walk = files.walk(root, 3).unwrap();
        let remote: Vec<_> = walk.by_ref().map(seen).collect();
        let local: Vec<_> = sheaf_core::source::Walk::new(root, 3).unwrap().map(seen).collect();
        assert!(remote.len() > 1, "{}", remote.len());
        assert_eq!(remote, local, "the agent's walk of {} lists what this host's does, in its order", root.display());
        assert!(walk.take_warnings().is_empty());
    }
    assert!(f.pgdata.join("base/5").read_dir().unwrap().count() > proto::LIST_BATCH);
    let mut names = Vec::new();
    files.each_name(&f.pgdata.join("base/5"), &mut |n| names.push(n.to_string_lossy().into_owned())).unwrap();
    names.sort();
    let mut want: Vec<String> = f.pgdata.join("base/5").read_dir().unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    want.sort();
    assert_eq!(names, want);
    // A folder gone has no names; one outside the cluster is refused; the pool still serves.
    files.each_name(&f.pgdata.join("base/999"), &mut |n| panic!("{n:?} in a missing folder")).unwrap();
    let e = files.each_name(f.pgdata.parent().unwrap(), &mut |_| ()).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    let e = files.walk(f.pgdata.parent().unwrap(), 0).unwrap().next().unwrap().unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    assert_eq!(files.list_one(&f.pgdata.join("base/5/20001"), "base/5/20001".into(), 0).unwrap().unwrap().entry.size, 1);
    // Decided by the wire's kind: a file that is not there is none, and opens as NotFound; a
    // failure of another kind (a name too long to stat) is an error, never taken for "none".
    assert!(files.list_one(&f.pgdata.join("base/5/gone"), "base/5/gone".into(), 0).unwrap().is_none());
    assert_eq!(files.open(&f.pgdata.join("base/5/gone")).err().unwrap().kind(), ErrorKind::NotFound);
    let long = f.pgdata.join("base/5").join("x".repeat(300));
    let e = files.list_one(&long, "base/5/x".into(), 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Source, "{e}");
}

#[test]
fn certificates_off_the_list_expired_or_of_another_ca_and_plain_tcp_are_refused() {
    let f = fixture();
    let now = OffsetDateTime::now_utc();
    // Signed by the CA, but not on the allow-list.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(f.tls.join(certs::CA), other.path().join(certs::CA)).unwrap();
    certs::issue_client(&f.tls, other.path(), "client", now - Duration::hours(1), now + Duration::days(1)).unwrap();
    let e = AgentClient::connect(&f.addr, other.path()).err().unwrap();
    assert!(e.to_string().contains("not in the agent's allowed-clients"), "{e}");
    // Every refusal of a certificate is one kind (one exit code), and final.
    assert_eq!((e.kind(), e.is_transient()), (ErrorKind::Denied, false), "{e}");

    // On the list, but expired.
    let expired = tempfile::tempdir().unwrap();
    std::fs::copy(f.tls.join(certs::CA), expired.path().join(certs::CA)).unwrap();
    let fp = certs::issue_client(&f.tls, expired.path(), "client", now - Duration::days(10), now - Duration::days(1)).unwrap();
    std::fs::OpenOptions::new().append(true).open(f.tls.join(certs::ALLOWED)).unwrap().write_all(format!("{fp} expired\n").as_bytes()).unwrap();
    let e = AgentClient::connect(&f.addr, expired.path()).err().unwrap();
    // Refused for good, whether the alert came or the connection closed first; sheaf's hint says why.
    assert_eq!((e.kind(), e.is_transient()), (ErrorKind::Denied, false), "{e}");
    assert!(e.to_string().contains("unexpired"), "{e}");

    // A client of another CA: the agent's certificate is not trusted, nor the client's.
    let stranger = tempfile::tempdir().unwrap();
    certs::init(&stranger.path().join("tls"), &[]).unwrap();
    let e = AgentClient::connect(&f.addr, &stranger.path().join("tls")).err().unwrap();
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    assert_eq!((e.kind(), e.is_transient()), (ErrorKind::Denied, false), "{e}");

    // Plain TCP: no answer but the end of the connection.
    let mut raw = std::net::TcpStream::connect(&f.addr).unwrap();
    raw.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let ask = serde_json::to_vec(&sheaf_agent::proto::Request::Read { path: p(&f.pgdata.join("base/5/16384")), offset: 0, len: 100 }).unwrap();
    let mut frame = vec![sheaf_agent::proto::REQUEST];
    frame.extend_from_slice(&(ask.len() as u32).to_le_bytes());
    frame.extend_from_slice(&ask);
    raw.write_all(&frame).unwrap();
    let mut got = Vec::new();
    let _ = raw.read_to_end(&mut got);
    assert!(!got.windows(4).any(|w| w == [0u8, 1, 2, 3]), "no file bytes in clear");
    assert!(got.len() < 64, "only a TLS alert comes back: {} bytes", got.len());

    // The agent said why it refused each.
    let log = f.logged(&["not on the allow-list"]);
    let t0 = std::time::Instant::now();
    while f.log.lock().unwrap().join("\n").matches("TLS handshake failed").count() < 3 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // And the rightful client still gets in.
    assert!(AgentClient::connect(&f.addr, &f.tls).is_ok());
}

#[test]
fn init_certs_never_overwrites_and_keeps_keys_private() {
    let d = tempfile::tempdir().unwrap();
    let tls = d.path().join("tls");
    let made = certs::init(&tls, &["db1.example".into(), "10.0.0.5".into()]).unwrap();
    assert!(made.server_names.contains(&"db1.example".to_string()) && made.server_names.contains(&"127.0.0.1".to_string()));
    use std::os::unix::fs::PermissionsExt;
    for (name, mode) in [(certs::CA_KEY, 0o600), (certs::SERVER_KEY, 0o600), (certs::CLIENT_KEY, 0o600), (certs::CA, 0o644), (certs::CLIENT, 0o644)] {
        assert_eq!(std::fs::metadata(tls.join(name)).unwrap().permissions().mode() & 0o777, mode, "{name}");
    }
    assert_eq!(std::fs::metadata(&tls).unwrap().permissions().mode() & 0o777, 0o700);
    let allowed = std::fs::read_to_string(tls.join(certs::ALLOWED)).unwrap();
    assert!(allowed.contains(&made.client_fingerprint));
    let before = std::fs::read(tls.join(certs::CA_KEY)).unwrap();
    let e = certs::init(&tls, &[]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TargetNotEmpty);
    assert_eq!(std::fs::read(tls.join(certs::CA_KEY)).unwrap(), before, "the CA's key is untouched");
    assert!(certs::init(&d.path().join("bad"), &["not a name!".into()]).is_err());
}

/// A backup of `root` through `files` into two stripes in `out`, then restored and compared.
fn backup_through(files: sheaf_agent::AgentFiles, root: &Path, out: &Path, codec: &str, encrypted: bool) -> sheaf_core::BackupReport {
    use sheaf_core::{Backup, BackupOptions, Location, NoProgress, RestoreOptions, Tuning};
    std::fs::create_dir_all(out).unwrap();
    let stripes: Vec<Location> = (0..2).map(|k| Location::file(out.join(format!("s{k}.sheaf")))).collect();
    let mut opts = BackupOptions::new(stripes.clone());
    opts.codec = sheaf_core::CodecSpec::parse(codec).unwrap();
    opts.transfer_size = 256 << 10;
    let keys = encrypted.then(|| Arc::new(sheaf_core::Keys::from_passphrase(b"k".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap()));
    opts.encryption = keys.clone().map(|k| sheaf_core::crypto::Encryption { kdf: k.fresh_kdf().unwrap(), keys: k });
    let files: Arc<dyn sheaf_core::source::Files> = Arc::new(files);
    let mut b = Backup::start(&opts, Tuning::resolve(&opts, 1).unwrap(), Arc::new(NoProgress)).unwrap();
    b.read_through(files.clone());
    b.add_tree_streamed(sheaf_core::manifest::Root { name: String::new(), path: p(root) }, files.walk(root, 0).unwrap()).unwrap();
    let r = b.finish(serde_json::json!({ "kind": "directory" })).unwrap();
    let set = sheaf_core::BackupSet::open_with(&stripes, &sheaf_core::LocalOnly, keys.as_deref()).unwrap();
    let back = out.join("restored");
    sheaf_core::restore(&set, &RestoreOptions::new(&back), Arc::new(NoProgress)).unwrap();
    sheaf_core::datagen::compare_trees(root, &back).unwrap();
    r
}

#[test]
fn the_agent_compresses_chunks_that_restore_byte_for_byte() {
    let f = fixture();
    let rel = f.pgdata.join("base/5");
    // Text-like pages, a hole of zeros, noise that does not shrink, and a tail of odd length.
    let mut big: Vec<u8> = (0..(3u32 << 20)).map(|i| b"lineitem|1995-03-15|DELIVER IN PERSON|"[(i % 38) as usize]).collect();
    big.extend(std::iter::repeat_n(0u8, 1 << 20));
    big.extend((0..(700u32 << 10) + 123).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    std::fs::write(rel.join("16500"), &big).unwrap();
    std::fs::write(rel.join("16501"), &big[..300 << 10]).unwrap();
    let raw: u64 = big.len() as u64 + (300 << 10) + 3 * 8192;

    let plain = sheaf_agent::AgentFiles::connect(&f.addr, &f.tls).unwrap();
    let counted = plain.clone();
    let d = tempfile::tempdir().unwrap();
    let r = backup_through(plain, &rel, &d.path().join("host"), "zstd:low", false);
    assert_eq!(r.bytes_read, raw);
    assert!(counted.received() >= raw - (1 << 20), "raw bytes cross the link (all but the zeros): {} of {raw}", counted.received());

    for (codec, encrypted) in [("zstd:low", false), ("lz4", true), ("deflate:1", false)] {
        let files = sheaf_agent::AgentFiles::connect(&f.addr, &f.tls).unwrap().compressing(sheaf_core::CodecSpec::parse(codec).unwrap()).unwrap();
        let counted = files.clone();
        let r = backup_through(files, &rel, &d.path().join(codec), codec, encrypted);
        assert_eq!(r.bytes_read, raw, "{codec}");
        // Compressed text, no zeros, the noise raw: well under half.
        assert!(counted.received() < raw / 2, "{codec}: {} of {raw} bytes crossed the link", counted.received());
        assert!(r.bytes_written < raw / 2, "{codec}: {}", r.bytes_written);
    }
    for bad in ["auto", "none"] {
        let e = sheaf_agent::AgentFiles::connect(&f.addr, &f.tls).unwrap().compressing(sheaf_core::CodecSpec::parse(bad).unwrap()).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("--compress-on agent"), "{e}");
    }
}

impl Fixture {
    /// Wait (up to 10 s) for a log line holding every one of `parts`; the line.
    fn logged(&self, parts: &[&str]) -> String {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| parts.iter().all(|p| l.contains(p))) {
                return l.clone();
            }
            assert!(t0.elapsed().as_secs() < 10, "no log line with {parts:?}: {:?}", self.log.lock().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Reload the allow-list (what SIGHUP does) and wait until it is done.
    fn reload(&self) -> String {
        let before = self.log.lock().unwrap().iter().filter(|l| l.contains("reloaded")).count();
        self.reload.store(true, std::sync::atomic::Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        loop {
            let log = self.log.lock().unwrap();
            let reloads: Vec<&String> = log.iter().filter(|l| l.contains("reloaded")).collect();
            if reloads.len() > before {
                return reloads[before].clone();
            }
            assert!(t0.elapsed().as_secs() < 10, "no reload: {log:?}");
            drop(log);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[test]
fn a_client_added_or_removed_counts_after_a_reload_and_open_connections_go_on() {
    let f = fixture();
    let file = p(&f.pgdata.join("base/5/16384"));
    let added = certs::add_client(&f.tls, "backup-2", &[]).unwrap();
    for n in [certs::CA, certs::CLIENT, certs::CLIENT_KEY] {
        assert!(added.dir.join(n).exists(), "{n} in {}", added.dir.display());
    }
    assert!(std::fs::read_to_string(f.tls.join(certs::ALLOWED)).unwrap().contains(&format!("{} backup-2", added.fingerprint)));
    for (name, want) in [("backup-2", "already lists"), ("../x", "letters, digits"), ("", "letters, digits")] {
        let e = certs::add_client(&f.tls, name, &[]).unwrap_err();
        assert!(e.to_string().contains(want), "{name}: {e}");
    }
    let e = certs::add_client(&added.dir, "x", &[]).unwrap_err();
    assert!(e.to_string().contains("no CA key"), "{e}");

    // Listed, but the agent read its list before: refused until the reload.
    let e = AgentClient::connect(&f.addr, &added.dir).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    let mut first = AgentClient::connect(&f.addr, &f.tls).unwrap();
    let line = f.reload();
    assert!(line.contains("added: backup-2") && line.contains("removed: none"), "{line}");
    let mut second = AgentClient::connect(&f.addr, &added.dir).unwrap();
    let mut buf = vec![0u8; 100];
    assert_eq!(second.read_at(&file, 0, &mut buf).unwrap(), 100);
    drop(second);
    let done = f.logged(&["backup-2 (SHA-256", "done after", "1 reads of 1 files", "closed by the client"]);
    assert!(done.contains("bytes sent"), "{done}");
    f.logged(&["backup-2 (SHA-256", "connected, served"]);

    // The first host's line removed: new connections refused, the open one goes on.
    let text = std::fs::read_to_string(f.tls.join(certs::ALLOWED)).unwrap();
    std::fs::write(f.tls.join(certs::ALLOWED), text.lines().filter(|l| !l.ends_with("client.pem")).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let line = f.reload();
    assert!(line.contains("removed: client.pem") && line.contains("1 clients admitted"), "{line}");
    let e = AgentClient::connect(&f.addr, &f.tls).err().unwrap();
    assert!(e.to_string().contains("not in the agent's allowed-clients"), "{e}");
    assert_eq!(first.read_at(&file, 8192, &mut buf).unwrap(), 100, "a connection open before the reload goes on");
    // A list that no longer reads keeps the one in force.
    std::fs::write(f.tls.join(certs::ALLOWED), "# nobody\n").unwrap();
    f.reload.store(true, std::sync::atomic::Ordering::SeqCst);
    f.logged(&["not reloaded", "lists no client certificate"]);
    AgentClient::connect(&f.addr, &added.dir).unwrap();
}

#[test]
fn certificates_near_their_end_are_warned_of_a_month_ahead() {
    let f = fixture();
    let now = OffsetDateTime::now_utc();
    let secs = now.unix_timestamp();
    assert!(certs::expiring(&f.tls, secs, 30).unwrap().is_empty(), "new ones are good for ten years");
    assert_eq!(certs::expiries(&f.tls).unwrap().len(), 3, "the CA's, the agent's and the client's");
    let soon = tempfile::tempdir().unwrap();
    certs::issue_client(&f.tls, soon.path(), "client", now - Duration::days(1), now + Duration::days(10)).unwrap();
    let w = certs::expiring(soon.path(), secs, 30).unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(!w[0].expired && w[0].file.ends_with("client.pem") && matches!((w[0].until - secs) / 86_400, 9 | 10), "{w:?}");
    let days = format!("in {} days", (w[0].until - secs) / 86_400);
    assert!(w[0].message.contains("client.pem expires on") && w[0].message.contains(&days) && w[0].message.contains("--add-client"), "{w:?}");
    assert!(certs::expiring(soon.path(), secs, 5).unwrap().is_empty());
    let gone = tempfile::tempdir().unwrap();
    certs::issue_client(&f.tls, gone.path(), "client", now - Duration::days(10), now - Duration::days(1)).unwrap();
    let w = certs::expiring(gone.path(), secs, 30).unwrap();
    assert!(w[0].expired && w[0].until < secs && w[0].message.contains("expired on"), "{w:?}");
}
