//! The database lab: seed 003's experiment in PostgreSQL's own form. The same table is made
//! three times: with its wide text column TOAST-compressed by `pglz`, by `lz4`, and not at all
//! (`STORAGE EXTERNAL`). Each copy then gets a full scan that reads every value, singleton seeks
//! by key, and in-place updates that change a value's bytes (so it is decompressed, changed and
//! compressed again). Everything is timed on a warm cache and repeated; each cost is also given
//! as a multiple of the uncompressed table's, with the size each copy takes.

use std::time::Instant;

use postgres::Client;
use serde::Serialize;
use sheaf_core::{Error, ErrorKind, Result};

/// What to run.
#[derive(Clone, Debug)]
pub struct DbLabOptions {
    /// Rows in the generated table (about 2.3 KB of text each).
    pub rows: u32,
    /// Timed runs of each measurement (median kept).
    pub repeat: usize,
    /// Seeks, and updates, per run.
    pub accesses: usize,
    /// The user's table (`SCHEMA.NAME`) to copy up to `rows` rows of, instead of a generated one.
    pub table: Option<String>,
}

impl Default for DbLabOptions {
    fn default() -> Self {
        DbLabOptions { rows: 50_000, repeat: 3, accesses: 500, table: None }
    }
}

/// How the scratch tables are made and used: from the user's table or a generated one.
struct Shape {
    /// TOASTable columns, whose compression (or storage) each method sets.
    columns: Vec<String>,
    /// The column updates change (a text or bytea column), and what it is changed with.
    update_set: String,
    key: String,
    /// The table, as `regclass` spells it (quoted where it must be).
    source: String,
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The user's table's TOASTable columns, and one to change in updates.
fn shape_of(c: &mut Client, table: &str) -> Result<Shape> {
    let rows = c
        .query(
            "SELECT a.attname::text, t.typname::text FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'e', 'm') ORDER BY a.attnum",
            &[&table],
        )
        .map_err(err(&format!("reading the columns of {table}")))?;
    if rows.is_empty() {
        let exists: bool = c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table]).map_err(err("finding the table"))?.get(0);
        return Err(Error::invalid(if exists {
            format!("{table} has no column TOAST can compress (text, bytea, jsonb, ...): nothing for the lab to measure")
        } else {
            format!("no table {table} in this database (give SCHEMA.NAME, and the database in the URL)")
        }));
    }
    let columns: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let (col, ty) = columns
        .iter()
        .find(|(_, t)| matches!(t.as_str(), "text" | "varchar" | "bpchar" | "bytea"))
        .ok_or_else(|| Error::invalid(format!("{table} has no text or bytea column for the lab's updates to change")))?;
    let empty = if ty == "bytea" { "''::bytea" } else { "''" };
    let source: String = c.query_one("SELECT to_regclass($1)::text", &[&table]).map_err(err("finding the table"))?.get(0);
    Ok(Shape { columns: columns.iter().map(|(n, _)| quote(n)).collect(), update_set: format!("{} = {} || {empty}", quote(col), quote(col)), key: "sheaf_id".into(), source })
}

/// One storage method.
#[derive(Clone, Debug, Serialize)]
pub struct DbLabRow {
    /// `none` (STORAGE EXTERNAL), `pglz` or `lz4`.
    pub method: String,
    /// The table with its TOAST table, bytes.
    pub size_bytes: u64,
    /// The uncompressed table's size over this one's.
    pub ratio: f64,
    /// Full scan reading every value, milliseconds.
    pub scan_ms: f64,
    /// As a multiple of the uncompressed table's.
    pub scan_x: f64,
    /// Singleton seek by key, microseconds, median.
    pub seek_us: f64,
    /// As a multiple.
    pub seek_x: f64,
    /// In-place update of one value, microseconds, median.
    pub update_us: f64,
    /// As a multiple.
    pub update_x: f64,
}

fn err(what: &str) -> impl Fn(postgres::Error) -> Error + '_ {
    move |e| {
        let detail = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string());
        Error::new(ErrorKind::Source, format!("database lab: {what}: {detail}"))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Run the database lab on the server at `url` (its database gets three scratch tables,
/// `sheaf_lab_none`, `sheaf_lab_pglz` and `sheaf_lab_lz4`, dropped at the end).
///
/// # Errors
/// A server that cannot be reached, lacks the privileges to create tables, or any query failing.
pub fn run(url: &str, opts: &DbLabOptions) -> Result<Vec<DbLabRow>> {
    let mut info = sheaf_pg::connect::conninfo::ConnInfo::resolve(url)?;
    if info.get("application_name").is_none() {
        info.set("application_name", "sheaf lab");
    }
    let mut c = sheaf_pg::connect::session::open(&mut info, None)?;
    let lz4 = c.simple_query("CREATE TEMP TABLE sheaf_lab_probe (t text COMPRESSION lz4); DROP TABLE sheaf_lab_probe").is_ok();
    let mut methods = vec!["none", "pglz"];
    if lz4 {
        methods.push("lz4");
    }
    let result = measure(&mut c, &methods, opts);
    for m in &methods {
        let _ = c.simple_query(&format!("DROP TABLE IF EXISTS sheaf_lab_{m}"));
    }
    result
}

fn measure(c: &mut Client, methods: &[&str], opts: &DbLabOptions) -> Result<Vec<DbLabRow>> {
    let user = opts.table.as_deref().map(|t| shape_of(c, t)).transpose()?;
    let mut raw: Vec<(String, u64, f64, f64, f64)> = Vec::new();
    let mut n_rows = i64::from(opts.rows);
    for m in methods {
        let t = format!("sheaf_lab_{m}");
        let set_method = |col: &str| match *m {
            "none" => format!("ALTER TABLE {t} ALTER COLUMN {col} SET STORAGE EXTERNAL"),
            other => format!("ALTER TABLE {t} ALTER COLUMN {col} SET COMPRESSION {other}"),
        };
        let (scan_sql, seek_sql, update_sql) = match &user {
            Some(shape) => {
                let src = &shape.source;
                // A copy of the user's rows, with a key of our own for the seeks and updates.
                c.batch_execute(&format!("DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (LIKE {src}); ALTER TABLE {t} ADD COLUMN sheaf_id bigint"))
                    .map_err(err("creating the tables"))?;
                for col in &shape.columns {
                    c.batch_execute(&set_method(col)).map_err(err("setting the compression"))?;
                }
                c.batch_execute(&format!(
                    "INSERT INTO {t} SELECT s.*, row_number() OVER () FROM (SELECT * FROM {src} LIMIT {}) s; ALTER TABLE {t} ADD PRIMARY KEY ({})",
                    opts.rows, shape.key
                ))
                .map_err(err(&format!("copying {src}")))?;
                n_rows = c.query_one(&format!("SELECT count(*) FROM {t}"), &[]).map_err(err("counting"))?.get(0);
                if n_rows == 0 {
                    return Err(Error::invalid(format!("{src} is empty: nothing for the lab to measure")));
                }
                (
                    format!("SELECT sum(length(x::text))::int8 FROM {t} x"),
                    format!("SELECT length(x::text) FROM {t} x WHERE {} = $1::int8", shape.key),
                    format!("UPDATE {t} SET {} WHERE {} = $1::int8", shape.update_set, shape.key),
                )
            }
            None => {
                c.batch_execute(&format!("DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int8 PRIMARY KEY, n int NOT NULL, payload text)")).map_err(err("creating the tables"))?;
                c.batch_execute(&set_method("payload")).map_err(err("setting the compression"))?;
                // Wide text like a log or a comments column: words from a small vocabulary,
                // numbers and a short digest per line, about 2.3 KB a row, so TOASTed, and
                // compressed where the method says.
                c.batch_execute(&format!(
                    "INSERT INTO {t} SELECT g, g, (SELECT string_agg('order ' || ((g * 31 + k * 17) % 5000) || ' shipped via ' \
                     || (ARRAY['AIR', 'RAIL', 'TRUCK', 'SHIP', 'MAIL'])[1 + (g + k) % 5] || ' ref ' || left(md5((g * 40 + k)::text), 8), '; ') \
                     FROM generate_series(1, 60) k) FROM generate_series(1, {}) g",
                    opts.rows
                ))
                .map_err(err("filling the tables"))?;
                // Change one character in place: the value is detoasted, decompressed, changed and
                // compressed again (n is NOT NULL int, as in the seed, and moves along).
                (
                    format!("SELECT sum(length(payload))::int8 FROM {t}"),
                    format!("SELECT length(payload) FROM {t} WHERE id = $1::int8"),
                    format!("UPDATE {t} SET payload = overlay(payload placing 'x' from 40 for 1), n = n + 1 WHERE id = $1::int8"),
                )
            }
        };
        c.batch_execute(&format!("VACUUM ANALYZE {t}")).map_err(err("vacuuming the tables"))?;
        let size: i64 = c.query_one(&format!("SELECT pg_total_relation_size('{t}')"), &[]).map_err(err("sizing"))?.get(0);
        c.query_one(&scan_sql, &[]).map_err(err("warming the cache"))?;
        let seek = c.prepare(&seek_sql).map_err(err("preparing"))?;
        let update = c.prepare(&update_sql).map_err(err("preparing"))?;
        let (mut scans, mut seeks, mut updates) = (Vec::new(), Vec::new(), Vec::new());
        let mut x: u64 = 0x5eed;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n_rows.max(1) as u64) as i64 + 1
        };
        for _ in 0..opts.repeat.max(1) {
            let t0 = Instant::now();
            c.query_one(&scan_sql, &[]).map_err(err("scanning"))?;
            scans.push(t0.elapsed().as_secs_f64());
            for (statement, what, out) in [(&seek, "seeking", &mut seeks), (&update, "updating", &mut updates)] {
                let mut lat = Vec::with_capacity(opts.accesses);
                for _ in 0..opts.accesses {
                    let id = next();
                    let t0 = Instant::now();
                    c.execute(statement, &[&id]).map_err(err(what))?;
                    lat.push(t0.elapsed().as_secs_f64());
                }
                out.push(median(lat));
            }
        }
        raw.push((m.to_string(), size as u64, median(scans), median(seeks), median(updates)));
    }
    let base = raw.first().cloned().ok_or_else(|| Error::invalid("no storage method to measure"))?;
    Ok(raw
        .into_iter()
        .map(|(method, size, scan, seek, update)| DbLabRow {
            method,
            size_bytes: size,
            ratio: base.1 as f64 / size as f64,
            scan_ms: scan * 1e3,
            scan_x: scan / base.2,
            seek_us: seek * 1e6,
            seek_x: seek / base.3,
            update_us: update * 1e6,
            update_x: update / base.4,
        })
        .collect())
}

/// The seed's table for the database lab.
pub fn table(rows: &[DbLabRow]) -> String {
    let mut out = format!("{:<6} {:>10} {:>6} {:>10} {:>7} {:>10} {:>7} {:>10} {:>9}\n", "TOAST", "size", "ratio", "scan", "scan ×", "seek", "seek ×", "update", "update ×");
    for r in rows {
        out.push_str(&format!(
            "{:<6} {:>10} {:>6.2} {:>8.1}ms {:>7.2} {:>8.1}µs {:>7.2} {:>8.1}µs {:>9.2}\n",
            r.method,
            sheaf_core::size::format_size(r.size_bytes),
            r.ratio,
            r.scan_ms,
            r.scan_x,
            r.seek_us,
            r.seek_x,
            r.update_us,
            r.update_x
        ));
    }
    out
}
