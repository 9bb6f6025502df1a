//! `sheaf` against a real S3-compatible server (MinIO on 127.0.0.1, started per test): stripes as
//! objects, mixed with files; any one stripe finds the others; deleted, truncated and replaced
//! objects named by verify; permanent errors fail cleanly with no object and no open upload; a
//! backup killed mid-upload leaves no object under a final name; no secret anywhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sheaf_core::{Location, Schemes};
use sheaf_s3::testing::{FaultProxy, Faults, Minio, SECRET_KEY};

use super::common::{s, sheaf_with_catalog, stderr};

/// `sheaf` for `minio`, with its catalog and home in `dir` (no profile of the user's is read).
fn sheaf_for(minio: &Minio, dir: &Path) -> Command {
    let mut c = sheaf_with_catalog(&dir.join("catalog.db"));
    c.env("HOME", dir).stdin(Stdio::null());
    for (k, v) in minio.env() {
        c.env(k, v);
    }
    c
}

struct Env {
    minio: Minio,
    dir: tempfile::TempDir,
    src: PathBuf,
}

impl Env {
    /// A server with buckets `bk1` and `bk2`, and a source tree of every file shape (64 KiB chunks)
    /// plus a 24 MiB file that compresses little, so that stripes span several 5 MiB parts.
    fn new() -> Env {
        let minio = Minio::start();
        minio.create_bucket("bk1");
        minio.create_bucket("bk2");
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 7).unwrap();
        sheaf_core::datagen::write_file(&src.join("big.dat"), 24 << 20, 5, 0.2).unwrap();
        Env { minio, dir, src }
    }

    fn sheaf(&self) -> Command {
        sheaf_for(&self.minio, self.dir.path())
    }

    fn run(&self, args: &[&str]) -> Output {
        self.sheaf().args(args).output().expect("run sheaf")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Read and write objects directly (to damage them) through sheaf's own store.
    fn object(&self, url: &str) -> Location {
        let env = self.minio.env();
        let schemes = sheaf_s3::S3Schemes::with_env(self.minio.options(), move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
        let leaked: &'static sheaf_s3::S3Schemes = Box::leak(Box::new(schemes));
        Location::parse(url, leaked as &dyn Schemes).unwrap()
    }

    fn backup(&self, to: &[&str], extra: &[&str]) -> Output {
        let mut args = vec!["backup", s(&self.src), "--s3-part-size", "5MiB", "--json"];
        for t in to {
            args.extend(["--to", t]);
        }
        args.extend(extra);
        self.run(&args)
    }
}

/// [`super::common::assert_fails`], and no secret in the message.
fn assert_fails(o: &Output, code: i32, needles: &[&str]) {
    super::common::assert_fails(o, code, needles);
    let err = stderr(o);
    assert!(!err.contains(SECRET_KEY), "a secret in a message: {err}");
}

fn read_all(loc: &Location) -> Vec<u8> {
    let src = loc.open().unwrap();
    let mut b = vec![0u8; src.len() as usize];
    src.read_exact_at(&mut b, 0).unwrap();
    b
}

fn put(loc: &Location, bytes: &[u8]) {
    let mut sink = loc.create(true, bytes.len() as u64).unwrap();
    sink.write_all(bytes).unwrap();
    sink.publish().unwrap();
}

#[test]
fn stripes_in_two_buckets_and_a_file_back_up_verify_and_restore_byte_identical() {
    let e = Env::new();
    let file = e.path("d_3.sheaf");
    let o = e.backup(&["s3://bk1/nightly/d_1.sheaf", "s3://bk2/nightly/d_2.sheaf", s(&file)], &["-c", "lz4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["stripes"], 3);
    assert_eq!(r["targets"][0], "s3://bk1/nightly/d_1.sheaf");
    // Two S3 stripes of (2 in flight + 1) 5 MiB parts are in the budget.
    assert_eq!(r["target_memory_bytes"], 2 * 3 * (5 << 20), "{r}");
    assert_eq!(e.minio.objects("bk1"), vec!["nightly/d_1.sheaf"]);
    assert_eq!(e.minio.objects("bk2"), vec!["nightly/d_2.sheaf"]);
    assert!(e.minio.open_uploads("bk1").is_empty() && e.minio.open_uploads("bk2").is_empty());

    // Any one stripe finds the others: the file finds both objects, an object finds the file.
    for one in ["s3://bk1/nightly/d_1.sheaf", s(&file)] {
        let v = e.run(&["verify", one, "--json"]);
        assert!(v.status.success(), "verify from {one}: {}", stderr(&v));
        let v: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
        assert_eq!(v["stripes"], 3);
    }
    let out = e.path("restored");
    let o = e.run(&["restore", "s3://bk2/nightly/d_2.sheaf", "--to", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&e.src, &out).unwrap();

    // No secret in the catalog, nor in what sheaf printed.
    let list = e.run(&["list", "--json"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("s3://bk1/nightly/d_1.sheaf"), "{text}");
    assert!(!text.contains(SECRET_KEY), "the catalog holds a secret");
    assert!(!String::from_utf8_lossy(&o.stdout).contains(SECRET_KEY));
    let db = std::fs::read(e.dir.path().join("catalog.db")).unwrap();
    assert!(!db.windows(SECRET_KEY.len()).any(|w| w == SECRET_KEY.as_bytes()), "the catalog file holds a secret");
}

#[test]
fn verify_names_a_deleted_truncated_or_replaced_object() {
    let e = Env::new();
    let (one, two) = ("s3://bk1/set/x_1.sheaf", "s3://bk1/set/x_2.sheaf");
    let o = e.backup(&[one, two], &["-c", "lz4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let obj = e.object(two);
    let good = read_all(&obj);

    // Truncated: the footer is gone.
    put(&obj, &good[..good.len() / 2]);
    let v = e.run(&["verify", one]);
    assert!(matches!(v.status.code(), Some(3) | Some(4)), "{}", stderr(&v));
    assert!(stderr(&v).contains("s3://bk1/set/x_2.sheaf"), "{}", stderr(&v));

    // Replaced: one byte among the frames differs.
    let mut bad = good.clone();
    bad[good.len() / 3] ^= 0x40;
    put(&obj, &bad);
    let v = e.run(&["verify", one]);
    assert_fails(&v, 3, &["s3://bk1/set/x_2.sheaf", "frame"]);

    // Deleted.
    obj.store().delete(obj.name()).unwrap();
    let v = e.run(&["verify", one]);
    assert_fails(&v, 4, &["x_2.sheaf", "missing"]);
    let out = e.path("out");
    assert_fails(&e.run(&["restore", one, "--to", s(&out)]), 4, &["x_2.sheaf"]);
    assert!(!out.exists());

    // Put back: whole again.
    put(&obj, &good);
    let v = e.run(&["verify", one]);
    assert!(v.status.success(), "{}", stderr(&v));
}

#[test]
fn permanent_errors_fail_at_once_with_no_object_and_no_open_upload() {
    let e = Env::new();
    let file = e.path("f.sheaf");
    // A missing bucket, beside a good object and a file: nothing of the set is left anywhere.
    let o = e.backup(&["s3://bk1/p/a.sheaf", "s3://nosuch/p/b.sheaf", s(&file)], &[]);
    assert_fails(&o, 8, &["s3://nosuch/p/b.sheaf", "bucket does not exist"]);
    assert!(e.minio.objects("bk1").is_empty() && e.minio.open_uploads("bk1").is_empty(), "{:?}", e.minio.open_uploads("bk1"));
    assert!(!file.exists() && !e.path("f.sheaf.partial").exists());

    // Wrong credentials: named, not printed.
    let o = e.sheaf().env("AWS_SECRET_ACCESS_KEY", "not-the-secret").args(["backup", s(&e.src), "--to", "s3://bk1/p/a.sheaf"]).output().unwrap();
    assert_fails(&o, 8, &["credentials"]);
    assert!(!stderr(&o).contains("not-the-secret"));
    assert!(e.minio.objects("bk1").is_empty());

    // No credentials at all, a plain-HTTP endpoint not allowed: named before anything runs.
    let o = e.sheaf().env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY").args(["backup", s(&e.src), "--to", "s3://bk1/p/a.sheaf"]).output().unwrap();
    assert_fails(&o, 2, &["no S3 credentials", "AWS_ACCESS_KEY_ID"]);
    let o = e.sheaf().env_remove("AWS_ALLOW_HTTP").args(["backup", s(&e.src), "--to", "s3://bk1/p/a.sheaf"]).output().unwrap();
    assert_fails(&o, 2, &["--s3-allow-http"]);

    // An existing object is not replaced without --overwrite.
    assert!(e.backup(&["s3://bk1/p/a.sheaf"], &[]).status.success());
    assert_fails(&e.backup(&["s3://bk1/p/a.sheaf"], &[]), 8, &["already exists", "--overwrite"]);
    assert!(e.backup(&["s3://bk1/p/a.sheaf"], &["--overwrite"]).status.success());
    assert!(e.minio.open_uploads("bk1").is_empty());

    // The catalog records the failures as failed.
    let list: Vec<serde_json::Value> = serde_json::from_slice(&e.run(&["list", "--json"]).stdout).unwrap();
    assert!(list.iter().filter(|r| r["status"] == "failed").count() >= 3, "{list:?}");
}

#[test]
fn a_backup_killed_mid_upload_leaves_no_object_under_a_final_name() {
    let e = Env::new();
    sheaf_core::datagen::write_file(&e.src.join("slow.dat"), 48 << 20, 3, 0.3).unwrap();
    let mut child = e
        .sheaf()
        .args(["backup", s(&e.src), "--to", "s3://bk1/k/killed.sheaf", "-c", "zstd:19", "--threads", "1", "--buffer-count", "3", "--s3-part-size", "5MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while e.minio.open_uploads("bk1").is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the backup never started uploading");
        assert!(child.try_wait().unwrap().is_none(), "the backup finished before it could be killed; make it slower");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let a part or two go up, then kill it.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the backup finished before it could be killed; make it slower");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(e.minio.objects("bk1").is_empty(), "a killed backup left an object: {:?}", e.minio.objects("bk1"));
    assert_fails(&e.run(&["verify", "s3://bk1/k/killed.sheaf"]), 4, &["does not exist"]);
}

#[test]
fn slowdowns_server_errors_resets_and_slow_answers_are_retried_and_restore_byte_identical() {
    let e = Env::new();
    let faults = Faults { slow_down: 0.12, server_error: 0.08, reset: 0.08, slow: 0.05, deny_parts: false, upstream_host: false, seed: 42 };
    let proxy = FaultProxy::start(&e.minio.addr, faults);
    let via = |args: &[&str]| e.sheaf().env("AWS_ENDPOINT_URL", proxy.endpoint()).args(args).output().unwrap();
    let mut args = vec!["backup", s(&e.src), "-c", "lz4", "--s3-part-size", "5MiB"];
    args.extend(["--to", "s3://bk1/f/a_1.sheaf", "--to", "s3://bk1/f/a_2.sheaf"]);
    let o = via(&args);
    assert!(o.status.success(), "backup through faults: {}", stderr(&o));
    let out = e.path("out");
    let o = via(&["restore", "s3://bk1/f/a_2.sheaf", "--to", s(&out), "--s3-read-ahead", "3"]);
    assert!(o.status.success(), "restore through faults: {}", stderr(&o));
    sheaf_core::datagen::compare_trees(&e.src, &out).unwrap();
    let o = via(&["verify", "s3://bk1/f/a_1.sheaf"]);
    assert!(o.status.success(), "verify through faults: {}", stderr(&o));
    let c = &proxy.counts;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::SeqCst);
    assert!(n(&c.slow_down) > 0 && n(&c.server_error) > 0 && n(&c.reset) > 0 && n(&c.slow) > 0, "every fault was injected: {c:?}");
    assert_eq!(e.minio.objects("bk1"), vec!["f/a_1.sheaf", "f/a_2.sheaf"]);
    assert!(e.minio.open_uploads("bk1").is_empty(), "{:?}", e.minio.open_uploads("bk1"));
}

#[test]
fn a_permanent_403_on_parts_fails_the_backup_and_aborts_every_upload() {
    let e = Env::new();
    let proxy = FaultProxy::start(&e.minio.addr, Faults { deny_parts: true, ..Default::default() });
    let file = e.path("f.sheaf");
    let o = e
        .sheaf()
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .args(["backup", s(&e.src), "--to", "s3://bk1/d/a.sheaf", "--to", "s3://bk2/d/b.sheaf", "--to", s(&file), "--s3-part-size", "5MiB"])
        .output()
        .unwrap();
    assert_fails(&o, 8, &["access denied"]);
    assert!(proxy.injected() > 0);
    for b in ["bk1", "bk2"] {
        assert!(e.minio.objects(b).is_empty(), "{b}: {:?}", e.minio.objects(b));
        assert!(e.minio.open_uploads(b).is_empty(), "{b}: uploads left open: {:?}", e.minio.open_uploads(b));
    }
    assert!(!file.exists() && !e.path("f.sheaf.partial").exists());
}

#[test]
fn bench_runs_the_matrix_against_object_storage_and_cleans_up() {
    let e = Env::new();
    let out = e.path("report");
    let o = e.run(&["bench", s(&e.src), "--target", "nul,s3://bk1/bench", "-c", "lz4,zstd:low", "--stripes", "1,2", "--repeat", "1", "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut rd = csv::Reader::from_path(out.join("report.csv")).unwrap();
    let headers = rd.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name} in {headers:?}"));
    let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 8, "2 codecs × 2 stripe counts × 2 targets");
    let s3_rows: Vec<_> = rows.iter().filter(|r| &r[col("target")] == "s3://bk1/bench").collect();
    assert_eq!(s3_rows.len(), 4);
    for r in s3_rows {
        assert!(!r[col("restore_s_median")].is_empty() && !r[col("verify_s_median")].is_empty(), "objects are verified and restored: {r:?}");
    }
    assert!(e.minio.objects("bk1").is_empty(), "the bench removes its objects: {:?}", e.minio.objects("bk1"));
    assert!(e.minio.open_uploads("bk1").is_empty());
}

/// The printed budget holds with uploads in flight: peak resident memory (VmHWM, as the catalog
/// records it) stays within the budget plus a fixed overhead (the program, the HTTP client, the
/// allocator's slack), on a source several times larger than the budget.
#[test]
fn peak_memory_stays_within_the_budget_with_parts_in_flight() {
    let e = Env::new();
    sheaf_core::datagen::write_file(&e.src.join("more.dat"), 256 << 20, 9, 0.1).unwrap();
    let o = e.run(&["backup", s(&e.src), "-c", "lz4", "--to", "s3://bk1/m/a.sheaf", "--to", "s3://bk2/m/b.sheaf", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let budget = r["memory_budget_bytes"].as_u64().unwrap();
    let parts = r["target_memory_bytes"].as_u64().unwrap();
    assert_eq!(parts, 2 * 3 * (16 << 20), "two stripes, (2 in flight + 1) parts of 16 MiB: {r}");
    let list: Vec<serde_json::Value> = serde_json::from_slice(&e.run(&["list", "--json"]).stdout).unwrap();
    let run = list.iter().find(|x| x["backup_id"] == r["backup_id"]).expect("recorded");
    let peak = run["peak_rss_bytes"].as_u64().unwrap();
    const OVERHEAD: u64 = 48 << 20;
    assert!(peak <= budget + OVERHEAD, "peak RSS {} MiB exceeds the budget {} MiB + {} MiB", peak >> 20, budget >> 20, OVERHEAD >> 20);
    assert!(r["bytes_read"].as_u64().unwrap() > 2 * budget, "the source is larger than the budget, so the bound is tested");
}

#[test]
fn https_with_a_private_ca_works_and_an_untrusted_certificate_is_refused() {
    let m = Minio::start_tls(&["tls"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 3).unwrap();
    let sheaf = || sheaf_for(&m, dir.path());
    let o = sheaf().args(["backup", s(&src), "--to", "s3://tls/a.sheaf"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = dir.path().join("out");
    let o = sheaf().args(["restore", "s3://tls/a.sheaf", "--to", s(&out)]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&src, &out).unwrap();
    // Without the CA the server's certificate is not trusted: named, and nothing is written.
    let o = sheaf().env_remove("AWS_CA_BUNDLE").args(["backup", s(&src), "--to", "s3://tls/b.sheaf"]).output().unwrap();
    // Refused for good (exit 10), decided by rustls's error, never "transient".
    assert_fails(&o, 10, &["s3://tls/b.sheaf", "certificate is not trusted", "--s3-ca-bundle"]);
    assert!(!stderr(&o).contains("transient"), "{}", stderr(&o));
    let o = sheaf().args(["verify", "s3://tls/b.sheaf"]).output().unwrap();
    assert_fails(&o, 4, &["does not exist"]);
}

#[test]
fn an_interrupted_backup_removes_its_partial_file_and_aborts_its_uploads() {
    let e = Env::new();
    sheaf_core::datagen::write_file(&e.src.join("slow.dat"), 48 << 20, 3, 0.3).unwrap();
    let file = e.path("i.sheaf");
    let child = e
        .sheaf()
        .args(["backup", s(&e.src), "--to", "s3://bk1/i/a.sheaf", "--to", s(&file), "-c", "zstd:19", "--threads", "1", "--buffer-count", "3", "--s3-part-size", "5MiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while e.minio.open_uploads("bk1").is_empty() || !e.path("i.sheaf.partial").exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the backup never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::INT).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
    assert!(e.minio.objects("bk1").is_empty(), "{:?}", e.minio.objects("bk1"));
    assert!(e.minio.open_uploads("bk1").is_empty(), "Ctrl-C aborts the uploads: {:?}", e.minio.open_uploads("bk1"));
    assert!(!file.exists() && !e.path("i.sheaf.partial").exists(), "and removes the .partial");
}

/// Whether `needle` is anywhere in the files under `dir`.
fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            on_disk(&p, needle)
        } else {
            std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
        }
    })
}

/// S3's own encryption beside sheaf's (pgBackRest's repo-s3-kms-key-id and
/// repo-s3-sse-customer-key): with neither, MinIO's disk holds the plain bytes sheaf sent (no
/// compression, no sheaf encryption); with SSE-KMS or SSE-C it does not, and the set restores;
/// SSE-C objects do not read without their key, nor with another; SSE-C over plain HTTP is refused.
#[test]
fn s3_server_side_encryption_with_a_kms_key_or_a_customer_key() {
    let m = Minio::start_tls(&["sse"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let marker = b"sheaf-sse-test: these bytes must not reach the disk in the clear. ";
    std::fs::write(src.join("marked"), marker.repeat(2000)).unwrap();
    let sheaf = || sheaf_for(&m, dir.path());
    let key = dir.path().join("sse-c.key");
    std::fs::write(&key, [0x5c; 32]).unwrap();
    let other = dir.path().join("other.key");
    std::fs::write(&other, [0x3a; 32]).unwrap();
    let backup = |to: &str, extra: &[&str]| {
        let o = sheaf().args(["backup", s(&src), "--to", to, "-c", "none"]).args(extra).output().unwrap();
        assert!(o.status.success(), "{to}: {}", stderr(&o));
    };
    let restored = |from: &str, extra: &[&str], name: &str| -> Output {
        let out = dir.path().join(name);
        let o = sheaf().args(["restore", from, "--to", s(&out)]).args(extra).output().unwrap();
        if o.status.success() {
            sheaf_core::datagen::compare_trees(&src, &out).unwrap();
        }
        o
    };

    backup("s3://sse/plain.sheaf", &[]);
    assert!(on_disk(&m.data_dir().join("sse/plain.sheaf"), marker), "the control: unencrypted bytes are on MinIO's disk");

    backup("s3://sse/kms.sheaf", &["--s3-kms-key-id", sheaf_s3::testing::KMS_KEY_ID]);
    assert!(!on_disk(&m.data_dir().join("sse/kms.sheaf"), marker), "SSE-KMS: not in the clear");
    let o = restored("s3://sse/kms.sheaf", &[], "kms");
    assert!(o.status.success(), "SSE-KMS reads need no key of ours: {}", stderr(&o));
    let o = sheaf().args(["backup", s(&src), "--to", "s3://sse/nokey.sheaf", "--s3-kms-key-id", "no-such-key"]).output().unwrap();
    assert!(!o.status.success(), "an unknown KMS key is refused by the server");

    let k = ["--s3-sse-customer-key-file", s(&key)];
    backup("s3://sse/ssec.sheaf", &k);
    assert!(!on_disk(&m.data_dir().join("sse/ssec.sheaf"), marker), "SSE-C: not in the clear");
    assert!(restored("s3://sse/ssec.sheaf", &k, "ssec").status.success());
    for (what, extra) in [("without the key", vec![]), ("with another key", vec!["--s3-sse-customer-key-file", s(&other)])] {
        let o = restored("s3://sse/ssec.sheaf", &extra, &format!("ssec-{}", extra.len()));
        assert!(!o.status.success(), "SSE-C {what} reads nothing");
    }
    let secret_b64 = "XFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFxcXFw=";
    let o = restored("s3://sse/ssec.sheaf", &["--s3-sse-customer-key-file", s(&other)], "ssec-shown");
    assert!(!stderr(&o).contains(secret_b64) && !stderr(&o).contains("Ojo6Ojo6"), "no key in messages: {}", stderr(&o));

    let o = sheaf().args(["backup", s(&src), "--to", "s3://sse/http.sheaf", "--s3-endpoint", &format!("http://{}", m.addr), "--s3-allow-http"]).args(k).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("SSE-C") && stderr(&o).contains("https://"), "{}", stderr(&o));
}
