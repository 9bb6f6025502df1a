//! A backup's annotations: what the DBA says of it ("before the 2026-12 migration",
//! `ticket=OPS-1234`), as pgBackRest's `annotate` and WAL-G's user data keep it. Given at backup
//! time (`backup --annotation KEY=VALUE`, in the record), edited since with `sheaf annotate`:
//! the whole map as it stands then, in `annotations/ID.annotations` beside the record, which is
//! never rewritten (in a locked repository it cannot be). Expire removes them with their backup;
//! `restore` and `drill` pick the newest backup that carries one (`--annotation KEY=VALUE`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sheaf_core::{Error, Result};

use super::paths;
use super::Repo;

/// Longest key and value.
const KEY_MAX: usize = 64;
const VALUE_MAX: usize = 1024;

/// What `annotations/ID.annotations` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Edited {
    /// The backup.
    id: String,
    /// The annotations as they stand.
    annotations: BTreeMap<String, String>,
    /// When and where they were last edited.
    edited_at: String,
    host: String,
}

/// One change: `KEY=VALUE` sets, `KEY=` removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The key.
    pub key: String,
    /// The value; `None` removes the key.
    pub value: Option<String>,
}

impl std::str::FromStr for Change {
    type Err = Error;
    fn from_str(s: &str) -> Result<Change> {
        let Some((key, value)) = s.split_once('=') else {
            return Err(Error::invalid(format!("annotation '{s}': write KEY=VALUE (KEY= removes the key)")));
        };
        let key = key.trim();
        if key.is_empty() || key.len() > KEY_MAX || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(Error::invalid(format!("annotation '{s}': a key is 1 to {KEY_MAX} letters, digits, '-', '_' or '.'")));
        }
        if value.len() > VALUE_MAX || value.chars().any(char::is_control) {
            return Err(Error::invalid(format!("annotation '{s}': a value is at most {VALUE_MAX} bytes of text on one line")));
        }
        Ok(Change { key: key.to_string(), value: (!value.is_empty()).then(|| value.to_string()) })
    }
}

/// `changes` made to `map`, in order.
pub fn apply(map: &mut BTreeMap<String, String>, changes: &[Change]) {
    for c in changes {
        match &c.value {
            Some(v) => map.insert(c.key.clone(), v.clone()),
            None => map.remove(&c.key),
        };
    }
}

/// The annotations given at backup time, as the record keeps them (`KEY=` there means nothing).
pub fn given(changes: &[Change]) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    apply(&mut map, changes);
    map
}

/// Backup `id`'s annotations as `sheaf annotate` left them.
///
/// # Errors
/// The store's; an object that does not parse.
pub fn read(repo: &Repo, id: &str) -> Result<BTreeMap<String, String>> {
    let e: Edited = repo.get_json(&paths::annotations(id))?;
    Ok(e.annotations)
}

/// Write `map` as backup `id`'s annotations, replacing what `annotate` wrote before.
///
/// # Errors
/// The store's.
pub fn write(repo: &Repo, id: &str, map: &BTreeMap<String, String>) -> Result<()> {
    let edited = Edited { id: id.to_string(), annotations: map.clone(), edited_at: sheaf_core::time::utc_now(), host: sheaf_core::host::host_name() };
    repo.put_json(&paths::annotations(id), &edited, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_parse_set_and_remove() {
        let c: Change = "ticket=OPS-1234".parse().unwrap();
        assert_eq!(c, Change { key: "ticket".into(), value: Some("OPS-1234".into()) });
        let gone: Change = "ticket=".parse().unwrap();
        assert_eq!(gone.value, None);
        let spaced: Change = "why=before the 2026-12 migration".parse().unwrap();
        assert_eq!(spaced.value.as_deref(), Some("before the 2026-12 migration"));
        for bad in ["no-equals", "=v", "bad key=v", "k=line\nbreak"] {
            assert!(bad.parse::<Change>().is_err(), "{bad}");
        }
        let mut map = given(&["a=1".parse().unwrap(), "b=2".parse().unwrap()]);
        apply(&mut map, &["a=".parse().unwrap(), "c=3".parse().unwrap(), "b=4".parse().unwrap()]);
        assert_eq!(map.into_iter().collect::<Vec<_>>(), vec![("b".into(), "4".into()), ("c".into(), "3".into())]);
    }
}
