//! Secrets and certificates from the command line: encryption keys and passphrases that never
//! show, a set's key changed in place, the agent's clients admitted and their certificates'
//! expiry checked.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{run, runs_with, same_files, Fixture};
use crate::integration::common::{assert_fails, catalog, s, sheaf, stderr, stdout, SHEAF};

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
    // Read once the program's own command line is there (the new image's, naming its command),
    // while it still runs.
    let proc_cmdline = format!("/proc/{}/cmdline", child.id());
    let mut cmdline = Vec::new();
    crate::integration::common::wait_while_running(&mut child, "the slow backup's command line", || {
        cmdline = fs::read(&proc_cmdline).unwrap_or_default();
        cmdline.windows(7).any(|w| w == b"backup\0")
    });
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
/// the new secret does; every other byte of the stripes stays as it was. New sets are layout 2 (4
/// under a passphrase).
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
    // Layout 4: layout 2 under a passphrase, whose Argon2id salt may be shared, so each block
    // seals its key under a nonce of its own.
    assert_eq!((layout(&a), layout(&b)), (4, 4));
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
