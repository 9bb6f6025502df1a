//! sheaf-s3 against a real S3-compatible server (MinIO on 127.0.0.1): the storage conformance suite
//! every store passes, and what only object storage has (parts, ETags, open uploads).

use std::io::Read;

use sheaf_core::storage::conformance::check_store;
use sheaf_core::{ErrorKind, Location, Schemes};
use sheaf_s3::testing::{Minio, ACCESS_KEY, SECRET_KEY};
use sheaf_s3::{S3Options, S3Schemes};

/// Schemes that reach `m` with its credentials, reading no environment or profile of the user's.
fn schemes(m: &Minio, o: S3Options) -> S3Schemes {
    assert!(o.endpoint.as_deref() == Some(m.endpoint().as_str()));
    S3Schemes::with_env(o, |k| match k {
        "AWS_ACCESS_KEY_ID" => Some(ACCESS_KEY.into()),
        "AWS_SECRET_ACCESS_KEY" => Some(SECRET_KEY.into()),
        "HOME" => Some("/nonexistent".into()),
        _ => None,
    })
}

#[test]
fn s3_conforms() {
    let m = Minio::start();
    m.create_bucket("conf");
    // 5 MiB parts, so that the 12 MiB case spans three parts with two in flight.
    let o = S3Options { part_size: 5 << 20, ..m.options() };
    let s = schemes(&m, o);
    let (store, _) = s.resolve("s3", "conf", "x").unwrap();
    check_store(store.clone(), "run1/stripes", 12 << 20);
    assert!(m.open_uploads("conf").is_empty(), "every upload was completed or aborted: {:?}", m.open_uploads("conf"));
    assert!(m.objects("conf").is_empty(), "nothing left: {:?}", m.objects("conf"));
    // Sink memory is counted as (parts in flight + 1) parts.
    assert_eq!(store.sink_memory(0), 3 * (5 << 20));
}

#[test]
fn missing_bucket_and_wrong_credentials_fail_cleanly() {
    let m = Minio::start();
    m.create_bucket("real");
    let s = schemes(&m, m.options());
    let loc = Location::parse("s3://nosuchbucket/a/b.sheaf", &s).unwrap();
    let e = loc.create(false, 0).err().expect("no bucket");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    assert!(e.to_string().contains("bucket does not exist"), "{e}");

    let bad = S3Schemes::with_env(m.options(), |k| match k {
        "AWS_ACCESS_KEY_ID" => Some(ACCESS_KEY.into()),
        "AWS_SECRET_ACCESS_KEY" => Some("wrong-secret".into()),
        _ => None,
    });
    let loc = Location::parse("s3://real/a/b.sheaf", &bad).unwrap();
    let e = loc.create(false, 0).err().expect("bad credentials");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    assert!(e.to_string().contains("credentials"), "{e}");
    assert!(!e.to_string().contains("wrong-secret"), "no secret in messages: {e}");
    assert!(m.open_uploads("real").is_empty() && m.objects("real").is_empty());
}

#[test]
fn an_object_replaced_while_it_is_read_is_named_not_mixed() {
    let m = Minio::start();
    m.create_bucket("pin");
    let s = schemes(&m, m.options());
    let loc = Location::parse("s3://pin/x.sheaf", &s).unwrap();
    let write = |byte: u8| {
        let mut sink = loc.create(true, 1 << 20).unwrap();
        sink.write_all(&vec![byte; 1 << 20]).unwrap();
        sink.publish().unwrap();
    };
    write(1);
    let src = loc.open().unwrap();
    let mut b = [0u8; 16];
    src.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(b, [1u8; 16]);
    write(2); // same length, other bytes: only the ETag tells
    let e = src.read_exact_at(&mut b, 100).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Incomplete, "{e}");
    assert!(e.to_string().contains("changed while it was being read"), "{e}");
    let mut all = Vec::new();
    let e = std::io::Read::read_to_end(&mut src.stream(0, 1 << 20).unwrap(), &mut all).unwrap_err();
    assert!(e.to_string().contains("changed while it was being read"), "{e}");
    // Opened again, it reads the new bytes.
    loc.open().unwrap().read_exact_at(&mut b, 0).unwrap();
    assert_eq!(b, [2u8; 16]);
}

/// Schemes whose only environment is `vars` (no user's files or variables).
fn schemes_with(vars: Vec<(&'static str, String)>) -> S3Schemes {
    S3Schemes::with_env(S3Options::default(), move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
}

#[test]
fn azure_and_gcs_conform() {
    let az = sheaf_s3::testing::Azurite::start();
    az.create_container("conf");
    let s = schemes_with(az.env_for(&az.endpoint()));
    let (store, _) = s.resolve("az", "conf", "x").unwrap();
    assert_eq!(store.describe("a/b.sheaf"), "az://conf/a/b.sheaf");
    check_store(store, "run1/stripes", 12 << 20);

    // GCS is written through its JSON API: an object of one part in one request, a larger one as a
    // resumable upload (5 MiB parts: the suite's 12 MiB stripe takes three).
    let body: Vec<u8> = (0..(3u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let gcs = sheaf_s3::testing::FakeGcs::start_with("conf", "run1/a_1.sheaf", &body);
    let vars = gcs.env_for(&gcs.endpoint());
    let s = S3Schemes::with_env(S3Options { part_size: 5 << 20, ..S3Options::default() }, move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
    let (store, _) = s.resolve("gs", "conf", "x").unwrap();
    assert_eq!(store.describe("a/b.sheaf"), "gs://conf/a/b.sheaf");
    // What the server was started with reads back.
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut store.open("run1/a_1.sheaf").unwrap().stream(0, body.len() as u64).unwrap(), &mut all).unwrap();
    assert_eq!(all, body);
    store.delete("run1/a_1.sheaf").unwrap();
    check_store(store.clone(), "run2/stripes", 12 << 20);
    assert!(store.list("").unwrap().is_empty(), "the suite leaves nothing behind");
    // A last part that is no multiple of 256 KiB is held and sent with the total.
    let odd: Vec<u8> = body.iter().cycle().take((11 << 20) + 1000).copied().collect();
    put(store.as_ref(), "run3/odd.sheaf", &odd);
    let mut back = Vec::new();
    store.open("run3/odd.sheaf").unwrap().stream(0, odd.len() as u64).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == odd, "{} bytes back of {}", back.len(), odd.len());
}

#[test]
fn azure_and_gcs_refuse_a_missing_container_or_bucket_and_wrong_credentials() {
    let az = sheaf_s3::testing::Azurite::start();
    az.create_container("real");
    let s = schemes_with(az.env_for(&az.endpoint()));
    let e = Location::parse("az://nosuch/a/b.sheaf", &s).unwrap().create(false, 0).err().expect("no container");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    let mut wrong = az.env_for(&az.endpoint());
    wrong[1].1 = "d3JvbmcgYWNjb3VudCBrZXkgZm9yIHRoZSB0ZXN0IG9mIHNoZWFm".into();
    let e = Location::parse("az://real/a/b.sheaf", &schemes_with(wrong)).unwrap().create(false, 0).err().expect("wrong key");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    assert!(e.to_string().contains("AZURE_STORAGE_ACCOUNT_KEY") && !e.to_string().contains("d3JvbmcgYWNj"), "{e}");

    let gcs = sheaf_s3::testing::FakeGcs::start_with("real", "x", b"x");
    let s = schemes_with(gcs.env_for(&gcs.endpoint()));
    let e = Location::parse("gs://nosuch/a/b.sheaf", &s).unwrap().open().err().expect("no bucket");
    assert_eq!(e.kind(), ErrorKind::Incomplete, "{e}");
    let e = Location::parse("gs://nosuch/a/b.sheaf", &s).unwrap().create(false, 0).err().expect("no bucket to write to");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    assert!(e.to_string().contains("gs://nosuch/a/b.sheaf"), "{e}");
    let missing = schemes_with(vec![("GOOGLE_SERVICE_ACCOUNT", "/nonexistent/key.json".into())]);
    let e = Location::parse("gs://real/x", &missing).map(drop).expect_err("no key file");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("Google Cloud Storage configuration for bucket"), "{e}");
}

#[test]
fn azure_conforms_through_the_fault_proxy() {
    use sheaf_s3::testing::{FaultProxy, Faults};
    let faults = Faults { slow_down: 0.05, server_error: 0.05, reset: 0.03, seed: 7, ..Default::default() };
    let az = sheaf_s3::testing::Azurite::start();
    az.create_container("conf");
    let proxy = FaultProxy::start(&az.addr, faults);
    let (store, _) = schemes_with(az.env_for(&proxy.endpoint())).resolve("az", "conf", "x").unwrap();
    check_store(store, "faulty", 12 << 20);
    assert!(proxy.injected() > 0, "faults were injected");
}

#[test]
fn gcs_conforms_through_the_fault_proxy() {
    use sheaf_s3::testing::{FaultProxy, Faults};
    let faults = Faults { slow_down: 0.05, server_error: 0.05, reset: 0.03, seed: 11, upstream_host: true, ..Default::default() };
    let gcs = sheaf_s3::testing::FakeGcs::start_with("conf", "seed/a.sheaf", b"started with");
    let proxy = FaultProxy::start(&gcs.addr, faults);
    let vars = gcs.env_for(&proxy.endpoint());
    let s = S3Schemes::with_env(S3Options { part_size: 5 << 20, ..S3Options::default() }, move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
    let (store, _) = s.resolve("gs", "conf", "x").unwrap();
    check_store(store, "faulty", 12 << 20);
    assert!(proxy.injected() > 0, "faults were injected");
}

/// Write `bytes` to `name` in `store`, published.
fn put(store: &dyn sheaf_core::Store, name: &str, bytes: &[u8]) {
    put_with(store, name, bytes, None);
}

/// As [`put`], the object written with `lock`.
fn put_with(store: &dyn sheaf_core::Store, name: &str, bytes: &[u8], lock: Option<sheaf_core::storage::ObjectLock>) {
    let opts = sheaf_core::storage::WriteOptions { overwrite: true, expected_bytes: bytes.len() as u64, lock, bulk: true, keep_unfinished: false };
    let mut sink = store.create(name, &opts).unwrap();
    sink.write_all(bytes).unwrap();
    sink.publish().unwrap();
}

#[test]
fn object_lock_keeps_what_was_written_from_the_same_credentials() {
    use sheaf_core::storage::{LockMode, WriteLock};
    let m = Minio::start();
    m.create_locked_bucket("locked");
    m.create_bucket("plain");
    let s = schemes(&m, m.options());
    let (store, _) = s.resolve("s3", "locked", "x").unwrap();
    let (plain, _) = s.resolve("s3", "plain", "x").unwrap();
    assert!(store.retention().unwrap().lock_enabled().unwrap());
    assert!(!plain.retention().unwrap().lock_enabled().unwrap());

    let until = sheaf_core::time::now_ms() / 1000 + 3600;
    let lock = WriteLock { mode: LockMode::Governance, until, spare: vec![".lock".into()] };
    put_with(store.as_ref(), "r/data.wal", b"sixteen megabytes, nearly", lock.for_name("r/data.wal"));
    put_with(store.as_ref(), "r/backup.lock", b"removed again", lock.for_name("r/backup.lock"));
    let store_retention = store.retention().expect("S3 keeps versions and locks");
    let store = &*store;
    assert_eq!(store_retention.lock_of("r/data.wal").unwrap(), Some((LockMode::Governance, until)));
    assert_eq!(store_retention.lock_of("r/backup.lock").unwrap(), None, "spared");
    // A lock is lengthened, never shortened.
    store_retention.extend_lock("r/data.wal", LockMode::Governance, until + 7200).unwrap();
    assert_eq!(store_retention.lock_of("r/data.wal").unwrap(), Some((LockMode::Governance, until + 7200)));
    let e = store_retention.extend_lock("r/data.wal", LockMode::Governance, until).expect_err("shorter");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    let versions = store_retention.versions("r/").unwrap();
    assert_eq!(versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["r/backup.lock", "r/data.wal"]);
    assert!(versions.iter().all(|v| v.latest && !v.deleted));

    // The same credentials cannot remove the locked version; the spared one goes.
    let data = versions.iter().find(|v| v.name == "r/data.wal").unwrap();
    let e = store_retention.delete_version(&data.name, &data.version).expect_err("a locked version stays");
    assert_eq!(e.kind(), ErrorKind::Target, "{e}");
    assert!(e.to_string().contains("WORM") || e.to_string().contains("AccessDenied"), "{e}");
    let spare = versions.iter().find(|v| v.name == "r/backup.lock").unwrap();
    store_retention.delete_version(&spare.name, &spare.version).unwrap();
    assert!(!store.exists("r/backup.lock").unwrap());
    // Nor overwrite it: an overwrite (by a client that sets no lock) is a new version on top; the
    // locked one is still there.
    let attacker = schemes(&m, m.options());
    let (theirs, _) = attacker.resolve("s3", "locked", "x").unwrap();
    put(theirs.as_ref(), "r/data.wal", b"ransom note");

    // A plain delete only hides it behind a delete marker, which can be removed again.
    theirs.delete("r/data.wal").unwrap();
    assert!(!store.exists("r/data.wal").unwrap());
    let versions = store_retention.versions("r/data.wal").unwrap();
    assert_eq!(versions.len(), 3, "{versions:?}");
    assert!(versions[0].latest && versions[0].deleted, "{versions:?}");
    assert_eq!(versions[2].version, data.version, "oldest last: {versions:?}");
    for v in &versions[..2] {
        store_retention.delete_version(&v.name, &v.version).unwrap();
    }
    let mut back = Vec::new();
    store.open("r/data.wal").unwrap().stream(0, 25).unwrap().read_to_end(&mut back).unwrap();
    assert_eq!(back, b"sixteen megabytes, nearly");

    // A bucket without Object Lock refuses locked uploads, with S3's words.
    let opts = sheaf_core::storage::WriteOptions { lock: lock.for_name("x.wal"), ..Default::default() };
    let e = plain.create("x.wal", &opts).err().expect("no Object Lock on this bucket");
    assert!(e.to_string().contains("ObjectLockConfiguration"), "{e}");
    // A store that cannot lock refuses a locked write rather than write it unlocked.
    let e = sheaf_core::Store::create(&sheaf_core::storage::LocalStore, "/tmp/never.wal", &opts).err().expect("a folder cannot lock");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    // Azure and Google Cloud Storage have their own immutability; sheaf's --lock is S3's.
    let e = sheaf_core::storage::no_lock("az://c");
    assert!(e.to_string().contains("immutability policy"), "{e}");
}

/// Two repositories in one bucket, reached through one store (the schemes keep one per bucket),
/// each locked in its own mode and for its own time: every object carries its own repository's
/// lock (a lock kept in the shared store gave the second the first one's date).
#[test]
fn two_repositories_in_one_bucket_keep_their_own_locks() {
    use sheaf_core::repo::{Meta, Place};
    use sheaf_core::storage::{LockMode, WriteLock};
    /// A description that locks what is written for `secs` in `mode`, sparing `.lock` objects.
    #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    struct Locked {
        mode: LockMode,
        secs: i64,
        spare: bool,
    }
    impl Meta for Locked {
        fn lock(&self, now: i64) -> Option<WriteLock> {
            Some(WriteLock { mode: self.mode, until: now + self.secs, spare: if self.spare { vec![".lock".into()] } else { vec![] } })
        }
    }
    let m = Minio::start();
    m.create_locked_bucket("shared");
    let s = schemes(&m, m.options());
    let now = sheaf_core::time::now_ms() / 1000;
    let a = Place::at("s3://shared/a", &s).unwrap().init(&Locked { mode: LockMode::Governance, secs: 3600, spare: true }).unwrap();
    let b = Place::at("s3://shared/b", &s).unwrap().init(&Locked { mode: LockMode::Compliance, secs: 600, spare: false }).unwrap();
    for r in [&a, &b] {
        r.put_json("backups/x.json", &serde_json::json!({ "at": r.display() }), false).unwrap();
        let mut sink = r.location("backups/x_1.sheaf").create(false, 0).unwrap();
        sink.write_all(b"a stripe").unwrap();
        sink.publish().unwrap();
    }
    a.put_json("backups/x.lock", &serde_json::json!({}), false).unwrap();
    for name in ["backups/x.json", "backups/x_1.sheaf"] {
        // Locked from the open (a second or so after `now`), each for its own time.
        let (am, at) = a.lock_of(name).unwrap().expect("a's object locked");
        let (bm, bt) = b.lock_of(name).unwrap().expect("b's object locked");
        assert!(am == LockMode::Governance && (now + 3600..now + 3660).contains(&at), "a's {name}: {am} {at}");
        assert!(bm == LockMode::Compliance && (now + 600..now + 660).contains(&bt), "b's {name}: {bm} {bt}");
    }
    assert_eq!(a.lock_of("backups/x.lock").unwrap(), None, "spared");
}

/// A resumable stripe's parts end where frames do; going on from one of them keeps the parts up to
/// it and sets aside those past it (each replaced by one byte, too small to be taken for the next
/// attempt's), so that a later resumption never takes a part an earlier attempt left under a
/// number the new one sends again; the stripe published holds exactly the kept bytes and the new.
#[test]
fn a_resumed_upload_keeps_its_parts_and_sets_aside_those_past_them() {
    use sheaf_core::storage::Holding;
    let m = Minio::start();
    m.create_bucket("resume");
    let o = S3Options { part_size: 5 << 20, ..m.options() };
    let s = schemes(&m, o);
    let loc = Location::parse("s3://resume/set/s_1.sheaf", &s).unwrap();
    let frame = |b: u8| vec![b; 1 << 20];
    let ends = |loc: &Location| -> (Box<dyn sheaf_core::storage::UnfinishedStripe>, Vec<u64>) {
        let u = loc.resume(0).unwrap().expect("an upload to go on from");
        let e = match u.holds() {
            Holding::Parts(e) => e.to_vec(),
            Holding::Bytes(_) => panic!("an upload is parts"),
        };
        (u, e)
    };
    // Sixteen frames of 1 MiB: parts end after the 5th, 10th and 15th; the 16th, too small to be a
    // part that is not the last, is not sent when the sink is dropped unpublished (a kill).
    let mut sink = loc.create_resumable(false, 16 << 20).unwrap();
    for i in 0..16u8 {
        sink.write_all(&frame(i)).unwrap();
        assert_eq!(sink.frame_end().unwrap(), matches!(i, 4 | 9 | 14), "frame {i}");
    }
    drop(sink);
    let (u, e) = ends(&loc);
    assert_eq!(e, [5 << 20, 10 << 20, 15 << 20]);
    // Going on from the first part's end: parts 2 and 3 are set aside.
    let sink = u.go_on(5 << 20).unwrap();
    drop(sink);
    let (u, e) = ends(&loc);
    assert_eq!(e, [5 << 20], "the parts past the one kept are not taken again");
    let mut sink = u.go_on(5 << 20).unwrap();
    for i in 100..106u8 {
        sink.write_all(&frame(i)).unwrap();
        sink.frame_end().unwrap();
    }
    sink.sync().unwrap();
    sink.publish().unwrap();
    let mut got = Vec::new();
    loc.open().unwrap().stream(0, 11 << 20).unwrap().read_to_end(&mut got).unwrap();
    let want: Vec<u8> = (0..5u8).chain(100..106).flat_map(frame).collect();
    assert!(got == want, "the kept part, then the new frames, and nothing else");
    assert!(m.open_uploads("resume").is_empty(), "{:?}", m.open_uploads("resume"));
}

/// Uploads that killed writers left open under a folder are aborted, and only those: a folder
/// beside it with a name that begins the same keeps its own.
#[test]
fn uploads_left_open_under_a_folder_are_aborted_and_no_others() {
    let m = Minio::start();
    m.create_bucket("left");
    let s = schemes(&m, S3Options { part_size: 5 << 20, ..m.options() });
    for name in ["set/a/s_1.sheaf", "set/a/resume-0000-index", "set/ab/s_1.sheaf"] {
        let loc = Location::parse(&format!("s3://left/{name}"), &s).unwrap();
        let mut sink = loc.create_resumable(false, 16 << 20).unwrap();
        sink.write_all(&[7; 6 << 20]).unwrap();
        sink.frame_end().unwrap();
        drop(sink);
    }
    let mut open = m.open_uploads("left");
    open.sort();
    assert_eq!(open, ["set/a/resume-0000-index", "set/a/s_1.sheaf", "set/ab/s_1.sheaf"]);
    let store = Location::parse("s3://left/set/a/s_1.sheaf", &s).unwrap().store().clone();
    assert_eq!(store.abort_uploads("set/a/").unwrap(), 2);
    assert_eq!(m.open_uploads("left"), ["set/ab/s_1.sheaf"]);
    assert_eq!(store.abort_uploads("set/a/").unwrap(), 0, "nothing is left to abort");
}
