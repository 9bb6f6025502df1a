//! `sheaf expire`: old backups and the WAL no kept backup needs removed, by policy
//! ([`sheaf_pg::repo::retention`]).

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::repo::retention;

use crate::args::ExpireArgs;
use crate::context::Context;
use crate::output::plural;

/// `14d`, `36h`, `90m`, `600s`, `2w` in seconds.
fn parse_duration(text: &str) -> Result<i64, Error> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().map_err(|_| Error::invalid(format!("--keep-within '{text}': write a number and a unit, e.g. 14d, 36h, 90m")))?;
    let mult = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(Error::invalid(format!("--keep-within '{text}': units are s, m, h, d, w (e.g. 14d)"))),
    };
    if n == 0 {
        return Err(Error::invalid(format!("--keep-within '{text}': give a span longer than zero")));
    }
    Ok(n * mult)
}

/// Run it.
///
/// # Errors
/// No policy, a repository that cannot be read, an object that cannot be removed.
pub fn run(ctx: &Context, a: ExpireArgs) -> Result<(), Error> {
    let (repo, meta) = ctx.open_repo()?;
    let keep = retention::Retention { keep_full: a.keep_full, keep_within: a.keep_within.as_deref().map(parse_duration).transpose()? };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let plan = retention::plan_expire(&repo, &meta, &keep, now)?;
    if !a.dry_run {
        retention::expire(&repo, &plan)?;
    }
    if a.json {
        let mut v = serde_json::to_value(&plan).expect("plan serialises");
        v["dry_run"] = serde_json::json!(a.dry_run);
        println!("{v}");
        return Ok(());
    }
    let verb = if a.dry_run { "would remove" } else { "removed" };
    println!(
        "{verb} {} backup{}{}, {} WAL files ({}); kept {} backup{} ({}) and WAL from {}",
        plan.removed.len(),
        plural(plan.removed.len()),
        if plan.removed.is_empty() { String::new() } else { format!(" ({})", plan.removed.join(", ")) },
        plan.wal_removed,
        format_size(plan.wal_bytes),
        plan.kept.len(),
        plural(plan.kept.len()),
        plan.kept.join(", "),
        plan.wal_kept_from.as_deref().unwrap_or("the start (no backup to anchor it)")
    );
    if !plan.unfinished.is_empty() {
        println!("{verb} unfinished backup{} left by a crash: {}", plural(plan.unfinished.len()), plan.unfinished.join(", "));
    }
    if !plan.running.is_empty() {
        println!("left alone, still being written: {}", plan.running.join(", "));
    }
    println!("{verb} {} in {} objects", format_size(plan.bytes), plan.objects.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("14d").unwrap(), 14 * 86_400);
        assert_eq!(parse_duration("90m").unwrap(), 5400);
        assert_eq!(parse_duration("2w").unwrap(), 14 * 86_400);
        for bad in ["14", "d", "0h", "3y", "-1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
