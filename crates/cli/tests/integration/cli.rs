//! The `sheaf` binary against bad input and faults: each case checks the exit code, that the message
//! names the stripe and region (or file) at fault, and that nothing is left looking complete.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sheaf_core::format::{IndexEntry, Trailer, FRAME_HEADER_LEN, HEADER_LEN, TRAILER_LEN};

use super::common::{assert_fails, catalog, s, sheaf, stderr, stdout, SHEAF};

/// The catalog's runs whose stripes include `stripe`.
fn runs_with(stripe: &Path) -> Vec<serde_json::Value> {
    let o = run(&["list", "--json", "--limit", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let all: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    all.into_iter().filter(|r| r["stripes"].as_array().unwrap().iter().any(|x| x.as_str() == Some(s(stripe)))).collect()
}

/// `sheaf ARGS`, run to the end.
fn run(args: &[&str]) -> Output {
    super::common::run(sheaf().args(args))
}

/// A small source tree and a pristine 3-stripe backup of it.
struct Fixture {
    dir: tempfile::TempDir,
    src: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 11).unwrap();
        Fixture { dir, src }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Back up into folder `rel` as `b_0.sheaf .. b_{n-1}.sheaf`.
    fn backup(&self, rel: &str, n: usize) -> Vec<PathBuf> {
        let d = self.path(rel);
        fs::create_dir_all(&d).unwrap();
        let stripes: Vec<PathBuf> = (0..n).map(|k| d.join(format!("b_{k}.sheaf"))).collect();
        let mut args = vec!["backup".to_string(), s(&self.src).to_string(), "--transfer-size".into(), "64KiB".into()];
        for p in &stripes {
            args.push("--to".into());
            args.push(s(p).into());
        }
        let o = sheaf().args(&args).output().unwrap();
        assert!(o.status.success(), "backup failed: {}", stderr(&o));
        stripes
    }
}

/// A failed restore leaves nothing that looks complete: no target, an empty one, or one marked.
fn assert_not_complete(target: &Path) {
    if !target.exists() {
        return;
    }
    let items: Vec<_> = fs::read_dir(target).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(items.is_empty() || target.join(sheaf_core::restore::INCOMPLETE_MARKER).exists(), "failed restore left {} looking complete: {items:?}", target.display());
}

#[test]
fn help_teaches_flags_examples_and_exit_codes() {
    let o = run(&["backup", "--help"]);
    let out = stdout(&o);
    for n in ["--transfer-size", "--buffer-count", "--compression", "nul", "Examples", "MAXTRANSFERSIZE"] {
        assert!(out.contains(n), "backup --help lacks {n}");
    }
    assert!(stdout(&run(&["--help"])).contains("Exit codes"));
}

#[test]
fn summary_and_json_report_what_a_dba_needs() {
    let f = Fixture::new();
    let a = f.path("a.sheaf");
    let b = f.path("b.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&a), "--to", s(&b), "-c", "lz4", "--transfer-size", "64KiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().next().unwrap();
    assert!(
        line.starts_with("processed ") && line.contains(" pages (") && line.contains(" MiB/s), wrote ") && line.contains("(ratio ") && line.ends_with("to 2 stripes"),
        "{line}"
    );
    assert!(out.contains("memory: "), "{out}");

    let o = run(&["backup", s(&f.src), "--to", "nul", "--json", "-c", "deflate:1", "--buffer-count", "9", "--label", "nightly"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for k in ["bytes_read", "bytes_written", "seconds", "stripes", "codec", "level", "transfer_size", "buffer_count", "memory_budget_bytes", "files", "backup_id"] {
        assert!(v.get(k).is_some(), "--json lacks {k}: {v}");
    }
    assert_eq!(v["codec"], "deflate");
    assert_eq!(v["level"], 1);
    assert_eq!(v["buffer_count"], 9);
    assert_eq!(v["memory_budget_bytes"], 9 * 1024 * 1024);
    assert_eq!(v["label"], "nightly");

    let o = run(&["verify", s(&a), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["stripes"], 2);
    let out = f.path("out");
    let o = run(&["restore", s(&b), "--to", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &out).unwrap();
}

#[test]
fn unknown_codec_and_out_of_range_values_exit_2() {
    let f = Fixture::new();
    let t = f.path("x.sheaf");
    for (args, needle) in [
        (vec!["-c", "brotli"], "unknown compression 'brotli'"),
        (vec!["-c", "zstd:30"], "-7..22"),
        (vec!["-c", "deflate:13"], "0..12"),
        (vec!["--transfer-size", "32MiB"], "64KiB .. 16MiB"),
        (vec!["--transfer-size", "lots"], "is not a size"),
        (vec!["--buffer-count", "2", "--threads", "4"], "--buffer-count 5"),
        (vec!["--to", "nul"], "nul cannot be mixed with file targets"),
    ] {
        let mut a = vec!["backup", s(&f.src), "--to", s(&t)];
        a.extend(args);
        assert_fails(&run(&a), 2, &[needle]);
        assert!(!t.exists() && !f.path("x.sheaf.partial").exists());
    }
}

#[test]
fn target_folder_missing_exits_8() {
    let f = Fixture::new();
    let o = run(&["backup", s(&f.src), "--to", "/nonexistent/sheaf/x.sheaf"]);
    assert_fails(&o, 8, &["/nonexistent/sheaf", "does not exist"]);
}

#[test]
fn missing_stripe_is_named() {
    let f = Fixture::new();
    let st = f.backup("set", 3);
    fs::remove_file(&st[1]).unwrap();
    for cmd in ["verify", "restore"] {
        let out = f.path("out");
        let mut a = vec![cmd, s(&st[0])];
        if cmd == "restore" {
            a.extend(["--to", s(&out)]);
        }
        assert_fails(&run(&a), 4, &["stripe 2 (b_1.sheaf) is missing"]);
        assert!(!out.exists(), "nothing restored from an incomplete set");
    }
}

#[test]
fn stripes_named_on_the_command_line_need_not_be_side_by_side() {
    let f = Fixture::new();
    let st = f.backup("set", 2);
    let moved = f.path("elsewhere/b_1.sheaf");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(&st[1], &moved).unwrap();
    assert_fails(&run(&["verify", s(&st[0])]), 4, &["is missing"]);
    let o = run(&["verify", s(&moved), s(&st[0])]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn stripe_from_another_backup_is_refused() {
    let f = Fixture::new();
    let a = f.backup("a", 2);
    let b = f.backup("b", 2);
    fs::copy(&b[1], &a[1]).unwrap();
    let o = run(&["verify", s(&a[0])]);
    assert_fails(&o, 4, &["b_1.sheaf", "belongs to backup", "do not mix"]);
    let o = run(&["restore", s(&a[0]), "--to", s(&f.path("out"))]);
    assert_fails(&o, 4, &["belongs to backup"]);
    assert!(!f.path("out").exists());
}

#[test]
fn truncated_stripe_is_incomplete() {
    let f = Fixture::new();
    let st = f.backup("set", 2);
    let len = fs::metadata(&st[1]).unwrap().len();
    fs::OpenOptions::new().write(true).open(&st[1]).unwrap().set_len(len / 2).unwrap();
    assert_fails(&run(&["verify", s(&st[0])]), 4, &["b_1.sheaf", "trailer", "truncated"]);
    let out = f.path("out");
    assert_fails(&run(&["restore", s(&st[1]), "--to", s(&out)]), 4, &["b_1.sheaf"]);
    assert_not_complete(&out);
}

struct Regions {
    packed_header: Option<u64>,
    packed_payload: Option<u64>,
    header: u64,
    frame_header: Option<u64>,
    payload: Option<u64>,
    index: u64,
    /// Whether the stripe took any frame (a writer may take none of a small backup's).
    has_index: bool,
    manifest: u64,
    trailer: u64,
}

fn regions(stripe: &Path) -> Regions {
    let bytes = fs::read(stripe).unwrap();
    let t = Trailer::decode(&bytes[bytes.len() - TRAILER_LEN..]).unwrap();
    let index = IndexEntry::decode_all(&bytes[t.index_offset as usize..(t.index_offset + t.index_len) as usize], sheaf_core::format::FORMAT_VERSION).unwrap();
    // A plain (not packed) frame with a payload, if this stripe took one.
    let with_payload = index
        .iter()
        .enumerate()
        .find(|(i, e)| e.stored_len > 16 && index.get(i + 1).is_none_or(|n| n.frame_pos != e.frame_pos) && (*i == 0 || index[i - 1].frame_pos != e.frame_pos))
        .map(|(_, e)| *e);
    // A packed frame: several small files' chunks share its position.
    let packed = index.windows(2).find(|w| w[0].frame_pos == w[1].frame_pos && w[0].stored_len > 16).map(|w| w[0]);
    Regions {
        packed_header: packed.map(|p| p.frame_pos + 9),
        packed_payload: packed.map(|p| p.frame_pos + FRAME_HEADER_LEN as u64 + p.stored_len as u64 / 2),
        header: 20,
        frame_header: with_payload.map(|p| p.frame_pos + 9),
        payload: with_payload.map(|p| p.frame_pos + FRAME_HEADER_LEN as u64 + p.stored_len as u64 / 2),
        index: t.index_offset + 5,
        has_index: t.index_len > 0,
        manifest: t.manifest_offset + t.manifest_len / 2,
        trailer: bytes.len() as u64 - 20,
    }
}

fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x5A;
    fs::write(path, b).unwrap();
}

#[test]
fn a_flipped_byte_in_any_region_is_caught_and_named() {
    let f = Fixture::new();
    let pristine = f.backup("pristine", 2);
    let r = regions(&pristine[1]);
    assert!(r.header < HEADER_LEN as u64);
    // Frames go to whichever stripe's writer is free: find a plain frame and a packed one (the
    // small files) wherever they went.
    let (packed_in, p) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.packed_header.is_some()).expect("a packed frame");
    let (plain_in, q) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.frame_header.is_some()).expect("a plain frame");
    let (index_in, i) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.has_index).expect("an index");
    for (name, stripe, at, needle) in [
        ("header", 1, r.header, "header: checksum mismatch"),
        ("frame header", plain_in, q.frame_header.unwrap(), "frame header: checksum mismatch"),
        ("payload", plain_in, q.payload.unwrap(), "payload checksum mismatch"),
        ("packed frame header", packed_in, p.packed_header.unwrap(), "frame header: checksum mismatch"),
        ("packed payload", packed_in, p.packed_payload.unwrap(), "payload checksum mismatch"),
        ("index", index_in, i.index, "index: checksum mismatch"),
        ("manifest", 1, r.manifest, "manifest: checksum mismatch"),
        ("trailer", 1, r.trailer, "trailer: checksum mismatch"),
    ] {
        let dir = f.path(&format!("case_{}", name.replace(' ', "_")));
        fs::create_dir_all(&dir).unwrap();
        for p in &pristine {
            fs::copy(p, dir.join(p.file_name().unwrap())).unwrap();
        }
        let a = dir.join("b_0.sheaf");
        let damaged = format!("b_{stripe}.sheaf");
        flip(&dir.join(&damaged), at);
        let o = run(&["verify", s(&a)]);
        assert_fails(&o, 3, &[&damaged, needle]);
        let out = dir.join("restored");
        let o = run(&["restore", s(&a), "--to", s(&out)]);
        assert_fails(&o, 3, &[&damaged, needle]);
        assert_not_complete(&out);
    }
}

#[test]
fn restore_refuses_a_non_empty_target_with_exit_5() {
    let f = Fixture::new();
    let st = f.backup("set", 1);
    let out = f.path("busy");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("data"), b"x").unwrap();
    assert_fails(&run(&["restore", s(&st[0]), "--to", s(&out)]), 5, &["not empty", "--force"]);
    let o = run(&["restore", s(&st[0]), "--to", s(&out), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_backup_killed_mid_way_leaves_nothing_restore_accepts() {
    let f = Fixture::new();
    // Slow on purpose: a strong level on one thread over a few tens of MiB.
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 48 << 20, 3, 0.3).unwrap();
    let target = f.path("killed.sheaf");
    let partial = f.path("killed.sheaf.partial");
    let mut child = sheaf()
        .args(["backup", s(&f.src), "--to", s(&target), "-c", "zstd:19", "--threads", "1", "--buffer-count", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while fs::metadata(&partial).map(|m| m.len() < 4096).unwrap_or(true) {
        assert!(t0.elapsed() < Duration::from_secs(60), "backup never started writing");
        assert!(child.try_wait().unwrap().is_none(), "backup finished before it could be killed; make it slower");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!target.exists(), "a killed backup must not leave a stripe under its final name");
    assert_fails(&run(&["verify", s(&target)]), 4, &["does not exist"]);
    assert_fails(&run(&["verify", s(&partial)]), 4, &["killed.sheaf.partial", "trailer"]);
    let out = f.path("out");
    assert_fails(&run(&["restore", s(&partial), "--to", s(&out)]), 4, &["trailer"]);
    assert_not_complete(&out);
    // The history says it failed (interrupted), never that it completed.
    let recorded: Vec<_> = runs_with(&target).into_iter().filter(|r| r["operation"] == "backup").collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["status"], "failed");
    assert!(recorded[0]["error"].as_str().unwrap().contains("interrupted"));
    // The leftover .partial's writer is gone (nobody holds its lock): a new backup to the same
    // name takes it over and publishes a whole stripe.
    let again = run(&["backup", s(&f.src), "--to", s(&target)]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(target.exists() && !partial.exists());
}

#[test]
fn unreadable_source_file_exits_7_and_names_it() {
    // A plain tree: everything readable by anyone but the one file.
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let f = Fixture { src: dir.path().join("src"), dir };
    fs::create_dir_all(f.src.join("sub")).unwrap();
    fs::set_permissions(&f.src, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(f.src.join("sub"), fs::Permissions::from_mode(0o755)).unwrap();
    sheaf_core::datagen::write_file(&f.src.join("sub/readable"), 300_000, 1, 0.5).unwrap();
    fs::set_permissions(f.src.join("sub/readable"), fs::Permissions::from_mode(0o644)).unwrap();
    let secret = f.src.join("secret");
    fs::write(&secret, b"no peeking").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
    let out = f.path("out");
    fs::create_dir_all(&out).unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).unwrap();
    let target = out.join("x.sheaf");
    let mut cmd = if sheaf_core::host::is_root() {
        // root reads anything; drop to nobody so that mode 000 means what it says.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", SHEAF]);
        c
    } else {
        sheaf()
    };
    let o = cmd.env("SHEAF_CATALOG", catalog()).args(["backup", s(&f.src), "--to", s(&target)]).output().unwrap();
    assert_fails(&o, 7, &["cannot read source file", "secret", "Permission denied"]);
    assert!(fs::read_dir(&out).unwrap().next().is_none(), "no stripe or partial left behind");
}

#[test]
fn disk_full_exits_6_and_leaves_nothing() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let mnt = f.path("small_fs");
    fs::create_dir_all(&mnt).unwrap();
    let target = mnt.join("x.sheaf");
    let o = on_small_tmpfs(&mnt, &format!("backup {} --to {} -c none", s(&f.src), s(&target)));
    assert_fails(&o, 6, &["x.sheaf", "No space left on device", "the device or quota is full"]);
    assert_eq!(stdout(&o).trim(), "", "the full filesystem holds no stripe and no partial afterwards");
}

/// Run `sheaf ARGS` with a 1 MiB tmpfs mounted at `mnt`; its exit status is the result's, and
/// what is left on the tmpfs afterwards is listed at the end of stdout.
fn on_small_tmpfs(mnt: &Path, args: &str) -> Output {
    let script = format!("mount -t tmpfs -o size=1m sheaf-test {m} && {bin} {args}; rc=$?; ls -A {m}; umount {m}; exit $rc", m = s(mnt), bin = SHEAF,);
    with_mounts(&script)
}

/// Run `script` (which may mount) as root, or in a user and mount namespace of its own otherwise.
fn with_mounts(script: &str) -> Output {
    let mut c = if sheaf_core::host::is_root() {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    } else {
        let mut c = Command::new("unshare");
        c.args(["--user", "--map-root-user", "--mount", "sh", "-c", script]);
        c
    };
    c.env("SHEAF_CATALOG", catalog()).output().unwrap()
}

#[test]
fn restore_into_a_full_disk_exits_6_and_removes_what_it_wrote() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let st = f.backup("set", 2);
    let mnt = f.path("small_fs");
    fs::create_dir_all(&mnt).unwrap();
    let o = on_small_tmpfs(&mnt, &format!("restore {} --to {}", s(&st[0]), s(&mnt)));
    // Refused before a byte is written: the data cannot fit, and the message says how much.
    assert_fails(&o, 6, &["No space left on device", "the restore writes 4", "free", "what it wrote was removed"]);
    assert_eq!(stdout(&o).trim(), "", "the full filesystem is left empty");
}

#[test]
fn a_file_changing_while_read_is_reported() {
    let f = Fixture::new();
    let growing = f.src.join("growing.log");
    sheaf_core::datagen::write_file(&growing, 16 << 20, 4, 0.3).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, growing) = (stop.clone(), growing.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut fh = fs::OpenOptions::new().append(true).open(&growing).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fh.write_all(b"another log line\n").unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let o = run(&["backup", s(&f.src), "--to", s(&f.path("c.sheaf")), "--json", "-c", "zstd:12", "--threads", "1", "--buffer-count", "2", "--transfer-size", "64KiB"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(o.status.success(), "a changing file is reported, not fatal: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("growing.log") && warnings.contains("changed while being read"), "{warnings}");
    assert!(stderr(&o).contains("warning: ") && stderr(&o).contains("growing.log"));
    // What was backed up is consistent: it verifies.
    assert!(run(&["verify", s(&f.path("c.sheaf"))]).status.success());
}

#[test]
fn the_catalog_records_every_run_and_failures_as_failed() {
    let f = Fixture::new();
    let a = f.path("cat_a.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&a), "-c", "lz4", "--label", "nightly", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(run(&["verify", s(&a)]).status.success());
    assert!(run(&["restore", s(&a), "--to", s(&f.path("cat_out"))]).status.success());
    let runs = runs_with(&a);
    let ops: Vec<(&str, &str)> = runs.iter().map(|r| (r["operation"].as_str().unwrap(), r["status"].as_str().unwrap())).collect();
    assert_eq!(ops, vec![("restore", "complete"), ("verify", "complete"), ("backup", "complete")], "newest first");
    let b = &runs[2];
    assert_eq!(b["backup_id"], report["backup_id"]);
    assert_eq!(b["label"], "nightly");
    assert_eq!(b["compression"], "lz4");
    assert_eq!(b["bytes_read"], report["bytes_read"]);
    assert!(b["user_cpu_seconds"].as_f64().is_some() && b["peak_rss_bytes"].as_i64().unwrap() > 0);
    assert_eq!(runs[1]["backup_id"], report["backup_id"], "verify knows which backup it read");

    let o = run(&["show", &b["id"].to_string(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["details"]["files"], report["files"]);
    assert_eq!(run(&["show", "999999999"]).status.code(), Some(2));

    // A failed run is recorded as failed, with its error.
    let missing = std::path::PathBuf::from("/nonexistent/sheaf/cat.sheaf");
    assert_eq!(run(&["backup", s(&f.src), "--to", s(&missing)]).status.code(), Some(8));
    let failed = runs_with(&missing);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["status"], "failed");
    assert!(failed[0]["error"].as_str().unwrap().contains("does not exist"));

    // An explicit --catalog wins over SHEAF_CATALOG.
    let other = f.path("other.db");
    assert!(run(&["--catalog", s(&other), "verify", s(&a)]).status.success());
    assert!(other.exists());
}

#[test]
fn bench_of_a_directory_from_a_plan_with_flags_over_it() {
    let f = Fixture::new();
    let (target, out) = (f.path("bench_target"), f.path("bench_out"));
    fs::create_dir(&target).unwrap();
    let plan = f.path("plan.toml");
    fs::write(
        &plan,
        format!("source = {:?}\ncompression = [\"lz4\", \"zstd:high\"]\nstripes = [1, 2]\ntransfer-size = [\"64KiB\"]\nbuffer-count = [\"default\"]\ntarget = [\"nul\", {:?}]\nrepeat = 3\n", s(&f.src), s(&target)),
    )
    .unwrap();
    // --repeat and --peers on the command line win over the plan; pg_basebackup cannot back up a directory.
    let o = run(&["bench", "--plan", s(&plan), "--repeat", "2", "--peers", "pg_basebackup", "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: peer pg_basebackup skipped: it backs up PostgreSQL servers"), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("tool") && lines[0].contains("backup s") && lines[0].contains("restore CPU %"), "{table}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("sheaf ")).count(), 8, "2 codecs x 2 stripe counts x 2 targets: {table}");
    let report: serde_json::Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r["backup_seconds"]["n"] == 2), "--repeat 2 won over the plan's 3");
    let ratio = |codec: &str| {
        let r = rows.iter().find(|r| r["compression"] == codec).unwrap();
        r["bytes_read"].as_f64().unwrap() / r["size_bytes"]["median"].as_f64().unwrap()
    };
    assert!(ratio("zstd:high") > ratio("lz4"), "zstd:high compresses the fixture better than lz4");
    for r in rows {
        let disk = r["target"] != "nul";
        assert_eq!(r["restore_seconds"].is_object(), disk, "{r}");
        assert_eq!(r["verify_seconds"].is_object(), disk, "{r}");
        assert_eq!(r["transfer_size"], 65536);
    }
    for name in ["report.csv", "report.md", "samples.csv", "size_vs_backup_time.png", "cpu_per_codec.svg"] {
        assert!(fs::metadata(out.join(name)).map(|m| m.len()).unwrap_or(0) > 100, "{name}");
    }
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "the bench leaves nothing in its target");
    assert!(fs::read_dir(&f.src).unwrap().count() > 0, "the source is untouched");

    // --from redraws the same table and files from report.json, running nothing.
    let again = f.path("bench_again");
    let o = run(&["bench", "--from", s(&out.join("report.json")), "--out", s(&again)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), table, "the same table");
    assert_eq!(fs::read_to_string(again.join("report.csv")).unwrap(), fs::read_to_string(out.join("report.csv")).unwrap(), "figures survive report.json exactly");
    assert!(fs::metadata(again.join("throughput_vs_stripes.svg")).unwrap().len() > 1000);
    assert_fails(&run(&["bench", "--from", s(&out.join("report.csv"))]), 2, &["is not a sheaf bench report.json"]);
}

#[test]
fn bench_mistakes_are_named() {
    let f = Fixture::new();
    let plan = f.path("bad.toml");
    fs::write(&plan, "stripe = [1]\n").unwrap();
    assert_fails(&run(&["bench", s(&f.src), "--plan", s(&plan)]), 2, &["unknown field `stripe`"]);
    assert_fails(&run(&["bench"]), 2, &["nothing to back up", "--dataset tpch:SCALE"]);
    assert_fails(&run(&["bench", s(&f.src), "--stripes", "1,x"]), 2, &["--stripes: 'x' is not a stripe count"]);
    assert_fails(&run(&["bench", "--dataset", "tpch"]), 2, &["give tpch:SCALE"]);
    assert_fails(&run(&["bench", s(&f.src), "--peers", "barman"]), 2, &["unknown peer 'barman'"]);
    assert_fails(&run(&["bench", s(&f.path("missing")), "--repeat", "1", "--out", s(&f.path("o"))]), 7, &["is not a directory"]);
}

#[test]
fn bench_drops_caches_when_allowed_and_says_so_when_not() {
    let f = Fixture::new();
    let out = f.path("cold");
    let allowed = fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches").is_ok();
    let o = run(&["bench", s(&f.src), "-c", "lz4", "--repeat", "1", "--drop-caches", "--json", "--out", s(&out)]);
    if allowed {
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["info"]["cache"], "dropped before every operation");
    } else {
        assert_fails(&o, 2, &["--drop-caches: cannot write /proc/sys/vm/drop_caches"]);
    }
}

#[test]
fn bench_restores_inside_a_folder_of_its_own_in_restore_dir() {
    let f = Fixture::new();
    let (target, elsewhere) = (f.path("t"), f.path("elsewhere"));
    fs::create_dir_all(&target).unwrap();
    // A user's folders named like the bench's scratch: never touched.
    for sentinel in ["restore/keep.txt", "restore.ts/keep.txt"] {
        let p = elsewhere.join(sentinel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, "mine").unwrap();
    }
    let o = run(&["bench", s(&f.src), "-c", "lz4", "--repeat", "1", "--target", s(&target), "--restore-dir", s(&elsewhere), "--out", s(&f.path("o"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&fs::read(f.path("o/report.json")).unwrap()).unwrap();
    assert!(report["rows"][0]["restore_seconds"]["median"].as_f64().unwrap() > 0.0);
    for sentinel in ["restore/keep.txt", "restore.ts/keep.txt"] {
        assert_eq!(fs::read_to_string(elsewhere.join(sentinel)).unwrap(), "mine");
    }
    let mut left: Vec<String> = fs::read_dir(&elsewhere).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["restore", "restore.ts"], "the bench's own folder is gone");
}

#[test]
fn bench_refuses_targets_it_should_not_use() {
    let f = Fixture::new();
    let inside = f.src.join("bench_out");
    fs::create_dir_all(&inside).unwrap();
    assert_fails(&run(&["bench", s(&f.src), "--target", s(&inside), "--repeat", "1"]), 2, &["is inside the source", "choose a folder outside it"]);
    fs::remove_dir(&inside).unwrap();
    let missing = f.path("no/such/dir");
    assert_fails(&run(&["bench", s(&f.src), "--target", &format!("nul,{}", s(&missing)), "--repeat", "1"]), 8, &["is not a directory: create it"]);
    assert!(!missing.exists(), "a mistyped target is not created");
    assert_fails(&run(&["bench", s(&f.src), "--transfer-size", "1MiB,32MiB"]), 2, &["'32MiB' is out of range"]);
}

#[test]
fn a_bench_that_fails_mid_way_writes_what_it_measured_and_exits_with_the_failure() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let (mnt, out) = (f.path("small_fs"), f.path("partial"));
    fs::create_dir_all(&mnt).unwrap();
    // nul runs first and succeeds; the 1 MiB tmpfs then fills up.
    let o = on_small_tmpfs(&mnt, &format!("bench {} -c none --repeat 1 --target nul,{} --out {}", s(&f.src), s(&mnt), s(&out)));
    assert_fails(&o, 6, &["No space left on device"]);
    assert_eq!(stdout(&o).lines().filter(|l| l.starts_with("sheaf ")).count(), 1, "the nul row is printed: {}", stdout(&o));
    assert!(!stdout(&o).contains("sheaf-bench-"), "the work folder is not left on the full filesystem: {}", stdout(&o));
    let report: serde_json::Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 1);
    assert!(report["info"]["warnings"][0].as_str().unwrap().contains("the sweep stopped early"), "{}", report["info"]);
    assert!(fs::read_to_string(out.join("report.md")).unwrap().contains("the sweep stopped early"));
}

/// `--max-rate` on backup, verify and restore: the result is the same tree, a throttled backup
/// takes at least its bytes' worth of time at the rate (a lower bound set by sleeping, not a speed
/// claim), and a rate that cannot work is named.
#[test]
fn max_rate_holds_backup_and_restore_to_a_rate() {
    let f = Fixture::new();
    let stripe = f.path("b.sheaf");
    let t0 = Instant::now();
    let o = run(&["backup", s(&f.src), "--to", s(&stripe), "-c", "none", "--max-rate", "1MiB", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written = fs::metadata(&stripe).unwrap().len();
    // From a standing start, a burst of 0.1 s at most goes unpaid.
    let floor = Duration::from_secs_f64((written as f64 / (1 << 20) as f64 - 0.15).max(0.0));
    assert!(written > 512 << 10, "the fixture is big enough to be held back ({written} bytes)");
    assert!(t0.elapsed() >= floor, "{written} bytes in {:?} at 1 MiB/s", t0.elapsed());
    let o = run(&["verify", s(&stripe), "--max-rate", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = f.path("out");
    let o = run(&["restore", s(&stripe), "--to", s(&out), "--max-rate", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &out).unwrap();
    assert_fails(&run(&["backup", s(&f.src), "--to", s(&f.path("z.sheaf")), "--max-rate", "0"]), 2, &["--max-rate 0 would never write a byte"]);
    assert_fails(&run(&["restore", s(&stripe), "--to", s(&f.path("o2")), "--max-rate", "fast"]), 2, &["--max-rate", "'fast'", "e.g. 100MiB"]);
    assert!(!f.path("z.sheaf").exists() && !f.path("o2").exists(), "nothing started");
}

/// Encrypted sets from the command line: each way of giving the secret, exit 9 for every key
/// problem before anything is written, and the secret nowhere: not in the output, the JSON, the
/// stripes, the catalog, the bench's reports or the process's command line.
#[test]
fn encryption_from_the_command_line_keeps_its_secret() {
    const PASS: &str = "Tr0ub4dor&3-not-in-any-output";
    let f = Fixture::new();
    let stripe = f.path("e.sheaf");
    let with_pass = |args: &[&str]| sheaf().args(args).env("SHEAF_PASSPHRASE", PASS).stdin(Stdio::null()).output().unwrap();
    let o = with_pass(&["backup", s(&f.src), "--to", s(&stripe), "--to", s(&f.path("e2.sheaf")), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["encryption"], "aes-256-gcm");
    let leaks = |what: &str, bytes: &[u8]| assert!(!bytes.windows(PASS.len()).any(|w| w == PASS.as_bytes()), "the passphrase is in {what}");
    leaks("stdout", &o.stdout);
    leaks("stderr", &o.stderr);
    leaks("the stripe", &fs::read(&stripe).unwrap());

    // No secret, the wrong one, the other kind: exit 9, nothing restored.
    let out = f.path("out");
    assert_fails(&run(&["restore", s(&stripe), "--to", s(&out)]), 9, &["encrypted", "SHEAF_PASSPHRASE"]);
    let o = sheaf().args(["restore", s(&stripe), "--to", s(&out)]).env("SHEAF_PASSPHRASE", "wrong").output().unwrap();
    assert_fails(&o, 9, &["wrong passphrase"]);
    let key = f.path("key");
    fs::write(&key, [5u8; 32]).unwrap();
    assert_fails(&run(&["verify", s(&stripe), "--encryption-key-file", s(&key)]), 9, &["passphrase"]);
    assert!(!out.exists(), "a refused restore makes nothing");

    // Mistakes with the secret itself.
    let short = f.path("short.key");
    fs::write(&short, "my-password\n").unwrap();
    let o = run(&["backup", s(&f.src), "--to", s(&f.path("x.sheaf")), "--encryption-key-file", s(&short)]);
    assert_fails(&o, 9, &["32 random bytes", "head -c 32 /dev/urandom"]);
    assert!(!stderr(&o).contains("my-password"), "the key file's content is never quoted");
    let o = with_pass(&["backup", s(&f.src), "--to", s(&f.path("x.sheaf")), "--encryption-key-file", s(&key)]);
    assert_fails(&o, 9, &["more than one secret"]);
    let empty = f.path("empty.pass");
    fs::write(&empty, "\n").unwrap();
    assert_fails(&run(&["backup", s(&f.src), "--to", s(&f.path("x.sheaf")), "--passphrase-file", s(&empty)]), 9, &["empty"]);
    assert!(!f.path("x.sheaf").exists());
    let conf = f.path("sheaf.toml");
    fs::write(&conf, format!("passphrase = \"{PASS}\"\n")).unwrap();
    let o = run(&["--config", s(&conf), "verify", s(&stripe)]);
    assert_fails(&o, 2, &["no secrets in its config", "passphrase-file"]);
    leaks("a refused config's message", &o.stderr);

    // A passphrase file gives the same secret (its first line).
    let pass_file = f.path("pass");
    fs::write(&pass_file, format!("{PASS}\n")).unwrap();
    let o = run(&["restore", s(&stripe), "--to", s(&out), "--passphrase-file", s(&pass_file)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &out).unwrap();

    // A key file: a slow backup, whose command line is read while it runs.
    let slow = f.path("slow.sheaf");
    let mut child = sheaf()
        .args(["backup", s(&f.src), "--to", s(&slow), "--encryption-key-file", s(&key), "-c", "none", "--max-rate", "2MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cmdline = fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default();
    assert!(child.wait().unwrap().success());
    assert!(!cmdline.is_empty() && !cmdline.windows(32).any(|w| w == [5u8; 32]), "the key in the process's command line");
    let o = run(&["verify", s(&slow), "--encryption-key-file", s(&key), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The catalog holds the runs, never the secret.
    assert!(!runs_with(&stripe).is_empty());
    leaks("the catalog", &fs::read(catalog()).unwrap());
    let o = run(&["list", "--json", "--limit", "100000"]);
    leaks("sheaf list", &o.stdout);

    // The bench, with the secret from the environment: encrypted runs, and its reports clean.
    let bench_out = f.path("bench");
    let target = f.path("bench-target");
    fs::create_dir_all(&target).unwrap();
    let o = with_pass(&["bench", s(&f.src), "-c", "auto", "--repeat", "1", "--target", s(&target), "--out", s(&bench_out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    leaks("the bench's stdout", &o.stdout);
    leaks("the bench's stderr", &o.stderr);
    for e in fs::read_dir(&bench_out).unwrap() {
        let p = e.unwrap().path();
        leaks(&p.display().to_string(), &fs::read(&p).unwrap());
    }
}

/// `-c auto` reports the levels it chose in the summary, --json and the catalog.
#[test]
fn auto_reports_its_levels_everywhere() {
    let f = Fixture::new();
    let stripe = f.path("auto.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&stripe), "-c", "auto"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("auto chose zstd level 1 ("), "{}", stdout(&o));
    let o = run(&["backup", s(&f.src), "--to", s(&f.path("auto2.sheaf")), "-c", "auto", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["compression"], "auto");
    let chunks: u64 = v["auto_levels"].as_object().expect("auto_levels").values().map(|n| n.as_u64().unwrap()).sum();
    assert!(chunks > 0 && chunks <= v["frames"].as_u64().unwrap(), "{v}");
    let runs = runs_with(&stripe);
    let id = runs[0]["id"].to_string();
    let shown = stdout(&run(&["show", &id]));
    assert!(shown.contains("compression: auto") && shown.contains("auto_levels: {\"1\":"), "{shown}");
    assert_fails(&run(&["backup", s(&f.src), "--to", "nul", "-c", "auto:5"]), 2, &["auto takes no level"]);
    let o = run(&["restore", s(&stripe), "--to", s(&f.path("out"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &f.path("out")).unwrap();
}

/// `sheaf lab` on a file of pages: the seed's table, CSV and JSON, and mistakes named.
#[test]
fn lab_measures_codecs_on_a_file_of_pages() {
    let f = Fixture::new();
    let pages = f.path("rel");
    let mut bytes = Vec::new();
    for i in 0..64u32 {
        let mut p = vec![0u8; 8192];
        for (j, b) in p.iter_mut().enumerate().skip(24) {
            *b = b"row 42, shipped by rail; "[(j + i as usize) % 25];
        }
        bytes.extend_from_slice(&p);
    }
    fs::write(&pages, &bytes).unwrap();
    let out = f.path("lab");
    let o = run(&["lab", "--file", s(&pages), "-c", "lz4,zstd:low", "--unit", "8KiB,64KiB", "--repeat", "1", "--accesses", "50", "--out", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "none, then 2 codecs x 2 units: {v}");
    assert!(rows.iter().skip(1).all(|r| r["ratio"].as_f64().unwrap() > 2.0), "{v}");
    assert_eq!(v["sample_bytes"], 64 * 8192);
    let csv = fs::read_to_string(out.join("lab.csv")).unwrap();
    assert_eq!(csv.lines().count(), 6);
    assert!(out.join("lab.json").exists());
    for plot in ["lab-cost.svg", "lab-cost.png", "lab-fetch.svg", "lab-fetch.png"] {
        assert!(fs::metadata(out.join(plot)).unwrap().len() > 1000, "{plot}");
    }
    let svg = fs::read_to_string(out.join("lab-fetch.svg")).unwrap();
    assert!(svg.contains("zstd:low") && svg.contains("64 KiB"), "the legend and the unit labels");
    let table = run(&["lab", "--file", s(&pages), "-c", "lz4", "--unit", "8KiB", "--repeat", "1", "--accesses", "20"]);
    assert!(stdout(&table).contains("fetch p50") && stdout(&table).contains("lz4"), "{}", stdout(&table));
    assert_fails(&run(&["lab", "--file", s(&pages), "--unit", "10000"]), 2, &["multiple of 8 KiB"]);
    assert_fails(&run(&["lab"]), 2, &["--file PATH"]);
}

/// A reader that went away (`sheaf list | head`) ends the command quietly with success, as every
/// Unix tool does, instead of a panic about a broken pipe.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = sheaf().arg("list").stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "nothing said: {}", stderr(&o));
}

/// Every duration flag reads the same forms (`8s`, `26h`, or seconds), and what sheaf suggests
/// pastes into a shell as it reads (a URL's `&` quoted).
#[test]
fn durations_read_alike_and_suggestions_are_shell_quoted() {
    for bad in [["check", "postgres://x/y", "--archive-timeout", "8y"], ["check", "postgres://x/y", "--max-age", "0h"]] {
        let o = sheaf().args(bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(bad[2]), "names the flag: {}", stderr(&o));
    }
    let o = sheaf().args(["backup", "/nonexistent", "--to", "nul", "--wal-timeout", "8s", "--agent-timeout", "2m"]).output().unwrap();
    assert_ne!(o.status.code(), Some(2), "8s and 2m are durations: {}", stderr(&o));
}

/// `sheaf agent --init-certs DIR --add-client NAME` issues a backup host's certificate from the
/// existing CA; the running agent admits it after SIGHUP (not before), logs each connection with
/// who it was and what it sent; `sheaf check` warns of a certificate in tls-dir that expires
/// within 30 days.
#[test]
fn agent_clients_are_added_and_admitted_on_sighup_and_check_warns_of_expiring_certificates() {
    let d = tempfile::tempdir().unwrap();
    let (pgdata, tls) = (d.path().join("data"), d.path().join("tls"));
    fs::create_dir_all(pgdata.join("global")).unwrap();
    fs::write(pgdata.join("global/pg_control"), 4242_u64.to_le_bytes().repeat(4)).unwrap();
    fs::write(pgdata.join("PG_VERSION"), "15\n").unwrap();
    let o = run(&["agent", "--init-certs", s(&tls)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let port = sheaf_core::host::free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let log = d.path().join("agent.log");
    /// The agent, killed however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut agent = Killed(
        Command::new(SHEAF)
            .args(["agent", "--listen", &addr, "--pgdata", s(&pgdata), "--tls-dir", s(&tls)])
            .stderr(fs::File::create(&log).unwrap())
            .stdout(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while sheaf_agent::AgentClient::connect(&addr, &tls).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the agent did not come up: {}", fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = run(&["agent", "--init-certs", s(&tls), "--add-client", "nightly-2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("kill -HUP"), "{}", stdout(&o));
    let host2 = tls.join("clients/nightly-2");
    let e = sheaf_agent::AgentClient::connect(&addr, &host2).err().expect("not admitted before the reload");
    assert!(e.to_string().contains("not in the agent's allowed-clients"), "{e}");
    let o = run(&["agent", "--init-certs", s(&tls), "--add-client", "nightly-2"]);
    assert_fails(&o, 5, &["already lists"]);

    rustix::process::kill_process(rustix::process::Pid::from_raw(agent.0.id() as i32).unwrap(), rustix::process::Signal::HUP).unwrap();
    let t0 = Instant::now();
    let mut client = loop {
        if let Ok(c) = sheaf_agent::AgentClient::connect(&addr, &host2) {
            break c;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not admitted after SIGHUP: {}", fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut buf = [0u8; 16];
    assert_eq!(client.read_at(s(&pgdata.join("PG_VERSION")), 0, &mut buf).unwrap(), 3);
    drop(client);
    let t0 = Instant::now();
    loop {
        let text = fs::read_to_string(&log).unwrap();
        if text.contains("nightly-2 (SHA-256") && text.contains("done after") {
            assert!(text.contains("added: nightly-2") && text.contains("connected, served") && text.contains("bytes sent"), "{text}");
            assert!(agent.0.try_wait().unwrap().is_none(), "SIGHUP does not end the agent");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(agent);

    // check, on a backup host whose certificate ends in 12 days.
    let soon = d.path().join("soon");
    fs::create_dir(&soon).unwrap();
    fs::copy(tls.join("ca.pem"), soon.join("ca.pem")).unwrap();
    let now = time::OffsetDateTime::now_utc();
    sheaf_agent::certs::issue_client(&tls, &soon, "client", now - time::Duration::days(1), now + time::Duration::days(12)).unwrap();
    let conf = d.path().join("sheaf.toml");
    fs::write(&conf, format!("tls-dir = \"{}\"\nrepo = \"{}\"\n", soon.display(), d.path().join("no-repo").display())).unwrap();
    let o = Command::new(SHEAF).args(["check", "--json", "postgres://nobody@127.0.0.1:1/x"]).env("SHEAF_CONFIG", &conf).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let certs: Vec<&serde_json::Value> = report["findings"].as_array().unwrap().iter().filter(|f| f["check"] == "certs").collect();
    assert_eq!(certs.len(), 1, "{report}");
    assert_eq!(certs[0]["status"], "warning", "{report}");
    assert!(certs[0]["message"].as_str().unwrap().contains("client.pem expires on"), "{report}");
}

/// Sets written before layout 2 (their data key made from the secret itself; a real one, in
/// tests/fixtures/v1-set) still restore; `sheaf key migrate --set` writes only each stripe's key
/// block, after which the same secret opens a random data key sealed for it, or with --new-* only
/// the new secret does; every other byte of the stripes stays as it was. New sets are layout 2.
#[test]
fn a_set_s_key_block_is_moved_to_a_sealed_random_key_and_its_secret_changed_in_place() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-set");
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("v1-a.sheaf"), d.path().join("v1-b.sheaf"));
    for (from, to) in [("v1-a.sheaf", &a), ("v1-b.sheaf", &b)] {
        fs::copy(fixture.join(from), to).unwrap();
    }
    let pass = fixture.join("pass");
    let layout = |p: &Path| fs::read(p).unwrap()[64 + 4];
    let restores = |with: &[&str], name: &str| -> Output {
        let out = d.path().join(name);
        let o = run(&[&["restore", s(&a), "--to", s(&out)], with].concat());
        if o.status.success() {
            same_files(&fixture.join("src"), &out);
        }
        o
    };
    assert_eq!((layout(&a), layout(&b)), (1, 1));
    assert!(restores(&["--passphrase-file", s(&pass)], "before").status.success(), "an older set restores as before");
    let before: Vec<Vec<u8>> = [&a, &b].iter().map(|p| fs::read(p).unwrap()).collect();
    let outside_the_block = |p: &Path, was: &[u8]| {
        let now = fs::read(p).unwrap();
        assert_eq!(now.len(), was.len());
        assert!(now[..64] == was[..64] && now[160..] == was[160..], "{}: only bytes 64..160 change", p.display());
        now[64..160] != was[64..160]
    };

    let wrong = d.path().join("wrong");
    fs::write(&wrong, "not it\n").unwrap();
    let o = run(&["key", "migrate", "--set", s(&a), "--passphrase-file", s(&wrong)]);
    assert_fails(&o, 9, &["wrong passphrase"]);
    assert_eq!(fs::read(&a).unwrap(), before[0], "nothing written with the wrong secret");

    let o = run(&["key", "migrate", "--set", s(&a), "--passphrase-file", s(&pass), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let done: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((done["stripes"].as_u64(), done["from_layout_1"].as_u64()), (Some(2), Some(2)), "{done}");
    assert_eq!((layout(&a), layout(&b)), (2, 2));
    assert!(outside_the_block(&a, &before[0]) && outside_the_block(&b, &before[1]));
    assert!(restores(&["--passphrase-file", s(&pass)], "after").status.success(), "the same secret opens it");

    // A new secret, in place: the old one no longer opens the set.
    let key = d.path().join("new.key");
    fs::write(&key, "ab".repeat(32)).unwrap();
    let o = run(&["key", "migrate", "--set", s(&a), "--passphrase-file", s(&pass), "--new-key-file", s(&key)]);
    assert!(o.status.success() && stdout(&o).contains("the new secret only"), "{}", stderr(&o));
    assert_fails(&restores(&["--passphrase-file", s(&pass)], "old-secret"), 9, &["encrypted with a key file"]);
    assert!(restores(&["--encryption-key-file", s(&key)], "new-secret").status.success());
    assert!(outside_the_block(&a, &before[0]));

    // A set written now is layout 2 from the start, here under a key command's key.
    let set = d.path().join("new.sheaf");
    let o = run(&["backup", s(&fixture.join("src")), "--to", s(&set), "--key-command", &format!("cat {}", s(&key))]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(layout(&set), 2);
    let out = d.path().join("from-new");
    let o = run(&["restore", s(&set), "--to", s(&out), "--encryption-key-file", s(&key)]);
    assert!(o.status.success(), "{}", stderr(&o));
    same_files(&fixture.join("src"), &out);
}

/// Every file under `a` is under `b` with the same bytes, and no more (a checkout's times differ
/// from those the fixture recorded, so only contents are compared).
fn same_files(a: &Path, b: &Path) {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    walk(a, a, &mut x);
    walk(b, b, &mut y);
    x.sort();
    y.sort();
    assert!(!x.is_empty() && x == y, "{} and {} differ", a.display(), b.display());
}
