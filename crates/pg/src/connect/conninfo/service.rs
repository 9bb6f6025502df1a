//! The connection service file (`pg_service.conf`): a named section's keywords and values, from
//! the user's file, then the system's, as libpq reads them.

use std::path::{Path, PathBuf};

use sheaf_core::{Error, Result};

use super::home;
use super::parse::known;

/// The section `name` of the service files: the user's (`PGSERVICEFILE`, else
/// `~/.pg_service.conf`) first, then the system's (`PGSYSCONFDIR/pg_service.conf`, else Debian's
/// `/etc/postgresql-common/pg_service.conf`).
///
/// # Errors
/// A service in neither; a file that does not parse; `service` inside a service.
pub(super) fn service_section(name: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>> {
    let user = env("PGSERVICEFILE").map(PathBuf::from).or_else(|| home().map(|h| h.join(".pg_service.conf")));
    let system = PathBuf::from(env("PGSYSCONFDIR").unwrap_or_else(|| "/etc/postgresql-common".into())).join("pg_service.conf");
    let mut looked = Vec::new();
    for file in user.into_iter().chain([system]) {
        looked.push(file.display().to_string());
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        if let Some(section) = service_in(&text, name, &file)? {
            return Ok(section);
        }
    }
    Err(Error::invalid(format!("definition of service \"{name}\" not found (looked in {}): add a [{name}] section, or check PGSERVICE", looked.join(", "))))
}

fn service_in(text: &str, name: &str, file: &Path) -> Result<Option<Vec<(String, String)>>> {
    let mut inside = false;
    let mut found: Option<Vec<(String, String)>> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            if found.is_some() {
                break;
            }
            inside = section.strip_suffix(']').is_some_and(|s| s.trim() == name);
            if inside {
                found = Some(Vec::new());
            }
            continue;
        }
        if !inside {
            continue;
        }
        let (k, v) = line.split_once('=').ok_or_else(|| Error::invalid(format!("syntax error in service file \"{}\", line {}", file.display(), n + 1)))?;
        let (k, v) = (k.trim(), v.trim());
        if k == "service" {
            return Err(Error::invalid(format!("nested service specifications not supported in service file \"{}\", line {}", file.display(), n + 1)));
        }
        if !known(k) {
            return Err(Error::invalid(format!("syntax error in service file \"{}\", line {}: unknown keyword \"{k}\"", file.display(), n + 1)));
        }
        if let Some(f) = found.as_mut() {
            f.push((k.to_string(), v.to_string()));
        }
    }
    Ok(found)
}
