//! `sheaf wal-receive`: WAL streamed into every repository given over a replication slot
//! ([`sheaf_pg::wal::receive`]); what it meets is said on stderr as it goes, what it did at the end.

use std::path::Path;
use std::sync::Arc;

use sheaf_core::stop::Beat;
use sheaf_core::Error;
use sheaf_pg::wal::receive::{receive, Events, ReceiveOptions};

use crate::args::WalReceiveArgs;
use crate::context::Context;

/// Run it until stopped.
///
/// # Errors
/// What connecting again cannot mend (another cluster, a logical slot, a busy spool, a server
/// older than 15), and storing what was received failing at the end.
pub fn run(ctx: &Context, a: WalReceiveArgs) -> Result<(), Error> {
    let codec = ctx.codec(a.compression);
    if codec.is_auto() {
        return Err(Error::invalid("--compression auto steers a backup's level; give wal-receive a codec and level (e.g. zstd:low)"));
    }
    if ctx.spool_dir().is_none() {
        return Err(Error::invalid(
            "wal-receive keeps the segment it is receiving on this host's disk before it reaches the repository: give --spool DIR (or spool in the config file), a folder kept across restarts",
        ));
    }
    // Into every repository given; one that cannot be read now is tried again as WAL comes. The
    // spool is the first repository's (the received WAL is the same for all).
    let repos = ctx.open_repos_to_write()?;
    let first = &repos[0].0;
    // The spool setting is given, so the WAL folder the spool would default to plays no part.
    let spool = ctx.spool(Path::new("."), first).dir().join("receive");
    let url = ctx.pg_url(a.url.clone())?;
    let opts = ReceiveOptions {
        url: url.clone(),
        slot: a.slot.clone(),
        spool,
        codec,
        partial_every: a.partial_every,
        retry_every: a.retry_every,
        stop: ctx.interrupt.stop().clone(),
        beat: Beat::default(),
    };
    let into: Vec<String> = repos.iter().map(|(r, _)| r.display().to_string()).collect();
    let receiving = format!("receiving WAL from {} into {} (slot {}, spool {})", sheaf_pg::connect::session::redact(&url), into.join(" and "), opts.slot, opts.spool.display());
    crate::log::note("sheaf", &receiving);
    let events: Events = Arc::new(|m: &str| {
        crate::log::note("sheaf", m);
        crate::notify::status(m);
    });
    crate::notify::watchdog(opts.beat.clone(), opts.stop.clone());
    // Ready once it runs: it connects (and connects again) by itself, saying so in its status.
    crate::notify::ready(&receiving);
    let r = receive(repos, &opts, &events);
    crate::notify::stopping();
    let r = r?;
    if a.json {
        say!("{}", serde_json::to_value(&r).expect("report serialises"));
    } else {
        eprintln!(
            "sheaf: received {} bytes of WAL up to {} on timeline {}; {} segment(s) stored ({} archived by wal-push already), the last one received copied {} time(s)",
            r.bytes,
            r.flushed.map_or_else(|| "-".to_string(), |l| l.to_string()),
            r.timeline,
            r.segments.len(),
            r.already_archived,
            r.partial_uploads
        );
    }
    Ok(())
}
