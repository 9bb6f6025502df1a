//! Archiving into the repository: wal-push idempotent and refusing what is not its cluster's or
//! user's, surviving a repository away and a push killed, looking ahead, prefetching, and
//! dropping WAL under --queue-max, said loudly.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::super::cluster::{pg_dir, Cluster};
use super::super::sheaf;
use super::*;
use crate::integration::common::{assert_fails, run, stderr, SHEAF};

#[test]
fn wal_push_is_idempotent_refuses_conflicts_and_other_clusters() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    c.sql("postgres", "CREATE TABLE x AS SELECT g FROM generate_series(1, 1000) g");
    let seg = archive_now(&c);
    let wal = c.data.join("pg_wal").join(&seg);
    let copy = base.path().join(&seg);
    std::fs::copy(&wal, &copy).unwrap();
    super::super::cluster::give_to_server(&copy);

    // The same segment again: success, said so.
    let again = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("archived already with the same content"), "{}", stderr(&again));

    // Different content under its name: refused, the archived one untouched.
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes[100_000] ^= 0xFF;
    std::fs::write(&copy, &bytes).unwrap();
    let conflict = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert_eq!(conflict.status.code(), Some(8), "{}", stderr(&conflict));
    assert!(stderr(&conflict).contains("already holds a different") && stderr(&conflict).contains("refusing to overwrite"), "{}", stderr(&conflict));
    let fetched = base.path().join("fetched");
    ok(run(sheaf().args(["wal-fetch", &seg, fetched.to_str().unwrap(), "--repo", r])), "wal-fetch");
    assert!(std::fs::read(&fetched).unwrap() == std::fs::read(&wal).unwrap(), "the archived segment is the original");

    // A damaged object stops recovery (exit 255) instead of looking like the archive's end.
    let object = repo.join(format!("wal/00000001/{seg}.wal"));
    let good = std::fs::read(&object).unwrap();
    let mut bad = good.clone();
    bad[200] ^= 0x55;
    std::fs::write(&object, &bad).unwrap();
    let damaged = run(sheaf().args(["wal-fetch", &seg, base.path().join("damaged").to_str().unwrap(), "--repo", r, "--parallel", "1"]));
    assert_eq!(damaged.status.code(), Some(255), "{}", stderr(&damaged));
    assert!(stderr(&damaged).contains("damaged") || stderr(&damaged).contains("checksum"), "{}", stderr(&damaged));
    assert!(!base.path().join("damaged").exists(), "nothing under %p");
    std::fs::write(&object, &good).unwrap();

    // Not in the archive: exit 1 without a word.
    let missing = run(sheaf().args(["wal-fetch", "0000000100000000000000FF", base.path().join("nope").to_str().unwrap(), "--repo", r]));
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).is_empty(), "quiet: {}", stderr(&missing));

    // Another cluster's segment, and a backup of another cluster: refused, naming both.
    let other = Cluster::new(&[], &[]);
    let theirs = other.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    let foreign = run(sheaf().args(["wal-push", other.data.join("pg_wal").join(&theirs).to_str().unwrap(), "--repo", r]));
    assert_eq!(foreign.status.code(), Some(2), "{}", stderr(&foreign));
    assert!(stderr(&foreign).contains("is of cluster") && stderr(&foreign).contains("repository of its own"), "{}", stderr(&foreign));
    let wrong = run(sheaf().args(["backup", &other.url("postgres"), "--repo", r]));
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("holds cluster") && stderr(&wrong).contains("sheaf repo upgrade") && stderr(&wrong).contains("repository of its own"), "{}", stderr(&wrong));
    assert!(!repo.join("backups").exists() || std::fs::read_dir(repo.join("backups")).unwrap().next().is_none(), "nothing written for a foreign backup");

    // No repository there: named, with the fix.
    let none = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", base.path().join("absent").to_str().unwrap()]));
    assert_eq!(none.status.code(), Some(7), "not there, not a bad argument");
    assert!(stderr(&none).contains("there is no sheaf repository") && stderr(&none).contains("sheaf init"), "{}", stderr(&none));
}

/// A repository belongs to the user who made it (here the cluster's, as archive_command runs):
/// root writing into it is refused before anything is written or the server is touched, naming
/// both users and the fix, and reading it as root still works.
#[test]
fn another_user_is_refused_writing_into_the_repository() {
    if !sheaf_core::host::is_root() {
        sheaf_core::testing::missing("root, to write as another user than the repository's");
        return;
    }
    let (_base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup as the repository's owner");
    let backups = || tree(&repo.join("backups"));
    let before = backups();
    let as_root = |args: &[&str]| run(crate::integration::common::sheaf().args(args));
    let o = as_root(&["backup", &c.url("postgres"), "--repo", r]);
    assert_fails(&o, 10, &[&format!("the repository {r} belongs to postgres"), "sheaf runs as root (uid 0)", "sudo -u postgres sheaf", "chown -R root"]);
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "the server was not touched");
    for args in [&["expire", "--repo", r, "--keep-full", "1"][..], &["wal-summarize", "--repo", r]] {
        assert_fails(&as_root(args), 10, &["belongs to postgres"]);
    }
    // (The archiver, the repository's owner, may still be storing the backup's history file.)
    assert_eq!(backups(), before, "no backup written, none removed");
    assert!(tree(&repo).iter().all(|(_, uid)| *uid != 0), "nothing of root's in the repository: {:?}", tree(&repo));
    // Reading is no hazard: info and verify as root.
    ok(as_root(&["info", "--repo", r]), "info as root");
    ok(as_root(&["verify", "--repo", r]), "verify as root");
}

#[test]
fn archiving_survives_an_unreachable_repository_and_a_killed_push() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    // Nothing in flight when the repository goes: a push of the backup's own WAL that had already
    // opened it would fail for another reason (its folder gone) than the one this test is about.
    archive_now(&c);

    // The repository goes away: archiving fails, PostgreSQL keeps the segments and retries.
    let away = base.path().join("away");
    std::fs::rename(&repo, &away).unwrap();
    for b in 1..=3 {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
        c.sql("postgres", "SELECT pg_switch_wal()");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver") == "0" {
        assert!(Instant::now() < deadline, "archiving never failed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("there is no sheaf repository"), "the server log says why: {log}");
    let pending = std::fs::read_dir(c.data.join("pg_wal/archive_status")).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".ready")).count();
    assert!(pending >= 3, "segments wait in pg_wal: {pending}");
    // Back: everything is archived and recovers.
    std::fs::rename(&away, &repo).unwrap();
    archive_now(&c);
    let back = recover(&repo, &base.path().join("after_outage"), &[]);
    assert_eq!(batches(&back), "1:100,2:100,3:100", "nothing written during the outage is lost");
    drop(back);

    // Not writable by the server's user: the push fails naming who and the fix; once fixed, the
    // waiting segment is archived.
    let timeline = repo.join("wal/00000001");
    std::fs::set_permissions(&timeline, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let failed = |c: &Cluster| c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver").parse::<u64>().unwrap();
    let before = failed(&c);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 4 FROM generate_series(1, 100) g");
    let waiting = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed(&c) == before {
        assert!(Instant::now() < deadline, "archiving into a read-only repository never failed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("is not writable by this user") && log.contains("the user PostgreSQL runs as"), "{log}");
    assert!(log.contains(&format!("{} is postgres's", timeline.display())), "the file and its owner are named: {log}");
    std::fs::set_permissions(&timeline, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    archive_now(&c);
    assert!(timeline.join(format!("{waiting}.wal")).exists());

    // A push killed mid-write leaves nothing that looks archived; the retry succeeds.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 9 FROM generate_series(1, 200000) g");
    let seg = c.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    c.sql("postgres", "CHECKPOINT");
    let copy = base.path().join(&seg);
    std::fs::copy(c.data.join("pg_wal").join(&seg), &copy).unwrap();
    super::super::cluster::give_to_server(&copy);
    let object = repo.join(format!("wal/00000001/{seg}.wal"));
    let partial = repo.join(format!("wal/00000001/{seg}.wal.partial"));
    let mut child = sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r, "-c", "zstd:19"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while std::fs::metadata(&partial).map(|m| m.len() == 0).unwrap_or(true) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the push never started writing");
        assert!(child.try_wait().unwrap().is_none(), "the push ended before it could be killed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!object.exists(), "no object under the final name");
    let missing = run(sheaf().args(["wal-fetch", &seg, base.path().join("f1").to_str().unwrap(), "--repo", r]));
    assert_eq!(missing.status.code(), Some(1), "a killed push is not archived");
    // The retry, and a second archiver pushing the same segment while the retry writes it (as
    // wal-receive and archive_command may): the second waits for the first, finds the same
    // content, and both succeed.
    // The killed push's .partial is still there: the retry has taken it over once it writes.
    let stale = std::fs::metadata(&partial).and_then(|m| m.modified()).ok();
    let retry = sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r, "-c", "zstd:19"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = Instant::now();
    let writing = || std::fs::metadata(&partial).is_ok_and(|m| m.len() > 0 && m.modified().ok() != stale);
    while !writing() && !object.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the retry never started writing");
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert!(second.status.success(), "a second archiver of the same segment: {}", stderr(&second));
    assert!(stderr(&second).contains("archived already with the same content"), "{}", stderr(&second));
    let retry = retry.wait_with_output().unwrap();
    assert!(retry.status.success(), "the retry: {}", stderr(&retry));
    assert!(!partial.exists());
    ok(run(sheaf().args(["wal-fetch", &seg, base.path().join("f2").to_str().unwrap(), "--repo", r])), "fetch");
    assert!(std::fs::read(base.path().join("f2")).unwrap() == std::fs::read(&copy).unwrap());
}

/// `.ready` files waiting in the cluster's pg_wal.
fn ready(c: &Cluster) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(c.data.join("pg_wal/archive_status"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_string_lossy().strip_suffix(".ready").map(str::to_string))
        .collect();
    v.sort();
    v
}

/// `sheaf ARGS` as the server's user in its data directory, as archive_command runs it.
fn as_archiver(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = sheaf_pg::drill::scratch::as_server_user(SHEAF);
    run(cmd.current_dir(&c.data).args(args))
}

#[test]
fn wal_push_looks_ahead_and_wal_fetch_prefetches() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    // The archiver fails on purpose, so finished segments wait as .ready.
    let mut c = Cluster::new(&[], &["archive_mode = on", "archive_command = 'false'", "archive_timeout = 0"]);
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    let mut segs = Vec::new();
    for i in 0..5 {
        c.sql("postgres", &format!("CREATE TABLE t{i} AS SELECT g FROM generate_series(1, 1000) g"));
        segs.push(c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())"));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !segs.iter().all(|s| ready(&c).contains(s)) {
        assert!(Instant::now() < deadline, "segments never became .ready: {:?}", ready(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    let archived = |s: &str| repo.join(format!("wal/00000001/{s}.wal")).exists();
    let push = |seg: &str| json(ok(as_archiver(&c, &["wal-push", &format!("pg_wal/{seg}"), "--repo", r, "--parallel", "3", "--json"]), "wal-push"));

    // One call pushes the asked-for segment and the next two .ready ones.
    let first = push(&segs[0]);
    let names: Vec<&str> = first["pushed"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, [&segs[0], &segs[1], &segs[2]], "{first}");
    assert_eq!(first["from_spool"], false);
    assert!(archived(&segs[2]) && !archived(&segs[3]));
    // The archiver's next call returns at once: the segment is known pushed.
    let second = push(&segs[1]);
    assert_eq!(second["from_spool"], true, "{second}");
    assert!(second["pushed"].as_array().unwrap().is_empty());
    // A marker vouches only for the file as it was pushed: touched since, it is checked again
    // (same content: already archived), and the look-ahead goes on.
    ok(run(std::process::Command::new("touch").arg(c.data.join("pg_wal").join(&segs[2]))), "touch");
    let third = push(&segs[2]);
    assert_eq!(third["from_spool"], false, "{third}");
    assert_eq!(third["pushed"][0]["already"], true, "{third}");
    assert!(archived(&segs[3]) && archived(&segs[4]), "{third}");

    // PostgreSQL's own archiver takes over and catches up.
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = '{} wal-push %p --repo {r}'", SHEAF));
    c.sql("postgres", "SELECT pg_reload_conf()");
    let last = archive_now(&c);
    assert!(ready(&c).is_empty(), "{:?}", ready(&c));
    assert!(archived(&last));
    c.stop();

    // Prefetch: serving one segment starts a prefetcher that fetches the next ones, checked.
    // `recovering` stands for a data directory's pg_wal; the prefetcher fetches while that data
    // directory's postmaster.pid names a live process (this one).
    let dest = base.path().join("recovering");
    pg_dir(&dest);
    let pid_file = base.path().join("postmaster.pid");
    std::fs::write(&pid_file, format!("{}\n{}\n", std::process::id(), base.path().display())).unwrap();
    let fetch = |seg: &str, n: &str| run(sheaf().args(["wal-fetch", seg, dest.join("RECOVERYXLOG").to_str().unwrap(), "--repo", r, "--parallel", n, "--json"]));
    let got = json(ok(fetch(&segs[0], "3"), "wal-fetch"));
    assert_eq!(got["from_spool"], false, "{got}");
    let spool = std::fs::read_dir(dest.join(".sheaf")).unwrap().next().unwrap().unwrap().path().join("in");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !segs[1..4].iter().all(|s| spool.join(s).exists()) {
        let log = std::fs::read_to_string(spool.parent().unwrap().join("prefetch.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "the prefetcher did not fetch {:?}: {log}", &segs[1..4]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = json(ok(fetch(&segs[1], "3"), "wal-fetch from the spool"));
    assert_eq!(served["from_spool"], true, "{served}");
    let from_spool = std::fs::read(dest.join("RECOVERYXLOG")).unwrap();
    let direct = base.path().join("direct");
    ok(run(sheaf().args(["wal-fetch", &segs[1], direct.to_str().unwrap(), "--repo", r, "--parallel", "1"])), "wal-fetch without prefetch");
    assert!(from_spool == std::fs::read(&direct).unwrap(), "the spooled segment is the archived one");
    assert!(!spool.join(&segs[1]).exists(), "served segments leave the spool");
    // The server stopped (its pid file gone): the prefetcher stops at once, long before its 10 s
    // idle end, and removes what recovery did not take.
    assert!(segs[2..4].iter().all(|s| spool.join(s).exists()), "{:?}", std::fs::read_dir(&spool).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    std::fs::remove_file(&pid_file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(4);
    while std::fs::read_dir(&spool).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("00000001")) {
        assert!(Instant::now() < deadline, "the prefetcher went on after its server stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    // With no server behind it (pg_rewind --restore-target-wal runs restore_command with its
    // target stopped) nothing is watched: the prefetcher fetches ahead as before.
    ok(fetch(&segs[2], "3"), "wal-fetch with no server running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !spool.join(&segs[3]).exists() {
        assert!(Instant::now() < deadline, "no prefetch without a server: {}", std::fs::read_to_string(spool.parent().unwrap().join("prefetch.log")).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the archive's end: a quiet miss, with or without prefetch.
    let miss = fetch("0000000100000000000000FF", "3");
    assert_eq!(miss.status.code(), Some(1), "{}", stderr(&miss));
    assert!(stderr(&miss).is_empty(), "{}", stderr(&miss));
    // Asked past the end, the prefetcher ends (its lock free) before the folder is removed.
    let lock = std::fs::File::open(spool.join(".lock")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        assert!(Instant::now() < deadline, "the prefetcher did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn queue_max_drops_wal_while_the_repository_is_away_and_says_so() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    // 16 MB segments: at most two may wait.
    let cmd = format!("archive_command = '{} wal-push %p --repo {r} --queue-max 40MB'", SHEAF);
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE TABLE t (id int, batch int)");
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    archive_now(&c);

    let away = base.path().join("away");
    std::fs::rename(&repo, &away).unwrap();
    for b in 1..=6 {
        c.sql("postgres", &format!("INSERT INTO t SELECT g, {b} FROM generate_series(1, 100) g"));
        c.sql("postgres", "SELECT pg_switch_wal()");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The archiver drops the oldest until no more than the bound waits; the rest wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    while ready(&c).len() > 2 {
        assert!(Instant::now() < deadline, "pg_wal kept {:?}; log: {}", ready(&c), std::fs::read_to_string(c.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("DROPPED from the archive") && log.contains("over queue-max") && log.contains("take a new backup"), "{log}");
    assert!(log.contains("there is no sheaf repository"), "the cause is named: {log}");

    // Back: what waited is archived, the drops are recorded in the repository and named by info,
    // and recovery refuses to cross the gap.
    std::fs::rename(&away, &repo).unwrap();
    archive_now(&c);
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    let dropped = info["dropped"].as_array().unwrap();
    assert!(dropped.len() >= 3, "{info}");
    assert!(dropped.iter().all(|d| d["queue_max"] == 40_000_000 && !repo.join(format!("wal/00000001/{}.wal", d["name"].as_str().unwrap())).exists()), "{info}");
    assert!(!info["gaps"].as_array().unwrap().is_empty(), "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(text.contains("WAL DROPPED") && text.contains("WAL GAP"), "{text}");
    let gap = run(sheaf().args(["restore", "--repo", r, "--to", base.path().join("gap").to_str().unwrap()]));
    assert_eq!(gap.status.code(), Some(4), "{}", stderr(&gap));
    assert!(stderr(&gap).contains("the archive has a gap"), "{}", stderr(&gap));
}
