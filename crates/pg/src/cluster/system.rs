//! A cluster's system identifier ([`SystemId`]): the random 64-bit number initdb gives it, which
//! the control file, every WAL segment's first page and `pg_control_system()` carry. It tells one
//! cluster from another wherever sheaf meets one (a repository, a backup, WAL, a data directory),
//! compared as a number, written as PostgreSQL shows it: decimal text.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sheaf_core::{Error, Result};

/// A cluster's system identifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SystemId(pub u64);

impl fmt::Display for SystemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for SystemId {
    type Err = Error;
    fn from_str(s: &str) -> Result<SystemId> {
        s.trim().parse().map(SystemId).map_err(|_| Error::corrupt(format!("'{s}' is not a system identifier (a decimal number, as pg_control_system() shows it)")))
    }
}

/// As decimal text, as records and manifests have always held it.
impl Serialize for SystemId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// From decimal text (or a bare number).
impl<'de> Deserialize<'de> for SystemId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<SystemId, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Text(String),
            Number(u64),
        }
        match Either::deserialize(d)? {
            Either::Text(t) => t.parse().map_err(|e: Error| serde::de::Error::custom(e.message())),
            Either::Number(n) => Ok(SystemId(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_text_read_as_text_or_number() {
        let id = SystemId(7_341_234_567_890_123_456);
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"7341234567890123456\"");
        assert_eq!(serde_json::from_str::<SystemId>("\"7341234567890123456\"").unwrap(), id);
        assert_eq!(serde_json::from_str::<SystemId>("7").unwrap(), SystemId(7));
        assert!(serde_json::from_str::<SystemId>("\"seven\"").is_err());
        assert_eq!(id.to_string().parse::<SystemId>().unwrap(), id);
    }
}
