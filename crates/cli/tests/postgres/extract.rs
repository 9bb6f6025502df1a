//! `sheaf extract`: a relation's files and a single page out of a backup, byte for byte what the
//! stopped source holds for a static table, reading a small share of the set.

use super::cluster::{run, sheaf, stderr, Cluster};

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
    let o = run(sheaf().args(["extract", stripe.to_str().unwrap(), "--relation", "public.orders", "--database", "shop", "--block", &block.to_string(), "--to", out.to_str().unwrap(), "--json"]));
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
