//! `sheaf restore`: a set from its stripes (a directory's, or a PostgreSQL cluster that starts),
//! `--only` files of any backup, or point-in-time recovery from a repository; recorded in the
//! history catalog.

use sheaf_core::size::format_size;
use sheaf_core::text::shell_quote;
use sheaf_core::{Error, ErrorKind, RestoreOptions, RestoreReport};
use sheaf_pg::repo::records::BackupRef;
use sheaf_pg::restore::directory::Restored;
use sheaf_pg::restore::startup::{Role, Startup, Upstream, Written};
use sheaf_pg::PgRestoreOptions;

use crate::args::data::{ArchiveMode, DeltaHow};
use crate::args::RestoreArgs;
use crate::context::Context;
use crate::hooks::Hooks;
use crate::output::{mib, plural, rate};
use crate::progress::for_terminal as progress;
use crate::recorder::{recorded, Done};

/// Run it.
///
/// # Errors
/// The restore's.
pub fn run(ctx: &Context, a: RestoreArgs) -> Result<(), Error> {
    let repo = if a.stripes.is_empty() { ctx.repo_given() } else { None };
    let start = sheaf_catalog::RunStart { operation: "restore".into(), source: Some(a.to.display().to_string()), stripes: a.stripes.clone(), repo, ..Default::default() };
    let hooks = Hooks::new(&ctx.settings, ctx.interrupt.stop(), a.hooks.clone())
        .with("SHEAF_REPO", ctx.repos_given().first().cloned().unwrap_or_default())
        .with("SHEAF_TARGET", a.to.display().to_string());
    recorded(ctx.catalog(), start, &hooks, || restore(ctx, a).map(Done::from))
}

/// The core restore's options from the flags: a directory backup, `--only`, or the part of a
/// PostgreSQL restore that any set has.
fn core_options(ctx: &Context, a: &RestoreArgs) -> Result<RestoreOptions, Error> {
    let mut opts = RestoreOptions::new(&a.to);
    opts.stop = ctx.interrupt.stop().clone();
    opts.relocate = a.relocate.iter().map(|r| sheaf_core::restore::parse_relocation(r)).collect::<Result<_, _>>()?;
    opts.force = a.force;
    opts.delta = a.delta.is_some();
    opts.original_paths = a.original_paths;
    opts.threads = a.threads;
    opts.buffered = a.buffered_io;
    opts.sync_writes = a.sync_writes;
    opts.only = a.only.clone();
    Ok(opts)
}

/// A PostgreSQL restore's options from the flags (from stripes or from a repository alike).
fn pg_options(ctx: &Context, a: &RestoreArgs) -> Result<PgRestoreOptions, Error> {
    if !a.relocate.is_empty() {
        return Err(Error::invalid("a PostgreSQL backup moves with --to (the data directory) and --tablespace OLD=NEW, not --relocate"));
    }
    if a.check_changes && a.delta == Some(DeltaHow::Hash) {
        return Err(Error::invalid("--check-changes checks what the WAL says changed against the target's hashes: give it with --delta, not --delta=hash"));
    }
    Ok(PgRestoreOptions {
        core: core_options(ctx, a)?,
        tablespaces: a.tablespace.iter().map(|r| sheaf_core::restore::parse_relocation(r)).collect::<Result<_, _>>()?,
        db_include: a.db_include.clone(),
        archive_off: a.archive_mode == ArchiveMode::Off,
        tablespaces_under: None,
        delta_hash: a.delta == Some(DeltaHow::Hash),
        check_changes: a.check_changes,
        startup: startup(a),
        link_map: a.start.link_map.clone(),
    })
}

/// How the restored cluster starts, as the flags ask: a standby, or (the library decides) a
/// recovery from the repository or a start as backed up.
fn startup(a: &RestoreArgs) -> Startup {
    let s = &a.start;
    // Patroni's replica method: a standby of the leader it names (Patroni then writes its own
    // recovery settings and strips sheaf's from postgresql.auto.conf).
    let role = if s.standby || s.patroni.replica() {
        let conninfo = s.primary_conninfo.clone().or_else(|| s.patroni.connstring.clone().filter(|c| !c.trim().is_empty()));
        Role::Standby(Upstream { conninfo, slot: s.slot.clone(), create_slot: s.create_slot }, None)
    } else {
        Role::AsBackedUp
    };
    Startup { role, restore_command: None, options: s.recovery_option.clone(), keep_recovery_settings: s.keep_recovery_settings, promote: s.promote, pg_bin: s.pg_bin.clone() }
}

/// The warning a restored cluster's archive settings call for, when archiving is preserved and
/// runs `sheaf wal-push` into `repo` (any repository, when `repo` is `None` or the command names
/// none): once started, it archives a new timeline there. A standby archives no new timeline.
fn archive_warning(a: &RestoreArgs, written: &Written, repo: Option<&str>) -> Option<String> {
    if a.archive_mode == ArchiveMode::Off || written.starts_as == "standby" {
        return None;
    }
    let (mode, command) = sheaf_pg::cluster::conf::archive_settings(&a.to);
    if mode == "off" || !command.contains("wal-push") {
        return None;
    }
    let names_other = repo.is_some_and(|r| command.contains("--repo") && !command.contains(r.trim_end_matches('/')));
    if names_other {
        return None;
    }
    Some(format!(
        "the restored cluster keeps archive_mode = {mode} and archive_command = '{command}': once started it archives a new timeline into {}; for a test restore, restore with --archive-mode off",
        repo.map_or_else(|| "the repository that command names".to_string(), |r| format!("{r}, the repository it came from"))
    ))
}

/// What a delta restore did, in a line: kept, rewritten, created, removed, and how it decided.
fn delta_line(r: &RestoreReport) -> Option<String> {
    let d = r.delta.as_ref()?;
    Some(format!(
        "delta: {} file{} kept (no byte written), {} rewritten in part ({} written), {} created ({}), {} entr{} removed ({}); {} of the target kept, not read from the backup; {}",
        d.files_kept,
        plural(d.files_kept as usize),
        d.files_rewritten,
        format_size(d.bytes_rewritten),
        d.files_created,
        format_size(d.bytes_created),
        d.removed,
        if d.removed == 1 { "y" } else { "ies" },
        format_size(d.bytes_removed),
        format_size(d.bytes_kept),
        d.how
    ))
}

/// The report as `--json` prints it: the core's, with its rate.
fn report(r: &RestoreReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("report serialises");
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_written, r.seconds));
    v
}

/// A PostgreSQL restore's report: the core's, and what was written for its start.
fn pg_report(r: &Restored) -> serde_json::Value {
    let mut v = report(&r.report);
    v["startup"] = serde_json::to_value(&r.startup).expect("startup serialises");
    v
}

/// What was written for the start, in lines, and the next step.
fn startup_lines(w: &Written, to: &std::path::Path) -> Vec<String> {
    let mut lines = Vec::new();
    if w.kept_target_settings {
        lines.push("the target was a standby: its own standby.signal, postgresql.conf, postgresql.auto.conf, pg_hba.conf and pg_ident.conf are kept, and it stays a standby (--promote makes it a primary)".to_string());
    }
    if !w.removed.is_empty() {
        lines.push(format!("commented out in postgresql.auto.conf, recovery settings of the cluster backed up: {} (--keep-recovery-settings keeps them)", w.removed.join(", ")));
    }
    if !w.settings.is_empty() {
        lines.push(format!("written to postgresql.auto.conf: {}", w.settings.iter().map(|s| format!("{} = '{}'", s.name, s.value)).collect::<Vec<_>>().join(", ")));
    }
    if let Some(slot) = &w.slot_created {
        lines.push(format!("created the physical replication slot {slot} on the primary: it keeps WAL for this standby; drop it if the standby goes for good"));
    }
    lines.extend(w.links.iter().cloned());
    let signal = w.signal.as_deref().map(|s| format!(" ({s} is there)")).unwrap_or_default();
    lines.push(match w.starts_as.as_str() {
        "standby" => format!("next: pg_ctl start -D {}: it starts as a standby{signal} and never promotes on its own", to.display()),
        "primary" => format!("next: pg_ctl start -D {}: it recovers through the archive{signal} and then opens for writes", to.display()),
        _ => format!("next: pg_ctl start -D {}: it replays the backup's own WAL and opens", to.display()),
    });
    lines
}

fn restore(ctx: &Context, a: RestoreArgs) -> Result<serde_json::Value, Error> {
    if !a.only.is_empty() {
        return restore_only(ctx, a);
    }
    if a.stripes.is_empty() {
        return from_repo(ctx, a);
    }
    if a.recovery.any_target() || !a.recovery.repo.repo.is_empty() {
        return Err(Error::invalid("--repo, --set and the --target flags restore from a repository: give them without stripes (or stripes without them)"));
    }
    // Entries and index stay out of memory: read a page and a piece at a time.
    let set = ctx.open_stripes_lean(&a.stripes)?;
    if sheaf_mariadb::is_mariadb(&set) {
        return restore_mariadb(ctx, &a, &set);
    }
    let (r, written) = if sheaf_pg::is_postgres(&set) {
        let restored = sheaf_pg::restore_postgres(&set, &pg_options(ctx, &a)?, progress(a.json))?;
        (restored.report, Some(restored.startup))
    } else {
        if !a.tablespace.is_empty() || !a.db_include.is_empty() || a.start.standby || !a.start.recovery_option.is_empty() || !a.start.link_map.is_empty() {
            return Err(Error::invalid(
                "--tablespace, --db-include, --standby, --recovery-option and --link-map apply to PostgreSQL backups; this one is of a directory (use --relocate, or --only)",
            ));
        }
        (sheaf_core::restore(&set, &core_options(ctx, &a)?, progress(a.json))?, None)
    };
    let mut v = report(&r);
    if let Some(w) = &written {
        v["startup"] = serde_json::to_value(w).expect("startup serialises");
    }
    if a.json {
        say!("{v}");
    } else {
        say_restored(&r);
        if let Some(line) = delta_line(&r) {
            say!("{line}");
        }
        if let Some(w) = &written {
            if w.starts_as == "standby" {
                say!("restored from stripes, not a repository: the standby has no restore_command and streams from its primary only");
            }
            for line in startup_lines(w, &a.to) {
                say!("{line}");
            }
        }
    }
    if let Some(w) = written.as_ref().and_then(|w| archive_warning(&a, w, None)) {
        crate::log::warning(w);
    }
    Ok(v)
}

/// `restore --repo`: point-in-time recovery, planned and carried out by [`sheaf_pg::restore::pitr::restore`].
fn from_repo(ctx: &Context, a: RestoreArgs) -> Result<serde_json::Value, Error> {
    if ctx.open_repos()?.iter().any(|(_, r)| r.as_ref().is_ok_and(|r| r.meta().is_mariadb())) {
        return from_mariadb_repo(ctx, &a);
    }
    let opts = pg_options(ctx, &a)?;
    let r = &a.recovery;
    let request = r.targets.request(r.backup(), r.target_action, r.target_timeline);
    // The first repository that can serve the restore; one that cannot be read, or fails before
    // anything is written (no backup that fits, a gap, a damaged record), is passed over for the
    // next. A failure once the restore has written is final: its files are not the next one's.
    let repos = ctx.open_repos()?;
    let several = repos.len() > 1;
    let mut outcome = None;
    for (k, (place, opened)) in repos.iter().enumerate() {
        let attempt = match opened {
            Err(e) => Err(Error::new(e.kind(), e.to_string())),
            Ok(repo) => sheaf_pg::restore::pitr::restore(repo, ctx.schemes()?, &request, &opts, || restore_command(ctx, place), progress(a.json)),
        };
        match attempt {
            Ok((r, plan)) => {
                outcome = Some(Ok((r, plan, place.display().to_string())));
                break;
            }
            Err(e) if several && k + 1 < repos.len() && nothing_written(&a.to) => {
                eprintln!("sheaf: repository {} ({}) cannot serve this restore, trying the next: {e}", k + 1, place.display());
                outcome = Some(Err(e));
            }
            Err(e) => {
                outcome = Some(Err(e));
                break;
            }
        }
    }
    let (restored, plan, from) = outcome.expect("at least one repository")?;
    let r = &restored.report;
    let mut v = pg_report(&restored);
    v["repository_backup"] = serde_json::json!(plan.backup.id);
    v["recovery"] = serde_json::to_value(&plan).expect("plan serialises");
    if a.json {
        say!("{v}");
    } else {
        say!(
            "restored backup {} ({} files, {:.1} MiB) in {:.2} s to {}; recovery follows timeline {} through the archive{}",
            plan.backup.id,
            r.files,
            mib(r.bytes_written),
            r.seconds,
            r.target,
            plan.timeline,
            plan.archive_end.as_deref().map(|e| format!(" (it ends at {e})")).unwrap_or_default()
        );
        if let Some(line) = delta_line(r) {
            say!("{line}");
        }
        for line in startup_lines(&restored.startup, &a.to) {
            say!("{line}");
        }
    }
    if let Some(w) = archive_warning(&a, &restored.startup, Some(&from)) {
        crate::log::warning(w);
    }
    Ok(v)
}

/// The restore_command a restored cluster runs: this sheaf, by absolute path, with the settings
/// that found the repository `repo` (no secrets: credentials stay in the environment or ~/.aws).
pub fn restore_command(ctx: &Context, repo: &sheaf_core::repo::Place) -> Result<String, Error> {
    let exe = ctx.exe()?;
    let mut parts = vec![shell_quote(&exe.display().to_string()).into_owned(), "wal-fetch".into(), "%f".into(), "%p".into()];
    if let Some(c) = ctx.config_flag() {
        parts.push("--config".into());
        parts.push(shell_quote(&c.display().to_string()).into_owned());
    }
    // Every repository given, so that wal-fetch falls back as the restore did; the one restored
    // from when it came from outside them.
    let mut repos = ctx.repos_given();
    if !repos.iter().any(|r| r.trim_end_matches('/') == repo.display()) {
        repos = vec![repo.display().to_string()];
    }
    for r in repos {
        parts.push("--repo".into());
        parts.push(shell_quote(&r).into_owned());
    }
    for f in ctx.s3_flags() {
        parts.push(shell_quote(&f).into_owned());
    }
    if repo.keys().is_some() {
        match ctx.key_flags() {
            Some(flags) => parts.extend(flags.iter().map(|f| shell_quote(f).into_owned())),
            None => {
                return Err(Error::new(
                    ErrorKind::Key,
                    "the restored server's restore_command needs the passphrase too, and SHEAF_PASSPHRASE cannot be written into its settings: give the passphrase with --passphrase-file FILE (a file the server's user can read), or a key file",
                ))
            }
        }
    }
    Ok(parts.join(" "))
}

/// `restore --only`: the matching files of any backup (from stripes or a repository), as files.
fn restore_only(ctx: &Context, a: RestoreArgs) -> Result<serde_json::Value, Error> {
    if !a.db_include.is_empty() {
        return Err(Error::invalid("--only restores files and --db-include a cluster: give one of them"));
    }
    if !a.tablespace.is_empty() || a.recovery.any_target() {
        return Err(Error::invalid("--only restores files, not a cluster: --tablespace and the --target flags do not apply (use --relocate to place a tree elsewhere)"));
    }
    // From a repository, the backup with the ones it builds on (an incremental reads its chain):
    // the first repository that has it and reads, as a restore falls back.
    let sets = if a.stripes.is_empty() {
        let schemes = ctx.schemes()?;
        ctx.first_repo_serving(|repo| sheaf_pg::repo::records::open_backup_chain(repo, &a.recovery.backup().unwrap_or(BackupRef::Latest), schemes, true))?
    } else {
        vec![ctx.open_stripes_lean(&a.stripes)?]
    };
    let r = sheaf_core::restore_chain(&sets.iter().collect::<Vec<_>>(), &core_options(ctx, &a)?, progress(a.json))?;
    let v = report(&r);
    if a.json {
        say!("{v}");
    } else {
        say!(
            "restored {} files ({:.1} MiB) matching {} in {:.2} s to {}; read {} of the set's {}",
            r.files,
            mib(r.bytes_written),
            a.only.join(", "),
            r.seconds,
            r.target,
            format_size(r.bytes_read),
            format_size(r.set_bytes)
        );
    }
    Ok(v)
}

/// Whether a restore into `to` has written nothing yet (no folder, or an empty one).
fn nothing_written(to: &std::path::Path) -> bool {
    std::fs::read_dir(to).map_or(true, |mut d| d.next().is_none())
}

fn mariadb_flags(a: &RestoreArgs) -> Result<(), Error> {
    if !a.tablespace.is_empty() || !a.db_include.is_empty() || a.start.standby || !a.start.recovery_option.is_empty() || !a.start.link_map.is_empty() || a.check_changes {
        return Err(Error::invalid(
            "--tablespace, --db-include, --standby, --recovery-option, --link-map and --check-changes apply to PostgreSQL backups; this one is of a MariaDB server",
        ));
    }
    Ok(())
}

/// A MariaDB backup: laid out, then prepared by the server's own crash recovery.
fn restore_mariadb(ctx: &Context, a: &RestoreArgs, set: &sheaf_core::set::BackupSet) -> Result<serde_json::Value, Error> {
    mariadb_flags(a)?;
    let restored = sheaf_mariadb::restore_mariadb(set, &core_options(ctx, a)?, progress(a.json))?;
    say_mariadb(a, &restored, None)
}

/// `restore --repo` of a MariaDB server's repository: the backup `--set` (or `--annotation`)
/// names, else the newest; no point in time but the backup's own.
fn from_mariadb_repo(ctx: &Context, a: &RestoreArgs) -> Result<serde_json::Value, Error> {
    mariadb_flags(a)?;
    if a.recovery.targets.any() {
        return Err(Error::invalid(
            "a MariaDB backup restores to its own consistency point (the binary log position it records): --target-time, --target-lsn and the like are PostgreSQL's; replay the binary log from that position with mariadb-binlog for later points",
        ));
    }
    let which = a.recovery.backup().unwrap_or_default();
    let opts = core_options(ctx, a)?;
    let (restored, record) = ctx.first_repo_serving(|repo| sheaf_mariadb::repo::restore_from_repo(repo, ctx.schemes()?, &which, &opts, progress(a.json)))?;
    say_mariadb(a, &restored, Some(&record.id.to_string()))
}

fn say_mariadb(a: &RestoreArgs, restored: &sheaf_mariadb::MariaRestored, repository_id: Option<&str>) -> Result<serde_json::Value, Error> {
    let r = &restored.report;
    let mut v = report(r);
    if let Some(id) = repository_id {
        v["repository_backup"] = serde_json::json!(id);
    }
    v["prepared"] = serde_json::to_value(&restored.prepared).expect("prepared serialises");
    if a.json {
        say!("{v}");
        return Ok(v);
    }
    say_restored(r);
    let p = &restored.prepared;
    say!(
        "prepared in {:.2} s: the server's crash recovery applied {} of redo log to LSN {} in {:.2} s{}",
        p.seconds,
        format_size(p.redo_bytes),
        p.end_lsn,
        p.recovery_seconds,
        if p.ddl_fixed > 0 { format!(", after {} tablespaces put right for DDL during the backup", p.ddl_fixed) } else { String::new() }
    );
    if let (Some(f), Some(pos)) = (&p.binlog.file, p.binlog.position) {
        say!("consistent at binary log {f} position {pos}, GTID {}", if p.binlog.gtid_binlog_pos.is_empty() { "none" } else { &p.binlog.gtid_binlog_pos });
    }
    say!("start it: mariadbd --datadir={} (as the user who owns it)", a.to.display());
    Ok(v)
}

/// The line a restore from stripes ends with.
fn say_restored(r: &RestoreReport) {
    say!(
        "restored {} files ({:.1} MiB) from {} stripe{} in {:.2} s ({:.1} MiB/s) to {}",
        r.files,
        mib(r.bytes_written),
        r.stripes,
        plural(r.stripes),
        r.seconds,
        rate(r.bytes_written, r.seconds),
        r.target
    );
}
