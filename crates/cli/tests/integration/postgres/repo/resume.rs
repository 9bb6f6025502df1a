//! Issue 54, part 2: a full backup into the repository killed midway is resumed by the next one.
//! Under a pgbench load through every attempt, a backup is killed (SIGKILL) at a third of its
//! stripe, the next is stopped (SIGTERM) at two thirds, and the third finishes: it says what it took from the
//! attempts before, the files it took are not read again, it verifies, and a point-in-time
//! recovery to a restore point made after it equals the source there and passes pg_amcheck.
//! `--no-resume` removes an unfinished backup and starts afresh.

use std::process::{Child, Stdio};

use super::*;

/// The stripe file an unfinished backup writes (`backups/ID/ID_1.sheaf.partial`), once there is one.
pub(super) fn partial(repo: &Path) -> Option<PathBuf> {
    for d in std::fs::read_dir(repo.join("backups")).ok()? {
        let d = d.ok()?.path();
        if d.is_dir() {
            let id = d.file_name()?.to_str()?.to_string();
            let p = d.join(format!("{id}_1.sheaf.partial"));
            if p.exists() {
                return Some(p);
            }
        }
    }
    None
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Start a backup (at most 12 MiB per second into the repository), wait until its stripe holds
/// `bytes` or more, and stop it: with SIGKILL, as a power cut would, or (`term`) with SIGTERM,
/// which it answers by stopping and saying that what it stored stays. The size its stripe reached.
fn kill_at(c: &Cluster, repo: &Path, bytes: u64, term: bool) -> u64 {
    kill_at_rate(c, repo, bytes, term, "12MiB")
}

/// [`kill_at`], the backup written at `rate` (`--max-rate`).
pub(super) fn kill_at_rate(c: &Cluster, repo: &Path, bytes: u64, term: bool, rate: &str) -> u64 {
    let mut b: Child =
        sheaf().args(["backup", &c.url("postgres"), "--repo", repo.to_str().unwrap(), "--max-rate", rate]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(p) = partial(repo) {
            if size(&p) >= bytes {
                break;
            }
        }
        assert!(b.try_wait().unwrap().is_none(), "the backup ended before it was killed");
        assert!(Instant::now() < deadline, "the stripe never reached {bytes} bytes");
        std::thread::sleep(Duration::from_millis(20));
    }
    if term {
        rustix::process::kill_process(rustix::process::Pid::from_child(&b), rustix::process::Signal::TERM).unwrap();
        let o = b.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(143), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains("the next full backup goes on from it"), "{}", String::from_utf8_lossy(&o.stderr));
    } else {
        b.kill().unwrap();
        // Waited for, so that its lock names a process that is gone.
        b.wait().unwrap();
    }
    size(&partial(repo).expect("the stopped backup's stripe stays"))
}

/// Eight tables written before the first attempt and never again (taken), and pgbench's, written
/// the whole time by the load returned (read again).
fn loaded(c: &Cluster) -> Child {
    for i in 1..=8 {
        c.sql("app", &format!("CREATE TABLE s{i} AS SELECT g AS id, md5((g * {i})::text) || md5(g::text) AS v FROM generate_series(1, 120000) g"));
    }
    ok(run(c.tool("pgbench").args(["-i", "-s", "3", "-q", "app"])), "pgbench -i");
    // Nothing left for autovacuum to write in them, every page on disk, and a second between
    // their last write and the first attempt's start.
    c.sql("app", "VACUUM (FREEZE, ANALYZE)");
    c.sql("app", "CHECKPOINT");
    std::thread::sleep(Duration::from_millis(1500));
    c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// A digest of every row of the eight static tables.
fn contents(c: &Cluster) -> String {
    let each: Vec<String> = (1..=8).map(|i| format!("(SELECT md5(string_agg(id || v, ',' ORDER BY id)) FROM s{i})")).collect();
    c.sql("app", &format!("SELECT {}", each.join(" || ")))
}

#[test]
fn a_full_backup_killed_twice_under_load_is_resumed_and_recovers_to_a_restore_point() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let mut load = loaded(&c);
    let tables = contents(&c);

    // How big a whole stripe is: the same backup into a file of its own.
    let probe = base.path().join("probe.sheaf");
    let whole = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--to", probe.to_str().unwrap(), "--json"])), "a backup to measure"));
    let total = whole["bytes_written"].as_u64().unwrap();

    // Killed at a third, then at two thirds: nothing looks finished, the unfinished backup shows.
    let one = kill_at(&c, &repo, total / 3, false);
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    let states: Vec<&str> = info["backups"].as_array().unwrap().iter().map(|b| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["unfinished"], "{info}");
    assert!(info["backups"][0]["objects"].as_array().unwrap().iter().any(|o| o.as_str().unwrap().contains("/resume-0000-files-")), "{info}");
    let two = kill_at(&c, &repo, total * 2 / 3, true);
    assert!(two > one, "the second attempt went on past the first: {one} then {two}");

    // The third finishes, and says what it took.
    let b = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"])), "the resumed backup"));
    let resumed = &b["resumed"];
    assert_eq!(resumed["attempt"], 2, "{b}");
    let taken = resumed["bytes"].as_u64().unwrap();
    assert!(resumed["files"].as_u64().unwrap() >= 2 && taken >= 4 << 20, "it took files of the attempts before: {resumed}");
    let read = b["bytes_read"].as_u64().unwrap();
    assert!(read + taken >= whole["bytes_read"].as_u64().unwrap() * 9 / 10, "taken and read make the cluster: {read} + {taken}");
    assert!(read < whole["bytes_read"].as_u64().unwrap(), "what it took was not read again: {read}");
    let id = b["postgres"]["repository_id"].as_str().unwrap().to_string();
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(text.contains(&id) && text.contains("[resumed: attempt 3"), "{text}");
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    assert_eq!(info["backups"][0]["resumed"]["files"], resumed["files"], "{info}");
    assert!(!repo.join("backups").join(&id).read_dir().unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains("resume-")), "its journal is gone");
    ok(run(sheaf().args(["verify", "--repo", r])), "verify");

    // A restore point after it, the load stopped: the recovered cluster equals the source there.
    verified_and_recovered(base.path(), &TestRepo::existing(&repo), &c, &mut load, &b, &tables);

    // --no-resume: the unfinished backup goes, and the new one holds everything itself.
    kill_at(&c, &repo, total / 3, false);
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--no-resume", "--json"]));
    assert!(stderr(&o).contains("was left unfinished: removed, as --no-resume asks"), "{}", stderr(&o));
    let b = json(ok(o, "backup --no-resume"));
    assert!(b.get("resumed").is_none(), "{b}");
    assert!(partial(&repo).is_none(), "nothing unfinished is left");
}

/// The load stopped, resumed backup `v` verifies, and a point-in-time recovery to a restore
/// point made after it equals the source there: pgbench's balances agree, the static tables equal
/// `tables` (the source's, taken before the first attempt), and pg_amcheck is clean.
fn verified_and_recovered(base: &Path, repo: &TestRepo, c: &Cluster, load: &mut Child, v: &serde_json::Value, tables: &str) {
    let id = v["postgres"]["repository_id"].as_str().unwrap().to_string();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let _ = load.kill();
    let _ = load.wait();
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
    let invariant = pgbench_invariant(c);
    assert_eq!(contents(c), tables, "the static tables were never written");
    c.sql("app", "SELECT pg_create_restore_point('after_resume')");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 100) g");
    archive_now(c);
    ok(run(repo.sheaf().args(["verify", "--repo", &repo.arg])), "verify");
    let back = repo.recover(&base.join("back"), &["--set", &id, "--target-name", "after_resume"]);
    assert_eq!(back.sql("app", "SELECT string_agg(DISTINCT batch::text, ',') FROM t"), "1", "recovered to the restore point");
    assert_eq!(pgbench_invariant(&back), invariant, "pgbench's balances agree with the source's");
    assert_eq!(contents(&back), tables, "the tables taken from the earlier attempts are the source's");
    let o = run(back.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
}

/// A backup into `repo` held back to 12 MiB per second (with `args` besides), started.
fn held_back(repo: &TestRepo, c: &Cluster, args: &[&str]) -> Child {
    let url = c.url("postgres");
    repo.sheaf().args(["backup", &url, "--repo", &repo.arg, "--max-rate", "12MiB"]).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// The same in an encrypted repository in a MinIO bucket: the killed backup's upload is left open,
/// and the next backup sends its parts to it after the parts it keeps, reading nothing back;
/// killed twice, the result verifies and restores with the tables it took equal to the source's,
/// and nothing is left open; a killed backup given up with --no-resume has its upload aborted.
#[test]
fn a_full_backup_killed_in_an_encrypted_bucket_is_resumed() {
    let base = super::super::cluster::server_tempdir("sheaf-resume-s3.");
    let repo = TestRepo::encrypted_bucket(base.path());
    let c = repo.cluster();
    let mut load = loaded(&c);
    let tables = contents(&c);
    let probe = base.path().join("probe.sheaf");
    let whole = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--to", probe.to_str().unwrap(), "--json"])), "a backup to measure"));
    // At 12 MiB/s into the bucket, in parts of 5 MiB: killed after about half of the time the
    // whole takes, then its resumption killed after a quarter more. Each goes on from the parts
    // the one before left in its upload, never read back.
    let seconds = whole["bytes_written"].as_u64().unwrap() as f64 / f64::from(12 << 20);
    let held_back = || held_back(&repo, &c, &["--s3-part-size", "5MiB"]);
    for (n, share) in [0.5, 0.25].into_iter().enumerate() {
        let mut b = held_back();
        std::thread::sleep(Duration::from_secs_f64(seconds * share));
        assert!(b.try_wait().unwrap().is_none(), "backup {} ended before it was killed", n + 1);
        b.kill().unwrap();
        b.wait().unwrap();
    }

    let minio = repo.minio().expect("a bucket");
    // Stripes' uploads (the archiver's, of WAL under load, come and go meanwhile).
    let stripes_open = || minio.open_uploads("chains").into_iter().filter(|k| k.contains("/backups/")).collect::<Vec<_>>();
    assert!(!stripes_open().is_empty(), "the killed backup's upload stays open for the next");
    let v = json(ok(run(repo.sheaf().args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--s3-part-size", "5MiB", "--json"])), "the resumed backup"));
    let resumed = &v["resumed"];
    assert_eq!(resumed["attempt"], 2, "{v}");
    assert!(resumed["files"].as_u64().unwrap() >= 2 && resumed["kept_stored_bytes"].as_u64().unwrap() > 5 << 20, "{resumed}");
    assert_eq!(stripes_open(), Vec::<String>::new(), "nothing left open once it is published");
    verified_and_recovered(base.path(), &repo, &c, &mut load, &v, &tables);

    // Killed again and given up with --no-resume: its upload is aborted, not left to be billed.
    let mut b = held_back();
    crate::integration::common::wait_for("a part uploaded", Duration::from_secs(60), || !stripes_open().is_empty());
    std::thread::sleep(Duration::from_secs_f64(seconds * 0.3));
    b.kill().unwrap();
    b.wait().unwrap();
    ok(run(repo.sheaf().args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--no-resume"])), "backup --no-resume");
    assert_eq!(stripes_open(), Vec::<String>::new(), "the given-up backup's upload is aborted");
}

/// Files under `dir` whose names say they are unfinished (`.partial`).
fn unfinished_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().contains(".partial")) {
                out.push(p);
            }
        }
    }
    out
}

/// A full backup under load into `repo` (whose files are in `on_disk`, where it has files) killed
/// at about half its time is resumed by the next: it keeps what the first stored, verifies, and
/// restores to a cluster whose tables equal the source's and pass pg_amcheck; nothing unfinished
/// is left.
fn killed_at_half_and_resumed(base: &Path, repo: &TestRepo, on_disk: Option<&Path>) {
    let c = repo.cluster();
    let mut load = loaded(&c);
    let tables = contents(&c);
    let probe = base.join("probe.sheaf");
    let whole = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--to", probe.to_str().unwrap(), "--json"])), "a backup to measure"));
    let seconds = whole["bytes_written"].as_u64().unwrap() as f64 / f64::from(12 << 20);
    let mut b = held_back(repo, &c, &[]);
    std::thread::sleep(Duration::from_secs_f64(seconds * 0.5));
    assert!(b.try_wait().unwrap().is_none(), "the backup ended before it was killed");
    b.kill().unwrap();
    b.wait().unwrap();
    if let Some(d) = on_disk {
        assert!(!unfinished_in(&d.join("backups")).is_empty(), "the killed backup's stripe stays unfinished in {}", d.display());
    }

    let v = json(ok(run(repo.sheaf().args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--json"])), "the resumed backup"));
    let resumed = &v["resumed"];
    assert_eq!(resumed["attempt"], 1, "{v}");
    assert!(resumed["files"].as_u64().unwrap() >= 2 && resumed["kept_stored_bytes"].as_u64().unwrap() > 1 << 20, "{resumed}");
    assert!(v["bytes_read"].as_u64().unwrap() < whole["bytes_read"].as_u64().unwrap(), "what it took was not read again: {v}");
    if let Some(d) = on_disk {
        // Of backups: the archiver's WAL, pushed meanwhile, is written under a temporary name too.
        assert_eq!(unfinished_in(&d.join("backups")), Vec::<PathBuf>::new(), "nothing unfinished is left once it is published");
    }
    verified_and_recovered(base, repo, &c, &mut load, &v, &tables);
}

/// Into a repository a backup host's agent serves: the agent keeps the stripe its killed client
/// was writing, and hands it to the next backup's connection to read back and go on writing.
#[test]
fn a_full_backup_killed_on_the_way_to_a_backup_host_is_resumed() {
    let (base, _) = repo_dir();
    let (repo, host) = TestRepo::served(base.path());
    killed_at_half_and_resumed(base.path(), &repo, Some(&host.folder));
    assert!(host.logged().contains("took over"), "the agent says it handed an unfinished stripe over: {}", host.logged());
}

/// Over SFTP: the killed backup's temporary file stays on the server, and the next backup reads it
/// back, cuts it where its last good frame ends and goes on writing it.
#[test]
fn a_full_backup_killed_on_the_way_to_an_sftp_server_is_resumed() {
    let (base, _) = repo_dir();
    let repo = TestRepo::sftp(base.path());
    killed_at_half_and_resumed(base.path(), &repo, Some(&base.path().join("sftp-repo")));
}

/// In an Azure container (Azurite): the killed backup's blocks stay uncommitted under numbers of
/// sheaf's, and the next backup commits them with its own after them, reading nothing back.
#[test]
fn a_full_backup_killed_on_the_way_to_azure_is_resumed() {
    let (base, _) = repo_dir();
    let repo = TestRepo::azure_container();
    killed_at_half_and_resumed(base.path(), &repo, None);
}

/// In a GCS bucket (fake-gcs-server): the killed backup's parts are objects of their own, hidden
/// from listings; the next backup writes its own after those it keeps and composes them all.
#[test]
fn a_full_backup_killed_on_the_way_to_gcs_is_resumed() {
    let (base, _) = repo_dir();
    let repo = TestRepo::gcs_bucket(base.path());
    killed_at_half_and_resumed(base.path(), &repo, None);
}
