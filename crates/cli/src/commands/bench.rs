//! `sheaf bench`: the seeds' experiment as a command; the runs are [`sheaf_bench`]'s, here they
//! are announced, and the table and report files written.

use std::path::{Path, PathBuf};

use sheaf_bench::results::BenchResult;
use sheaf_bench::runner::Event;
use sheaf_core::{Error, ErrorKind};

use crate::args::BenchArgs;
use crate::context::Context;
use crate::output::duration;

/// Run it (the Ctrl-C handler `main` installs stops the scratch servers and removes the work
/// folders).
///
/// # Errors
/// A plan or flag that does not parse, the first run that failed (after the report of those
/// before it is written).
pub fn run(ctx: &Context, a: BenchArgs) -> Result<(), Error> {
    let plan = match &a.plan {
        Some(p) => sheaf_bench::plan::Plan::load(p)?,
        None => sheaf_bench::plan::Plan::default(),
    };
    let (mut dataset, mut peers) = (a.dataset, a.peers);
    if a.engine == crate::args::tools::Engine::Mariadb {
        match &a.source {
            Some(s) if !sheaf_mariadb::url::is_url(s) => {
                return Err(Error::invalid(format!(
                    "--engine mariadb measures a MariaDB server: give a mariadb:// URL, not {s} (or no source: a throwaway server loaded by sysbench)"
                )))
            }
            Some(_) => {}
            None => {
                dataset.get_or_insert_with(|| "sysbench:4x250000".to_string());
            }
        }
        if peers.is_none() && plan.peers.is_none() {
            peers = Some("mariadb-backup".into());
        }
    }
    let flags = sheaf_bench::plan::Flags {
        source: a.source,
        dataset,
        compression: a.compression,
        stripes: a.stripes,
        transfer_size: a.transfer_size,
        buffer_count: a.buffer_count,
        target: a.target,
        repeat: a.repeat,
        peers,
        drop_caches: a.drop_caches,
        out: a.out,
        restore_dir: a.restore_dir,
        backup_type: a.backup_type,
        change: a.change,
    };
    let default_out = || PathBuf::from(format!("sheaf-bench-{}", sheaf_core::time::utc_now().replace(':', "")));
    if let Some(from) = &a.from {
        let text = std::fs::read(from).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read {}", from.display()), e))?;
        let result: BenchResult = serde_json::from_slice(&text).map_err(|e| Error::invalid(format!("{} is not a sheaf bench report.json: {e}", from.display())))?;
        return bench_output(&result, &flags.out.unwrap_or_else(default_out), a.json);
    }
    let r = sheaf_bench::plan::resolve(flags, plan)?;
    let out = r.out.clone().unwrap_or_else(default_out);
    let sheaf = ctx.exe()?;
    let opts = sheaf_bench::runner::BenchOptions {
        matrix: r.matrix,
        source: r.source,
        peers: r.peers,
        drop_caches: r.drop_caches,
        sheaf,
        catalog: ctx.catalog().map(Path::to_path_buf),
        restore_dir: r.restore_dir,
        incremental: r.incremental,
        key_args: match ctx.keys()? {
            // Checked here, so that a bad key file stops the bench before its first run; the
            // runs get the file's name (SHEAF_PASSPHRASE they inherit), never the secret.
            Some(_) => ctx.key_flags().unwrap_or_default(),
            None => Vec::new(),
        },
        stop: ctx.interrupt.stop().clone(),
    };
    let note = |e: Event| match e {
        Event::Note(n) => eprintln!("sheaf bench: {n}"),
        Event::Warning(w) => crate::log::warning(w),
        Event::Run { index, total, what, repeat, repeats, eta } => {
            eprintln!("sheaf bench: [{index}/{total}{}] {what} (run {repeat} of {repeats})", eta.map_or_else(String::new, |d| format!(", {} left", duration(d))))
        }
    };
    let outcome = sheaf_bench::runner::run(&opts, &note)?;
    // What ran before a failure is written all the same, marked as stopped early.
    bench_output(&outcome.result, &out, a.json)?;
    outcome.failure.map_or(Ok(()), Err)
}

/// Print the table (or JSON) and write the report files and plots into `out`.
fn bench_output(result: &BenchResult, out: &Path, json: bool) -> Result<(), Error> {
    let written = sheaf_bench::report::write_all(result, out);
    if json {
        say!("{}", serde_json::to_string(result).expect("results serialise"));
    } else {
        let mut table = Vec::new();
        sheaf_bench::report::write_text(&result.rows, &mut table).expect("a table in memory");
        if !result.rewinds.is_empty() || !result.disk.is_empty() {
            table.push(b'\n');
            sheaf_bench::report::write_extras(result, &mut table).expect("a table in memory");
        }
        say_raw!("{}", String::from_utf8_lossy(&table));
        say!("(median of {} runs, (min-max) where they differ; CPU % of all {} cores; cache {})", result.info.repeats, result.info.cores, result.info.cache);
    }
    let files = written?;
    eprintln!("sheaf bench: wrote {} files to {} (report.md, report.csv, report.json, samples.csv, plots)", files.len(), out.display());
    Ok(())
}
