//! S3 credentials without a key pair in the environment, against real servers on 127.0.0.1:
//! MinIO as the store and its STS (AssumeRole, AssumeRoleWithWebIdentity), `identity.py` as the
//! OpenID provider MinIO trusts, the instance metadata service (IMDSv2 only) and the container
//! credentials endpoint, handing out MinIO's own temporary credentials; moto as an S3 with
//! storage classes. The store checks every credential: a wrong one is refused.

use std::collections::HashMap;
use std::io::Read;

use sheaf_core::{ErrorKind, Schemes};
use sheaf_s3::testing::{Identity, Minio, Moto, ACCESS_KEY, SECRET_KEY};
use sheaf_s3::{S3Options, S3Schemes, StorageClass};

/// Schemes reaching `m` with only `vars` in their environment (no HOME: no profile of the user's).
fn schemes(m: &Minio, o: S3Options, vars: &[(&str, String)]) -> S3Schemes {
    let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    S3Schemes::with_env(S3Options { endpoint: Some(m.endpoint()), allow_http: true, ..o }, move |k| env.get(k).cloned())
}

/// Write an object through the store `s` gives, read it back, and say whom the store acted as.
fn round_trip(s: &S3Schemes, name: &str) -> String {
    let (store, key) = s.resolve("s3", "ids", name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let bytes: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let mut sink = store.create(&key, &sheaf_core::storage::WriteOptions { overwrite: true, ..Default::default() }).unwrap_or_else(|e| panic!("{name}: {e}"));
    sink.write_all(&bytes).unwrap();
    sink.publish().unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut back = Vec::new();
    let src = store.open(&key).unwrap();
    src.stream(0, src.len()).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == bytes, "{name}: read back what was written");
    store.credentials().expect("an S3 store names its credentials")
}

/// The servers: the identity services first (MinIO reads the OpenID discovery document when it
/// starts), then MinIO trusting them, a bucket, and the services told where MinIO is.
fn servers(container_token: &str) -> (Identity, Minio) {
    let id = Identity::start();
    let m = Minio::start_with(&id.minio_env());
    m.create_bucket("ids");
    id.setup(&m.endpoint(), 900, container_token);
    (id, m)
}

#[test]
fn every_source_of_the_chain_gives_credentials_the_store_accepts() {
    let (id, m) = servers("pod-identity-token");
    let dir = id.dir();
    let sts = ("AWS_ENDPOINT_URL_STS", m.endpoint());
    let files = |credentials: &str, config: &str| {
        let (c, f) = (dir.join(format!("credentials-{}", credentials.len())), dir.join(format!("config-{}", config.len())));
        std::fs::write(&c, credentials).unwrap();
        std::fs::write(&f, config).unwrap();
        vec![("AWS_SHARED_CREDENTIALS_FILE", c.display().to_string()), ("AWS_CONFIG_FILE", f.display().to_string())]
    };
    // No IMDS for the sources before it: a closed port, so that a source that fell through would fail.
    let no_imds = ("AWS_EC2_METADATA_SERVICE_ENDPOINT", format!("http://127.0.0.1:{}", sheaf_s3::testing::free_port()));

    // A profile's role, assumed through STS with its source profile's keys.
    let mut env = files(
        &format!("[base]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"),
        "[profile app]\nrole_arn = arn:aws:iam::123456789012:role/backup\nsource_profile = base\nduration_seconds = 900\n",
    );
    env.extend([("AWS_PROFILE", "app".to_string()), sts.clone(), no_imds.clone()]);
    let who = round_trip(&schemes(&m, S3Options::default(), &env), "profile-role");
    assert!(who.contains("role arn:aws:iam::123456789012:role/backup assumed (profile 'app') with keys from profile 'base'") && who.contains("expire at"), "{who}");

    // --s3-role-arn on top of a credential_process.
    let process = format!(r#"printf '{{"Version":1,"AccessKeyId":"{ACCESS_KEY}","SecretAccessKey":"{SECRET_KEY}"}}'"#);
    let mut env = files("", &format!("[default]\ncredential_process = {process}\n"));
    env.extend([sts.clone(), no_imds.clone()]);
    let who = round_trip(&schemes(&m, S3Options { role_arn: Some("arn:aws:iam::123456789012:role/on-top".into()), ..Default::default() }, &env), "process-role");
    assert!(who.contains("role arn:aws:iam::123456789012:role/on-top assumed (--s3-role-arn) with credential_process of profile 'default'"), "{who}");
    // The process alone: its keys, as given.
    let who = round_trip(&schemes(&m, S3Options::default(), &env), "process");
    assert!(who.starts_with("credential_process of profile 'default'") && who.contains("do not expire"), "{who}");

    // A web identity (IRSA): the token exchanged at MinIO's STS for the role it trusts.
    let token = dir.join("token");
    std::fs::write(&token, id.token(3600)).unwrap();
    let web = vec![("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()), ("AWS_ROLE_ARN", id.role_arn()), sts.clone(), no_imds.clone()];
    let who = round_trip(&schemes(&m, S3Options::default(), &web), "web");
    assert!(who.starts_with("web identity (token ") && who.contains(&id.role_arn()), "{who}");
    // A role that is not the one trusted: refused, the role named.
    let mut wrong = web.clone();
    wrong[1].1 = "arn:minio:iam:::role/not-this-one".into();
    let e = schemes(&m, S3Options::default(), &wrong).resolve("s3", "ids", "x").expect_err("a wrong role");
    assert!(e.to_string().contains("arn:minio:iam:::role/not-this-one") && e.to_string().contains("AssumeRoleWithWebIdentity"), "{e}");

    // Container credentials (EKS Pod Identity): the full URI and its token file.
    let auth = dir.join("pod-token");
    std::fs::write(&auth, "pod-identity-token\n").unwrap();
    let pod = vec![
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/container/credentials", id.endpoint())),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", auth.display().to_string()),
        no_imds.clone(),
    ];
    let who = round_trip(&schemes(&m, S3Options::default(), &pod), "container");
    assert!(who.starts_with("container credentials from http://127.0.0.1") && who.contains("expire at"), "{who}");
    // The wrong token: the agent's refusal named.
    let refused = vec![pod[0].clone(), ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "stolen".to_string()), no_imds.clone()];
    let e = schemes(&m, S3Options::default(), &refused).resolve("s3", "ids", "x").expect_err("a wrong pod token");
    assert!(e.to_string().contains("HTTP 401") && e.to_string().contains("container"), "{e}");

    // The instance's profile, IMDSv2: a session token first, reads with it.
    let before = id.stats();
    let imds = vec![("AWS_EC2_METADATA_SERVICE_ENDPOINT", id.endpoint())];
    let who = round_trip(&schemes(&m, S3Options::default(), &imds), "instance");
    assert!(who.starts_with(&format!("instance metadata at {}", id.endpoint())), "{who}");
    let after = id.stats();
    assert!(after["imds_session"].as_u64() > before["imds_session"].as_u64(), "{after}");
    assert_eq!(after["imds_refused"], before["imds_refused"], "no read without a session token: {after}");
    assert!(after["container_refused"].as_u64() >= Some(1), "{after}");

    // Nothing at all: every source named, with why it gave nothing.
    let e = schemes(&m, S3Options::default(), &[no_imds]).resolve("s3", "ids", "x").expect_err("no credentials");
    let text = e.to_string();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    for part in ["no S3 credentials", "(1) the environment", "(2) profile 'default'", "(3) web identity", "(4) container", "(5) instance metadata at http://127.0.0.1"] {
        assert!(text.contains(part), "{part} in {text}");
    }
}

/// Credentials end with the token they were exchanged for: a store whose token is not renewed
/// fails once they expire, naming the source, so the renewal the next test relies on is real.
#[test]
fn credentials_that_expire_are_fetched_again_and_a_stale_token_is_named() {
    let (id, m) = servers("unused");
    let dir = id.dir();
    let sts = ("AWS_ENDPOINT_URL_STS", m.endpoint());
    // Renewed by the "kubelet" every 10 s, each token valid 30 s: the credentials last 30 s.
    let fresh = dir.join("fresh-token");
    id.rotate(&fresh, 30, 10.0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let env = vec![("AWS_WEB_IDENTITY_TOKEN_FILE", fresh.display().to_string()), ("AWS_ROLE_ARN", id.role_arn()), sts.clone()];
    let renewed = schemes(&m, S3Options::default(), &env);
    // One token written once, valid 30 s.
    let once = dir.join("once-token");
    std::fs::write(&once, id.token(30)).unwrap();
    let env = vec![("AWS_WEB_IDENTITY_TOKEN_FILE", once.display().to_string()), ("AWS_ROLE_ARN", id.role_arn()), sts];
    let stale = schemes(&m, S3Options::default(), &env);
    let t0 = std::time::Instant::now();
    let mut n = 0;
    while t0.elapsed() < std::time::Duration::from_secs(75) {
        round_trip(&renewed, &format!("renewed-{n}"));
        n += 1;
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    assert!(n >= 15, "{n} round trips over 75 s, past two expiries");
    let e = stale.resolve("s3", "ids", "x").and_then(|(s, k)| s.create(&k, &Default::default()).map(drop)).expect_err("the stale token's credentials expired");
    assert!(e.to_string().contains("web identity") && e.to_string().contains("expired"), "{e}");
}

#[test]
fn stripes_and_wal_take_the_storage_class_and_an_archived_object_is_named() {
    let moto = Moto::start();
    moto.create_bucket("tiers");
    let vars: HashMap<&str, String> = [("AWS_ACCESS_KEY_ID", "moto"), ("AWS_SECRET_ACCESS_KEY", "moto")].into_iter().map(|(k, v)| (k, v.to_string())).collect();
    let s = |class: StorageClass| {
        let vars = vars.clone();
        S3Schemes::with_env(S3Options { endpoint: Some(moto.endpoint()), allow_http: true, storage_class: Some(class), ..Default::default() }, move |k| vars.get(k).cloned())
    };
    let write = |s: &S3Schemes, name: &str, bulk: bool| {
        let (store, key) = s.resolve("s3", "tiers", name).unwrap();
        let mut sink = store.create(&key, &sheaf_core::storage::WriteOptions { bulk, ..Default::default() }).unwrap();
        sink.write_all(&[7u8; 100_000]).unwrap();
        sink.publish().unwrap();
        store
    };
    let ia = s(StorageClass::StandardIa);
    write(&ia, "repo/backups/a/a_1.sheaf", true);
    write(&ia, "repo/backups/a.json", false);
    assert_eq!(moto.storage_class("tiers", "repo/backups/a/a_1.sheaf"), "STANDARD_IA");
    assert_eq!(moto.storage_class("tiers", "repo/backups/a.json"), "STANDARD", "records stay STANDARD");

    let glacier = s(StorageClass::Glacier);
    let store = write(&glacier, "repo/wal/00000001/000000010000000000000003.wal", true);
    assert_eq!(moto.storage_class("tiers", "repo/wal/00000001/000000010000000000000003.wal"), "GLACIER");
    let read = || -> Result<Vec<u8>, String> {
        let mut back = Vec::new();
        let src = store.open("repo/wal/00000001/000000010000000000000003.wal").map_err(|e| e.to_string())?;
        src.stream(0, src.len()).map_err(|e| e.to_string())?.read_to_end(&mut back).map_err(|e| e.to_string())?;
        Ok(back)
    };
    let e = read().expect_err("an object in GLACIER is not read before it is thawed");
    assert!(e.contains("000000010000000000000003.wal") && e.contains("GLACIER") && e.contains("restore-object"), "{e}");
    assert!(!e.contains("credentials"), "not blamed on the credentials: {e}");
}
