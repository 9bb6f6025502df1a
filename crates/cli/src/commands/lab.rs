//! `sheaf lab`: what a codec costs per access on the user's own pages ([`sheaf_bench::lab`]), or
//! with `--db-url` the database lab on the server ([`sheaf_bench::dblab`]).

use std::path::Path;

use sheaf_core::size::{format_size, parse_size};
use sheaf_core::{CodecSpec, Error, ErrorKind};

use crate::args::LabArgs;
use crate::context::Context;

/// Run it.
///
/// # Errors
/// Flags that do not fit together, pages that cannot be read, the lab's own failures.
pub fn run(ctx: &Context, a: LabArgs) -> Result<(), Error> {
    if let Some(url) = &a.db_url {
        let opts = sheaf_bench::dblab::DbLabOptions { rows: a.rows.max(100), repeat: a.repeat.max(1), accesses: a.accesses.max(1), table: a.relation.clone() };
        let rows = sheaf_bench::dblab::run(url, &opts)?;
        let v =
            serde_json::json!({ "source": sheaf_pg::connect::session::redact(url), "table": opts.table, "rows_in_table": opts.rows, "repeat": opts.repeat, "database_lab": rows });
        if let Some(out) = &a.out {
            std::fs::create_dir_all(out).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", out.display()), e))?;
            let p = out.join("dblab.json");
            std::fs::write(&p, serde_json::to_string_pretty(&v).expect("serialises")).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", p.display()), e))?;
        }
        if a.json {
            say!("{v}");
        } else {
            let what = opts.table.as_deref().map_or_else(|| "rows of generated wide text".to_string(), |t| format!("rows at most of {t}"));
            say!("database lab on {}: {} {what}, warm cache, median of {}", sheaf_pg::connect::session::redact(url), opts.rows, opts.repeat);
            say_raw!("{}", sheaf_bench::dblab::table(&rows));
            say!("(× = as a multiple of the uncompressed table, STORAGE EXTERNAL)");
        }
        return Ok(());
    }
    let sample = parse_size(&a.sample)? as usize / sheaf_bench::lab::PAGE * sheaf_bench::lab::PAGE;
    if sample == 0 {
        return Err(Error::invalid(format!("--sample {}: give at least 8KiB", a.sample)));
    }
    let read_file = |path: &Path| -> Result<Vec<u8>, Error> {
        use std::io::Read;
        let f = std::fs::File::open(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot open {}", path.display()), e))?;
        let mut v = Vec::new();
        f.take(sample as u64).read_to_end(&mut v).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?;
        Ok(v)
    };
    let (what, mut pages) = match (&a.file, &a.url, a.stripes.is_empty()) {
        (Some(f), _, _) => (f.display().to_string(), read_file(f)?),
        (None, Some(url), _) => {
            let rel = a.relation.as_deref().ok_or_else(|| Error::invalid("--url needs --relation SCHEMA.NAME"))?;
            let path = sheaf_pg::connect::server::Server::connect(url)?.relation_file(rel)?;
            (format!("{rel} ({})", path.display()), read_file(&path)?)
        }
        (None, None, false) => {
            let rel = a.relation.as_deref().ok_or_else(|| Error::invalid("a backup needs --relation NAME"))?;
            let set = ctx.open_stripes(&a.stripes)?;
            let facts = sheaf_pg::restore::extract::catalog(&set)?;
            let (db, r) = sheaf_pg::restore::extract::find(facts.databases()?, rel, a.database.as_deref())?;
            let mut f = sheaf_core::chain_file(&[&set], sheaf_pg::restore::extract::main_fork(&set, &r)?)?;
            let n = (f.size() as usize).min(sample);
            let mut v = vec![0u8; n];
            f.read_at(0, &mut v)?;
            (format!("{}.{} in database {} of backup {}", r.schema, r.name, db.name, set.manifest.backup_id), v)
        }
        (None, None, true) => return Err(Error::invalid("give the pages: --file PATH, --url URL --relation NAME, or a backup's STRIPE with --relation NAME")),
    };
    pages.truncate(pages.len() / sheaf_bench::lab::PAGE * sheaf_bench::lab::PAGE);
    if pages.is_empty() {
        return Err(Error::invalid(format!("{what} holds no whole 8 KiB page")));
    }
    let mut opts = sheaf_bench::lab::LabOptions { repeat: a.repeat.max(1), threads: a.threads.max(1), accesses: a.accesses.max(1), ..Default::default() };
    if let Some(list) = &a.compression {
        opts.codecs = list.split(',').map(CodecSpec::parse).collect::<Result<_, _>>()?;
    }
    if let Some(list) = &a.unit {
        opts.units = list.split(',').map(|u| parse_size(u).map(|b| b as usize)).collect::<Result<_, _>>()?;
    }
    let rows = sheaf_bench::lab::run(&pages, &opts)?;
    let v = serde_json::json!({ "source": what, "sample_bytes": pages.len(), "threads": opts.threads, "repeat": opts.repeat, "rows": rows });
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", out.display()), e))?;
        let write = |name: &str, text: String| {
            let p = out.join(name);
            std::fs::write(&p, text).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", p.display()), e))
        };
        write("lab.json", serde_json::to_string_pretty(&v).expect("serialises"))?;
        let mut csv = String::from("codec,unit,ratio,scan_mb_s,scan_x,fetch_p50_us,fetch_p99_us,fetch_x,update_us,update_x\n");
        for r in &rows {
            csv.push_str(&format!(
                "{},{},{:.4},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
                r.codec, r.unit, r.ratio, r.scan_mb_s, r.scan_x, r.fetch_p50_us, r.fetch_p99_us, r.fetch_x, r.update_us, r.update_x
            ));
        }
        write("lab.csv", csv)?;
        sheaf_bench::plot::write_lab_plots(&rows, out)?;
    }
    if a.json {
        say!("{v}");
    } else {
        say!(
            "{what}: {} of pages ({} pages), scan on {} core{}, median of {}",
            format_size(pages.len() as u64),
            pages.len() / sheaf_bench::lab::PAGE,
            opts.threads,
            crate::output::plural(opts.threads),
            opts.repeat
        );
        say_raw!("{}", sheaf_bench::lab::table(&rows));
        say!("(× = cost as a multiple of raw pages: copying them for scan and fetch, changing one in place for update)");
    }
    Ok(())
}
