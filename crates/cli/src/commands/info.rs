//! `sheaf info`: what the repository holds ([`sheaf_pg::repo::inventory`]), as a table or JSON.

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::repo::inventory::Inventory;
use sheaf_pg::repo::records::Found;

use crate::args::InfoArgs;
use crate::context::Context;
use crate::output::plural;

/// Run it.
///
/// # Errors
/// A repository that cannot be read.
pub fn run(ctx: &Context, a: InfoArgs) -> Result<(), Error> {
    let (repo, meta) = ctx.open_repo()?;
    let Inventory { found, files, ranges, gaps, dropped, wal_bytes, backup_bytes } = Inventory::take(&repo, &meta)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "repo": repo.display(), "meta": meta, "backups": found, "wal": ranges, "gaps": gaps,
                "wal_files": files.len(), "wal_bytes": wal_bytes, "backup_bytes": backup_bytes, "dropped": dropped,
            })
        );
        return Ok(());
    }
    println!("repository {}: cluster {} (PostgreSQL {}), created {}", repo.display(), meta.system_identifier, meta.server_version, meta.created);
    println!();
    println!(
        "{:<18} {:<4} {:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>10} {:>6} {:<10} {:>3}  label",
        "backup", "type", "on", "start (UTC)", "stop (UTC)", "tl", "LSN start .. stop", "read", "held", "stored", "ratio", "codec", "str"
    );
    for f in &found {
        match f {
            Found::Complete(r) => println!(
                "{:<18} {:<4} {:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>10} {:>6.2} {:<10} {:>3}  {}",
                r.id,
                r.backup_type.name(),
                r.parent().unwrap_or("-"),
                r.start_time,
                r.stop_time,
                r.timeline,
                format!("{} .. {}", r.start_lsn, r.stop_lsn),
                format_size(r.bytes_read),
                if r.bytes_held > 0 { format_size(r.bytes_held) } else { "-".into() },
                format_size(r.bytes_written),
                r.ratio(),
                r.compression,
                r.stripes.len(),
                r.label.as_deref().unwrap_or("")
            ),
            Found::Unfinished { id, running, .. } => {
                println!("{id:<18} {}", if *running { "running (its writer is still at work)" } else { "UNFINISHED: left by a crash; sheaf expire removes it" })
            }
        }
    }
    // How each incremental found what changed (the WAL summaries name the blocks; the page scan
    // read every page), and what it holds.
    let incrementals: Vec<_> = found.iter().filter_map(Found::record).filter(|r| r.method.is_some()).collect();
    if !incrementals.is_empty() {
        println!();
        println!("changes found by:");
        for r in incrementals {
            println!("  {:<18} {} on {}, {} held: {}", r.id, r.backup_type.name(), r.parent().unwrap_or("-"), format_size(r.bytes_held), r.method.as_deref().unwrap_or(""));
        }
    }
    println!();
    if ranges.is_empty() {
        println!("WAL archive: empty (set archive_command = 'sheaf wal-push %p' and archive_mode = on)");
    }
    for r in &ranges {
        println!("WAL timeline {}: {} .. {} ({} segments)", r.timeline, r.first, r.last, r.segments);
    }
    for g in &gaps {
        println!("WAL GAP on timeline {}: nothing between {} and {}: recovery cannot cross it", g.timeline, g.after, g.before);
    }
    for d in &dropped {
        println!("WAL DROPPED: {} at {} by wal-push --queue-max {} ({} waiting): {}", d.name, d.at, format_size(d.queue_max), format_size(d.pending_bytes), d.error);
    }
    let n = found.iter().filter(|f| f.record().is_some()).count();
    println!(
        "total: {n} backup{} ({}), {} WAL files ({})",
        plural(n),
        format_size(backup_bytes),
        files.len(),
        format_size(wal_bytes)
    );
    Ok(())
}
