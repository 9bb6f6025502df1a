//! sheaf's WAL reader against PostgreSQL's own: every record of real WAL (inserts, updates, DDL,
//! databases made both ways, truncation, VACUUM, full-page images) decoded by sheaf lists the
//! same blocks at the same LSNs as pg_waldump prints.

use std::collections::BTreeMap;

use sheaf_pg::wal::read::{Decoder, PAGE};

use super::cluster::Cluster;
use crate::integration::common::{run, stderr};

type Blocks = Vec<(u32, u32, u32, u8, u32)>;

fn lsn(text: &str) -> u64 {
    let (hi, lo) = text.trim_end_matches(',').split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

fn lsn_text(l: u64) -> String {
    format!("{:X}/{:08X}", l >> 32, l & 0xffff_ffff)
}

/// pg_waldump's records: LSN to the blocks it references, from lines such as
/// `... lsn: 0/01A2B3C8, prev ..., desc: ... blkref #0: rel 1663/5/16384 fork vm blk 0` (15) or
/// `... blkref #0: rel 1663/5/16384, fork vm, blk 0` (16 and later).
fn waldump(text: &str) -> BTreeMap<u64, Blocks> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("rmgr:")) {
        let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
        let at = words.iter().position(|w| *w == "lsn:").unwrap();
        let mut blocks = Vec::new();
        let mut i = 0;
        while i < words.len() {
            if words[i] == "blkref" {
                let rel: Vec<u32> = words[i + 3].split('/').map(|n| n.parse().unwrap()).collect();
                let mut j = i + 4;
                let mut fork = 0;
                if words[j] == "fork" {
                    fork = match words[j + 1] {
                        "main" => 0,
                        "fsm" => 1,
                        "vm" => 2,
                        "init" => 3,
                        other => panic!("fork {other}"),
                    };
                    j += 2;
                }
                assert_eq!(words[j], "blk", "{line}");
                blocks.push((rel[0], rel[1], rel[2], fork, words[j + 1].parse().unwrap()));
                i = j + 2;
            } else {
                i += 1;
            }
        }
        out.insert(lsn(words[at + 1]), blocks);
    }
    out
}

#[test]
fn the_wal_reader_finds_what_pg_waldump_finds() {
    let c = Cluster::new(&[], &["wal_level = replica"]);
    // Keep every segment from here on: the checkpoint below would recycle them.
    c.sql("postgres", "SELECT pg_create_physical_replication_slot('keep', true)");
    let first = c.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    let start = lsn(&c.sql("postgres", "SELECT pg_current_wal_lsn()"));
    for sql in [
        "CREATE TABLE t (id int primary key, pad text)",
        "INSERT INTO t SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g",
        "UPDATE t SET pad = 'y' WHERE id % 7 = 0",
        "DELETE FROM t WHERE id > 15000",
        "VACUUM t",
        "CHECKPOINT",
        "UPDATE t SET pad = 'after the checkpoint' WHERE id < 50",
        "CREATE DATABASE copied STRATEGY FILE_COPY",
        "CREATE DATABASE logged STRATEGY WAL_LOG",
        "DROP DATABASE copied",
        "CREATE TABLE big AS SELECT g, md5(g::text) FROM generate_series(1, 50000) g",
        "TRUNCATE big",
        "DROP TABLE big",
    ] {
        c.sql("postgres", sql);
    }
    let end = c.sql("postgres", "SELECT pg_current_wal_insert_lsn()");
    let last = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let theirs = if c.bin.join("pg_waldump").exists() {
        let dump = run(std::process::Command::new(c.bin.join("pg_waldump")).arg("-p").arg(c.data.join("pg_wal")).arg(&first).arg(&last));
        let printed = String::from_utf8_lossy(&dump.stdout).into_owned();
        assert!(!printed.is_empty(), "pg_waldump: {}", stderr(&dump));
        waldump(&printed)
    } else {
        // A server without its pg_waldump (the npm packages of 16 and 17 have none, and another
        // major's refuses this WAL): the server's own decoder, pg_walinspect, whose block_ref
        // reads as pg_waldump's blkref lines.
        c.sql("postgres", "CREATE EXTENSION pg_walinspect");
        let rows = c.sql("postgres", &format!("SELECT start_lsn, coalesce(block_ref, '') FROM pg_get_wal_records_info('{}', '{end}') ORDER BY start_lsn", lsn_text(start)));
        waldump(&rows.lines().map(|l| l.split_once('|').map_or(String::new(), |(at, refs)| format!("rmgr: x lsn: {at}, desc: {refs}"))).collect::<Vec<_>>().join("\n"))
    };
    assert!(theirs.len() > 1000, "{} records", theirs.len());

    let seg: u64 = c.sql("postgres", "SELECT setting::bigint * (CASE unit WHEN 'MB' THEN 1048576 ELSE 1 END) FROM pg_settings WHERE name = 'wal_segment_size'").parse().unwrap();
    let mut d = Decoder::new(seg, None);
    let mut ours: BTreeMap<u64, Blocks> = BTreeMap::new();
    let (from, to) = (u64::from_str_radix(&first[16..24], 16).unwrap(), u64::from_str_radix(&last[16..24], 16).unwrap());
    let per = 0x1_0000_0000 / seg;
    let log = u64::from_str_radix(&first[8..16], 16).unwrap();
    for segno in log * per + from..=log * per + to {
        let name = format!("{}{:08X}{:08X}", &first[..8], segno / per, segno % per);
        let bytes = std::fs::read(c.data.join("pg_wal").join(&name)).unwrap();
        for (i, page) in bytes.chunks(PAGE).enumerate() {
            d.feed(segno * seg + (i * PAGE) as u64, page, &mut |r| {
                ours.insert(r.lsn, r.blocks.iter().map(|b| (b.locator.spc, b.locator.db, b.locator.rel, b.fork, b.block)).collect());
                Ok(())
            })
            .unwrap();
        }
    }
    // pg_waldump starts at the first record of its first segment; so do we.
    let theirs: BTreeMap<u64, Blocks> = theirs.into_iter().filter(|(l, _)| *l >= start).collect();
    let ours: BTreeMap<u64, Blocks> = ours.into_iter().filter(|(l, _)| *l >= start && *l <= *theirs.keys().last().unwrap()).collect();
    assert_eq!(ours.len(), theirs.len(), "records: ours {} theirs {}; ended: {:?}", ours.len(), theirs.len(), d.end());
    for (l, b) in &theirs {
        assert_eq!(ours.get(l), Some(b), "record at {l:X}");
    }
}

/// The cases PostgreSQL's own WAL summarizer got wrong at first, each an incremental that must
/// restore right: a database dropped and made again by FILE_COPY under the same OID, visibility
/// map bits cleared by an update (not a block reference in WAL), and WAL written at
/// `wal_level = minimal` (then the summaries are not trusted). Also: `wal-summarize` fills in
/// summaries that are missing, and a segment missing from the archive and pg_wal sends the
/// incremental to the page scan, saying why.
#[test]
fn incrementals_survive_what_the_first_wal_summarizers_missed() {
    use super::repo::{archive_now, json, ok, recover, setup};
    use super::sheaf;
    let (base, repo, mut c) = setup();
    let r = repo.to_str().unwrap();
    let backup = |c: &Cluster, extra: &[&str]| json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"]).args(extra)), "backup"));
    c.sql("postgres", "CREATE DATABASE lakh OID = 100000 STRATEGY = FILE_COPY");
    c.sql("lakh", "CREATE TABLE t1 AS SELECT 1 AS x");
    c.sql("app", "CREATE TABLE vis (id int, pad text) WITH (autovacuum_enabled = off)");
    c.sql("app", "INSERT INTO vis SELECT g, repeat('v', 100) FROM generate_series(1, 5000) g");
    c.sql("app", "VACUUM (FREEZE) vis");
    archive_now(&c);
    backup(&c, &["--type", "full"]);

    // Dropped and made again, same OID, by copying its template: t1 must not come back.
    c.sql("postgres", "DROP DATABASE lakh");
    c.sql("postgres", "CREATE DATABASE lakh OID = 100000 STRATEGY = FILE_COPY");
    // Visibility map bits cleared by updates, which name only the heap page in WAL.
    c.sql("app", "UPDATE vis SET pad = 'changed' WHERE id % 50 = 0");
    archive_now(&c);
    let incr = backup(&c, &["--type", "incr", "--check-changes"]);
    assert!(incr["postgres"]["method"].as_str().unwrap().contains("checked against the WAL summaries"), "{incr}");
    let id = incr["postgres"]["repository_id"].as_str().unwrap();
    // The backup's own WAL is archive_command's to push (the stop does not wait for it): waited
    // for here, or a loaded machine restores before the last segment is in (a race, seen once).
    archive_now(&c);
    let out = base.path().join("out");
    super::cluster::pg_dir(&out);
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let restored = recover(&repo, &out.join("a"), &["--set", id, "--target", "immediate"]);
    assert_eq!(restored.sql("lakh", "SELECT to_regclass('public.t1') IS NULL"), "t", "t1 came back in the remade database");
    // The visibility map agrees with the heap: an index-only count and VACUUM find no stale bit.
    assert_eq!(restored.sql("app", "SELECT count(*) FROM vis WHERE pad = 'changed'"), "100");
    restored.sql("app", "VACUUM vis");
    let log = std::fs::read_to_string(restored.log()).unwrap_or_default();
    assert!(!log.contains("visibility map bit is set"), "{log}");
    drop(restored);

    // Summaries lost: wal-summarize makes them again, and a second run finds nothing to do.
    for o in walk(&repo.join("wal")) {
        if o.extension().is_some_and(|e| e == "sum") {
            std::fs::remove_file(o).unwrap();
        }
    }
    let filled = json(ok(run(sheaf().args(["wal-summarize", "--repo", r, "--json"])), "wal-summarize"));
    assert!(!filled["made"].as_array().unwrap().is_empty(), "{filled}");
    let again = json(ok(run(sheaf().args(["wal-summarize", "--repo", r, "--json"])), "wal-summarize"));
    assert!(again["made"].as_array().unwrap().is_empty() && again["kept"].as_u64().unwrap() > 0, "{again}");

    // WAL written at wal_level = minimal: the summaries cannot vouch for it; the page scan decides.
    for s in ["wal_level = minimal", "max_wal_senders = 0", "archive_mode = off"] {
        c.sql("postgres", &format!("ALTER SYSTEM SET {}", s.replace(" = ", " TO ")));
    }
    c.stop();
    c.start();
    c.sql("app", "BEGIN; CREATE TABLE quiet (x int); INSERT INTO quiet SELECT generate_series(1, 1000); COMMIT");
    c.sql("app", "UPDATE vis SET pad = 'minimal' WHERE id % 70 = 0");
    for s in ["wal_level", "max_wal_senders", "archive_mode"] {
        c.sql("postgres", &format!("ALTER SYSTEM RESET {s}"));
    }
    c.stop();
    c.start();
    archive_now(&c);
    let after = backup(&c, &["--type", "incr"]);
    let method = after["postgres"]["method"].as_str().unwrap();
    assert!(method.starts_with("page scan") && (method.contains("minimal") || method.contains("neither archived")), "{after}");
    let id = after["postgres"]["repository_id"].as_str().unwrap();
    let restored = recover(&repo, &out.join("b"), &["--set", id, "--target", "immediate"]);
    assert_eq!(restored.sql("app", "SELECT count(*) FROM quiet"), "1000");
    assert_eq!(restored.sql("app", "SELECT count(*) FROM vis WHERE pad = 'minimal'"), c.sql("app", "SELECT count(*) FROM vis WHERE pad = 'minimal'"));
}

/// Segments whose summaries are missing (an older repository, or a wal-push that could not store
/// them) are summarized on the spot, each from where the one before it ended: records run across
/// the segments' boundaries, and a segment summarized alone would start after the one it
/// continues and leave a gap.
#[test]
fn an_incremental_summarizes_what_lacks_a_summary_from_where_the_last_one_ended() {
    use super::repo::{archive_now, json, ok, setup};
    use super::sheaf;
    let (_base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let backup = |extra: &[&str]| json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"]).args(extra)), "backup"));
    archive_now(&c);
    backup(&["--type", "full"]);
    // About 50 MB of WAL: three segment boundaries or more, each inside a record.
    c.sql("app", "CREATE TABLE big AS SELECT g AS id, repeat('w', 200) AS pad FROM generate_series(1, 200000) g");
    archive_now(&c);
    let sums: Vec<_> = walk(&repo.join("wal")).into_iter().filter(|o| o.extension().is_some_and(|e| e == "sum")).collect();
    assert!(sums.len() >= 4, "wal-push summarized what it archived: {sums:?}");
    for o in sums {
        std::fs::remove_file(o).unwrap();
    }
    let incr = backup(&["--type", "incr", "--check-changes"]);
    assert!(incr["postgres"]["method"].as_str().unwrap().contains("checked against the WAL summaries"), "{incr}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
