//! TPC-H data (tpchgen) loaded into PostgreSQL with COPY, streamed row by row.

use std::io::Write;

use postgres::{Client, NoTls};
use sheaf_core::{Error, ErrorKind, Result};
use tpchgen::generators as g;

/// The eight tables, in load order, with their DDL.
pub const TABLES: [(&str, &str); 8] = [
    ("region", "r_regionkey int, r_name char(25), r_comment varchar(152)"),
    ("nation", "n_nationkey int, n_name char(25), n_regionkey int, n_comment varchar(152)"),
    ("part", "p_partkey int, p_name varchar(55), p_mfgr char(25), p_brand char(10), p_type varchar(25), p_size int, p_container char(10), p_retailprice numeric(15,2), p_comment varchar(23)"),
    ("supplier", "s_suppkey int, s_name char(25), s_address varchar(40), s_nationkey int, s_phone char(15), s_acctbal numeric(15,2), s_comment varchar(101)"),
    ("partsupp", "ps_partkey int, ps_suppkey int, ps_availqty int, ps_supplycost numeric(15,2), ps_comment varchar(199)"),
    ("customer", "c_custkey int, c_name varchar(25), c_address varchar(40), c_nationkey int, c_phone char(15), c_acctbal numeric(15,2), c_mktsegment char(10), c_comment varchar(117)"),
    ("orders", "o_orderkey bigint, o_custkey int, o_orderstatus char(1), o_totalprice numeric(15,2), o_orderdate date, o_orderpriority char(15), o_clerk char(15), o_shippriority int, o_comment varchar(79)"),
    ("lineitem", "l_orderkey bigint, l_partkey int, l_suppkey int, l_linenumber int, l_quantity numeric(15,2), l_extendedprice numeric(15,2), l_discount numeric(15,2), l_tax numeric(15,2), l_returnflag char(1), l_linestatus char(1), l_shipdate date, l_commitdate date, l_receiptdate date, l_shipinstruct char(25), l_shipmode char(10), l_comment varchar(44)"),
];

fn db(what: &str, e: postgres::Error) -> Error {
    Error::new(ErrorKind::Source, format!("{what}: {e}"))
}

/// Create the TPC-H tables in the database at `url` and load them at `scale` (1 = about 1 GB of
/// data). Returns each table's row count.
///
/// # Errors
/// Connection or COPY failures.
pub fn load(url: &str, scale: f64, note: &dyn Fn(&str)) -> Result<Vec<(String, i64)>> {
    let mut client = Client::connect(url, NoTls).map_err(|e| db(&format!("connecting to {url}"), e))?;
    let mut counts = Vec::new();
    for (name, cols) in TABLES {
        note(&format!("loading {name}"));
        client.batch_execute(&format!("DROP TABLE IF EXISTS {name}; CREATE TABLE {name} ({cols})")).map_err(|e| db(name, e))?;
        let writer = client.copy_in(&format!("COPY {name} FROM STDIN WITH (FORMAT text, DELIMITER '|')")).map_err(|e| db(&format!("COPY {name}"), e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, writer);
        let mut line = String::new();
        let mut rows = 0i64;
        let mut put = |row: &dyn std::fmt::Display| -> Result<()> {
            use std::fmt::Write as _;
            line.clear();
            let _ = write!(line, "{row}");
            // tpchgen writes TBL rows, which end with a delimiter COPY would read as a column.
            let body = line.strip_suffix('|').unwrap_or(&line);
            w.write_all(body.as_bytes()).and_then(|_| w.write_all(b"\n")).map_err(|e| Error::io(ErrorKind::Io, format!("COPY {name}"), e))?;
            rows += 1;
            Ok(())
        };
        match name {
            "region" => g::RegionGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "nation" => g::NationGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "part" => g::PartGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "supplier" => g::SupplierGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "partsupp" => g::PartSuppGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "customer" => g::CustomerGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            "orders" => g::OrderGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
            _ => g::LineItemGenerator::new(scale, 1, 1).iter().try_for_each(|r| put(&r))?,
        }
        let writer = w.into_inner().map_err(|e| Error::io(ErrorKind::Io, format!("COPY {name}"), e.into_error()))?;
        writer.finish().map_err(|e| db(&format!("COPY {name}"), e))?;
        counts.push((name.to_string(), rows));
    }
    client.batch_execute("CHECKPOINT").map_err(|e| db("CHECKPOINT", e))?;
    Ok(counts)
}

/// Each TPC-H table's row count in the database at `url`.
///
/// # Errors
/// Connection or query failures.
pub fn counts(url: &str) -> Result<Vec<(String, i64)>> {
    let mut client = Client::connect(url, NoTls).map_err(|e| db(&format!("connecting to {url}"), e))?;
    TABLES
        .iter()
        .map(|(name, _)| {
            let r = client.query_one(&format!("SELECT count(*) FROM {name}"), &[]).map_err(|e| db(name, e))?;
            Ok((name.to_string(), r.get::<_, i64>(0)))
        })
        .collect()
}
