//! sheaf-sftp against OpenSSH's sshd on 127.0.0.1: the storage conformance suite every store
//! passes, and what only SFTP has (host keys, logins, the server's fsync).

use sheaf_core::storage::conformance::check_store;
use sheaf_core::{ErrorKind, Schemes};
use sheaf_sftp::testing::Sshd;
use sheaf_sftp::{SftpOptions, SftpSchemes};

/// Schemes with `o`, reading nothing of the user's (no HOME, no ssh-agent).
fn schemes(o: SftpOptions) -> SftpSchemes {
    SftpSchemes::with_env(o, |k| match k {
        "HOME" => Some("/nonexistent".into()),
        _ => None,
    })
}

fn options(d: &Sshd) -> SftpOptions {
    SftpOptions { known_hosts: Some(d.known_hosts()), key_file: Some(d.client_key()), no_fsync: false }
}

fn authority(d: &Sshd) -> String {
    format!("root@127.0.0.1:{}", d.port)
}

#[test]
fn sftp_conforms() {
    let d = Sshd::start();
    let base = d.dir().join("store");
    std::fs::create_dir(&base).unwrap();
    let s = schemes(options(&d));
    let rel = base.display().to_string();
    let (store, name) = s.resolve("sftp", &authority(&d), &format!("{}/x", rel.trim_start_matches('/'))).unwrap();
    assert_eq!(name, format!("{rel}/x"));
    check_store(store.clone(), &rel, 12 << 20);
    let who = store.credentials().unwrap();
    assert!(who.contains("fsync@openssh.com") && who.contains("SHA256:"), "{who}");
    let left: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
}

/// The fingerprint `ssh-keygen -l` gives for the server's key.
fn keygen_fingerprint(d: &Sshd) -> String {
    let out = std::process::Command::new("ssh-keygen").arg("-lf").arg(d.dir().join("host_key.pub")).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn an_unknown_or_changed_host_key_is_refused_before_any_login() {
    let d = Sshd::start();
    let expected = keygen_fingerprint(&d);
    assert!(expected.starts_with("SHA256:"), "{expected}");
    let empty = d.dir().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let s = schemes(SftpOptions { known_hosts: Some(empty.clone()), ..options(&d) });
    let e = s.resolve("sftp", &authority(&d), "tmp/x").expect_err("unknown host");
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(e.to_string().contains(&expected) && e.to_string().contains("ssh-keyscan"), "the fingerprint ssh-keygen shows, and how to add it: {e}");

    // Another key under the server's name: a man in the middle, as ssh would call it.
    let other = d.dir().join("other");
    let ok = std::process::Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&other).status().unwrap().success();
    assert!(ok);
    let pubkey = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let key: Vec<&str> = pubkey.split_whitespace().take(2).collect();
    let wrong = d.dir().join("wrong_known_hosts");
    std::fs::write(&wrong, format!("[127.0.0.1]:{} {}\n", d.port, key.join(" "))).unwrap();
    let s = schemes(SftpOptions { known_hosts: Some(wrong), ..options(&d) });
    let e = s.resolve("sftp", &authority(&d), "tmp/x").expect_err("changed key");
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(e.to_string().contains("NOT the key") && e.to_string().contains(&expected), "{e}");

    // A key the server does not accept; no key at all.
    let s = schemes(SftpOptions { key_file: Some(other), ..options(&d) });
    let e = s.resolve("sftp", &authority(&d), "tmp/x").expect_err("a key it does not know");
    assert!(e.kind() == ErrorKind::Denied && e.to_string().contains("refused the key"), "{e}");
    let s = schemes(SftpOptions { key_file: None, ..options(&d) });
    let e = s.resolve("sftp", &authority(&d), "tmp/x").expect_err("no key");
    assert!(e.to_string().contains("--sftp-key-file") && e.to_string().contains("ssh-agent"), "{e}");
}

#[test]
fn a_server_without_fsync_is_refused_unless_told() {
    // OpenSSH's own sftp-server, with fsync@openssh.com denied (-P).
    let d = Sshd::start_with("Subsystem sftp /usr/lib/openssh/sftp-server -P fsync");
    let base = d.dir().join("nofsync");
    std::fs::create_dir(&base).unwrap();
    let key = format!("{}/a.sheaf", base.display().to_string().trim_start_matches('/'));
    let write = |o: SftpOptions| -> sheaf_core::Result<()> {
        let (store, name) = schemes(o).resolve("sftp", &authority(&d), &key)?;
        let mut sink = store.create(&name, &sheaf_core::storage::WriteOptions::default())?;
        sink.write_all(b"archived WAL")?;
        sink.publish()
    };
    let e = write(options(&d)).expect_err("no fsync");
    assert!(e.to_string().contains("fsync@openssh.com") && e.to_string().contains("--sftp-no-fsync"), "{e}");
    assert!(!base.join("a.sheaf").exists(), "nothing published");
    write(SftpOptions { no_fsync: true, ..options(&d) }).unwrap();
    assert_eq!(std::fs::read(base.join("a.sheaf")).unwrap(), b"archived WAL");
}
