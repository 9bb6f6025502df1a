use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

fn chain(pairs: &[(&str, &str)], role_arn: Option<&str>) -> Result<Chain> {
    let env = env_of(pairs);
    Chain::resolve(&Settings { env: &env, profile: None, role_arn: role_arn.map(String::from), region: "eu-west-1".into(), allow_http: true })
}

/// AWS files in a fresh folder, and the variables that point at them.
struct Aws {
    _dir: tempfile::TempDir,
    creds: String,
    conf: String,
}

fn aws(credentials: &str, config: &str) -> Aws {
    let d = tempfile::tempdir().unwrap();
    let (c, f) = (d.path().join("credentials"), d.path().join("config"));
    std::fs::write(&c, credentials).unwrap();
    std::fs::write(&f, config).unwrap();
    Aws { creds: c.to_str().unwrap().into(), conf: f.to_str().unwrap().into(), _dir: d }
}

#[test]
fn the_chain_is_walked_in_the_sdks_order() {
    let a = aws("[default]\naws_access_key_id = AKPROFILE\naws_secret_access_key = SPROFILE\n", "");
    let files = [("AWS_SHARED_CREDENTIALS_FILE", a.creds.as_str()), ("AWS_CONFIG_FILE", a.conf.as_str())];
    let web = [("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"), ("AWS_ROLE_ARN", "arn:aws:iam::1:role/web")];
    let container = [("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"), ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t")];
    let keys = [("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "SENV")];

    let all: Vec<_> = keys.iter().chain(&files).chain(&web).chain(&container).copied().collect();
    assert!(matches!(chain(&all, None).unwrap().source, Source::Keys { ref from, .. } if from == "the environment"));
    let all: Vec<_> = files.iter().chain(&web).chain(&container).copied().collect();
    assert!(matches!(chain(&all, None).unwrap().source, Source::Keys { ref from, .. } if from == "profile 'default'"));
    let all: Vec<_> = web.iter().chain(&container).chain(&[("HOME", "/nonexistent")]).copied().collect();
    assert!(matches!(chain(&all, None).unwrap().source, Source::WebIdentity { ref role, .. } if role.arn == "arn:aws:iam::1:role/web"));
    let all: Vec<_> = container.iter().chain(&[("HOME", "/nonexistent")]).copied().collect();
    assert!(matches!(chain(&all, None).unwrap().source, Source::Container { ref url, token: ContainerToken::Value(_) } if url == "http://127.0.0.1:9/creds"));
    let c = chain(&[("HOME", "/nonexistent")], None).unwrap();
    assert!(matches!(c.source, Source::Instance { ref endpoint, v1_allowed: true } if endpoint == IMDS_ENDPOINT));
    assert_eq!(c.passed.len(), 4, "the four sources before the metadata service are named: {:?}", c.passed);
    let c = chain(&[("HOME", "/nonexistent"), ("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1338/"), ("AWS_EC2_METADATA_V1_DISABLED", "true")], None).unwrap();
    assert!(matches!(c.source, Source::Instance { ref endpoint, v1_allowed: false } if endpoint == "http://127.0.0.1:1338"));
    let c = chain(&[("HOME", "/nonexistent"), ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc")], None).unwrap();
    assert!(matches!(c.source, Source::Container { ref url, token: ContainerToken::None } if url == "http://169.254.170.2/v2/credentials/abc"));
}

#[test]
fn a_role_on_top_wraps_whatever_the_chain_gave() {
    let c = chain(&[("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "S"), ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9000")], Some("arn:aws:iam::1:role/backup")).unwrap();
    match &c.source {
        Source::AssumeRole { role, base, from } => {
            assert_eq!((role.arn.as_str(), from.as_str(), role.seconds), ("arn:aws:iam::1:role/backup", "--s3-role-arn", None));
            assert!(matches!(**base, Source::Keys { .. }));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.sts_endpoint, "http://127.0.0.1:9000");
    assert!(c.source.describe().contains("role arn:aws:iam::1:role/backup assumed (--s3-role-arn) with keys from the environment"), "{}", c.source.describe());
    assert_eq!(c.static_secrets(), vec!["S".to_string()], "the base keys' secret is scrubbed from messages");
    let c = chain(&[("HOME", "/nonexistent")], None).unwrap();
    assert_eq!(c.sts_endpoint, "https://sts.eu-west-1.amazonaws.com");
}

#[test]
fn profiles_assume_roles_from_their_sources() {
    let a = aws(
        "[base]\naws_access_key_id = AKBASE\naws_secret_access_key = SBASE\n",
        "[profile app]\nrole_arn = arn:aws:iam::1:role/app\nsource_profile = base\nduration_seconds = 900\nexternal_id = x-1\n\
         [profile two]\nrole_arn = arn:aws:iam::1:role/two\nsource_profile = app\n\
         [profile env]\nrole_arn = arn:aws:iam::1:role/env\ncredential_source = Environment\n\
         [profile ec2]\nrole_arn = arn:aws:iam::1:role/ec2\ncredential_source = Ec2InstanceMetadata\nec2_metadata_service_endpoint = http://127.0.0.1:1/\n\
         [profile web]\nrole_arn = arn:aws:iam::1:role/web\nweb_identity_token_file = /t\n\
         [profile proc]\ncredential_process = /usr/bin/get-creds --json\n\
         [profile loop1]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = loop2\n\
         [profile loop2]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = loop1\n\
         [profile nosource]\nrole_arn = arn:aws:iam::1:role/c\n\
         [profile empty]\nregion = eu-west-1\n",
    );
    let with = |profile: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![("AWS_SHARED_CREDENTIALS_FILE", a.creds.as_str()), ("AWS_CONFIG_FILE", a.conf.as_str()), ("AWS_PROFILE", profile)];
        pairs.extend_from_slice(extra);
        chain(&pairs, None)
    };
    match with("app", &[]).unwrap().source {
        Source::AssumeRole { role, base, .. } => {
            assert_eq!((role.seconds, role.external_id.as_deref()), (Some(900), Some("x-1")));
            assert!(matches!(*base, Source::Keys { ref from, .. } if from == "profile 'base'"));
        }
        other => panic!("{other:?}"),
    }
    // A role assumed with a role: two hops.
    match with("two", &[]).unwrap().source {
        Source::AssumeRole { base, .. } => assert!(matches!(*base, Source::AssumeRole { ref role, .. } if role.arn.ends_with("role/app"))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(with("env", &[("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "S")]).unwrap().source, Source::Keys { .. }), "the environment's keys come first");
    assert!(with("env", &[]).unwrap_err().to_string().contains("credential_source = Environment"));
    // --s3-profile (the flag) puts the profile before the environment's keys.
    let env = env_of(&[("AWS_SHARED_CREDENTIALS_FILE", a.creds.as_str()), ("AWS_CONFIG_FILE", a.conf.as_str()), ("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "S")]);
    let flagged = Chain::resolve(&Settings { env: &env, profile: Some("app".into()), role_arn: None, region: "eu-west-1".into(), allow_http: true }).unwrap();
    assert!(matches!(flagged.source, Source::AssumeRole { .. }), "{:?}", flagged.source);
    let env_role = Chain::resolve(&Settings { env: &env, profile: Some("env".into()), role_arn: None, region: "eu-west-1".into(), allow_http: true }).unwrap();
    assert!(
        matches!(&env_role.source, Source::AssumeRole { base, .. } if matches!(**base, Source::Keys { ref from, .. } if from == "the environment")),
        "credential_source = Environment works: {:?}",
        env_role.source
    );
    match with("ec2", &[]).unwrap().source {
        Source::AssumeRole { base, .. } => assert!(matches!(*base, Source::Instance { ref endpoint, .. } if endpoint == "http://127.0.0.1:1")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(with("web", &[]).unwrap().source, Source::WebIdentity { ref from, .. } if from == "profile 'web'"));
    assert!(matches!(with("proc", &[]).unwrap().source, Source::Process { ref command, .. } if command == "/usr/bin/get-creds --json"));
    let e = with("loop1", &[]).unwrap_err().to_string();
    assert!(e.contains("circle") && e.contains("loop1 -> loop2 -> loop1"), "{e}");
    assert!(with("nosource", &[]).unwrap_err().to_string().contains("no source_profile, credential_source or web_identity_token_file"));
    // A profile with nothing to give is passed over, to the next source.
    let c = with("empty", &[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"), ("AWS_ROLE_ARN", "arn:aws:iam::1:role/w")]).unwrap();
    assert!(matches!(c.source, Source::WebIdentity { .. }));
    assert!(with("missing", &[]).unwrap_err().to_string().contains("profile 'missing' is in neither"));
}

#[test]
fn nothing_found_lists_every_source_and_why() {
    let e = chain(&[("HOME", "/nonexistent"), ("AWS_EC2_METADATA_DISABLED", "true")], None).unwrap_err().to_string();
    for part in ["no S3 credentials", "(1) the environment", "(2) profile 'default'", "(3) web identity", "(4) container", "(5) instance metadata: AWS_EC2_METADATA_DISABLED"] {
        assert!(e.contains(part), "{part} in {e}");
    }
    assert!(chain(&[("AWS_ACCESS_KEY_ID", "a")], None).unwrap_err().to_string().contains("only one of"));
    assert!(chain(&[("HOME", "/nonexistent"), ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")], None).unwrap_err().to_string().contains("without AWS_ROLE_ARN"));
    let e = chain(&[("HOME", "/nonexistent"), ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.5/creds")], None).unwrap_err().to_string();
    assert!(e.contains("only over HTTPS"), "{e}");
    let env = env_of(&[("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b"), ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9000")]);
    let plain = Chain::resolve(&Settings { env: &env, profile: None, role_arn: None, region: "us-east-1".into(), allow_http: false });
    assert!(plain.err().unwrap().to_string().contains("--s3-allow-http"), "a plain-HTTP STS needs the same consent as a plain-HTTP store");
}

#[test]
fn container_urls_are_https_or_local() {
    for ok in [
        "https://creds.example/x",
        "http://127.0.0.1:8080/c",
        "http://localhost/c",
        "http://[::1]:80/c",
        "http://169.254.170.2/v2",
        "http://169.254.170.23/v1/credentials",
        "http://[fd00:ec2::23]/v1",
    ] {
        assert!(container_url_allowed(ok), "{ok}");
    }
    for no in ["http://10.0.0.1/c", "http://evil.example/c", "ftp://127.0.0.1/c", "http://169.254.169.254/latest", "http://127.0.0.1:1@evil.example/c"] {
        assert!(!container_url_allowed(no), "{no}");
    }
}

#[test]
fn credentials_are_refreshed_before_they_expire() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let f = Fetched { credential: Arc::new(AwsCredential { key_id: "k".into(), secret_key: "s".into(), token: None }), expires: Some(t0 + Duration::from_secs(60)), fetched: t0 };
    assert!(!f.stale(t0 + Duration::from_secs(44)), "a 60 s credential is kept for three quarters of its life");
    assert!(f.stale(t0 + Duration::from_secs(46)));
    assert!(!f.expired(t0 + Duration::from_secs(59)) && f.expired(t0 + Duration::from_secs(60)));
    let hour = Fetched { expires: Some(t0 + Duration::from_secs(3600)), ..f.clone() };
    assert!(!hour.stale(t0 + Duration::from_secs(3299)) && hour.stale(t0 + Duration::from_secs(3301)), "at most five minutes early");
    let forever = Fetched { expires: None, ..f };
    assert!(!forever.stale(t0 + Duration::from_secs(10_000_000)));
}

fn provider_of(source: Source) -> Provider {
    let http = object_store::client::HttpConnector::connect(&object_store::client::ReqwestConnector::default(), &object_store::ClientOptions::new().with_allow_http(true)).unwrap();
    let chain = Chain { source, sts_endpoint: "http://127.0.0.1:1".into(), region: "us-east-1".into(), passed: Vec::new(), credentials_file: String::new() };
    Provider::new(chain, http.clone(), http)
}

/// A refresh that fails while the held credentials are valid keeps them and is not tried again
/// on every request: one attempt per RETRY_REFRESH.
#[test]
fn a_failed_refresh_keeps_valid_credentials_and_waits_before_trying_again() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let d = tempfile::tempdir().unwrap();
    let (json, runs) = (d.path().join("creds.json"), d.path().join("runs"));
    let expires = chrono::Utc::now() + chrono::Duration::seconds(8);
    let good = format!(r#"{{"Version": 1, "AccessKeyId": "AKFIRST", "SecretAccessKey": "s", "Expiration": "{}"}}"#, expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    std::fs::write(&json, good).unwrap();
    let p = provider_of(Source::Process { command: format!("echo run >> {}; cat {}", runs.display(), json.display()), profile: "p".into() });
    assert_eq!(rt.block_on(p.current()).unwrap().key_id, "AKFIRST");
    let count = || std::fs::read_to_string(&runs).unwrap().lines().count();
    assert_eq!(count(), 1);
    // The source breaks; the held credentials become stale (2 s of their 8 left), not expired.
    std::fs::write(&json, "not json").unwrap();
    std::thread::sleep(Duration::from_millis(6500));
    assert_eq!(rt.block_on(p.current()).unwrap().key_id, "AKFIRST", "still valid: kept");
    assert_eq!(count(), 2, "one refresh was tried");
    assert_eq!(rt.block_on(p.current()).unwrap().key_id, "AKFIRST");
    assert_eq!(count(), 2, "and not again on the next request");
}

#[test]
fn credential_process_is_read_and_its_failures_named() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ok = provider_of(Source::Process {
        command: r#"printf '{"Version": 1, "AccessKeyId": "AKPROC", "SecretAccessKey": "s", "SessionToken": "t", "Expiration": "2099-01-01T00:00:00Z"}'"#.into(),
        profile: "p".into(),
    });
    let c = rt.block_on(ok.current()).unwrap();
    assert_eq!((c.key_id.as_str(), c.token.as_deref()), ("AKPROC", Some("t")));
    assert!(rt.block_on(ok.expires()).is_some());
    let failing = provider_of(Source::Process { command: "echo 'sso session expired: run aws sso login' >&2; exit 3".into(), profile: "p".into() });
    let e = rt.block_on(failing.current()).unwrap_err();
    assert!(e.contains("credential_process of profile 'p'") && e.contains("aws sso login"), "{e}");
    let v2 = provider_of(Source::Process { command: r#"echo '{"Version": 2, "AccessKeyId": "a", "SecretAccessKey": "s"}'"#.into(), profile: "p".into() });
    assert!(rt.block_on(v2.current()).unwrap_err().contains("Version 2"));
    let none = provider_of(Source::Process { command: r#"echo '{"AccessKeyId": "a", "SecretAccessKey": "s"}'"#.into(), profile: "p".into() });
    assert!(rt.block_on(none.current()).unwrap_err().contains("without \"Version\""));
}
