//! `sheaf info`: what the repository holds ([`sheaf_pg::repo::inventory`]), as a table, JSON or
//! Prometheus metrics ([`sheaf_pg::maintain::metrics`], with the catalog's runs beside them).

use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::repo::inventory::Inventory;
use sheaf_pg::repo::records::Found;

use crate::args::repo::InfoFormat;
use crate::args::InfoArgs;
use crate::context::Context;
use crate::output::plural;

/// Run it.
///
/// # Errors
/// A repository that cannot be read.
pub fn run(ctx: &Context, a: InfoArgs) -> Result<(), Error> {
    let repos = ctx.open_repos()?;
    if a.format == InfoFormat::Prometheus || a.prometheus.is_some() {
        let text = prometheus(ctx, &a, &repos);
        return match &a.prometheus {
            None => {
                say_raw!("{text}");
                Ok(())
            }
            Some(file) => write_whole(file, &text),
        };
    }
    if a.url.is_some() {
        return Err(Error::invalid("the server's URL adds the archive's lag to the Prometheus metrics: give --format prometheus (or --prometheus FILE), or leave the URL out"));
    }
    // Each repository in turn; one that cannot be read is said and fails the command at the end.
    let json = a.json || a.format == InfoFormat::Json;
    let several = repos.len() > 1;
    let mut values = Vec::new();
    let mut failed = None;
    for (k, (place, opened)) in repos.iter().enumerate() {
        if k > 0 && !json {
            say!();
        }
        let shown = match opened {
            Ok(repo) => whole(repo, json),
            Err(e) => Err(Error::new(e.kind(), e.to_string())),
        };
        match shown {
            Ok(v) => values.push(v),
            Err(e) => {
                if several {
                    eprintln!("sheaf: repository {} ({}) cannot be read: {e}", k + 1, place.display());
                }
                failed.get_or_insert(e);
            }
        }
    }
    if json && (failed.is_none() || several) {
        let v = if several { serde_json::json!({ "repositories": values }) } else { values.pop().unwrap_or_default() };
        say!("{v}");
    }
    failed.map_or(Ok(()), Err)
}

/// One repository, each of its histories in turn when pg_upgrade left it several (oldest first),
/// printed (its JSON returned instead, with `json`: the newest history's, with `histories`
/// holding each one's).
fn whole(repo: &sheaf_pg::repo::Repo, json: bool) -> Result<serde_json::Value, Error> {
    let histories = sheaf_pg::repo::histories::all(repo)?;
    if histories.len() == 1 {
        return Inventory::take(repo).and_then(|inv| one(repo, inv, json));
    }
    let newest = histories.len();
    let mut values = Vec::new();
    for (k, h) in histories.iter().enumerate() {
        if !json {
            if k > 0 {
                say!();
            }
            say!("{}: {}", h.describe(), if k + 1 == newest { "archives and backs up now" } else { "upgraded since (its backups restore with its own major's server)" });
        }
        let mut v = Inventory::take(&h.repo).and_then(|inv| one(&h.repo, inv, json))?;
        if json {
            v["history"] = serde_json::json!(h.number);
            values.push(v);
        }
    }
    if !json {
        return Ok(serde_json::Value::Null);
    }
    let mut top = values.last().cloned().unwrap_or_default();
    top["histories"] = serde_json::Value::Array(values);
    Ok(top)
}

/// One repository (or one history of it), printed (its JSON returned instead, with `json`).
fn one(repo: &sheaf_pg::repo::Repo, inv: Inventory, json: bool) -> Result<serde_json::Value, Error> {
    let meta = repo.meta();
    let Inventory { found, files, ranges, gaps, expired, needs, drills, dropped, wal_bytes, backup_bytes, streaming, .. } = inv;
    let pins = sheaf_pg::repo::keep::pins(repo)?;
    // Backups that recover only to their own end: archive retention (or a pin past the policy)
    // left them the WAL that makes them consistent, not the WAL after.
    let end_only: Vec<&str> = found.iter().filter_map(Found::record).filter(|r| needs.to_its_end_only(&files, r, meta.wal_segment_size)).map(|r| r.id.as_str()).collect();
    if json {
        return Ok(serde_json::json!({
            "repo": repo.display(), "meta": meta, "backups": found, "wal": ranges, "gaps": gaps, "retention_gaps": expired, "retention_horizon": needs.horizon, "to_its_end_only": end_only, "drills": drills.last_of,
            "wal_files": files.len(), "wal_bytes": wal_bytes, "backup_bytes": backup_bytes, "dropped": dropped, "pins": pins, "streaming": streaming,
        }));
    }
    if meta.is_mariadb() {
        return mariadb(repo, &found, &pins, &drills, backup_bytes);
    }
    say!("repository {}: cluster {} (PostgreSQL {}), created {}", repo.display(), meta.system_identifier, meta.server_version, meta.created);
    if let Some(l) = &meta.lock {
        say!("locked: every object for {} days after it is written ({} mode, S3 Object Lock); expire leaves what is still locked", l.days, l.mode);
    }
    say!();
    say!(
        "{:<18} {:<4} {:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>10} {:>6} {:<10} {:>3}  label",
        "backup",
        "type",
        "on",
        "start (UTC)",
        "stop (UTC)",
        "tl",
        "LSN start .. stop",
        "read",
        "held",
        "stored",
        "ratio",
        "codec",
        "str"
    );
    for f in &found {
        match f {
            Found::Complete(r) => say!(
                "{:<18} {:<4} {:<18} {:<20} {:<20} {:>3} {:<23} {:>10} {:>10} {:>10} {:>6.2} {:<10} {:>3}  {}",
                r.id,
                r.backup_type.name(),
                r.parent().map_or("-", |p| p.as_str()),
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
                notes(r, pins.iter().find(|p| p.id == r.id), drills.last_of.iter().find(|d| d.backup == r.id), end_only.contains(&r.id.as_str()))
            ),
            Found::Unfinished { id, running, .. } => {
                say!("{id:<18} {}", if *running { "running (its writer is still at work)" } else { "UNFINISHED: left by a crash; sheaf expire removes it" })
            }
        }
    }
    // How each incremental found what changed (the WAL summaries name the blocks; the page scan
    // read every page), and what it holds.
    let incrementals: Vec<_> = found.iter().filter_map(Found::record).filter(|r| r.method.is_some()).collect();
    if !incrementals.is_empty() {
        say!();
        say!("changes found by:");
        for r in incrementals {
            say!(
                "  {:<18} {} on {}, {} held: {}",
                r.id,
                r.backup_type.name(),
                r.parent().map_or("-", |p| p.as_str()),
                format_size(r.bytes_held),
                r.method.as_deref().unwrap_or("")
            );
        }
    }
    say!();
    if ranges.is_empty() {
        say!("WAL archive: empty (set archive_command = 'sheaf wal-push %p' and archive_mode = on)");
    }
    for r in &ranges {
        say!("WAL timeline {}: {} .. {} ({} segments)", r.timeline, r.first, r.last, r.segments);
    }
    for g in &gaps {
        say!("WAL GAP on timeline {}: nothing between {} and {}: recovery cannot cross it", g.timeline, g.after, g.before);
    }
    for g in &expired {
        say!(
            "WAL removed by retention on timeline {}: between {} and {} (sheaf expire; a backup before it, pinned or past retention-archive, keeps only the WAL that makes it consistent)",
            g.timeline,
            g.after,
            g.before
        );
    }
    for s in &streaming {
        say!("WAL STREAMING: {s} is in the repository as far as sheaf wal-receive got (not archived whole yet); wal-fetch serves it");
    }
    for d in &dropped {
        say!("WAL DROPPED: {} at {} by wal-push --queue-max {} ({} waiting): {}", d.name, d.at, format_size(d.queue_max), format_size(d.pending_bytes), d.error);
    }
    let n = found.iter().filter(|f| f.record().is_some()).count();
    say!("total: {n} backup{} ({}), {} WAL files ({})", plural(n), format_size(backup_bytes), files.len(), format_size(wal_bytes));
    Ok(serde_json::Value::Null)
}

/// A MariaDB server's repository: its backups, each with the redo log's span and the binary
/// log's position it is consistent at (no WAL).
fn mariadb(
    repo: &sheaf_pg::repo::Repo,
    found: &[Found],
    pins: &[sheaf_pg::repo::keep::Pin],
    drills: &sheaf_pg::repo::drills::DrillSummary,
    backup_bytes: u64,
) -> Result<serde_json::Value, Error> {
    let meta = repo.meta();
    say!("repository {}: MariaDB server {} ({}), created {}", repo.display(), meta.mariadb.as_ref().map_or("", |m| m.server.as_str()), meta.server_version, meta.created);
    if let Some(l) = &meta.lock {
        say!("locked: every object for {} days after it is written ({} mode, S3 Object Lock); expire leaves what is still locked", l.days, l.mode);
    }
    say!();
    say!(
        "{:<20} {:<20} {:<20} {:<25} {:<28} {:>10} {:>10} {:>6} {:<10} {:>3}  label",
        "backup",
        "start (UTC)",
        "stop (UTC)",
        "LSN start .. end",
        "binary log",
        "read",
        "stored",
        "ratio",
        "codec",
        "str"
    );
    for f in found {
        match f {
            Found::Complete(r) => {
                let m = r.mariadb.clone().unwrap_or_default();
                let binlog = match (&m.binlog_file, m.binlog_position) {
                    (Some(f), Some(p)) => format!("{f}:{p}"),
                    _ => "-".into(),
                };
                say!(
                    "{:<20} {:<4} {:<20} {:<20} {:<20} {:<25} {:<28} {:>10} {:>10} {:>10} {:>6.2} {:<10} {:>3}  {}",
                    r.id,
                    r.backup_type.name(),
                    r.parent().map_or("-", |p| p.as_str()),
                    r.start_time,
                    r.stop_time,
                    format!("{} .. {}", m.start_lsn, m.end_lsn),
                    binlog,
                    format_size(r.bytes_read),
                    if r.bytes_held > 0 { format_size(r.bytes_held) } else { "-".into() },
                    format_size(r.bytes_written),
                    r.ratio(),
                    r.compression,
                    r.stripes.len(),
                    notes(r, pins.iter().find(|p| p.id == r.id), drills.last_of.iter().find(|d| d.backup == r.id), false)
                )
            }
            Found::Unfinished { id, running, .. } => {
                say!("{id:<18} {}", if *running { "running (its writer is still at work)" } else { "UNFINISHED: left by a crash; sheaf expire removes it" })
            }
        }
    }
    say!();
    let n = found.iter().filter(|f| f.record().is_some()).count();
    say!("total: {n} backup{} ({}); each restored to its own consistency point (no WAL), an incremental through its chain", plural(n), format_size(backup_bytes));
    Ok(serde_json::Value::Null)
}

/// A backup's label and annotations, then whether it is pinned and until when it is locked.
fn notes(r: &sheaf_pg::repo::records::BackupRecord, pin: Option<&sheaf_pg::repo::keep::Pin>, drill: Option<&sheaf_pg::repo::drills::DrillRecord>, end_only: bool) -> String {
    let mut out = r.label.clone().unwrap_or_default();
    for (k, v) in &r.annotations {
        out.push_str(&format!(" {k}={v}"));
    }
    if let Some(x) = &r.resumed {
        out.push_str(&format!(" [resumed: attempt {}, {} files ({}) taken from the attempts before]", x.attempt + 1, x.files, format_size(x.bytes)));
    }
    if let Some(d) = drill {
        out.push_str(&if d.passed {
            format!(" [drill passed {}: recovered in {:.1} s]", sheaf_core::time::utc(d.ended_unix), d.phases.total_seconds)
        } else {
            format!(" [drill FAILED {}: {}]", sheaf_core::time::utc(d.ended_unix), d.failure.as_deref().unwrap_or("a check failed"))
        });
    }
    if let Some(p) = pin {
        out.push_str(&format!(" [kept {}]", p.until_text()));
    }
    if end_only {
        out.push_str(" [to its end only: WAL after it expired]");
    }
    if let Some(u) = r.locked_until {
        let now = sheaf_core::time::now_ms() / 1000;
        out.push_str(&if u > now { format!(" [locked until {}]", sheaf_core::time::utc(u)) } else { format!(" [lock ran out {}]", sheaf_core::time::utc(u)) });
    }
    out.trim_start().to_string()
}

/// Every repository's metrics (`sheaf_repository_up` says which could be read), the server's lag
/// when a URL is given (`sheaf_server_up` says whether it answered), and the catalog's runs.
fn prometheus(ctx: &Context, a: &InfoArgs, repos: &[(sheaf_core::repo::Place, Result<sheaf_pg::repo::Repo, Error>)]) -> String {
    use sheaf_pg::maintain::metrics::{render, repository, Metric, ServerPosition};
    let now = sheaf_core::time::now_ms() / 1000;
    let server = a.url.as_deref().map(|url| {
        let pos = sheaf_pg::connect::server::Server::connect(url).and_then(|mut s| s.archiver()).map(|x| ServerPosition { lsn: x.lsn, timeline: x.timeline });
        if let Err(e) = &pos {
            eprintln!("sheaf: the server did not answer, so the archive's lag is left out: {e}");
        }
        pos.ok()
    });
    let mut metrics: Vec<Metric> = Vec::new();
    let mut up = Metric::gauge("sheaf_repository_up", "Whether the repository could be read.");
    let mut server_up = Metric::gauge("sheaf_server_up", "Whether the server answered (the lag metrics need it).");
    for (place, opened) in repos {
        let shown = place.display();
        let inv = opened.as_ref().ok().map(|r| Inventory::take(r).map(|inv| (r.meta(), inv)));
        match inv {
            Some(Ok((meta, inv))) => {
                up = up.with(vec![("repo", shown.to_string())], 1.0);
                merge(&mut metrics, repository(shown, meta, &inv, now, server.flatten()));
            }
            Some(Err(e)) => {
                eprintln!("sheaf: repository {shown} cannot be read, its metrics are left out: {e}");
                up = up.with(vec![("repo", shown.to_string())], 0.0);
            }
            None => {
                let why = opened.as_ref().err().map(ToString::to_string).unwrap_or_default();
                eprintln!("sheaf: repository {shown} cannot be read, its metrics are left out: {why}");
                up = up.with(vec![("repo", shown.to_string())], 0.0);
            }
        }
        if let Some(pos) = &server {
            server_up = server_up.with(vec![("repo", shown.to_string())], f64::from(u8::from(pos.is_some())));
        }
    }
    metrics.push(up);
    if server.is_some() {
        metrics.push(server_up);
    }
    if let Some(dir) = ctx.settings.value(&crate::settings::TLS_DIR, a.s3.agent_tls.tls_dir.clone()) {
        match sheaf_agent::certs::expiries(&dir) {
            Ok(found) => {
                let mut expiry = Metric::gauge("sheaf_tls_certificate_expiry_timestamp_seconds", "When each certificate of the agent's TLS folder stops being valid.");
                for (file, not_after) in found {
                    expiry = expiry.with(vec![("file", file)], not_after as f64);
                }
                metrics.push(expiry);
            }
            Err(e) => crate::log::warning(format_args!("the certificates' expiry is left out: {e}")),
        }
    }
    match sheaf_catalog::Catalog::open(ctx.catalog()).and_then(|c| c.tally()) {
        Ok(tally) => {
            let mut runs = Metric::counter("sheaf_runs_total", "Runs this host's catalog recorded on the repository, by operation and how they ended.");
            let mut last = Metric::gauge("sheaf_run_last_end_timestamp_seconds", "When the last run of each operation and outcome on the repository ended.");
            // Only the runs on the repositories reported, each labelled as its other metrics are:
            // another cluster's failed backup is not this one's alert.
            let given = ctx.repos_given();
            for t in tally {
                let Some(k) = t.repo.as_ref().and_then(|r| given.iter().position(|g| g == r)) else { continue };
                let Some((place, _)) = repos.get(k) else { continue };
                let labels = || vec![("repo", place.display().to_string()), ("operation", t.operation.clone()), ("status", t.status.clone())];
                runs = runs.with(labels(), t.runs as f64);
                last = last.with(labels(), t.last_unix as f64);
            }
            metrics.extend([runs, last]);
        }
        Err(e) => eprintln!("sheaf: the catalog's runs are left out: {e}"),
    }
    render(&metrics)
}

/// Replace `file` whole (durably, under a temporary name of its own), so a collector never
/// reads half of it; readable by others (node_exporter's textfile collector runs as its own user).
fn write_whole(file: &std::path::Path, text: &str) -> Result<(), Error> {
    sheaf_core::whole::write_whole_with(file, text.as_bytes(), 0o666, sheaf_core::ErrorKind::Target)
}

/// `more` into `all`: a family already there gets the new samples, so each name has one HELP and
/// TYPE whatever the number of repositories.
fn merge(all: &mut Vec<sheaf_pg::maintain::metrics::Metric>, more: Vec<sheaf_pg::maintain::metrics::Metric>) {
    for m in more {
        match all.iter_mut().find(|x| x.name == m.name) {
            Some(x) => x.samples.extend(m.samples),
            None => all.push(m),
        }
    }
}
