//! sheaf-s3 against a real S3-compatible server (MinIO on 127.0.0.1): the storage conformance suite
//! every store passes, and what only object storage has (parts, ETags, open uploads).

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
