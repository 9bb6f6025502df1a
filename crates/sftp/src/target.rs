//! Where an `sftp://` location points: its user, host and port.

use sheaf_core::{Error, Result};

/// The user, host and port of `sftp://USER@HOST[:PORT]/...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Who to log in as.
    pub user: String,
    /// The host name or address.
    pub host: String,
    /// The port (22 by default).
    pub port: u16,
}

impl Target {
    /// Read `USER@HOST[:PORT]` (the user defaults to `default_user`; `[v6]:port` for IPv6).
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`] naming what is wrong.
    pub fn parse(authority: &str, default_user: Option<&str>) -> Result<Target> {
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (default_user.map(String::from), authority),
        };
        let user = user.filter(|u| !u.is_empty()).ok_or_else(|| Error::invalid(format!("sftp://{authority}: name the user (sftp://USER@HOST/PATH)")))?;
        if user.contains(':') {
            return Err(Error::invalid(format!("sftp://{authority}: no password in the URL; sheaf authenticates by a key file (--sftp-key-file) or an ssh-agent")));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, rest) = v6.split_once(']').ok_or_else(|| Error::invalid(format!("sftp://{authority}: an IPv6 address is written [ADDR]:PORT")))?;
            (h.to_string(), rest.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| Error::invalid(format!("sftp://{authority}: port '{p}' is not a number from 1 to 65535")))?,
            None => 22,
        };
        if host.is_empty() || port == 0 {
            return Err(Error::invalid(format!("sftp://{authority}: give a host (and a port from 1 to 65535)")));
        }
        Ok(Target { user, host, port })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_and_mistakes_named() {
        let t = Target::parse("backup@vault.example:2222", None).unwrap();
        assert_eq!(t, Target { user: "backup".into(), host: "vault.example".into(), port: 2222 });
        assert_eq!(Target::parse("vault", Some("postgres")).unwrap().port, 22);
        assert_eq!(Target::parse("vault", Some("postgres")).unwrap().user, "postgres");
        let v6 = Target::parse("u@[::1]:2200", None).unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 2200));
        assert!(Target::parse("vault", None).unwrap_err().to_string().contains("name the user"));
        assert!(Target::parse("u:secret@vault", None).unwrap_err().to_string().contains("no password"));
        assert!(Target::parse("u@vault:ssh", None).unwrap_err().to_string().contains("port 'ssh'"));
        assert!(Target::parse("u@vault:0", None).is_err());
    }
}
