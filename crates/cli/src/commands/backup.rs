//! `sheaf backup`: a directory or a running PostgreSQL server, to stripes or into a repository;
//! recorded in the history catalog.

use sheaf_core::manifest::BackupType;
use sheaf_core::size::format_size;
use sheaf_core::{BackupOptions, BackupReport, Error};
use sheaf_pg::ClusterFacts;

use crate::args::data::{Checkpoint, CompressOn, Via, WalFrom};
use crate::args::BackupArgs;
use crate::context::{Context, Source};
use crate::output::{mib, plural, rate};
use crate::progress::for_terminal as progress;
use crate::recorder::{recorded, Done};
use crate::settings::Origin;

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
    let targets: Vec<usize> = if !a.to.is_empty() {
        vec![0]
    } else if a.repo_target == "all" {
        (0..repos.len().max(1)).collect()
    } else {
        match a.repo_target.parse::<usize>() {
            Ok(n) if n >= 1 && n <= repos.len().max(1) => vec![n - 1],
            _ => return Err(Error::invalid(format!("--repo-target {}: give a repository's position, 1 to {}, or all", a.repo_target, repos.len().max(1)))),
        }
    };
    for target in targets {
        let start = sheaf_catalog::RunStart {
            operation: "backup".into(),
            source_kind: Some(source.kind().into()),
            source: Some(source.describe()),
            label: a.label.clone(),
            stripes: if a.to.is_empty() { repos.get(target).cloned().into_iter().collect() } else { a.to.clone() },
        };
        recorded(ctx.catalog(), start, || backup(ctx, source.clone(), a.clone(), target))?;
    }
    Ok(())
}

/// A PostgreSQL backup's facts as the report gives them, and where they came from.
struct Cluster {
    facts: ClusterFacts,
    json: serde_json::Value,
    /// The backup's id in the repository, when it went into one.
    repository_id: Option<sheaf_pg::repo::id::BackupId>,
}

fn backup(ctx: &Context, source: Source, a: BackupArgs, target: usize) -> Result<Done, Error> {
    let codec = ctx.codec(a.compression.clone())?;
    ctx.schemes()?;
    let into_repo = a.to.is_empty();
    if into_repo && ctx.repo_given().is_none() {
        return Err(Error::invalid("say where the backup goes: --to TARGET (repeat for stripes), or --repo REPO (or SHEAF_REPO, or repo in the config file)"));
    }
    // Retention after the backup: checked now, so that a policy missing fails before, not after.
    let auto_expire = if into_repo && ctx.settings.switch("expire-auto", a.expire_auto)? {
        let keep = ctx.retention(None, None)?;
        if keep.keep_full.is_none() && keep.keep_within.is_none() {
            return Err(Error::invalid(
                "expire-auto is on but no retention is set: set retention-full (e.g. 2) and/or retention-within (e.g. 14d) in the config file, or turn expire-auto off",
            ));
        }
        Some(keep)
    } else {
        None
    };
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
    let mut expired = None;
    let (r, cluster) = match &source {
        Source::Postgres(url) => {
            let remote = match ctx.settings.get("agent", a.agent.clone()) {
                Some((addr, _)) => {
                    let tls = ctx.settings.get("tls-dir", a.tls_dir.as_ref().map(|p| p.display().to_string())).map(|(v, _)| v).ok_or_else(|| {
                        Error::invalid(
                            "--agent needs --tls-dir DIR (or tls-dir in the config file): the folder with ca.pem, client.pem and client.key from sheaf agent --init-certs",
                        )
                    })?;
                    let timeout = a.agent_timeout;
                    let files = sheaf_agent::AgentFiles::connect_within(&addr, std::path::Path::new(&tls), timeout)?;
                    Some(if a.compress_on == CompressOn::Agent { files.compressing(opts.codec)? } else { files })
                }
                None if a.compress_on == CompressOn::Agent => {
                    return Err(Error::invalid("--compress-on agent needs --agent HOST:PORT: only the agent compresses on the database host"))
                }
                None => None,
            };
            // Through an agent, the data directory is the one it serves unless told otherwise.
            let pgdata = a.pgdata.clone().or_else(|| remote.as_ref().map(|r| std::path::PathBuf::from(&r.hello.pgdata)));
            let pg = sheaf_pg::PgBackupOptions {
                url: url.clone(),
                pgdata,
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
                remote: remote.map(|r| sheaf_pg::backup::options::Remote(std::sync::Arc::new(r))),
                via_base_backup: a.via == Via::BaseBackup,
            };
            if into_repo {
                let repo = ctx.open_repos_to_write()?.into_iter().nth(target).map(|(_, r)| r).transpose()?.ok_or_else(|| Error::invalid("no such repository"))?;
                let stripes = ctx.repo_stripes(a.stripes)?;
                let backup_type = match ctx.settings.get("type", a.backup_type.clone()) {
                    Some((v, o)) => BackupType::parse(&v).map_err(|e| if o == Origin::Flag { e } else { e.context(format!("type from {o}")) })?,
                    None => BackupType::Full,
                };
                let (r, record) = sheaf_pg::backup::repo::backup_to_repo(
                    &repo,
                    &pg,
                    &opts,
                    sheaf_pg::backup::repo::Kind { stripes, backup_type, check_changes: a.check_changes, page_scan: a.page_scan },
                    ctx.schemes()?,
                    progress(a.json),
                )?;
                if let Some(why) = &r.full_because {
                    eprintln!("sheaf: {why}");
                }
                let mut json = r.postgres();
                json["repository_id"] = serde_json::json!(record.id);
                json["chain"] = serde_json::json!(record.chain);
                if let Some(keep) = &auto_expire {
                    let (v, plan) = expire_after(&repo, keep);
                    json["expire"] = v;
                    expired = plan;
                }
                (r.report, Some(Cluster { facts: r.facts, json, repository_id: Some(record.id) }))
            } else {
                let r = sheaf_pg::backup_postgres(&pg, &opts, progress(a.json))?;
                let json = r.postgres();
                (r.report, Some(Cluster { facts: r.facts, json, repository_id: None }))
            }
        }
        Source::Directory(dir) => {
            if into_repo || a.backup_type.is_some() {
                return Err(Error::invalid("a repository holds a PostgreSQL cluster's backups and WAL: back up a directory with --to"));
            }
            if a.pgdata.is_some()
                || a.slot.is_some()
                || a.ignore_checksum_failures
                || a.primary.is_some()
                || a.standby.is_some()
                || a.wal_from != WalFrom::Local
                || a.agent.is_some()
                || a.via != Via::Files
                || a.compress_on != CompressOn::Host
            {
                return Err(Error::invalid("--pgdata, --slot, --primary, --standby, --wal-from, --agent, --compress-on, --via and --ignore-checksum-failures apply to a PostgreSQL source (postgres://...)"));
            }
            (sheaf_core::backup_directory(dir, &opts, progress(a.json))?, None)
        }
    };
    for w in &r.warnings {
        eprintln!("sheaf: warning: {w}");
    }
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["ratio"] = serde_json::json!(r.ratio());
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_read, r.seconds));
    if let Some(c) = &cluster {
        v["postgres"] = c.json.clone();
    }
    if a.json {
        say!("{v}");
    } else {
        summary(&r, cluster.as_ref());
        if let Some(plan) = &expired {
            say!("expire-auto:");
            super::expire::say_plan(plan, false);
        }
    }
    Ok(Done { json: v, cluster: cluster.map(|c| c.facts) })
}

/// expire-auto: the policy run on the repository the backup went into. Its plan as JSON (or the
/// error), and the plan; a failure is a warning, never the backup's.
fn expire_after(repo: &sheaf_pg::repo::Repo, keep: &sheaf_pg::maintain::expire::Retention) -> (serde_json::Value, Option<sheaf_pg::maintain::expire::ExpirePlan>) {
    let now = sheaf_core::time::now_ms() / 1000;
    let done = sheaf_pg::maintain::expire::plan_expire(repo, keep, now).and_then(|plan| sheaf_pg::maintain::expire::expire(repo, &plan).map(|()| plan));
    match done {
        Ok(plan) => (serde_json::to_value(&plan).expect("plan serialises"), Some(plan)),
        Err(e) => {
            eprintln!("sheaf: warning: the backup is complete, but expire-auto failed: {e}; run sheaf expire to finish");
            (serde_json::json!({ "error": e.to_string() }), None)
        }
    }
}

fn summary(r: &BackupReport, cluster: Option<&Cluster>) {
    say!(
        "processed {} pages ({:.1} MiB) in {:.2} s ({:.1} MiB/s), wrote {:.1} MiB (ratio {:.2}) to {} stripe{}",
        r.bytes_read.div_ceil(8192),
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
    say!("backup id {}: {} files, {} entries", r.backup_id, r.files, r.entries);
    let Some(Cluster { facts: f, repository_id, json }) = cluster else { return };
    if let Some(id) = repository_id {
        say!("in the repository as backup {id} (sheaf info lists it; sheaf restore --repo ... --set {id})");
    }
    if let Some(t) = json.get("backup_type").and_then(|t| t.as_str()).filter(|t| *t != "full") {
        let chain: Vec<&str> = json["chain"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        say!("{t} backup on {} (a chain of {} backups); changes found by {}", chain.last().copied().unwrap_or("?"), chain.len() + 1, json["method"].as_str().unwrap_or_default());
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
        eprintln!("sheaf: warning: checksum failure kept by --ignore-checksum-failures: {c}");
    }
}
