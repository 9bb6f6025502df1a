//! `sheaf extract`: a relation's files and a single page out of a backup, byte for byte what the
//! stopped source holds for a static table, reading a small share of the set.

use super::cluster::Cluster;
use crate::integration::common::{run, sheaf, stderr};

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_relation_and_one_page_come_out_as_they_were_backed_up() {
    let mut c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE DATABASE shop");
    c.sql("shop", "CREATE TABLE orders AS SELECT g AS id, md5(g::text) AS h, repeat('y', 300) AS pad FROM generate_series(1, 100000) g");
    c.sql("shop", "VACUUM orders");
    c.sql("shop", "CHECKPOINT");
    // Other data, so that the set is much more than the relation.
    c.sql("postgres", "CREATE TABLE filler AS SELECT g, repeat(md5(g::text), 20) AS t FROM generate_series(1, 150000) g");
    let path = c.sql("shop", "SELECT pg_relation_filepath('orders')");
    let blocks: u64 = c.sql("shop", "SELECT pg_relation_size('orders') / 8192").parse().unwrap();
    assert!(blocks > 100);
    let dir = c.base.path().join("x");
    std::fs::create_dir_all(&dir).unwrap();
    let stripe = dir.join("b_1.sheaf");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--to", stripe.to_str().unwrap(), "--to", dir.join("b_2.sheaf").to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    // The lab on the running server's relation, and on the backup's copy of it.
    let lab =
        json(&run(sheaf().args(["lab", "--url", &c.url("shop"), "--relation", "public.orders", "-c", "lz4", "--unit", "8KiB", "--repeat", "1", "--accesses", "50", "--json"])));
    assert_eq!(lab["rows"].as_array().unwrap().len(), 2, "{lab}");
    assert_eq!(lab["sample_bytes"].as_u64().unwrap(), blocks * 8192);
    let lab =
        json(&run(sheaf().args(["lab", stripe.to_str().unwrap(), "--relation", "orders", "-c", "zstd:low", "--unit", "64KiB", "--repeat", "1", "--accesses", "50", "--json"])));
    assert!(lab["rows"][1]["ratio"].as_f64().unwrap() > 1.5, "{lab}");

    // The database lab: TOAST pglz, lz4 and none, each smaller than none where compressed, and
    // its scratch tables gone after.
    let db = json(&run(sheaf().args(["lab", "--db-url", &c.url("postgres"), "--rows", "500", "--repeat", "1", "--accesses", "20", "--json"])));
    let rows = db["database_lab"].as_array().unwrap();
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    // lz4 where the server was built with it (Debian's is; the PyPI wheel's PostgreSQL 18 is not).
    let lz4 = c.query("postgres", "CREATE TEMP TABLE probe (t text COMPRESSION lz4)").is_ok();
    assert_eq!(methods, if lz4 { &["none", "pglz", "lz4"][..] } else { &["none", "pglz"][..] }, "{db}");
    assert!(rows[1..].iter().all(|r| r["ratio"].as_f64().unwrap() > 1.2 && r["update_us"].as_f64().unwrap() > 0.0), "{db}");
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_class WHERE relname LIKE 'sheaf_lab%'"), "0");
    // ... and on the user's own table (orders: its h and pad text columns), copied, not touched.
    let own = json(&run(sheaf().args(["lab", "--db-url", &c.url("shop"), "--relation", "public.orders", "--rows", "3000", "--repeat", "1", "--accesses", "20", "--json"])));
    let rows = own["database_lab"].as_array().unwrap();
    assert_eq!(rows.len(), if lz4 { 3 } else { 2 }, "{own}");
    assert!(rows.iter().all(|r| r["size_bytes"].as_u64().unwrap() > 100_000 && r["update_us"].as_f64().unwrap() > 0.0), "{own}");
    assert_eq!(c.sql("shop", "SELECT count(*) FROM orders"), "100000", "the user's table is only read");
    assert_eq!(c.sql("shop", "SELECT count(*) FROM pg_class WHERE relname LIKE 'sheaf_lab%'"), "0");
    let bad = run(sheaf().args(["lab", "--db-url", &c.url("shop"), "--relation", "nosuch", "--json"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("no table nosuch"), "{}", stderr(&bad));

    // The source, stopped: its files are what a static table's backup holds.
    c.stop();
    let source = std::fs::read(c.data.join(&path)).unwrap();

    let out = dir.join("rel");
    let r = json(&run(sheaf().args(["extract", stripe.to_str().unwrap(), "--relation", "orders", "--to", out.to_str().unwrap(), "--json"])));
    assert_eq!(r["database"], "shop");
    assert_eq!(r["relation"], "public.orders");
    let base = path.rsplit('/').next().unwrap();
    let files: Vec<&str> = r["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(files.contains(&base) && files.contains(&format!("{base}_fsm").as_str()) && files.contains(&format!("{base}_vm").as_str()), "{files:?}");
    assert!(std::fs::read(out.join(base)).unwrap() == source, "the main fork, byte for byte");
    for f in &files {
        let mut src = c.data.join(&path);
        src.set_file_name(f);
        assert!(std::fs::read(out.join(f)).unwrap() == std::fs::read(&src).unwrap(), "{f}");
    }
    let (read, set) = (r["bytes_read"].as_u64().unwrap(), r["set_bytes"].as_u64().unwrap());
    assert!(read * 3 < set, "one relation reads a small share of the set: {read} of {set}");

    // One page: verified, and equal to the source's.
    let block = blocks / 2;
    let out = dir.join("page");
    let o = run(sheaf().args([
        "extract",
        stripe.to_str().unwrap(),
        "--relation",
        "public.orders",
        "--database",
        "shop",
        "--block",
        &block.to_string(),
        "--to",
        out.to_str().unwrap(),
        "--json",
    ]));
    let p = json(&o);
    assert_eq!(p["page"]["checksum"], "ok", "{p}");
    let page = std::fs::read(out.join(format!("{base}.block{block}"))).unwrap();
    assert!(page[..] == source[(block * 8192) as usize..((block + 1) * 8192) as usize], "the page, byte for byte");
    assert!(p["bytes_read"].as_u64().unwrap() <= 2 << 20, "a page reads one frame: {p}");
    let text = run(sheaf().args(["extract", stripe.to_str().unwrap(), "--relation", "orders", "--block", "0", "--to", out.to_str().unwrap()]));
    assert!(String::from_utf8_lossy(&text.stdout).contains("checksum ok"), "{}", String::from_utf8_lossy(&text.stdout));

    // restore --only: the relation's files (every fork) as the source holds them, and the folders
    // above them, nothing else, reading a small share of the set.
    let only = dir.join("only");
    let o = json(&run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", only.to_str().unwrap(), "--only", &format!("{path}*"), "--json"])));
    assert_eq!(o["files"].as_u64().unwrap() as usize, files.len(), "{o}");
    for f in &files {
        let mut src = c.data.join(&path);
        src.set_file_name(f);
        let mut got = only.join(&path);
        got.set_file_name(f);
        assert!(std::fs::read(&got).unwrap() == std::fs::read(&src).unwrap(), "{f}");
    }
    assert_eq!(std::fs::read_dir(&only).unwrap().count(), 1, "only base/ at the top");
    assert!(o["bytes_read"].as_u64().unwrap() * 3 < o["set_bytes"].as_u64().unwrap(), "{o}");

    // Mistakes are named.
    let past = run(sheaf().args(["extract", stripe.to_str().unwrap(), "--relation", "orders", "--block", &(blocks + 5).to_string(), "--to", out.to_str().unwrap()]));
    assert_eq!(past.status.code(), Some(2));
    assert!(stderr(&past).contains(&format!("it had {blocks} blocks")), "{}", stderr(&past));
    let none = run(sheaf().args(["extract", stripe.to_str().unwrap(), "--relation", "nosuch", "--to", out.to_str().unwrap()]));
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("no relation nosuch"), "{}", stderr(&none));
}

/// `--db-include`: a cluster that starts with the chosen database whole, the system ones too, and
/// the others as sparse zeros that can be dropped.
#[test]
fn db_include_restores_a_cluster_that_starts_with_the_others_droppable() {
    let c = Cluster::new(&[], &[]);
    for db in ["d1", "d2", "d3"] {
        c.sql("postgres", &format!("CREATE DATABASE {db}"));
        c.sql(db, "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 50000) g");
        c.sql(db, "CREATE INDEX ON t (id)");
    }
    let dir = c.base.path().join("x");
    std::fs::create_dir_all(&dir).unwrap();
    let stripe = dir.join("b.sheaf");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--to", stripe.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    let oid = |db: &str| c.sql("postgres", &format!("SELECT oid FROM pg_database WHERE datname = '{db}'"));
    let (d2, d3) = (oid("d2"), oid("d3"));

    let bad = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", dir.join("n").to_str().unwrap(), "--db-include", "nosuch"]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("no such database") && stderr(&bad).contains("d2"), "{}", stderr(&bad));

    let data = dir.join("data");
    let full = json(&run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", dir.join("full").to_str().unwrap(), "--json"])));
    let r = json(&run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", data.to_str().unwrap(), "--db-include", "d2", "--json"])));
    assert!(r["bytes_read"].as_u64().unwrap() < full["bytes_read"].as_u64().unwrap(), "the left-out databases are not read: {r}");
    // d3's relation files: their size, no blocks (sparse zeros).
    let mut sizes = 0;
    for e in std::fs::read_dir(data.join(format!("base/{d3}"))).unwrap() {
        let m = e.unwrap().metadata().unwrap();
        sizes += m.len();
        assert_eq!(std::os::unix::fs::MetadataExt::blocks(&m), 0, "sparse");
    }
    assert!(sizes > 1 << 20, "sized as backed up: {sizes}");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let restored = Cluster::over(&data, &c.sock);
    assert_eq!(restored.sql("d2", "SELECT count(*) FROM t"), "50000");
    let amcheck = run(restored.tool("pg_amcheck").args(["--install-missing", "-d", "d2", "-d", "postgres"]));
    assert!(amcheck.status.success(), "pg_amcheck: {}{}", String::from_utf8_lossy(&amcheck.stdout), stderr(&amcheck));
    restored.sql("postgres", "DROP DATABASE d3");
    restored.sql("postgres", "DROP DATABASE d1");
    assert_eq!(restored.sql("postgres", "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database"), "d2,postgres,template0,template1");
    assert!(!data.join(format!("base/{d3}")).exists());
    let d2_blocks: u64 = std::fs::read_dir(data.join(format!("base/{d2}"))).unwrap().map(|e| std::os::unix::fs::MetadataExt::blocks(&e.unwrap().metadata().unwrap())).sum();
    assert!(d2_blocks > 0, "the included database is data, not holes");
}
