//! A drill of a MariaDB server's backup ([`drill`]): restored from its repository into a folder of
//! the drill's own, prepared by the server's crash recovery, started on a private socket (no
//! TCP, grants skipped: nothing but the drill reaches it), checked with `mariadb-check
//! --all-databases` and the DBA's own SQL, then stopped and removed; its phases and verdict
//! recorded in the repository as a PostgreSQL drill's are (`drills/`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use sheaf_core::stop::interrupted;
use sheaf_core::{Error, ErrorKind, Progress, RestoreOptions, Result, Schemes};
use sheaf_pg::drill::run::{begin, choose, conclude, nothing_written, prepare_work, remove_work, DrillOptions};
use sheaf_pg::repo::drills::{CheckOutcome, DrillRecord};
use sheaf_pg::repo::records::BackupRef;
use sheaf_pg::repo::Repo;

use crate::restore::{geometry, run_dir};
use crate::scratch::{program, Scratch};

/// Drill the backup `opts.pick` names in `repo` (a MariaDB server's): see the module
/// documentation. PostgreSQL's recovery targets and server folder do not apply.
///
/// # Errors
/// A refusal before anything was written (no such backup, a folder in use); the record cannot be
/// written. A drill that fails is returned as a record that did not pass.
pub fn drill(repo: &Repo, schemes: &dyn Schemes, opts: &DrillOptions, progress: Arc<dyn Progress>) -> Result<DrillRecord> {
    let r = &opts.request;
    if r.time.is_some() || r.lsn.is_some() || r.name.is_some() || r.immediate {
        return Err(Error::invalid("a MariaDB backup is drilled to its own consistency point: the --target flags are PostgreSQL's"));
    }
    if opts.pg_bin.is_some() {
        return Err(Error::invalid("--pg-bin names PostgreSQL's programs; a MariaDB drill runs mariadbd (SHEAF_MARIADBD names another)"));
    }
    repo.check_writer().map_err(|e| e.context("a drill records itself in the repository"))?;
    let (repo, backup) = choose(repo, &opts.pick)?;
    prepare_work(&opts.work)?;
    let data = opts.work.join("data");
    let mut ropts = RestoreOptions::new(&data);
    ropts.threads = opts.threads;
    ropts.stop = opts.stop.clone();
    let mut record = begin(&backup, "its consistency point".into());
    let t0 = Instant::now();
    let restored = crate::repo::restore_from_repo(&repo, schemes, &BackupRef::Id(backup.id.to_string()), &ropts, progress);
    let outcome = match restored {
        Err(e) if nothing_written(&data) && matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::NoSpace | ErrorKind::TargetNotEmpty | ErrorKind::Key) => {
            remove_work(&opts.work);
            return Err(e);
        }
        Err(e) => {
            record.phases.restore_seconds = t0.elapsed().as_secs_f64();
            Err(e.context("restore"))
        }
        Ok((restored, _)) => {
            let prepared = &restored.prepared;
            record.bytes_restored = restored.report.bytes_written;
            record.phases.restore_seconds = (t0.elapsed().as_secs_f64() - prepared.seconds).max(0.0);
            record.phases.recovery_seconds = prepared.seconds;
            checks(&data, &restored.facts, opts, &mut record)
        }
    };
    if opts.stop.asked() {
        remove_work(&opts.work);
        return Err(interrupted());
    }
    conclude(&repo, record, outcome.err(), opts, &data)
}

/// Start the prepared data directory and check it.
fn checks(data: &Path, facts: &crate::backup::MariaFacts, opts: &DrillOptions, record: &mut DrillRecord) -> Result<()> {
    let run = run_dir(data)?;
    let mut settings = geometry(facts);
    settings.push("--skip-grant-tables".into());
    let mut server = Scratch::over(data, run.path(), &settings.iter().map(String::as_str).collect::<Vec<_>>())?;
    server.stop_with(&opts.stop);
    server.start().map_err(|e| e.context("the restored server did not start"))?;
    let t0 = Instant::now();
    let version = server.sql("SELECT VERSION()");
    record.checks.push(match &version {
        Ok(v) => CheckOutcome { check: "connect".into(), ok: true, detail: format!("MariaDB {v} answers on its private socket") },
        Err(e) => CheckOutcome { check: "connect".into(), ok: false, detail: e.to_string() },
    });
    record.server_version = version.unwrap_or_default();
    record.checks.push(tool_check(
        "mariadb-check",
        Command::new(program("mariadb-check")?).args(["--no-defaults", "-uroot", "--all-databases", "--extended"]).arg(format!("--socket={}", server.socket().display())),
        |out| {
            let bad: Vec<&str> = out.lines().filter(|l| l.contains("error") || l.contains("Corrupt") || l.contains("warning")).collect();
            if bad.is_empty() {
                Ok(format!("--all-databases --extended: {} tables, all OK", out.lines().filter(|l| l.trim_end().ends_with("OK")).count()))
            } else {
                Err(bad.join("; "))
            }
        },
    ));
    if let Some(file) = opts.check_sql.as_ref().filter(|_| !opts.stop.asked()) {
        let sql = std::fs::File::open(file).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read --check-sql {}", file.display()), e))?;
        record.checks.push(tool_check(
            &format!("check-sql {}", file.display()),
            Command::new(program("mariadb")?).args(["--no-defaults", "-uroot", "-N", "-B"]).arg(format!("--socket={}", server.socket().display())).stdin(sql),
            |out| Ok(format!("ran, {} row(s) of output", out.lines().count())),
        ));
    }
    record.phases.checks_seconds = t0.elapsed().as_secs_f64();
    server.stop()?;
    Ok(())
}

/// Run a client tool as a check: it passes when it exits 0 and `judge` finds its output good.
fn tool_check(name: &str, cmd: &mut Command, judge: impl Fn(&str) -> std::result::Result<String, String>) -> CheckOutcome {
    match cmd.output() {
        Ok(o) if o.status.success() => {
            let out = String::from_utf8_lossy(&o.stdout);
            match judge(&out) {
                Ok(detail) => CheckOutcome { check: name.into(), ok: true, detail },
                Err(detail) => CheckOutcome { check: name.into(), ok: false, detail },
            }
        }
        Ok(o) => CheckOutcome { check: name.into(), ok: false, detail: format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)).trim().to_string() },
        Err(e) => CheckOutcome { check: name.into(), ok: false, detail: format!("cannot run it: {e}") },
    }
}
