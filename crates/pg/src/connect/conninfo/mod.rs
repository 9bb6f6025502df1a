//! Connection parameters as libpq finds them, so that sheaf connects where psql, pg_basebackup and
//! pgBackRest do: a URL (`postgresql://user@host:5432/db?sslmode=verify-full`) or a keyword/value
//! string (`host=db1 dbname=app sslmode=require`), then the service file's section for `service`,
//! then the environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGSSLMODE`...), then libpq's defaults; the
//! password from the string, the service, `PGPASSWORD`, or else the password file (`passfile`,
//! `PGPASSFILE`, `~/.pgpass`, ignored with libpq's warning when others may read it). This is
//! libpq's own order (conninfo_add_defaults: the service before the environment).

use std::collections::BTreeMap;
use std::path::PathBuf;

use sheaf_core::{Error, Result};

mod parse;
mod passfile;
mod service;

use parse::KEYWORDS;
pub use parse::{is_keyword_string, keyword_string, parse};
use passfile::pgpass_lookup;
use service::service_section;

/// Where libpq looks for a Unix-domain socket when no host is given (Debian's build).
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Plain first, TLS if the server insists.
    Allow,
    /// TLS if the server offers it (the default).
    Prefer,
    /// TLS or nothing; the certificate checked as verify-ca when a root certificate is there.
    Require,
    /// TLS with a certificate that chains to a trusted root.
    VerifyCa,
    /// verify-ca, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    /// Its name, as libpq spells it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(v: &str) -> Result<SslMode> {
        Ok(match v {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(Error::invalid(format!("invalid sslmode value: \"{other}\": give disable, allow, prefer, require, verify-ca or verify-full"))),
        })
    }
}

/// libpq's `target_session_attrs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server.
    Any,
    /// One that takes writes (not in recovery, not default_transaction_read_only).
    ReadWrite,
    /// One that does not.
    ReadOnly,
    /// Not in recovery.
    Primary,
    /// In recovery.
    Standby,
    /// A standby if any host is one, else any.
    PreferStandby,
}

impl SessionAttrs {
    fn parse(v: &str) -> Result<SessionAttrs> {
        Ok(match v {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            other => return Err(Error::invalid(format!("invalid target_session_attrs value: \"{other}\": give any, read-write, read-only, primary, standby or prefer-standby"))),
        })
    }
}

/// One place to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix-domain socket in this folder (`sslmode` does not apply).
    Socket(PathBuf),
    /// A TCP host name (checked against the certificate under verify-full), with the address to
    /// use instead of resolving it (`hostaddr`).
    Tcp {
        /// The name.
        host: String,
        /// `hostaddr`, when given.
        addr: Option<String>,
    },
}

/// One host to try, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Where.
    pub endpoint: Endpoint,
    /// Its port.
    pub port: u16,
}

impl Target {
    /// The host name as the password file matches it: `localhost` for a socket.
    pub fn pgpass_host(&self) -> &str {
        match &self.endpoint {
            Endpoint::Socket(_) => "localhost",
            Endpoint::Tcp { host, .. } => host,
        }
    }
}

/// The parameters, resolved: the string's, the service's, the environment's and libpq's
/// defaults, each where the one before is silent.
#[derive(Clone, Default)]
pub struct ConnInfo {
    /// Every keyword given a value, by any source.
    values: BTreeMap<String, String>,
    /// Where each came from (`the connection string`, `service NAME`, `PGHOST`...), for messages.
    origin: BTreeMap<String, String>,
    /// What the password search found wrong (libpq's warnings), for the message when the login
    /// fails.
    pub warnings: Vec<String>,
}

/// Shown without its secrets.
impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: BTreeMap<&str, &str> = self.values.iter().map(|(k, v)| (k.as_str(), if SECRET.contains(&k.as_str()) { "****" } else { v.as_str() })).collect();
        f.debug_struct("ConnInfo").field("values", &shown).field("warnings", &self.warnings).finish_non_exhaustive()
    }
}

/// The keywords whose values are secrets.
const SECRET: [&str; 2] = ["password", "sslpassword"];

/// The values are wiped when it goes (a password given in the connection string among them).
impl Drop for ConnInfo {
    fn drop(&mut self) {
        for v in self.values.values_mut() {
            zeroize::Zeroize::zeroize(v);
        }
    }
}

impl ConnInfo {
    /// Resolve `text` (a URL, a keyword/value string, or empty) as libpq would, reading the
    /// environment, the service file and the password file as libpq does.
    ///
    /// # Errors
    /// A string that does not parse, an unknown keyword, an invalid value, a service that is not
    /// defined: each named, with what it should be.
    pub fn resolve(text: &str) -> Result<ConnInfo> {
        Self::resolve_with(text, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`ConnInfo::resolve`] with `env` for the environment.
    ///
    /// # Errors
    /// As [`ConnInfo::resolve`].
    pub fn resolve_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ConnInfo> {
        let given = parse(text)?;
        let mut c = ConnInfo::default();
        for (k, v) in given {
            c.origin.insert(k.clone(), "the connection string".into());
            c.values.insert(k, v);
        }
        // The service: named in the string, else PGSERVICE; its values fill what the string left.
        let service = c.values.get("service").cloned().or_else(|| env("PGSERVICE"));
        if let Some(name) = service {
            for (k, v) in service_section(&name, env)? {
                if !c.values.contains_key(&k) {
                    c.origin.insert(k.clone(), format!("service {name}"));
                    c.values.insert(k, v);
                }
            }
        }
        for (k, var) in KEYWORDS {
            if let (false, Some(var)) = (c.values.contains_key(*k), var) {
                if let Some(v) = env(var) {
                    c.origin.insert(k.to_string(), var.to_string());
                    c.values.insert(k.to_string(), v);
                }
            }
        }
        if !c.values.contains_key("sslmode") && env("PGREQUIRESSL").is_some_and(|v| v.starts_with('1')) {
            c.values.insert("sslmode".into(), "require".into());
            c.origin.insert("sslmode".into(), "PGREQUIRESSL".into());
        }
        c.check()?;
        Ok(c)
    }

    /// The value of `keyword`, when any source gave one.
    pub fn get(&self, keyword: &str) -> Option<&str> {
        self.values.get(keyword).map(String::as_str)
    }

    /// Set `keyword` (as the connection string would).
    pub fn set(&mut self, keyword: &str, value: &str) {
        self.values.insert(keyword.into(), value.into());
        self.origin.insert(keyword.into(), "sheaf".into());
    }

    fn origin(&self, keyword: &str) -> &str {
        self.origin.get(keyword).map_or("the connection string", String::as_str)
    }

    /// Values that must parse, checked once, each refusal naming where the value came from.
    fn check(&self) -> Result<()> {
        let bad = |k: &str, e: Error| Error::invalid(format!("{} (from {})", e.message(), self.origin(k)));
        if let Some(v) = self.get("sslmode") {
            SslMode::parse(v).map_err(|e| bad("sslmode", e))?;
        }
        if let Some(v) = self.get("target_session_attrs") {
            SessionAttrs::parse(v).map_err(|e| bad("target_session_attrs", e))?;
        }
        if let Some(v) = self.get("connect_timeout") {
            v.trim().parse::<i64>().map_err(|_| {
                Error::invalid(format!("invalid integer value \"{v}\" for connection option \"connect_timeout\" (from {}): give whole seconds", self.origin("connect_timeout")))
            })?;
        }
        for k in ["keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"] {
            if let Some(v) = self.get(k) {
                v.trim().parse::<u32>().map_err(|_| Error::invalid(format!("invalid integer value \"{v}\" for connection option \"{k}\" (from {})", self.origin(k))))?;
            }
        }
        if let Some(v) = self.get("sslsni") {
            if v != "0" && v != "1" {
                return Err(Error::invalid(format!("invalid sslsni value: \"{v}\" (from {}): give 0 or 1", self.origin("sslsni"))));
            }
        }
        // What sheaf does not speak is refused rather than quietly not done.
        // Keyword, the value that is refused (None: any), what it is.
        const UNSUPPORTED: &[(&str, Option<&str>, &str)] = &[
            ("gssencmode", Some("require"), "GSSAPI encryption"),
            ("krbsrvname", None, "Kerberos"),
            ("gsslib", None, "GSSAPI"),
            ("requirepeer", None, "requirepeer"),
            ("sslnegotiation", Some("direct"), "direct TLS negotiation"),
            ("sslpassword", None, "encrypted client keys (decrypt the key: openssl pkey -in KEY -out KEY.plain)"),
            ("load_balance_hosts", Some("random"), "load_balance_hosts=random"),
            ("require_auth", None, "require_auth"),
        ];
        for (k, refused, what) in UNSUPPORTED {
            if let Some(v) = self.get(k).filter(|v| refused.is_none_or(|r| r == *v)) {
                return Err(Error::invalid(format!("{k}={v} (from {}): sheaf does not support {what}; drop it, or connect with another method", self.origin(k))));
            }
        }
        self.targets().map(drop)
    }

    /// The `sslmode` (default `prefer`).
    pub fn sslmode(&self) -> SslMode {
        self.get("sslmode").and_then(|v| SslMode::parse(v).ok()).unwrap_or(SslMode::Prefer)
    }

    /// The `target_session_attrs` (default `any`).
    pub fn session_attrs(&self) -> SessionAttrs {
        self.get("target_session_attrs").and_then(|v| SessionAttrs::parse(v).ok()).unwrap_or(SessionAttrs::Any)
    }

    /// The user: given, else the operating system's user (libpq's default).
    pub fn user(&self) -> String {
        self.get("user").map(str::to_string).unwrap_or_else(|| sheaf_core::host::user_name(sheaf_core::host::effective_ids().0))
    }

    /// The database: given, else the user's name.
    pub fn dbname(&self) -> String {
        self.get("dbname").map(str::to_string).unwrap_or_else(|| self.user())
    }

    /// `connect_timeout` (libpq: none, or at least 2 s; sheaf's default 10 s, a backup job must
    /// not hang on a host that drops packets).
    pub fn connect_timeout(&self) -> std::time::Duration {
        match self.get("connect_timeout").and_then(|v| v.trim().parse::<i64>().ok()) {
            Some(s) if s <= 0 => std::time::Duration::from_secs(24 * 3600),
            Some(s) => std::time::Duration::from_secs(s.max(2) as u64),
            None => std::time::Duration::from_secs(10),
        }
    }

    /// The hosts to try, in order, with their ports: `host` and `hostaddr` as comma lists (a
    /// `host` starting with `/` or `@` is a socket folder), `port` one for all or one each;
    /// without a host, the default socket folder.
    ///
    /// # Errors
    /// Lists of different lengths, a port that is not a number.
    pub fn targets(&self) -> Result<Vec<Target>> {
        let split = |v: Option<&str>| -> Vec<String> { v.map(|v| v.split(',').map(|s| s.trim().to_string()).collect()).unwrap_or_default() };
        let mut hosts = split(self.get("host"));
        let addrs = split(self.get("hostaddr"));
        if hosts.is_empty() || hosts == [""] {
            hosts = if addrs.is_empty() { vec![String::new()] } else { vec![String::new(); addrs.len()] };
        }
        if !addrs.is_empty() && addrs.len() != hosts.len() {
            return Err(Error::invalid(format!("could not match {} host names to {} hostaddr values", hosts.len(), addrs.len())));
        }
        let ports = split(self.get("port"));
        if ports.len() > 1 && ports.len() != hosts.len() {
            return Err(Error::invalid(format!("could not match {} port numbers to {} hosts", ports.len(), hosts.len())));
        }
        let mut out = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let p = ports.get(i).or(ports.first()).map(String::as_str).filter(|p| !p.is_empty()).unwrap_or("5432");
            let port: u16 = p.parse().map_err(|_| Error::invalid(format!("invalid port number: \"{p}\" (from {})", self.origin("port"))))?;
            let addr = addrs.get(i).filter(|a| !a.is_empty()).cloned();
            let endpoint = if h.starts_with('/') {
                Endpoint::Socket(PathBuf::from(h))
            } else if let Some(abstract_name) = h.strip_prefix('@') {
                Endpoint::Socket(PathBuf::from(format!("\0{abstract_name}")))
            } else if h.is_empty() && addr.is_none() {
                Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET_DIR))
            } else {
                Endpoint::Tcp { host: if h.is_empty() { addr.clone().unwrap_or_default() } else { h.clone() }, addr }
            };
            out.push(Target { endpoint, port });
        }
        Ok(out)
    }

    /// The password for `target` and database `db`: given (string, service, `PGPASSWORD`), else
    /// the password file's first matching line. What made the file unusable goes into
    /// [`ConnInfo::warnings`].
    pub fn password(&mut self, target: &Target, db: &str) -> Option<zeroize::Zeroizing<String>> {
        if let Some(p) = self.get("password").filter(|p| !p.is_empty()) {
            return Some(zeroize::Zeroizing::new(p.to_string()));
        }
        let file = match self.get("passfile") {
            Some(f) => PathBuf::from(f),
            None => home()?.join(".pgpass"),
        };
        let user = self.user();
        match pgpass_lookup(&file, target.pgpass_host(), target.port, db, &user) {
            Ok(found) => found,
            Err(warning) => {
                if !self.warnings.contains(&warning) {
                    self.warnings.push(warning);
                }
                None
            }
        }
    }

    /// The URL form without a password, for messages (and what [`crate::connect::session::redact`] shows).
    pub fn shown(&self) -> String {
        let targets = self.targets().unwrap_or_default();
        let hosts: Vec<String> = targets
            .iter()
            .map(|t| match &t.endpoint {
                Endpoint::Socket(d) => format!("{}:{}", d.display(), t.port),
                Endpoint::Tcp { host, .. } => format!("{host}:{}", t.port),
            })
            .collect();
        format!("{}@{}/{}", self.user(), hosts.join(","), self.dbname())
    }
}

/// The user's home folder.
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn with_env(text: &str, env: &[(&str, &str)]) -> Result<ConnInfo> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ConnInfo::resolve_with(text, &move |k| env.get(k).cloned())
    }

    #[test]
    fn keyword_strings_are_told_from_paths_and_written_as_libpq_reads_them() {
        for t in ["host=/run/postgresql dbname=app", "  dbname = x", "service=nightly"] {
            assert!(is_keyword_string(t), "{t}");
        }
        for t in ["/srv/data", "data=dir", "./host", ""] {
            assert!(!is_keyword_string(t), "{t}");
        }
        let text = keyword_string(&[("host", "/run/postgresql"), ("user", "o'brien"), ("dbname", "a b\\c")]);
        let info = with_env(&text, &[]).unwrap();
        assert_eq!((info.get("host"), info.get("user"), info.get("dbname")), (Some("/run/postgresql"), Some("o'brien"), Some("a b\\c")));
        let shown = format!("{:?}", with_env("password=hunter2 dbname=x", &[]).unwrap());
        assert!(shown.contains("dbname") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn urls_and_keyword_strings_say_the_same() {
        let a = with_env("postgresql://app:p%40ss@db1:6432,db2/sales?sslmode=verify-full&application_name=nightly", &[]).unwrap();
        let b = with_env("host=db1,db2 port='6432,' user=app password='p@ss' dbname = sales sslmode=verify-full application_name=nightly", &[]).unwrap();
        for k in ["host", "user", "password", "dbname", "sslmode", "application_name"] {
            assert_eq!(a.get(k), b.get(k), "{k}");
        }
        assert_eq!(a.sslmode(), SslMode::VerifyFull);
        let t = a.targets().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].port, t[1].port), (6432, 5432), "a host without a port takes the default");
        assert_eq!(t[0].endpoint, Endpoint::Tcp { host: "db1".into(), addr: None });
        // A socket folder as host (URL query or keyword), IPv6 in brackets.
        let s = with_env("postgres://postgres@localhost:5433/postgres?host=/tmp/sock", &[]).unwrap();
        assert_eq!(s.targets().unwrap(), vec![Target { endpoint: Endpoint::Socket("/tmp/sock".into()), port: 5433 }]);
        let v6 = with_env("postgresql://[::1]:5434/x", &[]).unwrap();
        assert_eq!(v6.targets().unwrap()[0], Target { endpoint: Endpoint::Tcp { host: "::1".into(), addr: None }, port: 5434 });
        let q = with_env(r"password='it\'s' host=h", &[]).unwrap();
        assert_eq!(q.get("password"), Some("it's"));
    }

    #[test]
    fn refusals_name_the_real_cause() {
        let e = |t: &str, env: &[(&str, &str)]| with_env(t, env).unwrap_err().to_string();
        assert!(e("host=h sslmode=verify-everything", &[]).contains("invalid sslmode value: \"verify-everything\""));
        assert!(e("host=h connect_timeout=abc", &[]).contains("invalid integer value \"abc\" for connection option \"connect_timeout\""));
        assert!(e("postgres://h/db?bogus=1", &[]).contains("invalid URI query parameter: \"bogus\""));
        assert!(e("host=h bogus=1", &[]).contains("invalid connection option \"bogus\""));
        assert!(e("host=h dbname", &[]).contains("missing \"=\" after \"dbname\""));
        assert!(e("host='h", &[]).contains("unterminated quoted string"));
        let from_env = e("host=h", &[("PGSSLMODE", "verify")]);
        assert!(from_env.contains("invalid sslmode value") && from_env.contains("from PGSSLMODE"), "{from_env}");
        assert!(e("host=h,i port=1,2,3", &[]).contains("could not match 3 port numbers to 2 hosts"));
        assert!(e("host=h krbsrvname=x", &[]).contains("does not support Kerberos"));
    }

    #[test]
    fn the_string_then_the_service_then_the_environment_then_the_defaults() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("services.conf");
        std::fs::write(&file, "# nightly jobs\n[nightly]\nhost=svc-host\nport=7000\ndbname=svc-db\n\n[other]\nhost=elsewhere\n").unwrap();
        let f = file.to_str().unwrap();
        let env = [("PGSERVICEFILE", f), ("PGHOST", "env-host"), ("PGUSER", "env-user"), ("PGDATABASE", "env-db"), ("PGSSLMODE", "require")];
        let c = with_env("service=nightly dbname=given", &env).unwrap();
        assert_eq!(c.get("dbname"), Some("given"), "the string first");
        assert_eq!(c.get("host"), Some("svc-host"), "the service before the environment (libpq's order)");
        assert_eq!(c.targets().unwrap()[0].port, 7000);
        assert_eq!(c.get("user"), Some("env-user"), "the environment where both are silent");
        assert_eq!(c.sslmode(), SslMode::Require);
        let by_env = with_env("", &[("PGSERVICEFILE", f), ("PGSERVICE", "other")]).unwrap();
        assert_eq!(by_env.get("host"), Some("elsewhere"));
        let none = with_env("service=missing", &[("PGSERVICEFILE", f), ("PGSYSCONFDIR", d.path().to_str().unwrap())]).unwrap_err().to_string();
        assert!(none.contains("definition of service \"missing\" not found"), "{none}");
        // Nothing at all: the default socket folder and port, sslmode prefer.
        let bare = with_env("", &[]).unwrap();
        assert_eq!(bare.targets().unwrap(), vec![Target { endpoint: Endpoint::Socket(DEFAULT_SOCKET_DIR.into()), port: 5432 }]);
        assert_eq!(bare.sslmode(), SslMode::Prefer);
    }

    #[test]
    fn the_password_file_as_libpq_reads_it() {
        let d = tempfile::tempdir().unwrap();
        let pass = d.path().join("pgpass");
        std::fs::write(&pass, "# comment\nother:*:*:*:no\nlocalhost:5433:*:app:sock\\:et\ndb1:*:sales:app:tcp:with:colons\n*:*:*:*:fallback\n").unwrap();
        std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = pass.to_str().unwrap();
        let mut c = with_env("host=/run/pg port=5433 user=app", &[("PGPASSFILE", p)]).unwrap();
        let t = c.targets().unwrap()[0].clone();
        assert_eq!(c.password(&t, "app").as_deref().map(String::as_str), Some("sock:et"), "a socket matches as localhost");
        let mut c = with_env("host=db1 user=app", &[("PGPASSFILE", p)]).unwrap();
        let t = c.targets().unwrap()[0].clone();
        assert_eq!(c.password(&t, "sales").as_deref().map(String::as_str), Some("tcp:with:colons"));
        assert_eq!(c.password(&t, "other").as_deref().map(String::as_str), Some("fallback"));
        // A password given wins over the file.
        let mut given = with_env("host=db1 user=app password=given", &[("PGPASSFILE", p)]).unwrap();
        assert_eq!(given.password(&t, "sales").as_deref().map(String::as_str), Some("given"));
        // Readable by others: ignored, with libpq's warning.
        std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut open = with_env("host=db1 user=app", &[("PGPASSFILE", p)]).unwrap();
        assert!(open.password(&t, "sales").is_none());
        assert!(open.warnings[0].contains("has group or world access; permissions should be u=rw (0600) or less"), "{:?}", open.warnings);
    }
}
