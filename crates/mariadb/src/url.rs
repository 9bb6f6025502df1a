//! `mariadb://USER[:PASSWORD]@HOST[:PORT]/?socket=PATH`: where the server is and who connects.
//! A password may also come from `MARIADB_PASSWORD` (or the client's `MYSQL_PWD`), so that it
//! stays out of the process list and the history catalog.

use sheaf_core::{Error, Result};

/// A server to connect to, as a URL names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// The user (`root` when the URL names none, as the client's default).
    pub user: String,
    /// The password, if the URL or the environment gives one.
    pub password: Option<String>,
    /// Host name or address (`localhost` when none).
    pub host: String,
    /// TCP port (3306 when none).
    pub port: u16,
    /// The server's Unix socket: used when given, whatever the host.
    pub socket: Option<String>,
}

/// Whether `text` names a MariaDB server (rather than a directory).
pub fn is_url(text: &str) -> bool {
    text.starts_with("mariadb://") || text.starts_with("mysql://")
}

/// `text` without its password, for messages and the catalog.
pub fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else { return text.to_string() };
    let (auth, tail) = match rest.find('@') {
        Some(at) if rest[..at].find('/').is_none() => (&rest[..at], &rest[at..]),
        _ => return text.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{tail}"),
        None => text.to_string(),
    }
}

/// `s` percent-decoded (a `%` not followed by two hex digits stays as it is).
fn decode(s: &str) -> Result<String> {
    percent_encoding::percent_decode_str(s).decode_utf8().map(|d| d.into_owned()).map_err(|_| Error::invalid(format!("'{s}' is not UTF-8 once decoded")))
}

impl Address {
    /// Parse `mariadb://USER[:PASSWORD]@HOST[:PORT]/?socket=PATH` (`mysql://` too); `env` gives
    /// the environment's password (`MARIADB_PASSWORD`, else `MYSQL_PWD`) when the URL has none.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`] naming what is wrong and the form it takes.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Address> {
        let form = "give it as mariadb://USER@HOST[:PORT]/ or mariadb://USER@localhost/?socket=/run/mysqld/mysqld.sock";
        let rest =
            text.strip_prefix("mariadb://").or_else(|| text.strip_prefix("mysql://")).ok_or_else(|| Error::invalid(format!("'{}' is not a MariaDB URL: {form}", redact(text))))?;
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, database) = authority.split_once('/').unwrap_or((authority, ""));
        if !database.is_empty() {
            return Err(Error::invalid(format!("'{}': a backup is of the whole server, not database '{database}': leave the path empty ({form})", redact(text))));
        }
        let (auth, hostport) = match authority.rsplit_once('@') {
            Some((a, h)) => (Some(a), h),
            None => (None, authority),
        };
        let (user, password) = match auth.map(|a| a.split_once(':').map_or((a, None), |(u, p)| (u, Some(p)))) {
            Some((u, p)) => (decode(u)?, p.map(decode).transpose()?),
            None => ("root".to_string(), None),
        };
        let (host, port) = match hostport.rsplit_once(':').filter(|(h, _)| !h.ends_with(']') || hostport.starts_with('[')) {
            Some((h, p)) if !p.contains(']') => {
                (h.to_string(), p.parse::<u16>().map_err(|_| Error::invalid(format!("'{}': port '{p}' is not a number from 1 to 65535 ({form})", redact(text))))?)
            }
            _ => (hostport.to_string(), 3306),
        };
        let host = if host.is_empty() { "localhost".to_string() } else { host.trim_start_matches('[').trim_end_matches(']').to_string() };
        let mut socket = None;
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "socket" => socket = Some(decode(v)?),
                _ => return Err(Error::invalid(format!("'{}': unknown parameter '{k}': the one known is socket=PATH", redact(text)))),
            }
        }
        let password = password.or_else(|| env("MARIADB_PASSWORD")).or_else(|| env("MYSQL_PWD"));
        Ok(Address { user, password, host, port, socket })
    }

    /// `user@host:port` or `user@socket`, for messages.
    pub fn describe(&self) -> String {
        match &self.socket {
            Some(s) => format!("{}@{} (socket {s})", self.user, self.host),
            None => format!("{}@{}:{}", self.user, self.host, self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn urls_parse_with_their_defaults() {
        let a = Address::parse("mariadb://backup@localhost/?socket=/run/mysqld/mysqld.sock", none).unwrap();
        assert_eq!(a, Address { user: "backup".into(), password: None, host: "localhost".into(), port: 3306, socket: Some("/run/mysqld/mysqld.sock".into()) });
        let a = Address::parse("mariadb://u:p%40ss@db.example:3307/", none).unwrap();
        assert_eq!((a.user.as_str(), a.password.as_deref(), a.host.as_str(), a.port, a.socket), ("u", Some("p@ss"), "db.example", 3307, None));
        let a = Address::parse("mysql://[::1]:3308", none).unwrap();
        assert_eq!((a.user.as_str(), a.host.as_str(), a.port), ("root", "::1", 3308));
        let a = Address::parse("mariadb://u@h/", |k| (k == "MYSQL_PWD").then(|| "env".to_string())).unwrap();
        assert_eq!(a.password.as_deref(), Some("env"));
    }

    #[test]
    fn bad_urls_are_named_with_the_form_they_take() {
        for (url, says) in [
            ("mariadb://u@h:port/", "port 'port' is not a number"),
            ("mariadb://u@h/shop", "not database 'shop'"),
            ("mariadb://u@h/?sock=/x", "unknown parameter 'sock'"),
            ("postgres://u@h/", "not a MariaDB URL"),
        ] {
            let e = Address::parse(url, none).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        assert_eq!(redact("mariadb://u:secret@h/"), "mariadb://u:***@h/");
        assert!(!Address::parse("mariadb://u:secret@h:x/", none).unwrap_err().to_string().contains("secret"));
    }
}
