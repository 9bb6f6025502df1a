//! The configuration files of a data directory, as far as sheaf reads and writes them: settings
//! appended to `postgresql.auto.conf` (recovery targets, a standby's settings, a drill's or a
//! scratch server's own), settings commented out there (a backed-up cluster's recovery settings),
//! and the settings a restored copy would start with.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use sheaf_core::{Error, ErrorKind, Result};

/// Append `lines` (each ending in a newline) to `data`'s postgresql.auto.conf, made durable,
/// after a comment saying why.
///
/// # Errors
/// I/O errors naming the file.
pub fn append_settings(data: &Path, why: &str, lines: &str) -> Result<()> {
    use std::io::Write;
    let auto = data.join("postgresql.auto.conf");
    let io = |e: std::io::Error| Error::io(ErrorKind::Target, format!("cannot write {}", auto.display()), e);
    let mut f = fs::OpenOptions::new().create(true).append(true).open(&auto).map_err(io)?;
    f.write_all(format!("\n# Added by sheaf restore at {}: {why}.\n{lines}", sheaf_core::time::utc_now()).as_bytes()).and_then(|()| f.sync_all()).map_err(io)?;
    owned_like_folder(data, &auto);
    Ok(())
}

/// One `name = value` line of a configuration file: its name (lower case, as PostgreSQL matches
/// names) and its value unquoted; `None` for a comment, a blank line or an `include`.
pub fn setting_of(line: &str) -> Option<(String, String)> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // `name = value` or `name value` (the equals sign is optional).
    let end = line.find(|c: char| c == '=' || c.is_whitespace()).unwrap_or(line.len());
    let (key, rest) = line.split_at(end);
    if key.is_empty() || key.starts_with("include") {
        return None;
    }
    let rest = rest.trim_start();
    let value = rest.strip_prefix('=').unwrap_or(rest).trim();
    // 'quoted '' text' or a bare word, then an optional comment.
    let value = match value.strip_prefix('\'') {
        Some(quoted) => {
            let (mut out, mut chars) = (String::new(), quoted.chars().peekable());
            while let Some(c) = chars.next() {
                match c {
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        out.push('\'');
                    }
                    '\\' => out.extend(chars.next()),
                    '\'' => break,
                    c => out.push(c),
                }
            }
            out
        }
        None => value.split(['#', ' ', '\t']).next().unwrap_or_default().to_string(),
    };
    Some((key.to_ascii_lowercase(), value))
}

/// Every setting as a data directory would start with it: postgresql.conf, then
/// postgresql.auto.conf (the last setting wins; `include` files are not followed, and a
/// configuration kept outside the data directory is not seen).
pub fn settings(data: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for file in ["postgresql.conf", "postgresql.auto.conf"] {
        for (k, v) in fs::read_to_string(data.join(file)).unwrap_or_default().lines().filter_map(setting_of) {
            out.insert(k, v);
        }
    }
    out
}

/// `archive_mode` and `archive_command` as a restored data directory would start with them
/// ([`settings`]). Defaults: `off`, ``.
pub fn archive_settings(data: &Path) -> (String, String) {
    let mut all = settings(data);
    (all.remove("archive_mode").unwrap_or_else(|| "off".into()), all.remove("archive_command").unwrap_or_default())
}

/// A value as a configuration file quotes it: `'it''s'`.
pub fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Comment out, in `data`'s postgresql.auto.conf, every setting whose name `remove` accepts: each
/// line kept after a `# `, with why; the file replaced whole and made durable. Returns the names
/// commented out, in file order.
///
/// # Errors
/// I/O errors naming the file.
pub fn comment_out(data: &Path, remove: impl Fn(&str) -> bool, why: &str) -> Result<Vec<String>> {
    let auto = data.join("postgresql.auto.conf");
    let text = match fs::read_to_string(&auto) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(ErrorKind::Target, format!("cannot read {}", auto.display()), e)),
    };
    let mut removed = Vec::new();
    let mut out = String::with_capacity(text.len() + 128);
    for line in text.lines() {
        match setting_of(line) {
            Some((key, _)) if remove(&key) => {
                out.push_str(&format!("# {line}    # {why}\n"));
                removed.push(key);
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if !removed.is_empty() {
        let mode = fs::metadata(&auto).map_or(0o600, |m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777);
        sheaf_core::whole::write_whole_with(&auto, out.as_bytes(), mode, ErrorKind::Target)?;
        owned_like_folder(data, &auto);
    }
    Ok(removed)
}

/// Restored as root, the data directory belongs to the server's user: so must what sheaf writes
/// into it (best effort: a user who is not root cannot give files away, and needs not).
pub fn owned_like_folder(data: &Path, file: &Path) {
    if let Ok(m) = fs::metadata(data) {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::lchown(file, Some(m.uid()), Some(m.gid()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_settings_as_the_server_reads_them() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(archive_settings(d.path()), ("off".into(), String::new()), "nothing set: PostgreSQL's defaults");
        fs::write(d.path().join("postgresql.conf"), "#archive_mode = on\narchive_mode = on  # on\narchive_command = 'sheaf wal-push %p --repo ''/r'''\n").unwrap();
        assert_eq!(archive_settings(d.path()), ("on".into(), "sheaf wal-push %p --repo '/r'".into()));
        append_settings(d.path(), "a test", "archive_mode = off\n").unwrap();
        assert_eq!(archive_settings(d.path()).0, "off", "postgresql.auto.conf comes last and wins");
    }

    #[test]
    fn lines_read_as_the_server_reads_them() {
        assert_eq!(setting_of("Primary_Conninfo = 'host=a user=''b'''  # c"), Some(("primary_conninfo".into(), "host=a user='b'".into())));
        assert_eq!(setting_of("port 5433"), Some(("port".into(), "5433".into())));
        assert_eq!(setting_of("hot_standby=on#x"), Some(("hot_standby".into(), "on".into())));
        assert_eq!(setting_of("  # port = 1"), None);
        assert_eq!(setting_of("include_dir 'conf.d'"), None);
        assert_eq!(setting_of(""), None);
    }

    #[test]
    fn commented_out_settings_stay_readable_and_the_rest_untouched() {
        let d = tempfile::tempdir().unwrap();
        let auto = d.path().join("postgresql.auto.conf");
        fs::write(&auto, "# Do not edit\nport = '5433'\nrestore_command = 'cp x %p'\nprimary_conninfo = 'host=a'\n").unwrap();
        let removed = comment_out(d.path(), |k| k == "restore_command" || k == "primary_conninfo", "removed by a test").unwrap();
        assert_eq!(removed, vec!["restore_command", "primary_conninfo"]);
        let text = fs::read_to_string(&auto).unwrap();
        assert!(text.contains("# restore_command = 'cp x %p'    # removed by a test"), "{text}");
        assert_eq!(settings(d.path()).into_iter().collect::<Vec<_>>(), vec![("port".to_string(), "5433".to_string())]);
        assert_eq!(comment_out(d.path(), |_| true, "again").unwrap(), vec!["port"], "comments are never read as settings");
    }
}
