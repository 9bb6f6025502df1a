//! A connection string's keywords and values, as libpq parses them: a URL
//! (`postgresql://user@host:5432/db?sslmode=verify-full`, percent-decoded) or keyword/value pairs
//! (`host=db1 dbname=app`, quoted and escaped as libpq reads them); every keyword checked against
//! libpq's own list.

use sheaf_core::{Error, Result};

/// The keywords libpq knows, with the environment variable that supplies each.
pub(super) const KEYWORDS: &[(&str, Option<&str>)] = &[
    ("host", Some("PGHOST")),
    ("hostaddr", Some("PGHOSTADDR")),
    ("port", Some("PGPORT")),
    ("dbname", Some("PGDATABASE")),
    ("user", Some("PGUSER")),
    ("password", Some("PGPASSWORD")),
    ("passfile", Some("PGPASSFILE")),
    ("service", Some("PGSERVICE")),
    ("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    ("application_name", Some("PGAPPNAME")),
    ("fallback_application_name", None),
    ("options", Some("PGOPTIONS")),
    ("client_encoding", Some("PGCLIENTENCODING")),
    ("keepalives", None),
    ("keepalives_idle", None),
    ("keepalives_interval", None),
    ("keepalives_count", None),
    ("tcp_user_timeout", None),
    ("target_session_attrs", Some("PGTARGETSESSIONATTRS")),
    ("load_balance_hosts", Some("PGLOADBALANCEHOSTS")),
    ("channel_binding", Some("PGCHANNELBINDING")),
    ("require_auth", Some("PGREQUIREAUTH")),
    ("sslmode", Some("PGSSLMODE")),
    ("sslnegotiation", Some("PGSSLNEGOTIATION")),
    ("sslcompression", None),
    ("sslcert", Some("PGSSLCERT")),
    ("sslkey", Some("PGSSLKEY")),
    ("sslpassword", None),
    ("sslcertmode", Some("PGSSLCERTMODE")),
    ("sslrootcert", Some("PGSSLROOTCERT")),
    ("sslcrl", Some("PGSSLCRL")),
    ("sslcrldir", Some("PGSSLCRLDIR")),
    ("sslsni", Some("PGSSLSNI")),
    ("ssl_min_protocol_version", Some("PGSSLMINPROTOCOLVERSION")),
    ("ssl_max_protocol_version", Some("PGSSLMAXPROTOCOLVERSION")),
    ("requirepeer", Some("PGREQUIREPEER")),
    ("gssencmode", Some("PGGSSENCMODE")),
    ("krbsrvname", Some("PGKRBSRVNAME")),
    ("gsslib", Some("PGGSSLIB")),
    ("gssdelegation", Some("PGGSSDELEGATION")),
    ("replication", None),
];

pub(super) fn known(keyword: &str) -> bool {
    KEYWORDS.iter().any(|(k, _)| *k == keyword)
}

/// Whether `text` is a keyword/value connection string (`host=/run/postgresql dbname=app`): it
/// starts with one of libpq's keywords and `=`.
pub fn is_keyword_string(text: &str) -> bool {
    let t = text.trim_start();
    t.split_once('=').is_some_and(|(k, _)| KEYWORDS.iter().any(|(name, _)| *name == k.trim_end()))
}

/// A keyword/value connection string of `pairs`, each value quoted as libpq reads it.
pub fn keyword_string(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))).collect::<Vec<_>>().join(" ")
}

/// A connection string's keywords and values: a URL (`postgres://` or `postgresql://`) or
/// keyword/value pairs; empty gives none.
///
/// # Errors
/// What libpq refuses, in its words, with the fix.
pub fn parse(text: &str) -> Result<Vec<(String, String)>> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("postgresql://").or_else(|| t.strip_prefix("postgres://")) {
        parse_url(rest)
    } else {
        parse_keywords(t)
    }
}

fn decode(s: &str, what: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) if v != 0 => out.push(v),
                _ => return Err(Error::invalid(format!("invalid percent-encoded token in the URL's {what}: \"{s}\""))),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::invalid(format!("the URL's {what} is not UTF-8 once decoded")))
}

fn parse_url(rest: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match main.find('/') {
        Some(i) => (&main[..i], Some(&main[i + 1..])),
        None => (main, None),
    };
    // user[:password]@ up to the last '@' (a password may hold '@', encoded or not).
    let hostlist = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                out.push(("user".to_string(), decode(user, "user")?));
            }
            if let Some(p) = password {
                out.push(("password".to_string(), decode(p, "password")?));
            }
            hosts
        }
        None => authority,
    };
    let (mut hosts, mut ports) = (Vec::new(), Vec::new());
    if !hostlist.is_empty() {
        for part in hostlist.split(',') {
            let (host, port) = if let Some(v6) = part.strip_prefix('[') {
                let (h, after) = v6.split_once(']').ok_or_else(|| Error::invalid(format!("missing \"]\" in IPv6 host address in the URL: \"{part}\"")))?;
                (h.to_string(), after.strip_prefix(':').unwrap_or(""))
            } else {
                match part.rsplit_once(':') {
                    Some((h, p)) => (decode(h, "host")?, p),
                    None => (decode(part, "host")?, ""),
                }
            };
            hosts.push(host);
            ports.push(port.to_string());
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            out.push(("host".into(), hosts.join(",")));
        }
        if ports.iter().any(|p| !p.is_empty()) {
            out.push(("port".into(), ports.join(",")));
        }
    }
    if let Some(db) = path.filter(|d| !d.is_empty()) {
        out.push(("dbname".into(), decode(db, "database name")?));
    }
    for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| Error::invalid(format!("missing key/value separator \"=\" in URI query parameter: \"{pair}\"")))?;
        let (k, v) = (decode(k, "query")?, decode(v, "query")?);
        // JDBC's ssl=true, which libpq takes as sslmode=require.
        let (k, v) = if k == "ssl" && v == "true" { ("sslmode".to_string(), "require".to_string()) } else { (k, v) };
        if !known(&k) {
            return Err(Error::invalid(format!("invalid URI query parameter: \"{k}\" (libpq's keywords: host, port, dbname, user, sslmode, sslrootcert, application_name, ...)")));
        }
        out.retain(|(have, _)| *have != k);
        out.push((k, v));
    }
    Ok(out)
}

fn parse_keywords(text: &str) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(Error::invalid(format!(
                "missing \"=\" after \"{key}\" in connection info string: give a URL (postgresql://user@host:5432/db) or keyword=value pairs (host=db1 dbname=app)"
            )));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(Error::invalid(format!("unterminated quoted string in connection info string (the value of \"{key}\")"))),
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        if !known(&key) {
            return Err(Error::invalid(format!("invalid connection option \"{key}\" (libpq's keywords: host, port, dbname, user, sslmode, sslrootcert, service, ...)")));
        }
        out.retain(|(have, _)| *have != key);
        out.push((key, value));
    }
}
