//! `sheaf backup`: a directory or a running PostgreSQL server, to stripes or into a repository;
//! recorded in the history catalog.

use std::path::PathBuf;
use std::sync::Arc;

use sheaf_core::manifest::BackupType;
use sheaf_core::size::format_size;
use sheaf_core::{BackupOptions, BackupReport, Error};
use sheaf_pg::backup::options::{PgBackupReport, Remote};
use sheaf_pg::backup::repo::{backup_to_repo, InRepo, Kind};
use sheaf_pg::repo::records::BackupRecord;

use crate::args::data::{Checkpoint, CompressOn, Via, WalFrom};
use crate::args::BackupArgs;
use crate::context::{Context, Source};
use crate::hooks::Hooks;
use crate::output::{mib, plural, rate};
use crate::progress::for_terminal as progress;
use crate::recorder::{recorded, Done};

/// Run it.
///
/// # Errors
/// The backup's.
pub fn run(ctx: &Context, mut a: BackupArgs) -> Result<(), Error> {
    // `--primary P --standby S` alone: the primary is the source.
    // Else the connection in the settings.
    let source = match (a.source.clone(), a.standby.is_some()) {
        (Some(s), _) => Source::of(&s),
        (None, true) if a.primary.is_some() => Source::of(&a.primary.take().expect("checked")),
        (None, _) => Source::Postgres(ctx.pg_url(None).map_err(|e| Error::invalid(format!("say what to back up: a directory or a PostgreSQL server ({})", e.message())))?),
    };
    // Into a repository: the one --repo-target names (of those given), or each in turn.
    let repos = ctx.repos_given();
    let targets: Vec<usize> = if a.to.is_empty() { ctx.repo_targets(a.repo_target)? } else { vec![0] };
    for target in targets {
        let start = sheaf_catalog::RunStart {
            operation: "backup".into(),
            source_kind: Some(source.kind().into()),
            source: Some(source.describe()),
            label: a.label.clone(),
            stripes: if a.to.is_empty() { repos.get(target).cloned().into_iter().collect() } else { a.to.clone() },
            repo: if a.to.is_empty() { repos.get(target).cloned() } else { None },
        };
        let hooks = Hooks::new(&ctx.settings, ctx.interrupt.stop(), a.hooks.clone())
            .with("SHEAF_SOURCE", source.describe())
            .with("SHEAF_REPO", if a.to.is_empty() { repos.get(target).cloned().unwrap_or_default() } else { String::new() });
        recorded(ctx.catalog(), start, &hooks, || backup(ctx, source.clone(), a.clone(), target))?;
    }
    Ok(())
}

/// A PostgreSQL backup: its report, and its record when it went into a repository, with what
/// expire-auto did after it.
struct Cluster {
    backup: PgBackupReport,
    record: Option<BackupRecord>,
    expired: Option<Result<Vec<sheaf_pg::maintain::expire::HistoryPlan>, Error>>,
}

impl Cluster {
    /// The report's `postgres` object.
    fn json(&self) -> serde_json::Value {
        let mut json = self.backup.postgres();
        if let Some(record) = &self.record {
            json["repository_id"] = serde_json::json!(record.id);
            json["chain"] = serde_json::json!(record.chain);
        }
        match &self.expired {
            Some(Ok(plans)) => json["expire"] = super::expire::plans_json(plans),
            Some(Err(e)) => json["expire"] = serde_json::json!({ "error": e.to_string() }),
            None => {}
        }
        json
    }
}

fn backup(ctx: &Context, source: Source, a: BackupArgs, target: usize) -> Result<Done, Error> {
    let codec = ctx.codec(a.compression);
    ctx.schemes()?;
    let into_repo = a.to.is_empty();
    if into_repo && ctx.repo_given().is_none() {
        return Err(Error::invalid("say where the backup goes: --to TARGET (repeat for stripes), or --repo REPO (or SHEAF_REPO, or repo in the config file)"));
    }
    if !into_repo && !a.annotation.is_empty() {
        return Err(Error::invalid("--annotation is kept in a repository's record: give --repo (a backup --to stripes carries --label)"));
    }
    let annotations = sheaf_pg::repo::annotations::given(&a.annotation);
    // Retention after the backup: checked now, so that a policy missing fails before, not after.
    let auto_expire = if into_repo { ctx.expire_auto(a.expire_auto, ctx.repos_given().get(target).map(String::as_str))? } else { None };
    let pg_flags = postgres_flags(&a);
    let mut opts = BackupOptions::new(ctx.locations(&a.to)?);
    opts.stop = ctx.interrupt.stop().clone();
    opts.codec = codec;
    opts.transfer_size = a.transfer_size;
    opts.buffer_count = a.buffer_count;
    opts.readers = a.readers;
    opts.threads = a.threads;
    opts.label = a.label;
    opts.overwrite = a.overwrite;
    opts.preallocate = a.preallocate;
    if !into_repo {
        // A set of its own: a fresh KDF (salt) for this backup. Into a repository, its own KDF.
        opts.encryption = ctx.keys()?.map(|keys| keys.fresh_kdf().map(|kdf| sheaf_core::crypto::Encryption { keys, kdf })).transpose()?;
    }
    let (mut mariadb, mut mariadb_record) = (None, None);
    let (r, cluster) = match &source {
        Source::Postgres(url) => {
            let agent = ctx.agent(a.agent.clone(), a.s3.agent_tls.tls_dir.clone())?;
            if a.compress_on == CompressOn::Agent && agent.is_none() {
                return Err(Error::invalid("--compress-on agent needs --agent HOST:PORT: only the agent compresses on the database host"));
            }
            let agent =
                agent.map(|(addr, tls_dir)| sheaf_agent::AgentAt { addr, tls_dir, timeout: a.agent_timeout, compress: (a.compress_on == CompressOn::Agent).then_some(opts.codec) });
            let remote = agent.map(|at| at.connect()).transpose()?.map(|files| Remote { pgdata: PathBuf::from(&files.hello.pgdata), files: Arc::new(files) });
            let pg = sheaf_pg::PgBackupOptions {
                url: url.clone(),
                pgdata: a.pgdata.clone(),
                slot: a.slot.clone(),
                spread_checkpoint: a.checkpoint == Checkpoint::Spread,
                ignore_checksum_failures: a.ignore_checksum_failures,
                expect_system_identifier: None,
                parent: None,
                standby: a.standby.clone(),
                primary: a.primary.clone(),
                wal_from_archive: a.wal_from == WalFrom::Archive,
                wal_timeout: Some(a.wal_timeout),
                archive: None,
                remote,
                via_base_backup: a.via == Via::BaseBackup,
            };
            if into_repo {
                let repo = ctx.open_repos_to_write()?.into_iter().nth(target).map(|(_, r)| r).transpose()?.ok_or_else(|| Error::invalid("no such repository"))?;
                let kind = Kind {
                    stripes: ctx.repo_stripes(a.stripes)?,
                    backup_type: ctx.backup_type(a.backup_type),
                    check_changes: a.check_changes,
                    page_scan: a.page_scan,
                    expire_after: auto_expire,
                    annotations: annotations.clone(),
                    no_resume: a.no_resume,
                };
                let InRepo { backup, record, expired, not_resumed } = backup_to_repo(&repo, &pg, &opts, kind, ctx.schemes()?, progress(a.json))?;
                if let Some(why) = &not_resumed {
                    eprintln!("sheaf: {why}");
                }
                if let Some(why) = &backup.full_because {
                    eprintln!("sheaf: {why}");
                }
                if let Some(Err(e)) = &expired {
                    crate::log::warning(format_args!("the backup is complete, but expire-auto failed: {e}; run sheaf expire to finish"));
                }
                let report = backup.report.clone();
                (report, Some(Cluster { backup, record: Some(record), expired }))
            } else {
                let backup = sheaf_pg::backup_postgres(&pg, &opts, progress(a.json))?;
                (backup.report.clone(), Some(Cluster { backup, record: None, expired: None }))
            }
        }
        Source::MariaDb(url) => {
            if !into_repo && a.backup_type.is_some() {
                return Err(Error::invalid("--type incr or diff builds on a backup in a repository: give --repo R (a backup --to stripes is full)"));
            }
            if pg_flags {
                return Err(Error::invalid(
                    "--pgdata, --slot, --primary, --standby, --wal-from, --agent, --compress-on, --via and --ignore-checksum-failures apply to a PostgreSQL source (postgres://...); a MariaDB page that does not check out always fails the backup",
                ));
            }
            let m = sheaf_mariadb::MariaBackupOptions { url: url.clone(), redo_poll: std::time::Duration::from_millis(a.redo_poll.max(1)), expect: None, since: None };
            if into_repo {
                let repo = ctx.open_repos_to_write()?.into_iter().nth(target).map(|(_, r)| r).transpose()?.ok_or_else(|| Error::invalid("no such repository"))?;
                let o = sheaf_mariadb::repo::InRepoOptions {
                    backup_type: ctx.backup_type(a.backup_type),
                    stripes: ctx.repo_stripes(a.stripes)?,
                    expire_after: auto_expire,
                    annotations: annotations.clone(),
                };
                let r = sheaf_mariadb::repo::backup_to_repo(&repo, &m, &opts, o, ctx.schemes()?, progress(a.json))?;
                if let Some(why) = &r.full_because {
                    eprintln!("sheaf: {why}");
                }
                if let Some(Err(e)) = &r.expired {
                    crate::log::warning(format_args!("the backup is complete, but expire-auto failed: {e}; run sheaf expire to finish"));
                }
                mariadb_record = Some(r.record.id.to_string());
                mariadb = Some(r.backup.facts);
                (r.backup.report, None)
            } else {
                let r = sheaf_mariadb::backup_mariadb(&m, &opts, progress(a.json))?;
                mariadb = Some(r.facts);
                (r.report, None)
            }
        }
        Source::Directory(dir) => {
            if into_repo || a.backup_type.is_some() {
                return Err(Error::invalid("a repository holds a PostgreSQL cluster's backups and WAL: back up a directory with --to"));
            }
            if pg_flags {
                return Err(Error::invalid("--pgdata, --slot, --primary, --standby, --wal-from, --agent, --compress-on, --via and --ignore-checksum-failures apply to a PostgreSQL source (postgres://...)"));
            }
            (sheaf_core::backup_directory(dir, &opts, progress(a.json))?, None)
        }
    };
    for w in &r.warnings {
        crate::log::warning(w);
    }
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["ratio"] = serde_json::json!(r.ratio());
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_read, r.seconds));
    if let Some(c) = &cluster {
        v["postgres"] = c.json();
    }
    if let Some(m) = &mariadb {
        v["mariadb"] = serde_json::to_value(m).expect("facts serialise");
        if let Some(id) = &mariadb_record {
            v["mariadb"]["repository_id"] = serde_json::json!(id);
        }
    }
    if a.json {
        say!("{v}");
    } else {
        summary(&r, cluster.as_ref(), mariadb.as_ref().map_or(8192, |m| m.page_size.max(1)));
        if let Some(m) = &mariadb {
            mariadb_summary(m);
        }
        if let Some(id) = &mariadb_record {
            say!("in the repository as backup {id} (sheaf info lists it; sheaf restore --repo ... --set {id} --to DIR)");
        }
        if let Some(Some(Ok(plans))) = cluster.as_ref().map(|c| &c.expired) {
            say!("expire-auto:");
            super::expire::say_plans(plans, false);
        }
    }
    Ok(Done { json: v, cluster: cluster.map(|c| c.backup.facts) })
}

/// The summary, pages counted of `page` bytes (PostgreSQL's and SQL Server's 8 KiB; a MariaDB
/// server's InnoDB page).
fn summary(r: &BackupReport, cluster: Option<&Cluster>, page: u64) {
    say!(
        "processed {} pages ({:.1} MiB) in {:.2} s ({:.1} MiB/s), wrote {:.1} MiB (ratio {:.2}) to {} stripe{}",
        r.bytes_read.div_ceil(page),
        mib(r.bytes_read),
        r.seconds,
        rate(r.bytes_read, r.seconds),
        mib(r.bytes_written),
        r.ratio(),
        r.stripes,
        plural(r.stripes)
    );
    let uploads = if r.target_memory_bytes > 0 { format!(" + {} of upload parts", format_size(r.target_memory_bytes)) } else { String::new() };
    say!(
        "memory: {} buffers × {}{uploads} = {} ({}; {} reader{}, {} compressor thread{})",
        r.buffer_count,
        format_size(r.buffer_len),
        format_size(r.memory_budget_bytes),
        r.compression,
        r.readers,
        plural(r.readers),
        r.threads,
        plural(r.threads),
    );
    if let Some(levels) = &r.auto_levels {
        let total: u64 = levels.values().sum::<u64>().max(1);
        let shares: Vec<String> = levels.iter().map(|(l, n)| format!("{l} ({:.0} %)", *n as f64 * 100.0 / total as f64)).collect();
        say!("auto chose zstd level {} of the chunks", shares.join(", "));
    }
    if r.encryption != "none" {
        say!("encrypted with {}", r.encryption.to_uppercase());
    }
    if let Some(x) = &r.resumed {
        say!(
            "resumed (attempt {}, first begun {}): {} files ({:.1} MiB) taken unchanged from the attempts before, not read again; {:.1} MiB of their stripes kept",
            x.attempt + 1,
            sheaf_core::time::utc(x.first_started_unix_ms.div_euclid(1000)),
            x.files,
            mib(x.bytes),
            mib(x.kept_stored_bytes)
        );
    }
    say!("backup id {}: {} files, {} entries", r.backup_id, r.files, r.entries);
    let Some(Cluster { backup, record, .. }) = cluster else { return };
    let f = &backup.facts;
    if let Some(record) = record {
        let id = &record.id;
        say!("in the repository as backup {id} (sheaf info lists it; sheaf restore --repo ... --set {id})");
        if let Some(parent) = record.chain.last().filter(|_| backup.backup_type != BackupType::Full) {
            say!("{} backup on {parent} (a chain of {} backups); changes found by {}", backup.backup_type, record.chain.len() + 1, backup.method.as_deref().unwrap_or_default());
        }
    }
    say!(
        "PostgreSQL {} (system {}), timeline {}, LSN {} .. {}, {} WAL files; page checksums: {} pages verified, {} not checked (new or written during the backup), {} failures",
        f.server_version,
        f.system_identifier,
        f.timeline,
        f.start_lsn,
        f.stop_lsn,
        f.wal_files,
        f.pages_verified,
        f.pages_not_checked,
        r.check_failures.len()
    );
    for c in &r.check_failures {
        crate::log::warning(format_args!("checksum failure kept by --ignore-checksum-failures: {c}"));
    }
}

fn mariadb_summary(m: &sheaf_mariadb::MariaFacts) {
    let b = &m.binlog;
    let binlog = match (&b.file, b.position) {
        (Some(f), Some(p)) => format!("binary log {f} at {p}"),
        _ => "no binary log".to_string(),
    };
    say!(
        "MariaDB {}: LSN {} .. {} ({} of redo log copied, at least {} from being overwritten); {binlog}, GTID {}",
        m.server_version,
        m.start_lsn,
        m.end_lsn,
        format_size(m.redo_bytes),
        format_size(m.redo_least_headroom.min(m.log_file_size)),
        if b.gtid_binlog_pos.is_empty() { "none" } else { &b.gtid_binlog_pos }
    );
    say!(
        "commits waited {:.3} s in BLOCK_COMMIT, DDL {:.3} s in BLOCK_DDL; InnoDB pages: {} verified, {} not checked (empty or compressed), {} read again (torn while read)",
        m.block_commit_seconds,
        m.block_ddl_seconds,
        m.pages_verified,
        m.pages_not_checked,
        m.pages_read_again
    );
    let ddl = m.ddl_created.len() + m.ddl_recreated.len() + m.ddl_removed.len();
    if ddl > 0 {
        say!(
            "DDL during the backup: {} tablespaces created, {} recreated, {} removed; the restore puts them right",
            m.ddl_created.len(),
            m.ddl_recreated.len(),
            m.ddl_removed.len()
        );
    }
}

/// Whether a flag that only a PostgreSQL source takes was given.
fn postgres_flags(a: &BackupArgs) -> bool {
    a.pgdata.is_some()
        || a.slot.is_some()
        || a.ignore_checksum_failures
        || a.primary.is_some()
        || a.standby.is_some()
        || a.wal_from != WalFrom::Local
        || a.agent.is_some()
        || a.via != Via::Files
        || a.compress_on != CompressOn::Host
}
