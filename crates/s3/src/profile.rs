//! The AWS profile files (`~/.aws/credentials`, `~/.aws/config`): one profile's keys, read as the
//! SDKs read them. Both the settings ([`crate::config`]) and the credential chain
//! ([`crate::credentials`]) read them.

use std::path::PathBuf;

use sheaf_core::{Error, Result};

/// One profile's keys from an INI-style AWS file.
#[derive(Clone)]
pub(crate) struct Profile(pub(crate) Vec<(String, String)>);

impl Profile {
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }
}

/// Read profile `name` from `path`; `None` when the file or the section is missing. In the config
/// file sections other than `default` read `[profile NAME]`.
pub(crate) fn read_profile(path: Option<&PathBuf>, name: &str, config: bool) -> Result<Option<Profile>> {
    let Some(path) = path else { return Ok(None) };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(sheaf_core::ErrorKind::InvalidInput, format!("cannot read AWS profile file {}", path.display()), e)),
    };
    Ok(parse_profile(&text, name, config))
}

fn parse_profile(text: &str, name: &str, config: bool) -> Option<Profile> {
    let wanted = if config && name != "default" { format!("profile {name}") } else { name.to_string() };
    let mut inside = false;
    let mut found = false;
    let mut keys = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = section.trim() == wanted;
            found |= inside;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                keys.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
    }
    found.then_some(Profile(keys))
}
