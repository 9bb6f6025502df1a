//! The `sheaf` command finds its connection as PostgreSQL's tools do (issue 38): the cluster in
//! the config file (pg-host, pg-port, pg-user, pg-database; pg-url), the password in `~/.pgpass`
//! (and refused, with libpq's warning, when others may read it), a service in
//! `~/.pg_service.conf` named by PGSERVICE; no password is taken from the settings.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::cluster::{give_to_server, Cluster};
use super::repo::{ok, repo_dir};
use super::sheaf;
use crate::integration::common::{run, stderr};

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    give_to_server(path);
}

#[test]
fn the_connection_comes_from_the_config_file_pgpass_and_the_service_file() {
    let (base, repo) = repo_dir();
    let c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE ROLE dba LOGIN SUPERUSER PASSWORD 'pgpass-only-secret'");
    let hba = c.data.join("pg_hba.conf");
    let rest = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("host all dba 127.0.0.1/32 scram-sha-256\nhost replication dba 127.0.0.1/32 scram-sha-256\n{rest}")).unwrap();
    c.sql("postgres", "SELECT pg_reload_conf()");
    let port = c.port;

    // A home of the user sheaf runs as, with libpq's files in it.
    let home = base.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    give_to_server(&home);
    let pgpass = home.join(".pgpass");
    write(&pgpass, &format!("127.0.0.1:{port}:*:dba:pgpass-only-secret\n"), 0o600);
    write(&home.join(".pg_service.conf"), &format!("[nightly]\nhost=127.0.0.1\nport={port}\nuser=dba\ndbname=postgres\n"), 0o644);
    let config = base.path().join("sheaf.toml");
    write(&config, &format!("repo = \"{}\"\npg-host = \"127.0.0.1\"\npg-port = {port}\npg-user = \"dba\"\npg-database = \"postgres\"\n", repo.display()), 0o644);
    let cli = |config: &Path| -> Command {
        let mut s = sheaf();
        s.env("HOME", &home).env("SHEAF_CONFIG", config).env_remove("PGPASSWORD").env_remove("PGSERVICE").env_remove("PGHOST");
        s
    };

    // init, backup and check name no server: the config file does, the password is .pgpass's.
    let init = ok(run(cli(&config).args(["init"])), "init from the config's connection");
    assert!(init.contains("created repository") && init.contains("then sheaf backup --repo") && !init.contains("pgpass-only-secret"), "{init}");
    ok(run(cli(&config).args(["backup"])), "backup from the config's connection");
    let shown = ok(run(cli(&config).args(["config"])), "config");
    assert!(shown.contains("pg-host") && shown.contains("127.0.0.1"), "{shown}");

    // A service, named by PGSERVICE alone, with no connection in the settings.
    let bare = base.path().join("bare.toml");
    write(&bare, &format!("repo = \"{}\"\n", repo.display()), 0o644);
    let o = run(cli(&bare).args(["backup"]));
    assert!(!o.status.success() && stderr(&o).contains("no PostgreSQL server given") && stderr(&o).contains("pg-url"), "{}", stderr(&o));
    ok(run(cli(&bare).env("PGSERVICE", "nightly").args(["backup"])), "backup through the service file");
    ok(run(cli(&bare).args(["backup", "service=nightly"])), "a keyword/value string as the source");
    let info: serde_json::Value = serde_json::from_str(&ok(run(cli(&bare).args(["info", "--json"])), "info")).unwrap();
    assert_eq!(info["backups"].as_array().unwrap().len(), 3, "{info}");

    // .pgpass readable by others: ignored with libpq's warning, and the failure names it.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(cli(&config).args(["backup"]));
    assert!(!o.status.success(), "backup without a password");
    for part in ["has group or world access", "u=rw (0600)", "password"] {
        assert!(stderr(&o).contains(part), "{part}: {}", stderr(&o));
    }

    // No password in the settings: pg-url holding one is refused, and `config` does not show it.
    let with_pw = base.path().join("pw.toml");
    write(&with_pw, &format!("repo = \"{}\"\npg-url = \"postgresql://dba:inline-secret@127.0.0.1:{port}/postgres\"\n", repo.display()), 0o644);
    let o = run(cli(&with_pw).args(["backup"]));
    assert!(!o.status.success() && stderr(&o).contains("holds a password") && stderr(&o).contains(".pgpass"), "{}", stderr(&o));
    let shown = ok(run(cli(&with_pw).args(["config"])), "config");
    assert!(shown.contains("pg-url") && !shown.contains("inline-secret"), "{shown}");
    // pg-url and the keywords at once: one way, please.
    let both = base.path().join("both.toml");
    write(&both, &format!("repo = \"{}\"\npg-url = \"host=/tmp\"\npg-port = 5432\n", repo.display()), 0o644);
    let o = run(cli(&both).args(["backup"]));
    assert!(!o.status.success() && stderr(&o).contains("both set"), "{}", stderr(&o));
}
