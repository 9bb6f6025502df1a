//! `sheaf list` and `sheaf show`: the runs the history catalog holds.

use std::path::Path;

use sheaf_core::size::format_size;
use sheaf_core::Error;

use crate::args::{ListArgs, ShowArgs};

/// `sheaf list`.
///
/// # Errors
/// A catalog that cannot be read.
pub fn list(path: Option<&Path>, a: ListArgs) -> Result<(), Error> {
    let c = sheaf_catalog::Catalog::open(path)?;
    let runs = c.list(a.limit)?;
    if a.json {
        say!("{}", serde_json::to_string(&runs).expect("runs serialise"));
        return Ok(());
    }
    say!("{:>5}  {:<8} {:<9} {:<20} {:<12} {:>10} {:>9} {:>6} {:>8}  backup id / error", "id", "op", "status", "started (UTC)", "codec", "read", "seconds", "ratio", "MiB/s");
    for r in &runs {
        say!(
            "{:>5}  {:<8} {:<9} {:<20} {:<12} {:>10} {:>9} {:>6} {:>8}  {}",
            r.id,
            r.operation,
            r.status,
            r.started_at,
            r.compression.as_deref().unwrap_or("-"),
            r.bytes_read.map(|b| format_size(b as u64)).unwrap_or_else(|| "-".into()),
            r.seconds.map(|s| format!("{s:.2}")).unwrap_or_else(|| "-".into()),
            r.ratio.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into()),
            r.mib_per_second.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into()),
            r.error.as_deref().or(r.backup_id.as_deref()).unwrap_or("")
        );
    }
    Ok(())
}

/// `sheaf show`.
///
/// # Errors
/// A catalog that cannot be read, no such run.
pub fn show(path: Option<&Path>, a: ShowArgs) -> Result<(), Error> {
    let c = sheaf_catalog::Catalog::open(path)?;
    // One id a user sees, whichever: the run's number, or the backup's id in either form.
    let number = match a.id.trim().parse::<i64>() {
        Ok(n) => Some(n),
        Err(_) => c.backup_run(a.id.trim())?,
    };
    let run = number.map(|n| c.show(n, true)).transpose()?.flatten().ok_or_else(|| {
        Error::new(
            sheaf_core::ErrorKind::NotFound,
            format!("no run and no backup {} in {}: give a run's number (sheaf list), a backup's id in its repository (sheaf info) or its set id", a.id, c.path().display()),
        )
    })?;
    let v = serde_json::to_value(&run).expect("run serialises");
    if a.json {
        say!("{v}");
    } else {
        for (k, val) in v.as_object().expect("an object") {
            if k != "details" && !val.is_null() {
                say!("{k:>20}: {}", val.as_str().map(str::to_string).unwrap_or_else(|| val.to_string()));
            }
        }
        // From the full report: what the columns do not hold.
        for k in ["encryption", "auto_levels", "resumed"] {
            if let Some(val) = v.pointer(&format!("/details/{k}")).filter(|x| !x.is_null()) {
                say!("{k:>20}: {}", val.as_str().map(str::to_string).unwrap_or_else(|| val.to_string()));
            }
        }
    }
    Ok(())
}
