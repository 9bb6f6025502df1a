//! MariaDB, against real servers: throwaway `mariadbd`s ([`sheaf_mariadb::scratch::Scratch`]),
//! loaded by sysbench and written to (DDL too) while they are backed up. A restore is judged by
//! the server's own word: the restored data directory recovers and starts, `mariadb-check` finds
//! nothing, and once the source's binary log from the position the backup recorded is replayed
//! onto it (row events, which fail on a row that is not as they expect), `CHECKSUM TABLE` of every
//! table equals the source's: the restore was exactly the source at its consistency point.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sheaf_mariadb::scratch::Scratch;

use super::common::{run, sheaf, stderr, stdout};

/// A throwaway server writing a row-based binary log, with `settings` besides.
fn server(settings: &[&str]) -> Scratch {
    let mut all = vec!["--log-bin=binlog", "--binlog-format=ROW", "--server-id=1"];
    all.extend_from_slice(settings);
    Scratch::create(&all).unwrap_or_else(|e| panic!("{e}"))
}

fn sql(s: &Scratch, q: &str) -> String {
    s.sql(q).unwrap_or_else(|e| panic!("{e}"))
}

fn sysbench(s: &Scratch, tables: u32, rows: u32, what: &[&str]) -> Command {
    sysbench_script(s, "oltp_read_write", tables, rows, what)
}

fn sysbench_script(s: &Scratch, script: &str, tables: u32, rows: u32, what: &[&str]) -> Command {
    let mut c = Command::new("sysbench");
    c.arg(script)
        .arg("--db-driver=mysql")
        .arg(format!("--mysql-socket={}", s.socket().display()))
        .args(["--mysql-user=root", "--mysql-db=sbtest"])
        .arg(format!("--tables={tables}"))
        .arg(format!("--table-size={rows}"))
        .args(what);
    c
}

/// sysbench's tables, `tables` × `rows`.
fn load_tables(s: &Scratch, tables: u32, rows: u32) {
    sql(s, "CREATE DATABASE sbtest");
    let o = sysbench(s, tables, rows, &["prepare"]).output().expect("sysbench (Debian's sysbench package)");
    assert!(o.status.success(), "sysbench prepare: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

/// sysbench oltp_read_write on `threads` threads until killed.
fn load(s: &Scratch, tables: u32, rows: u32, threads: u32) -> Child {
    sysbench(s, tables, rows, &[&format!("--threads={threads}"), "--time=0", "--events=0", "--report-interval=0", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// `CHECKSUM TABLE ... EXTENDED` of every table outside the system schemas, and the tables' list.
fn checksums(s: &Scratch) -> BTreeMap<String, String> {
    let tables = sql(s, "SELECT CONCAT(table_schema, '.', table_name) FROM information_schema.tables WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1");
    tables.lines().map(|t| (t.to_string(), sql(s, &format!("CHECKSUM TABLE {t} EXTENDED")))).collect()
}

fn backup_json(args: &[&str]) -> serde_json::Value {
    let o = run(sheaf().args(args).arg("--json"));
    assert!(o.status.success(), "sheaf {args:?}: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

/// The restored data directory `data`, started as backed up.
fn started(data: &Path, facts: &serde_json::Value) -> (Scratch, tempfile::TempDir) {
    let facts: sheaf_mariadb::MariaFacts = serde_json::from_value(facts.clone()).unwrap();
    let run = sheaf_mariadb::restore::run_dir(data).unwrap();
    let settings = sheaf_mariadb::restore::geometry(&facts);
    let mut s = Scratch::over(data, run.path(), &settings.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    s.start().unwrap_or_else(|e| panic!("the restored server does not start: {e}"));
    (s, run)
}

/// Replay `source`'s binary log from where the backup says it was consistent onto `restored`.
fn replay_from(source: &Scratch, restored: &Scratch, binlog: &serde_json::Value) {
    let file = binlog["file"].as_str().expect("a binary log file");
    let pos = binlog["position"].as_u64().expect("a position");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&source.data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("binlog.0") && p.file_name().unwrap().to_string_lossy().as_ref() >= file)
        .collect();
    logs.sort();
    let mut dump = Command::new("mariadb-binlog");
    dump.arg(format!("--start-position={pos}")).arg(&logs[0]);
    let first = dump.output().unwrap();
    assert!(first.status.success(), "mariadb-binlog: {}", String::from_utf8_lossy(&first.stderr));
    let mut events = first.stdout;
    for l in &logs[1..] {
        events.extend(Command::new("mariadb-binlog").arg(l).output().unwrap().stdout);
    }
    let mut client = Command::new("mariadb")
        .args(["--no-defaults", "-uroot"])
        .arg(format!("--socket={}", restored.socket().display()))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(client.stdin.as_mut().unwrap(), &events).unwrap();
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "replaying the binary log from {file}:{pos} onto the restore failed (it was not the source at that point): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mariadb_check(s: &Scratch) {
    let o = Command::new("mariadb-check").args(["--no-defaults", "-uroot", "--all-databases"]).arg(format!("--socket={}", s.socket().display())).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "mariadb-check: {text}{}", String::from_utf8_lossy(&o.stderr));
    let bad: Vec<&str> = text.lines().filter(|l| !l.trim_end().ends_with("OK") && !l.contains("doesn't support check") && l.contains('.')).collect();
    assert!(bad.is_empty(), "mariadb-check found: {bad:?}\n{text}");
}

fn common_wait(cond: impl FnMut() -> bool) {
    super::common::wait_for("the server to flush its pages", Duration::from_secs(60), cond);
}

/// DDL while the backup reads: tables created (and loaded), recreated at their names (TRUNCATE, a
/// copying ALTER) and dropped, until told to stop; returns how many rounds it did.
fn ddl_loop(s: &Scratch, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    sql(s, "CREATE DATABASE ddl");
    let url = s.socket();
    std::thread::spawn(move || {
        let q = |s: String| sheaf_mariadb::scratch::sql_at(&url, &s).unwrap_or_else(|e| panic!("{e}"));
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            q(format!("CREATE TABLE ddl.t{n} (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB"));
            q(format!("INSERT INTO ddl.t{n} SELECT seq, REPEAT('x', 90) FROM ddl.seq_1_to_2000"));
            if n >= 1 {
                q(format!("ALTER TABLE ddl.t{} FORCE, ALGORITHM=COPY", n - 1));
            }
            if n >= 2 {
                q(format!("TRUNCATE TABLE ddl.t{}", n - 2));
            }
            if n >= 3 {
                q(format!("DROP TABLE ddl.t{}", n - 3));
            }
            q("CREATE TABLE IF NOT EXISTS ddl.kept (id INT PRIMARY KEY) ENGINE=Aria".into());
            q(format!("INSERT INTO ddl.kept VALUES ({n})"));
            n += 1;
        }
        n
    })
}

/// The whole round: sysbench loading the server and DDL running while it is backed up to two
/// stripes (held back, so that both go on through the copy); the restore recovers, starts, checks
/// clean, and equals the source once the binary log from the recorded position is replayed.
#[test]
fn a_server_under_load_and_ddl_restores_to_its_consistency_point() {
    let src = server(&["--innodb-log-file-size=64M", "--innodb-max-dirty-pages-pct=0"]);
    load_tables(&src, 4, 30000);
    // Flushed, so that the tablespaces' pages are on disk to be read and checked.
    sql(&src, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001");
    common_wait(|| sql(&src, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'").parse::<u64>().unwrap() < 100);
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (dir.path().join("s1.sheaf"), dir.path().join("s2.sheaf"));
    let mut bench = load(&src, 4, 30000, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let ddl = ddl_loop(&src, stop.clone());
    std::thread::sleep(Duration::from_millis(1500));
    let v = backup_json(&["backup", &src.url(), "--to", s1.to_str().unwrap(), "--to", s2.to_str().unwrap(), "--max-rate", "4MiB", "-c", "zstd:1"]);
    stop.store(true, Ordering::Relaxed);
    let rounds = ddl.join().unwrap();
    let _ = bench.kill();
    let _ = bench.wait();
    let m = &v["mariadb"];
    assert!(rounds >= 2, "DDL ran during the backup ({rounds} rounds)");
    assert!(m["redo_bytes"].as_u64().unwrap() > 0 && m["end_lsn"].as_u64() > m["start_lsn"].as_u64(), "{m}");
    // Pages the server has not flushed yet are all zero on disk (the redo log holds them).
    assert!(m["pages_verified"].as_u64().unwrap() > 100 && m["pages_verified"].as_u64().unwrap() + m["pages_not_checked"].as_u64().unwrap() > 1500, "{m}");
    assert!(m["block_commit_seconds"].as_f64().unwrap() >= 0.0 && m["binlog"]["file"].is_string(), "{m}");
    // Tables created and dropped while the tablespaces were read (the ones recreated at their
    // names come and go with the timing).
    assert!(!m["ddl_created"].as_array().unwrap().is_empty() && !m["ddl_removed"].as_array().unwrap().is_empty(), "the backup saw the DDL: {m}");
    let o = run(sheaf().args(["verify", s1.to_str().unwrap()]));
    assert!(o.status.success(), "verify: {}", stderr(&o));

    let target = dir.path().join("restored");
    let o = run(sheaf().args(["restore", s1.to_str().unwrap(), "--to", target.to_str().unwrap(), "--json"]));
    assert!(o.status.success(), "restore: {}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(r["prepared"]["end_lsn"], m["end_lsn"], "{r}");
    assert!(!target.join("sheaf-redo.log").exists(), "the redo log's copy went into ib_logfile0");
    // The source's size, or more when the backup copied more redo log than the source holds.
    let want = sheaf_mariadb::redo::restored_size(m["log_file_size"].as_u64().unwrap(), m["redo_bytes"].as_u64().unwrap());
    assert_eq!(std::fs::metadata(target.join("ib_logfile0")).unwrap().len(), want, "{m}");
    assert!(!target.join("binlog.000001").exists(), "the binary log is not copied");
    let (back, _run) = started(&target, m);
    mariadb_check(&back);
    let kept = sql(&back, "SELECT COUNT(*) FROM ddl.kept");
    replay_from(&src, &back, &m["binlog"]);
    assert_eq!(checksums(&back), checksums(&src), "every table equals the source's once the binary log from the backup's position is replayed");
    let after: usize = sql(&back, "SELECT COUNT(*) FROM ddl.kept").parse().unwrap();
    assert!(after >= kept.parse::<usize>().unwrap());
    // A second restore into the same place is refused; --force replaces it.
    let o = run(sheaf().args(["restore", s1.to_str().unwrap(), "--to", target.to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("not empty"), "{}", stderr(&o));
}

/// A follower that falls behind a small redo log under a write load fails the backup, naming the
/// log's size and the fix; nothing that looks like a backup is left.
#[test]
fn a_redo_log_too_small_for_the_load_fails_clearly() {
    let src = server(&["--innodb-log-file-size=4M"]);
    load_tables(&src, 2, 20000);
    let dir = tempfile::tempdir().unwrap();
    let stripe = dir.path().join("s.sheaf");
    // Writes only, on eight threads: the redo log runs round its 4 MiB many times while the
    // follower sleeps.
    let mut bench =
        sysbench_script(&src, "oltp_write_only", 2, 20000, &["--threads=8", "--time=0", "--events=0", "run"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let o = run(sheaf().args(["backup", &src.url(), "--to", stripe.to_str().unwrap(), "--redo-poll", "10000", "--max-rate", "2MiB"]));
    let _ = bench.kill();
    let _ = bench.wait();
    assert!(!o.status.success(), "the backup must fail: {}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("innodb_log_file_size") && e.contains("before sheaf had copied it"), "{e}");
    assert!(!stripe.exists(), "no stripe is published");
    assert_eq!(sql(&src, "SELECT 1"), "1");
}

/// Refused, named with the fix: a user without the privileges (the GRANT named), a data
/// directory the user running sheaf cannot read, a server sheaf cannot reach, a URL naming a
/// database; a killed backup leaves no stripe and the server takes the next backup.
#[test]
fn what_a_mariadb_backup_cannot_do_is_refused_and_a_killed_one_leaves_nothing() {
    let src = server(&[]);
    load_tables(&src, 2, 20000);
    let dir = tempfile::tempdir().unwrap();
    let stripe = dir.path().join("s.sheaf");
    sql(&src, "CREATE USER weak@localhost");
    sql(&src, "GRANT SELECT ON *.* TO weak@localhost");
    let weak = format!("mariadb://weak@localhost/?socket={}", src.socket().display());
    let o = run(sheaf().args(["backup", &weak, "--to", stripe.to_str().unwrap()]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR ON *.* TO 'weak'@"), "{}", stderr(&o));
    assert!(!stripe.exists());
    // A link in the data directory (a database folder elsewhere) would restore as a link to the
    // live server's files: refused, naming it.
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), src.data.join("linked")).unwrap();
    let o = run(sheaf().args(["backup", &src.url(), "--to", stripe.to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("linked in the data directory is a symbolic link"), "{}", stderr(&o));
    std::fs::remove_file(src.data.join("linked")).unwrap();
    // sheaf as another user (nobody), who reaches the socket but not the data directory.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&src.run, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", super::common::SHEAF, "backup", &src.url(), "--to"])
        .arg(open.path().join("s.sheaf"))
        .env("SHEAF_CATALOG", open.path().join("catalog.db"))
        .env("HOME", open.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("Permission denied") && stderr(&o).contains("run it on the server's host as the user the server runs as"), "{}", stderr(&o));
    let o = run(sheaf().args(["backup", "mariadb://root@localhost/?socket=/nonexistent/mysqld.sock", "--to", stripe.to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("cannot connect to MariaDB") && stderr(&o).contains("socket"), "{}", stderr(&o));
    let o = run(sheaf().args(["backup", "mariadb://root@localhost/shop", "--to", stripe.to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("whole server"), "{}", stderr(&o));

    // Killed midway (held back to 2 MiB/s): no stripe, and the server's backup stage is gone with
    // the connection, so the next backup runs.
    let mut b = sheaf().args(["backup", &src.url(), "--to", stripe.to_str().unwrap(), "--max-rate", "2MiB"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(b.try_wait().unwrap().is_none(), "the backup was still running");
    b.kill().unwrap();
    b.wait().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".sheaf")).collect();
    assert!(names.is_empty(), "nothing that looks complete: {names:?}");
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", dir.path().join("r").to_str().unwrap()]));
    assert!(!o.status.success());
    // Interrupted (Ctrl-C): it stops, exits 130, and removes what it wrote.
    let b = sheaf().args(["backup", &src.url(), "--to", stripe.to_str().unwrap(), "--max-rate", "2MiB"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    rustix::process::kill_process(rustix::process::Pid::from_raw(b.id() as i32).unwrap(), rustix::process::Signal::INT).unwrap();
    let o = b.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let left: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.contains("sheaf")).collect();
    assert!(left.is_empty(), "an interrupted backup leaves nothing: {left:?}");
    let o = run(sheaf().args(["backup", &src.url(), "--to", stripe.to_str().unwrap()]));
    assert!(o.status.success(), "the next backup runs: {}", stderr(&o));
}

/// A MariaDB server's repository: made by init, backed up into under load (stripes, an
/// annotation), listed by info (its binary log positions), verified, restored by id to a server
/// that equals the source once the binary log from the recorded position is replayed, expired by
/// count of fulls; another server's backup, a point in time, and PostgreSQL's WAL refused.
#[test]
fn a_repository_keeps_a_mariadb_servers_backups_apart() {
    let src = server(&["--innodb-log-file-size=32M"]);
    load_tables(&src, 2, 20000);
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    let o = run(sheaf().args(["init", "--repo", r, &src.url()]));
    assert!(o.status.success(), "init: {}", stderr(&o));
    assert!(stdout(&o).contains("for MariaDB server"), "{}", stdout(&o));
    let mut bench = load(&src, 2, 20000, 1);
    let first = backup_json(&["backup", &src.url(), "--repo", r, "--stripes", "2", "--annotation", "why=before-migration"]);
    let second = backup_json(&["backup", &src.url(), "--repo", r]);
    let _ = bench.kill();
    let _ = bench.wait();
    let id1 = first["mariadb"]["repository_id"].as_str().expect("a repository id").to_string();
    let id2 = second["mariadb"]["repository_id"].as_str().unwrap().to_string();
    let info = stdout(&run(sheaf().args(["info", "--repo", r])));
    assert!(info.contains("MariaDB server") && info.contains(&id1) && info.contains(&id2) && info.contains("why=before-migration") && info.contains("binlog.000001:"), "{info}");
    let json: serde_json::Value = serde_json::from_str(stdout(&run(sheaf().args(["info", "--repo", r, "--json"]))).trim()).unwrap();
    assert_eq!(json["backups"].as_array().unwrap().len(), 2, "{json}");
    assert_eq!(json["meta"]["kind"], "mariadb", "{json}");
    let o = run(sheaf().args(["verify", "--repo", r]));
    assert!(o.status.success(), "verify: {}{}", stdout(&o), stderr(&o));

    // The first backup, by its annotation, restored and equal to the source from its position on.
    let target = dir.path().join("back");
    let o = run(sheaf().args(["restore", "--repo", r, "--annotation", "why=before-migration", "--to", target.to_str().unwrap(), "--json"]));
    assert!(o.status.success(), "restore: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["repository_backup"], id1.as_str());
    let (back, _run) = started(&target, &first["mariadb"]);
    replay_from(&src, &back, &first["mariadb"]["binlog"]);
    assert_eq!(checksums(&back), checksums(&src));
    drop(back);

    // Refused: a point in time, another server's backup, PostgreSQL's WAL.
    let o = run(sheaf().args(["restore", "--repo", r, "--target-time", "2026-01-01 00:00:00+00", "--to", dir.path().join("t").to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("binary log position"), "{}", stderr(&o));
    let other = server(&[]);
    let o = run(sheaf().args(["backup", &other.url(), "--repo", r]));
    assert!(!o.status.success() && stderr(&o).contains("a repository holds one server's backups"), "{}", stderr(&o));
    let o = run(sheaf().args(["wal-summarize", "--repo", r]));
    assert!(!o.status.success() && stderr(&o).contains("holds a MariaDB server's backups"), "{}", stderr(&o));

    // Drilled: restored, recovered, started and checked, its phases recorded and shown by info.
    let o = run(sheaf().args(["drill", "--repo", r, "--set", &id2, "--to", dir.path().join("drill").to_str().unwrap(), "--json"]));
    assert!(o.status.success(), "drill: {}{}", stdout(&o), stderr(&o));
    let d: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(d["passed"], true, "{d}");
    assert!(d["checks"].as_array().unwrap().iter().any(|c| c["check"] == "mariadb-check" && c["ok"] == true), "{d}");
    assert!(d["phases"]["recovery_seconds"].as_f64().unwrap() > 0.0, "{d}");
    assert!(!dir.path().join("drill").exists(), "the drill's folder is removed");
    assert!(stdout(&run(sheaf().args(["info", "--repo", r]))).contains("[drill passed"));

    // Expired to the newest full: the first goes.
    let o = run(sheaf().args(["expire", "--repo", r, "--keep-full", "1"]));
    assert!(o.status.success(), "expire: {}", stderr(&o));
    let json: serde_json::Value = serde_json::from_str(stdout(&run(sheaf().args(["info", "--repo", r, "--json"]))).trim()).unwrap();
    let ids: Vec<&str> = json["backups"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id2.as_str()], "{json}");
}

/// Incrementals and differentials: each holds the pages with an LSN past its parent's start
/// checkpoint (and every other file whole), far less than a full; each restores through its chain
/// to a server equal to the source once the binary log from its position is replayed.
#[test]
fn incrementals_hold_what_changed_and_restore_through_their_chain() {
    let src = server(&["--innodb-log-file-size=32M", "--innodb-max-dirty-pages-pct=0"]);
    load_tables(&src, 2, 30000);
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    assert!(run(sheaf().args(["init", "--repo", r, &src.url()])).status.success());
    for (t, v) in [("small", 1), ("small_new", 2)] {
        sql(&src, &format!("CREATE TABLE sbtest.{t} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"));
        sql(&src, &format!("INSERT INTO sbtest.{t} SELECT seq, seq * {v} FROM sbtest.seq_1_to_3000"));
    }
    // Flushed and checkpointed, so that the full's start checkpoint is past the load's pages.
    let status = |v: &str| sql(&src, &format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{v}'")).parse::<u64>().unwrap();
    super::common::wait_for("a checkpoint", Duration::from_secs(60), || status("INNODB_LSN_CURRENT") - status("INNODB_LSN_LAST_CHECKPOINT") < 64 << 10);
    let full = backup_json(&["backup", &src.url(), "--repo", r]);
    let change = |n: u32| {
        sql(&src, &format!("UPDATE sbtest.sbtest1 SET k = k + 1 WHERE id % 50 = {n}"));
        sql(&src, &format!("CREATE TABLE sbtest.added{n} (id INT PRIMARY KEY) ENGINE=InnoDB"));
        sql(&src, &format!("INSERT INTO sbtest.added{n} SELECT seq FROM sbtest.seq_1_to_1000"));
    };
    change(1);
    // A table swapped in by a rename (as online schema change tools do): another tablespace at
    // the parent's name, whose pages are older than the parent's start (both made before it), is
    // stored whole, not taken page by page from the parent's table of that name.
    sql(&src, "RENAME TABLE sbtest.small TO sbtest.small_old, sbtest.small_new TO sbtest.small");
    let mut bench = load(&src, 2, 30000, 1);
    let incr = backup_json(&["backup", &src.url(), "--repo", r, "--type", "incr"]);
    let _ = bench.kill();
    let _ = bench.wait();
    change(2);
    let diff = backup_json(&["backup", &src.url(), "--repo", r, "--type", "diff"]);
    let (full_id, incr_id, diff_id) =
        (full["mariadb"]["repository_id"].as_str().unwrap(), incr["mariadb"]["repository_id"].as_str().unwrap(), diff["mariadb"]["repository_id"].as_str().unwrap());
    let info: serde_json::Value = serde_json::from_str(stdout(&run(sheaf().args(["info", "--repo", r, "--json"]))).trim()).unwrap();
    let b = info["backups"].as_array().unwrap();
    let of = |id: &str| b.iter().find(|x| x["id"] == id).unwrap().clone();
    assert_eq!(of(incr_id)["backup_type"], "incr", "{info}");
    assert_eq!(of(incr_id)["chain"], serde_json::json!([full_id]), "{info}");
    assert_eq!(of(diff_id)["backup_type"], "diff", "{info}");
    assert_eq!(of(diff_id)["chain"], serde_json::json!([full_id]), "a differential builds on the full: {info}");
    let stored = |id: &str| of(id)["bytes_written"].as_u64().unwrap();
    assert!(stored(incr_id) * 3 < stored(full_id), "the incremental stores much less than the full: {} of {}", stored(incr_id), stored(full_id));
    assert_eq!(incr["mariadb"]["since_lsn"], full["mariadb"]["start_lsn"], "{incr}");

    for (id, v) in [(incr_id, &incr), (diff_id, &diff)] {
        let target = dir.path().join(format!("back-{id}"));
        let o = run(sheaf().args(["restore", "--repo", r, "--set", id, "--to", target.to_str().unwrap()]));
        assert!(o.status.success(), "restore {id}: {}", stderr(&o));
        let (back, _run) = started(&target, &v["mariadb"]);
        mariadb_check(&back);
        replay_from(&src, &back, &v["mariadb"]["binlog"]);
        assert_eq!(checksums(&back), checksums(&src), "backup {id} through its chain, then the binary log");
    }
    // A backup others build on is kept by expire --set, naming them.
    let o = run(sheaf().args(["expire", "--repo", r, "--set", full_id]));
    assert!(!o.status.success() && stderr(&o).contains(incr_id), "{}", stderr(&o));
}

/// `sheaf bench --engine mariadb`: a throwaway server loaded by sysbench, the sweep (codec ×
/// stripes over nul and a folder) and mariadb-backup as the peer in the same run, each restore
/// prepared; the report written and nothing left behind.
#[test]
fn the_bench_measures_sheaf_against_mariadb_backup() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (target, out) = (dir.path().join("target"), dir.path().join("report"));
    std::fs::create_dir(&target).unwrap();
    let o = run(sheaf()
        .args(["bench", "--engine", "mariadb", "--dataset", "sysbench:2x10000", "-c", "lz4,zstd:1", "--stripes", "1,2", "--repeat", "1", "--target"])
        .arg(format!("nul,{}", target.display()))
        .arg("--out")
        .arg(&out));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("warning"), "every run and the peer ran: {err}");
    let server =
        err.lines().find_map(|l| l.strip_prefix("sheaf bench: server in ")).map(|l| PathBuf::from(l.split(" on socket ").next().unwrap())).unwrap_or_else(|| panic!("{err}"));
    assert!(!server.exists(), "the throwaway server {} is removed", server.display());
    let mut csv = csv::Reader::from_path(out.join("report.csv")).unwrap();
    let rows: Vec<std::collections::HashMap<String, String>> = csv.deserialize().collect::<Result<_, _>>().unwrap();
    // 2 codecs × 2 stripe counts × 2 targets for sheaf; mariadb-backup once per codec.
    assert_eq!(rows.len(), 8 + 2, "{rows:#?}");
    for r in &rows {
        let f = |k: &str| r[k].parse::<f64>().unwrap_or_else(|_| panic!("{k} = '{}'", r[k]));
        assert!(f("backup_s_median") > 0.0 && f("size_bytes_median") > 1e5, "{r:?}");
        assert_eq!(r["restore_s_median"].is_empty(), r["target"] == "nul", "restores timed for the folder only: {r:?}");
    }
    let peer: Vec<_> = rows.iter().filter(|r| r["tool"] == "mariadb-backup").collect();
    assert_eq!(peer.len(), 2);
    assert!(peer.iter().all(|r| r["settings"].contains("--stream=mbstream")), "{peer:?}");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "the bench's folder in the target is removed");
}

/// The knobs of the PostgreSQL path apply: a codec and its level, stripes, chunk size, buffer
/// count, readers, a rate limit, encryption (a restore without the secret refused, exit 9), the
/// `nul` target; the backup is in the history catalog as a MariaDB one.
#[test]
fn every_knob_applies_to_a_mariadb_backup() {
    let src = server(&[]);
    load_tables(&src, 2, 10000);
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("pass");
    std::fs::write(&pass, "correct horse battery staple\n").unwrap();
    std::fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (s1, s2) = (dir.path().join("k1.sheaf"), dir.path().join("k2.sheaf"));
    let v = backup_json(&[
        "backup",
        &src.url(),
        "--to",
        s1.to_str().unwrap(),
        "--to",
        s2.to_str().unwrap(),
        "-c",
        "deflate:6",
        "--transfer-size",
        "4MiB",
        "--buffer-count",
        "7",
        "--readers",
        "2",
        "--max-rate",
        "200MiB",
        "--passphrase-file",
        pass.to_str().unwrap(),
        "--label",
        "knobs",
    ]);
    assert_eq!((v["compression"].as_str(), v["stripes"].as_u64(), v["buffer_count"].as_u64()), (Some("deflate:6"), Some(2), Some(7)), "{v}");
    assert_eq!(v["encryption"], "aes-256-gcm", "{v}");
    let nul = backup_json(&["backup", &src.url(), "--to", "nul", "-c", "lz4"]);
    assert!(nul["bytes_read"].as_u64().unwrap() > 1 << 20 && nul["mariadb"]["end_lsn"].as_u64().is_some(), "{nul}");
    let target = dir.path().join("back");
    let o = run(sheaf().args(["restore", s1.to_str().unwrap(), "--to", target.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(9), "no secret, no restore: {}", stderr(&o));
    let o = run(sheaf().args(["restore", s1.to_str().unwrap(), "--to", target.to_str().unwrap(), "--passphrase-file", pass.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    let (back, _run) = started(&target, &v["mariadb"]);
    assert_eq!(checksums(&back), checksums(&src), "nothing wrote since the backup: the tables equal the source's");
    drop(back);
    // Into the same folder again: refused, then replaced with --force, and it starts again.
    let again = |force: bool| {
        let mut c = sheaf();
        c.args(["restore", s1.to_str().unwrap(), "--to", target.to_str().unwrap(), "--passphrase-file", pass.to_str().unwrap()]);
        if force {
            c.arg("--force");
        }
        run(&mut c)
    };
    let o = again(false);
    assert_eq!(o.status.code(), Some(5), "a restore into a data directory is refused: {}", stderr(&o));
    let o = again(true);
    assert!(o.status.success(), "--force: {}", stderr(&o));
    let (back, _run2) = started(&target, &v["mariadb"]);
    assert_eq!(checksums(&back), checksums(&src));
    let list = stdout(&run(sheaf().args(["list", "--json"])));
    assert!(list.contains("\"mariadb\"") && list.contains("knobs"), "the catalog records it: {list}");
}
