//! A SQL session with the server, opened as libpq opens one (the first host that answers and is
//! what `target_session_attrs` asks for; TLS as `sslmode` says; the password from the string, the
//! service, `PGPASSWORD` or the password file), and what its failures mean, decided by kind and
//! never by text: a SQLSTATE says whether trying again may help ([`transient_state`]); a
//! certificate or a login refused ([`Refusal`], from rustls's error enum and the SQLSTATE) is
//! permanent, [`ErrorKind::Denied`].

use postgres::error::SqlState;
use postgres::Client;
use sheaf_core::error::{Error, ErrorKind, Result};

use crate::connect::conninfo::{self, is_keyword_string, ConnInfo, Endpoint, SessionAttrs, SslMode};
use crate::connect::tls::{Policy, Rustls};

/// Whether `text` names a PostgreSQL server (a `postgres://` or `postgresql://` URL, or a libpq
/// keyword/value string such as `host=/run/postgresql dbname=postgres`) rather than a
/// path: how every command tells a running cluster from a directory.
pub fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://") || is_keyword_string(text)
}

/// Whether a server's error may pass on a second try, by its SQLSTATE: the connection's class
/// (08), a server shutting down or starting (57P01-57P03), too many connections or too little of
/// a resource (53), a serialization failure or deadlock (40001, 40P01). Decided by the code, so a
/// server whose `lc_messages` is not English is read the same.
pub fn transient_state(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("08")
        || c.starts_with("53")
        || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW, SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED].contains(code)
}

/// sheaf's error for a server's: the SQLSTATE beside the message, transient where the state says
/// so ([`transient_state`]) or where the client lost the connection (no SQLSTATE at all).
pub fn db_err(what: &str, e: postgres::Error) -> Error {
    let transient = match e.as_db_error() {
        Some(d) => transient_state(d.code()),
        // The link: closed, refused, reset (an I/O error under the client's).
        None => e.is_closed() || std::error::Error::source(&e).is_some_and(|c| c.is::<std::io::Error>()),
    };
    let detail = match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => {
            // The client error hides the cause (refused, no such socket) in its source chain.
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text = format!("{text}: {c}");
                cause = c.source();
            }
            text
        }
    };
    Error::new(ErrorKind::Source, format!("{what}: {detail}")).transient(transient)
}

/// The URL without its password, for messages, reports and manifests: the password in the user
/// part (up to the last `@` before the host, since a password may hold `@`) and any `password=`
/// parameter are dropped.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // keyword=value pairs: the password dropped, the rest as given.
        return match conninfo::parse(url) {
            Ok(pairs) => pairs
                .into_iter()
                .filter(|(k, _)| k != "password")
                .map(|(k, v)| if v.is_empty() || v.contains([' ', '\'', '\\']) { format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")) } else { format!("{k}={v}") })
                .collect::<Vec<_>>()
                .join(" "),
            Err(_) => "(a connection string that does not parse)".into(),
        };
    };
    let (authority_and_path, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match authority_and_path.find('/') {
        Some(i) => authority_and_path.split_at(i),
        None => (authority_and_path, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => format!("{}@{host}", user_info.split(':').next().unwrap_or_default()),
        None => authority.to_string(),
    };
    let query: Vec<&str> = query.map(|q| q.split('&').filter(|kv| !kv.to_ascii_lowercase().starts_with("password=")).collect()).unwrap_or_default();
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    format!("{scheme}://{authority}{path}{query}")
}

/// A SQL connection to the first of `info`'s hosts that answers and is what its
/// `target_session_attrs` asks for, in database `db` (else `info`'s), as libpq makes it: TLS as
/// its `sslmode` says on TCP (never on a Unix socket), the password from the string, the
/// service, `PGPASSWORD` or the password file.
///
/// # Errors
/// Bad parameters or TLS files ([`ErrorKind::InvalidInput`]); a certificate or login refused
/// ([`ErrorKind::Denied`], never transient); no host that answers, each host's failure said, with
/// the likely fix and what was wrong with the password file.
pub fn open(info: &mut ConnInfo, db: Option<&str>) -> Result<Client> {
    let policy = Policy::for_conn(info)?;
    let targets = info.targets()?;
    let dbname = db.map_or_else(|| info.dbname(), str::to_string);
    let attrs = info.session_attrs();
    let shown = info.shown();
    let mut failures: Vec<String> = Vec::new();
    let mut last: Option<Error> = None;
    // The first refusal met: a certificate or login refused is said as such, whatever the other
    // hosts did.
    let mut refused: Option<Refusal> = None;
    // prefer-standby: a standby first, then any.
    let passes: &[bool] = if attrs == SessionAttrs::PreferStandby { &[true, false] } else { &[false] };
    for &standby_only in passes {
        for t in &targets {
            let mut config = postgres::Config::new();
            match &t.endpoint {
                Endpoint::Socket(dir) => {
                    config.host_path(dir).ssl_mode(postgres::config::SslMode::Disable);
                }
                Endpoint::Tcp { host, addr } => {
                    config.host(host);
                    if let Some(a) = addr {
                        config.hostaddr(a.parse().map_err(|_| Error::invalid(format!("invalid hostaddr \"{a}\": give a numeric IP address")))?);
                    }
                    config.ssl_mode(match policy.mode {
                        SslMode::Disable => postgres::config::SslMode::Disable,
                        SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
                        _ => postgres::config::SslMode::Require,
                    });
                }
            }
            config.port(t.port).user(&info.user()).dbname(&dbname).connect_timeout(info.connect_timeout());
            config.application_name(info.get("application_name").or(info.get("fallback_application_name")).unwrap_or("sheaf"));
            if let Some(o) = info.get("options") {
                config.options(o);
            }
            // A backup session idles for as long as the copy takes: keep it alive.
            config.keepalives(info.get("keepalives") != Some("0"));
            config.keepalives_idle(std::time::Duration::from_secs(info.get("keepalives_idle").and_then(|v| v.parse().ok()).unwrap_or(60)));
            let password = info.password(t, &dbname);
            let password_given = password.is_some();
            if let Some(pw) = password {
                config.password(pw.as_str());
            }
            let where_ = match &t.endpoint {
                Endpoint::Socket(d) => format!("socket {}/.s.PGSQL.{}", d.display(), t.port),
                Endpoint::Tcp { host, .. } => format!("{host}:{}", t.port),
            };
            let connected = match &policy.config {
                Some(c) => config.connect(Rustls(c.clone())),
                None => config.connect(postgres::NoTls),
            };
            let mut client = match connected {
                Ok(c) => c,
                Err(e) => {
                    let err = connect_error(&format!("cannot connect to {where_}"), e, password_given);
                    failures.push(err.error.message().to_string());
                    refused = refused.or(err.refusal);
                    last = Some(err.error);
                    continue;
                }
            };
            if attrs != SessionAttrs::Any {
                let r =
                    client.query_one("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'", &[]).map_err(|e| db_err("checking target_session_attrs", e))?;
                let (recovery, read_only): (bool, bool) = (r.get(0), r.get(1));
                let fits = match attrs {
                    SessionAttrs::Any => true,
                    SessionAttrs::ReadWrite => !read_only,
                    SessionAttrs::ReadOnly => read_only,
                    SessionAttrs::Primary => !recovery,
                    SessionAttrs::Standby => recovery,
                    SessionAttrs::PreferStandby => recovery || !standby_only,
                };
                if !fits {
                    failures.push(format!(
                        "{where_} is {} (target_session_attrs={})",
                        if recovery { "a standby" } else { "a primary" },
                        info.get("target_session_attrs").unwrap_or_default()
                    ));
                    continue;
                }
            }
            return Ok(client);
        }
    }
    let mut said = failures.join("; ");
    for w in &info.warnings {
        said.push_str(&format!(" ({w})"));
    }
    let message = format!("cannot connect to {shown}: {said}");
    match refused {
        // Refused for who is asking: the same again would be refused again.
        Some(_) => Err(Error::new(ErrorKind::Denied, message)),
        None => Err(Error::new(ErrorKind::Source, message).transient(last.as_ref().is_some_and(Error::is_transient))),
    }
}

/// Why the other side and this one did not agree on who is asking: never mended by asking again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// This side did not accept the server's certificate: another CA's, expired, revoked, or not
    /// naming the host (rustls's `InvalidCertificate`).
    ServerCertificate,
    /// The server did not accept this side's certificate, or wanted one (a TLS alert it sent).
    ClientCertificate,
    /// The server refused the login (SQLSTATE class 28: no pg_hba.conf line lets it in, a wrong
    /// password, a certificate `cert` authentication did not accept).
    Login,
    /// The server asks for a password, and none was found.
    PasswordMissing,
}

impl Refusal {
    /// A TLS failure's refusal, by rustls's error: its own checks of the server's certificate,
    /// or an alert the server sent about this side's.
    pub fn of_tls(e: &rustls::Error) -> Option<Refusal> {
        use rustls::AlertDescription as A;
        match e {
            rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidCertRevocationList(_) | rustls::Error::NoCertificatesPresented => Some(Refusal::ServerCertificate),
            rustls::Error::AlertReceived(
                A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::CertificateRequired,
            ) => Some(Refusal::ClientCertificate),
            _ => None,
        }
    }

    /// The refusal somewhere in `e`'s chain of causes: a rustls error, also where an I/O error
    /// carries it (as tokio-rustls and rustls's streams hand it on).
    pub fn in_chain(e: &(dyn std::error::Error + 'static)) -> Option<Refusal> {
        let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = at {
            let tls = c.downcast_ref::<rustls::Error>().or_else(|| c.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|i| i.downcast_ref::<rustls::Error>()));
            if let Some(r) = tls.and_then(Refusal::of_tls) {
                return Some(r);
            }
            at = c.source();
        }
        None
    }

    /// A server error's refusal, by its SQLSTATE.
    pub fn of_state(code: &SqlState) -> Option<Refusal> {
        code.code().starts_with("28").then_some(Refusal::Login)
    }

    /// What to do about it.
    pub fn hint(self) -> &'static str {
        match self {
            Refusal::ServerCertificate => {
                "the server's certificate does not check against the root certificate (sslrootcert), or does not name the host (verify-full): check both, or the host you dial"
            }
            Refusal::ClientCertificate => "the server did not accept this client's certificate: give sslcert and sslkey of a certificate its CA (ssl_ca_file) signed, unexpired",
            Refusal::Login => {
                "the server refused the login: check the user and password (in the connection string, PGPASSWORD or ~/.pgpass) and pg_hba.conf; where it says `cert`, give sslcert and sslkey"
            }
            Refusal::PasswordMissing => "the server asks for a password: give it in the connection string, PGPASSWORD or a password file (~/.pgpass, mode 0600)",
        }
    }
}

/// A failed connection attempt, told: its error and, when it was refused, why.
struct Failed {
    error: Error,
    refusal: Option<Refusal>,
}

/// What `e`, a failure to connect, means: refused (a certificate, a login, a password missing;
/// permanent, with its hint) or not (the server not there, starting, or out of connections: the
/// transience the SQLSTATE or the lost link says).
fn connect_error(what: &str, e: postgres::Error, password_given: bool) -> Failed {
    let state = e.as_db_error().map(|d| d.code().clone());
    let refusal = state.as_ref().and_then(Refusal::of_state).or_else(|| Refusal::in_chain(&e)).or_else(|| {
        // The client refuses to go on without a password when the server asks for one: the only
        // failure without a server error, a link or TLS cause under it.
        let linked = std::error::Error::source(&e).is_some_and(|c| c.is::<std::io::Error>());
        (state.is_none() && !password_given && !linked && !e.is_closed()).then_some(Refusal::PasswordMissing)
    });
    let hint = match (refusal, &state) {
        (Some(r), _) => r.hint(),
        (None, Some(s)) if *s == SqlState::INVALID_CATALOG_NAME => "the database does not exist; any database will do, e.g. dbname=postgres",
        (None, _) => "check that the server runs and that host, port or socket directory are right",
    };
    let error = db_err(what, e);
    let error = match refusal {
        Some(_) => Error::new(ErrorKind::Denied, format!("{}; {hint}", error.message())),
        None => Error::new(error.kind(), format!("{}; {hint}", error.message())).transient(error.is_transient()),
    };
    Failed { error, refusal }
}
