//! Connections as libpq makes them (issue 38), against a real server with certificates from a
//! test CA: `hostssl` with `cert` authentication (clientcert=verify-full); a certificate from
//! another CA refused under verify-ca and verify-full and accepted under require; a name mismatch
//! refused under verify-full only; a password found only in a password file; a password file
//! others may read ignored with libpq's warning; sslmode=require over a Unix socket. Every
//! refusal is `Denied` (exit 10) and permanent (issue 50): never called transient.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType};
use sheaf_core::error::{Error, ErrorKind};
use sheaf_pg::connect::server::Server;
use sheaf_pg::connect::session::Refusal;
use sheaf_pg::connect::wire::Replication;

use super::cluster::{give_to_server, server_tempdir, Cluster};
use crate::integration::common::{assert_fails, run, sheaf};

struct Pki {
    ca: PathBuf,
    other_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let pem = p.self_signed(&key).unwrap().pem();
    (p, key, pem)
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Two CAs; the server's certificate (naming localhost only) and a client's for `certuser`, both
/// from the first. The server's files go to `server_dir` (the server's own), the rest to `dir`.
fn pki(dir: &Path, server_dir: &Path) -> Pki {
    let (ca_params, ca_key, ca_pem) = ca("sheaf test CA");
    let (_, _, other_pem) = ca("another CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let mut server = CertificateParams::default();
    server.distinguished_name.push(DnType::CommonName, "localhost");
    server.subject_alt_names = vec![SanType::DnsName("localhost".to_string().try_into().unwrap())];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().unwrap();
    let server_pem = server.signed_by(&server_key, &issuer).unwrap().pem();
    let mut client = CertificateParams::default();
    client.distinguished_name.push(DnType::CommonName, "certuser");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().unwrap();
    let client_pem = client.signed_by(&client_key, &issuer).unwrap().pem();
    for (name, text, mode) in [("server.crt", server_pem.as_str(), 0o644), ("server.key", &server_key.serialize_pem(), 0o600), ("ca.crt", ca_pem.as_str(), 0o644)] {
        let p = server_dir.join(name);
        write(&p, text, mode);
        give_to_server(&p);
    }
    let p = Pki { ca: dir.join("ca.crt"), other_ca: dir.join("other.crt"), client_cert: dir.join("client.crt"), client_key: dir.join("client.key") };
    write(&p.ca, &ca_pem, 0o644);
    write(&p.other_ca, &other_pem, 0o644);
    write(&p.client_cert, &client_pem, 0o644);
    write(&p.client_key, &client_key.serialize_pem(), 0o600);
    p
}

/// The refusal of `conn`: by kind, permanent, its text for what sheaf itself says.
fn refused(conn: &str) -> String {
    match Server::connect(conn) {
        Ok(_) => panic!("{conn}: connected, and should not have"),
        Err(e) => denied(e),
    }
}

fn denied(e: Error) -> String {
    assert_eq!(e.kind(), ErrorKind::Denied, "{e}");
    assert!(!e.is_transient(), "a refusal is permanent: {e}");
    e.to_string()
}

#[test]
fn connections_check_what_they_connect_to_and_find_their_password() {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    assert!(!home.join(".postgresql/root.crt").exists(), "a root.crt in {} would make require check certificates as libpq does", home.display());
    let base = server_tempdir("sheaf-tls.");
    let server_files = base.path().join("server");
    std::fs::create_dir(&server_files).unwrap();
    give_to_server(&server_files);
    let pki = pki(base.path(), &server_files);
    let at = |n: &str| server_files.join(n).display().to_string();
    let settings =
        ["ssl = on".to_string(), format!("ssl_cert_file = '{}'", at("server.crt")), format!("ssl_key_file = '{}'", at("server.key")), format!("ssl_ca_file = '{}'", at("ca.crt"))];
    let mut c = Cluster::new(&[], &[]);
    // PyPI's 18 is built without SSL; Debian's and npm's servers have it.
    if c.sql("postgres", "SHOW ssl_library").is_empty() {
        sheaf_core::testing::missing("a PostgreSQL server built with SSL (this one's ssl_library is empty)");
        return;
    }
    c.stop();
    let conf = c.data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!("\n{}\n", settings.join("\n")));
    std::fs::write(&conf, text).unwrap();
    c.start();
    c.sql("postgres", "CREATE ROLE certuser LOGIN SUPERUSER; CREATE ROLE pwuser LOGIN PASSWORD 'pw-secret'");
    let hba = c.data.join("pg_hba.conf");
    let rest = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!(
            "hostssl all certuser 127.0.0.1/32 cert\nhostssl replication certuser 127.0.0.1/32 cert\nhostnossl all certuser 127.0.0.1/32 reject\nhost all pwuser 127.0.0.1/32 scram-sha-256\n{rest}"
        ),
    )
    .unwrap();
    c.sql("postgres", "SELECT pg_reload_conf()");
    let port = c.port;
    let client = format!("sslcert={} sslkey={}", pki.client_cert.display(), pki.client_key.display());
    let ca = pki.ca.display();
    let other = pki.other_ca.display();

    // cert authentication, the server's certificate checked whole: by keywords and by URL.
    Server::connect(&format!("host=localhost port={port} user=certuser dbname=postgres sslmode=verify-full sslrootcert={ca} {client}")).unwrap();
    let url =
        format!("postgresql://certuser@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}", pki.client_cert.display(), pki.client_key.display());
    Server::connect(&url).unwrap();
    Replication::connect(&url).unwrap();
    // Without the client's certificate, cert authentication refuses.
    let e = refused(&format!("host=localhost port={port} user=certuser dbname=postgres sslmode=verify-full sslrootcert={ca}"));
    assert!(e.contains(Refusal::Login.hint()), "{e}");

    // The name: 127.0.0.1 is not in the certificate. verify-full refuses, verify-ca does not.
    let by_ip = |mode: &str, root: &dyn std::fmt::Display| format!("host=127.0.0.1 port={port} user=certuser dbname=postgres sslmode={mode} sslrootcert={root} {client}");
    let e = refused(&by_ip("verify-full", &ca));
    assert!(e.contains(Refusal::ServerCertificate.hint()), "{e}");
    Server::connect(&by_ip("verify-ca", &ca)).unwrap();

    // Another CA's root: the server cannot prove itself under verify-ca or verify-full, not by
    // SQL and not by replication; require (no root given) does not check, as libpq.
    for mode in ["verify-ca", "verify-full"] {
        let conn = format!("host=localhost port={port} user=certuser dbname=postgres sslmode={mode} sslrootcert={other} {client}");
        let e = refused(&conn);
        assert!(e.contains(Refusal::ServerCertificate.hint()), "{mode}: {e}");
        let e = denied(Replication::connect(&conn).err().expect("refused"));
        assert!(e.contains(Refusal::ServerCertificate.hint()), "{mode}, replication: {e}");
    }
    // What the user is told: exit 10, the refusal and its fix, and no word of trying again.
    let conn = format!("host=localhost port={port} user=certuser dbname=postgres sslmode=verify-full sslrootcert={other} {client}");
    let out = run(sheaf().args(["backup", &conn, "--to", "nul"]));
    assert_fails(&out, 10, &[Refusal::ServerCertificate.hint()]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("transient"), "{}", String::from_utf8_lossy(&out.stderr));
    Server::connect(&format!("host=localhost port={port} user=certuser dbname=postgres sslmode=require {client}")).unwrap();
    // verify-full without any root certificate: refused before connecting, naming the fix.
    let e = Server::connect(&format!("host=localhost port={port} user=certuser dbname=postgres sslmode=verify-full {client}")).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "a setting to mend, not a refusal: {e}");
    assert!(e.to_string().contains("root certificate file") && e.to_string().contains("sslrootcert"), "{e}");

    // A password only in a password file (libpq's format, mode 0600) works; readable by others,
    // it is ignored with libpq's warning, which the failure carries.
    let pass = base.path().join("pgpass");
    write(&pass, &format!("# test\nlocalhost:{port}:*:pwuser:pw-secret\n"), 0o600);
    let pw = format!("host=localhost port={port} user=pwuser dbname=postgres sslmode=disable passfile={}", pass.display());
    Server::connect(&pw).unwrap();
    std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = refused(&pw);
    assert!(e.contains("has group or world access; permissions should be u=rw (0600) or less") && e.contains(Refusal::PasswordMissing.hint()), "{e}");
    // A wrong password: refused, for good.
    let e = refused(&format!("host=localhost port={port} user=pwuser password=wrong dbname=postgres sslmode=disable"));
    assert!(e.contains(Refusal::Login.hint()), "{e}");

    // sslmode does not apply to a Unix socket (it failed "server does not support TLS" before).
    Server::connect(&format!("host={} port={port} user=postgres dbname=postgres sslmode=require", c.sock.display())).unwrap();
}
