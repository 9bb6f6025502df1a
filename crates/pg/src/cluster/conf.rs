//! The configuration files of a data directory, as far as sheaf reads and writes them: settings
//! appended to `postgresql.auto.conf` (recovery targets, a drill's or a scratch server's own), and
//! the archiving a restored copy would start with.

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
    f.write_all(format!("\n# Added by sheaf restore at {}: {why}.\n{lines}", sheaf_core::time::utc_now()).as_bytes()).and_then(|()| f.sync_all()).map_err(io)
}

/// `archive_mode` and `archive_command` as a restored data directory would start with them:
/// postgresql.conf, then postgresql.auto.conf (the last setting wins; `include` files are not
/// followed, and a configuration kept outside the data directory is not seen). Defaults: `off`, ``.
pub fn archive_settings(data: &Path) -> (String, String) {
    let (mut mode, mut command) = ("off".to_string(), String::new());
    for file in ["postgresql.conf", "postgresql.auto.conf"] {
        for line in fs::read_to_string(data.join(file)).unwrap_or_default().lines() {
            let Some((key, value)) = line.split_once('=') else { continue };
            let key = key.trim();
            if key.starts_with('#') {
                continue;
            }
            let value = value.trim();
            // 'quoted '' text' or a bare word, then an optional comment.
            let value = match value.strip_prefix('\'') {
                Some(rest) => {
                    let (mut out, mut chars) = (String::new(), rest.chars().peekable());
                    while let Some(c) = chars.next() {
                        match c {
                            '\'' if chars.peek() == Some(&'\'') => {
                                chars.next();
                                out.push('\'');
                            }
                            '\'' => break,
                            c => out.push(c),
                        }
                    }
                    out
                }
                None => value.split(['#', ' ', '\t']).next().unwrap_or_default().to_string(),
            };
            match key {
                "archive_mode" => mode = value,
                "archive_command" => command = value,
                _ => {}
            }
        }
    }
    (mode, command)
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
}
