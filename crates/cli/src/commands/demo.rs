//! `sheaf demo`: a throwaway cluster loaded with TPC-H, backed up with each codec, restored,
//! started and checked ([`sheaf_bench::demo`]); the table printed here.

use sheaf_core::size::format_size;
use sheaf_core::{CodecSpec, Error};

use crate::args::DemoArgs;
use crate::context::Context;

/// Run it (the Ctrl-C handler `main` installs stops the scratch servers).
///
/// # Errors
/// A bad scale or codec list, the demo's own failures, a restored cluster whose rows differ.
pub fn run(ctx: &Context, a: DemoArgs) -> Result<(), Error> {
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(Error::invalid(format!("--scale {}: give a TPC-H scale factor such as 0.1 or 1", a.scale)));
    }
    let codecs = a.compression.split(',').map(|c| CodecSpec::parse(c.trim())).collect::<Result<Vec<_>, _>>()?;
    let opts = sheaf_bench::demo::DemoOptions { scale: a.scale, codecs, stripes: a.stripes.max(1), stop: ctx.interrupt.stop().clone() };
    let rows = sheaf_bench::demo::run(&opts, &|n| eprintln!("sheaf demo: {n}"))?;
    if a.json {
        say!("{}", serde_json::to_string(&rows).expect("rows serialise"));
    } else {
        say!("{:<12} {:>10} {:>8} {:>11} {:>7} {:>11} {:>11} {:>6}", "codec", "backup s", "CPU %", "size", "ratio", "restore s", "restore CPU", "rows");
        for r in &rows {
            say!(
                "{:<12} {:>10.2} {:>7.0}% {:>11} {:>7.2} {:>11.2} {:>10.0}% {:>6}",
                r.codec,
                r.backup_seconds,
                r.backup_cpu_pct,
                format_size(r.size_bytes),
                r.ratio,
                r.restore_seconds,
                r.restore_cpu_pct,
                if r.rows_match { "ok" } else { "DIFFER" }
            );
        }
        if let Some(r) = rows.first() {
            say!("(each backup read {} from the cluster; CPU % is of all {} cores)", format_size(r.bytes_read), sheaf_core::host::available_cores());
        }
    }
    if rows.iter().any(|r| !r.rows_match) {
        return Err(Error::corrupt("a restored cluster's row counts differ from the source's"));
    }
    Ok(())
}
