//! The change between a full backup and an incremental (`sheaf bench --type full,incr --change
//! 5%`): updates that touch a share of the TPC-H cluster's pages, half of them scattered (every
//! Nth page) and half in one contiguous run, as a day of OLTP writes and a batch job would. The
//! new row versions land on further pages (free space in the same page, or the table's end), so
//! the WAL names somewhat more blocks than the share touched.

use std::time::Duration;

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::drill::scratch::ScratchCluster;

/// The tables changed, with the column set to itself (a new row version, nothing else).
const TABLES: [(&str, &str); 2] = [("lineitem", "l_comment"), ("orders", "o_comment")];

/// Parse `--change`: a percentage of the pages, `5%` or `5`, above 0 and at most 50.
///
/// # Errors
/// Not a number, or out of range.
pub fn parse_percent(text: &str) -> Result<f64> {
    let t = text.trim();
    let n = t.strip_suffix('%').unwrap_or(t).trim().parse::<f64>().ok().filter(|p| *p > 0.0 && *p <= 50.0);
    n.ok_or_else(|| Error::invalid(format!("--change '{text}': give the share of the pages to change between the full and the incremental, above 0 and at most 50, e.g. 5%")))
}

/// The `UPDATE` for one table of `pages` pages: every `every`th page from phase `off`, and the run
/// of `run` pages from `from`.
fn update_sql(table: &str, column: &str, pages: u64, percent: f64, round: u64) -> String {
    // Half the share scattered: one page in `every`; half in one run.
    let every = ((200.0 / percent).round() as u64).max(1);
    let run = ((pages as f64) * percent / 200.0).round() as u64;
    let from = if pages == 0 { 0 } else { pages * ((round * 13) % 100) / 100 };
    let off = (round * 7) % every;
    format!(
        "UPDATE {table} SET {column} = {column} WHERE (ctid::text::point)[0]::bigint % {every} = {off} \
         OR (ctid::text::point)[0]::bigint BETWEEN {from} AND {}",
        from + run
    )
}

/// Change about `percent` % of lineitem's and orders' pages in database `db` (round `round` moves
/// where: each round touches other pages), then checkpoint and see the WAL archived.
///
/// # Errors
/// A query that fails, or an archiver that does not catch up.
pub fn touch(cluster: &ScratchCluster, db: &str, percent: f64, round: u64) -> Result<()> {
    for (table, column) in TABLES {
        let pages: u64 = cluster
            .query(db, &format!("SELECT relpages FROM pg_class WHERE relname = '{table}'"))?
            .trim()
            .parse()
            .map_err(|_| Error::new(ErrorKind::Source, format!("the bench's cluster has no table {table} in {db}")))?;
        cluster.query(db, &update_sql(table, column, pages, percent, round))?;
    }
    cluster.query(db, "CHECKPOINT")?;
    archive_now(cluster)
}

/// Close the current WAL segment and wait until the archiver has stored it, so that the next
/// backup finds every segment of the change in the repository.
///
/// # Errors
/// A query that fails; the archiver failing on the segment or not catching up in 10 minutes.
pub fn archive_now(cluster: &ScratchCluster) -> Result<()> {
    // A record first, so that the switch always closes a segment.
    cluster.query("postgres", "SELECT pg_logical_emit_message(false, 'sheaf bench', 'switch')")?;
    let seg = cluster.query("postgres", "SELECT pg_walfile_name(pg_switch_wal())")?.trim().to_string();
    for _ in 0..3000 {
        let last = cluster.query("postgres", "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")?;
        if last.trim() >= seg.as_str() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let failed = cluster.query("postgres", "SELECT coalesce(last_failed_wal, '') FROM pg_stat_archiver").unwrap_or_default();
    Err(Error::new(
        ErrorKind::Source,
        format!("the bench's cluster did not archive WAL segment {seg} in 10 minutes (last failed: '{}'; see {})", failed.trim(), cluster.log().display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_parse_with_clear_errors() {
        assert_eq!(parse_percent("5%").unwrap(), 5.0);
        assert_eq!(parse_percent(" 0.5 % ").unwrap(), 0.5);
        assert_eq!(parse_percent("12").unwrap(), 12.0);
        for bad in ["0", "-1%", "51%", "five", ""] {
            assert!(parse_percent(bad).unwrap_err().to_string().contains("at most 50"), "{bad}");
        }
    }

    #[test]
    fn half_the_share_scattered_and_half_one_run() {
        let sql = update_sql("lineitem", "l_comment", 1000, 5.0, 0);
        assert!(sql.contains("% 40 = 0"), "one page in 40 is 2.5 %: {sql}");
        assert!(sql.contains("BETWEEN 0 AND 25"), "a run of 25 pages is 2.5 %: {sql}");
        // Another round touches other pages.
        let next = update_sql("lineitem", "l_comment", 1000, 5.0, 1);
        assert!(next.contains("% 40 = 7") && next.contains("BETWEEN 130 AND 155"), "{next}");
    }
}
