//! The private CA an agent and its backup hosts trust each other by, and their certificates.
//!
//! `init` writes, in one folder: `ca.pem` and `ca.key` (the CA; keep the key offline once the
//! clients you need are issued), `server.pem`/`server.key` (the agent's, naming this host),
//! `client.pem`/`client.key` (a backup host's: copy them with `ca.pem` to it) and
//! `allowed-clients`, the SHA-256 fingerprints of the client certificates the agent accepts. A
//! certificate signed by the CA but not on the list is refused, so one CA can serve many agents
//! while each admits only its own backup hosts. `add_client` issues one more backup host's
//! certificate into `clients/NAME/` (a ready `--tls-dir` for that host) and lists it; removing
//! its line (and `kill -HUP` of the agent) revokes it.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use sheaf_core::whole::WholeFile;
use sheaf_core::{Error, ErrorKind, Result};
use time::{Duration, OffsetDateTime};

/// The CA's certificate.
pub const CA: &str = "ca.pem";
/// The CA's private key.
pub const CA_KEY: &str = "ca.key";
/// The agent's certificate.
pub const SERVER: &str = "server.pem";
/// The agent's private key.
pub const SERVER_KEY: &str = "server.key";
/// The backup host's certificate.
pub const CLIENT: &str = "client.pem";
/// The backup host's private key.
pub const CLIENT_KEY: &str = "client.key";
/// Fingerprints of the client certificates the agent accepts.
pub const ALLOWED: &str = "allowed-clients";

fn cert_err(what: &str, e: rcgen::Error) -> Error {
    Error::new(ErrorKind::Io, format!("{what}: {e}"))
}

/// Write a certificate or key whole and durably, never over one already there.
fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    let mut f = WholeFile::create_with(path, mode, ErrorKind::Target)?.no_replace();
    f.write_all(text.as_bytes()).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", path.display()), e))?;
    f.commit()
}

/// The SHA-256 of a certificate's DER bytes, in lower-case hex: how the allow-list names it.
pub fn fingerprint(der: &[u8]) -> String {
    sheaf_core::text::hex(ring::digest::digest(&ring::digest::SHA256, der).as_ref())
}

/// What [`init`] made.
#[derive(Clone, Debug)]
pub struct Made {
    /// The names the agent's certificate holds (clients must dial one of them).
    pub server_names: Vec<String>,
    /// The client certificate's fingerprint, as the allow-list holds it.
    pub client_fingerprint: String,
}

fn this_host() -> Option<String> {
    rustix::system::uname().nodename().to_str().ok().filter(|h| !h.is_empty()).map(str::to_string)
}

fn leaf(names: &[String], cn: &str, usage: ExtendedKeyUsagePurpose, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Result<CertificateParams> {
    let mut p = CertificateParams::default();
    for n in names {
        let san = match n.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) if !n.is_empty() && n.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')) => {
                SanType::DnsName(n.clone().try_into().map_err(|e| cert_err(&format!("'{n}' is not a host name"), e))?)
            }
            Err(_) => return Err(Error::invalid(format!("'{n}' is neither a host name nor an address: give the names backup hosts dial the agent by"))),
        };
        p.subject_alt_names.push(san);
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![usage];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.not_before = not_before;
    p.not_after = not_after;
    Ok(p)
}

/// Make the CA, the agent's certificate (naming localhost, 127.0.0.1, ::1, this host and
/// `extra_names`), one client certificate and the allow-list holding it, in `dir` (made if
/// missing, mode 0700; keys 0600).
///
/// # Errors
/// [`ErrorKind::TargetNotEmpty`] when `dir` already holds a CA (nothing is overwritten); a name
/// that is neither a host name nor an address; I/O.
pub fn init(dir: &Path, extra_names: &[String]) -> Result<Made> {
    if dir.join(CA).exists() || dir.join(CA_KEY).exists() {
        return Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!("{} already holds a CA ({CA}): sheaf never replaces certificates; give another folder, or remove that one's files first", dir.display()),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(ErrorKind::Target, format!("cannot make {}", dir.display()), e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| Error::io(ErrorKind::Target, format!("cannot set the mode of {}", dir.display()), e))?;
    let now = OffsetDateTime::now_utc() - Duration::minutes(5);
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, format!("sheaf agent CA ({})", this_host().unwrap_or_else(|| "unnamed host".into())));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = now + Duration::days(3650);
    let ca_key = KeyPair::generate().map_err(|e| cert_err("cannot make the CA's key", e))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| cert_err("cannot make the CA", e))?;
    write_file(&dir.join(CA), &ca_cert.pem(), 0o644)?;
    write_file(&dir.join(CA_KEY), &ca_key.serialize_pem(), 0o600)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    names.extend(this_host());
    for n in extra_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let server = leaf(&names, "sheaf agent", ExtendedKeyUsagePurpose::ServerAuth, now, now + Duration::days(3650))?;
    let server_key = KeyPair::generate().map_err(|e| cert_err("cannot make the agent's key", e))?;
    let server_cert = server.signed_by(&server_key, &issuer).map_err(|e| cert_err("cannot sign the agent's certificate", e))?;
    write_file(&dir.join(SERVER), &server_cert.pem(), 0o644)?;
    write_file(&dir.join(SERVER_KEY), &server_key.serialize_pem(), 0o600)?;
    let fp = issue(&issuer, dir, "client", "sheaf backup host", now, now + Duration::days(3650))?;
    write_file(&dir.join(ALLOWED), &format!("# SHA-256 of each client certificate this agent accepts, one per line (a name may follow)\n{fp} client.pem\n"), 0o644)?;
    Ok(Made { server_names: names, client_fingerprint: fp })
}

fn issue(issuer: &Issuer<'_, KeyPair>, dir: &Path, stem: &str, cn: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Result<String> {
    let p = leaf(&[], cn, ExtendedKeyUsagePurpose::ClientAuth, not_before, not_after)?;
    let key = KeyPair::generate().map_err(|e| cert_err("cannot make a client key", e))?;
    let cert = p.signed_by(&key, issuer).map_err(|e| cert_err("cannot sign a client certificate", e))?;
    write_file(&dir.join(format!("{stem}.pem")), &cert.pem(), 0o644)?;
    write_file(&dir.join(format!("{stem}.key")), &key.serialize_pem(), 0o600)?;
    Ok(fingerprint(cert.der()))
}

/// Issue one more client certificate from the CA in `ca_dir` into `out` as `STEM.pem` and
/// `STEM.key`, valid from `not_before` to `not_after`; returns its fingerprint (add it to the
/// agent's allow-list to admit it).
///
/// # Errors
/// A folder without the CA's certificate and key; I/O.
pub fn issue_client(ca_dir: &Path, out: &Path, stem: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Result<String> {
    issue(&load_issuer(ca_dir)?, out, stem, &format!("sheaf backup host ({stem})"), not_before, not_after)
}

/// The CA in `ca_dir`, to sign with.
fn load_issuer(ca_dir: &Path) -> Result<Issuer<'static, KeyPair>> {
    let read = |name: &str| std::fs::read_to_string(ca_dir.join(name)).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", ca_dir.join(name).display()), e));
    let key = KeyPair::from_pem(&read(CA_KEY)?).map_err(|e| cert_err("the CA's key does not parse", e))?;
    Issuer::from_ca_cert_pem(&read(CA)?, key).map_err(|e| cert_err("the CA's certificate does not parse", e))
}

/// What [`add_client`] made.
#[derive(Clone, Debug)]
pub struct AddedClient {
    /// The folder to copy to the backup host as its `--tls-dir` (ca.pem, client.pem, client.key).
    pub dir: std::path::PathBuf,
    /// Its certificate's fingerprint, as the allow-list holds it.
    pub fingerprint: String,
}

/// One client on the allow-list: its name and what it may do with the repositories the agent
/// serves (`--serve-repo`).
///
/// A line of `allowed-clients` is the certificate's fingerprint, then its name, then grants:
/// `repos=db1,db2` (push WAL into, back up into, and read those repositories) and `manage=db1`
/// (that and everything else: remove backups, replace records, change keys). A client without a
/// grant reaches no repository; reading a cluster's files (`--pgdata`) needs none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Client {
    /// What the line names it (empty when nothing follows the fingerprint).
    pub name: String,
    /// Repositories it may push WAL into, back up into and read.
    pub repos: std::collections::BTreeSet<String>,
    /// Repositories it may also manage (expire, delete, re-key).
    pub manage: std::collections::BTreeSet<String>,
}

impl Client {
    /// Whether it may use repository `repo` at all.
    pub fn uses(&self, repo: &str) -> bool {
        self.repos.contains(repo) || self.manage.contains(repo)
    }

    /// Whether it may manage repository `repo`.
    pub fn manages(&self, repo: &str) -> bool {
        self.manage.contains(repo)
    }

    /// How the agent's log names it.
    pub fn shown(&self) -> &str {
        if self.name.is_empty() {
            "an unnamed client"
        } else {
            &self.name
        }
    }
}

/// The allow-list's entries: each fingerprint and its client.
///
/// # Errors
/// The file cannot be read; a grant of an unknown kind (`reads=` for `repos=`, say), named.
pub fn clients(dir: &Path) -> Result<Vec<(String, Client)>> {
    let path = dir.join(ALLOWED);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read {}", path.display()), e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let fp = words.next().unwrap_or_default().to_ascii_lowercase();
        let mut c = Client::default();
        let mut name = Vec::new();
        for w in words {
            match w.split_once('=') {
                None => name.push(w),
                Some((key, list)) => {
                    let set = match key {
                        "repos" => &mut c.repos,
                        "manage" => &mut c.manage,
                        _ => {
                            return Err(Error::invalid(format!(
                                "{} line {}: '{w}' is not a grant: write repos=NAME[,NAME...] (push, back up, read) or manage=NAME[,NAME...] (also expire and change keys)",
                                path.display(),
                                n + 1
                            )))
                        }
                    };
                    set.extend(list.split(',').filter(|r| !r.is_empty()).map(str::to_string));
                }
            }
        }
        c.name = name.join(" ");
        out.push((fp, c));
    }
    Ok(out)
}

/// The allow-list's entries: fingerprint and the name that follows it (empty when none).
///
/// # Errors
/// As [`clients`].
pub fn allowed_clients(dir: &Path) -> Result<Vec<(String, String)>> {
    Ok(clients(dir)?.into_iter().map(|(fp, c)| (fp, c.name)).collect())
}

/// Issue one more backup host's certificate, named `name`, with the CA in `dir`, into
/// `dir/clients/NAME/` with a copy of the CA's certificate, and add it to the allow-list, granted
/// the use of `repos` (repositories the agent serves; none: it reads clusters only).
///
/// # Errors
/// No CA in `dir`; a name that is not a plain word, or one issued already; I/O.
pub fn add_client(dir: &Path, name: &str, repos: &[String]) -> Result<AddedClient> {
    if !dir.join(CA_KEY).exists() {
        return Err(Error::invalid(format!(
            "{} holds no CA key ({CA_KEY}): make the CA first with `sheaf agent --init-certs {}`, or name the folder that holds it",
            dir.display(),
            dir.display()
        )));
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) || name.starts_with('.') {
        return Err(Error::invalid(format!("--add-client '{name}': name the backup host with letters, digits, '-', '_' or '.' (it names a folder and the allow-list entry)")));
    }
    let allowed = allowed_clients(dir)?;
    if allowed.iter().any(|(_, n)| n == name) {
        return Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!("{} already lists a client named {name}: choose another name, or remove its line first", dir.join(ALLOWED).display()),
        ));
    }
    let out = dir.join("clients").join(name);
    if out.exists() {
        return Err(Error::new(ErrorKind::TargetNotEmpty, format!("{} exists already: sheaf never replaces certificates; choose another name, or remove it first", out.display())));
    }
    std::fs::create_dir_all(&out).map_err(|e| Error::io(ErrorKind::Target, format!("cannot make {}", out.display()), e))?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).map_err(|e| Error::io(ErrorKind::Target, format!("cannot set the mode of {}", out.display()), e))?;
    let ca = std::fs::read_to_string(dir.join(CA)).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", dir.join(CA).display()), e))?;
    write_file(&out.join(CA), &ca, 0o644)?;
    let now = OffsetDateTime::now_utc() - Duration::minutes(5);
    let stem = CLIENT.strip_suffix(".pem").expect("client.pem");
    let fp = issue(&load_issuer(dir)?, &out, stem, &format!("sheaf backup host ({name})"), now, now + Duration::days(3650))?;
    // The allow-list, with one more line, replaced whole.
    let path = dir.join(ALLOWED);
    let mut text = std::fs::read_to_string(&path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?;
    if !text.ends_with('\n') && !text.is_empty() {
        text.push('\n');
    }
    let grant = if repos.is_empty() { String::new() } else { format!(" repos={}", repos.join(",")) };
    text.push_str(&format!("{fp} {name}{grant}\n"));
    let mut f = WholeFile::create_with(&path, 0o644, ErrorKind::Target)?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", path.display()), e))?;
    f.commit()?;
    Ok(AddedClient { dir: out, fingerprint: fp })
}

/// When each certificate in `dir` (the CA's, the agent's, a backup host's: those present) stops
/// being valid, seconds since the epoch.
///
/// # Errors
/// A certificate file that does not parse.
pub fn expiries(dir: &Path) -> Result<Vec<(String, i64)>> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let mut out = Vec::new();
    for name in [CA, SERVER, CLIENT] {
        let path = dir.join(name);
        let Ok(text) = std::fs::read(&path) else { continue };
        for pem in x509_parser::pem::Pem::iter_from_buffer(&text) {
            let pem = pem.map_err(|e| Error::corrupt(format!("{}: not a PEM certificate: {e}", path.display())))?;
            let (_, cert) = X509Certificate::from_der(&pem.contents).map_err(|e| Error::corrupt(format!("{}: not a certificate: {e}", path.display())))?;
            out.push((path.display().to_string(), cert.validity().not_after.timestamp()));
        }
    }
    Ok(out)
}

/// A certificate that expires soon, or has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiring {
    /// Its file.
    pub file: String,
    /// When it stops being valid, seconds since the epoch.
    pub until: i64,
    /// It has already: connections with it fail.
    pub expired: bool,
    /// What to tell the operator: the file, the date and the fix.
    pub message: String,
}

/// The certificates in `dir` that expire within `days` of `now`, or have.
///
/// # Errors
/// As [`expiries`].
pub fn expiring(dir: &Path, now: i64, days: i64) -> Result<Vec<Expiring>> {
    Ok(expiries(dir)?
        .into_iter()
        .filter(|(_, until)| *until - now < days * 86_400)
        .map(|(file, until)| {
            let when = sheaf_core::time::utc(until);
            let expired = until <= now;
            let message = if expired {
                format!("the certificate {file} expired on {when}: connections with it fail; issue new ones (sheaf agent --init-certs DIR --add-client NAME for a backup host, or a new --init-certs folder)")
            } else {
                format!(
                    "the certificate {file} expires on {when}, in {} days: issue a new one before then (sheaf agent --init-certs DIR --add-client NAME for a backup host, or a new --init-certs folder)",
                    (until - now) / 86_400
                )
            };
            Expiring { file, until, expired, message }
        })
        .collect())
}
