//! The password file (`~/.pgpass`, `PGPASSFILE`, `passfile`): the first line matching host, port,
//! database and user, as libpq matches it; a file others can read is not used, with libpq's
//! warning.

use std::path::Path;

/// The password of the first line of the password file `file` matching host, port, database and
/// user (`*` matches anything; `\:` and `\\` escape). `Err` carries libpq's warning when the file
/// is not used: not a plain file, or readable by group or others.
pub(super) fn pgpass_lookup(file: &Path, host: &str, port: u16, db: &str, user: &str) -> std::result::Result<Option<zeroize::Zeroizing<String>>, String> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(file) else { return Ok(None) };
    if !meta.is_file() {
        return Err(format!("WARNING: password file \"{}\" is not a plain file", file.display()));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("WARNING: password file \"{}\" has group or world access; permissions should be u=rw (0600) or less", file.display()));
    }
    let Ok(text) = std::fs::read_to_string(file).map(zeroize::Zeroizing::new) else { return Ok(None) };
    let port = port.to_string();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = pgpass_fields(line);
        let matches = |field: &str, want: &str| field == "*" || field == want;
        let found = fields.len() >= 5 && matches(&fields[0], host) && matches(&fields[1], &port) && matches(&fields[2], db) && matches(&fields[3], user);
        let password = found.then(|| zeroize::Zeroizing::new(fields[4..].join(":")));
        fields.iter_mut().for_each(zeroize::Zeroize::zeroize);
        if password.is_some() {
            return Ok(password);
        }
    }
    Ok(None)
}

/// A password file line's fields, split at unescaped colons and unescaped.
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.last_mut().expect("one field").extend(chars.next()),
            ':' if out.len() < 5 => out.push(String::new()),
            c => out.last_mut().expect("one field").push(c),
        }
    }
    out
}
