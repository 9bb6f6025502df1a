//! `sheaf extract`: one relation's files, or one 8 KiB page of it, out of a backup, as they were
//! when backed up, reading only the frames that hold them. Page-level forensics: the page comes
//! checked by its frames' checksums and, where the cluster had data checksums, by its own.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use sheaf_core::manifest::EntryKind;
use sheaf_core::whole::WholeFile;
use sheaf_core::{BackupSet, Error, ErrorKind, Result};

use crate::backup::facts::ClusterFacts;
use crate::cluster::checksum::{verify_page, Verdict, PAGE_SIZE};
use crate::cluster::lsn::Lsn;
use crate::connect::catalog::{DatabaseInfo, RelationInfo};

/// Blocks in one segment file of a relation (1 GiB of 8 KiB pages, PostgreSQL's default).
pub const RELSEG_BLOCKS: u64 = 131_072;

/// What to extract.
#[derive(Clone, Debug)]
pub struct ExtractOptions {
    /// `SCHEMA.NAME` or `NAME` (any schema, when only one has it).
    pub relation: String,
    /// The database; by default the one database that has the relation.
    pub database: Option<String>,
    /// One block (page) of the main fork instead of the relation's files.
    pub block: Option<u64>,
    /// The folder to write into (made if missing).
    pub dest: PathBuf,
    /// Asked, it stops at the next chunk, and the file it was writing is not left behind.
    pub stop: sheaf_core::stop::Stop,
}

/// One page's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct PageReport {
    /// Block number in the relation.
    pub block: u64,
    /// The page's LSN.
    pub lsn: Lsn,
    /// `ok`, `new` (all zeros, never written), `recent` (written while the backup ran, so WAL
    /// replay rewrites it; its checksum is not judged), `mismatch`, or `not checked` (the
    /// cluster has no data checksums).
    pub checksum: String,
}

/// What was extracted.
#[derive(Clone, Debug, Serialize)]
pub struct ExtractReport {
    /// The database.
    pub database: String,
    /// `schema.name`.
    pub relation: String,
    /// Its main fork's path in the data directory.
    pub path: String,
    /// Files written.
    pub files: Vec<String>,
    /// Bytes written.
    pub bytes_written: u64,
    /// Bytes read from the stripes.
    pub bytes_read: u64,
    /// Bytes of the whole set, for comparison.
    pub set_bytes: u64,
    /// The page, with `--block`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<PageReport>,
    /// Wall time.
    pub seconds: f64,
}

/// The facts a PostgreSQL backup recorded, its catalogs among them ([`ClusterFacts::databases`]).
///
/// # Errors
/// A set that is not a PostgreSQL backup, or whose facts do not parse.
pub fn catalog(set: &BackupSet) -> Result<ClusterFacts> {
    ClusterFacts::of(set)?.ok_or_else(|| Error::invalid("this backup is of a directory, not of a PostgreSQL cluster: it has no relations to find"))
}

/// Find `relation` (`SCHEMA.NAME` or `NAME`) in `database`, or in the one database that has it.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming what was looked for and where, with the candidates when
/// the name is ambiguous.
pub fn find<'a>(dbs: &'a [DatabaseInfo], relation: &str, database: Option<&str>) -> Result<(&'a DatabaseInfo, RelationInfo)> {
    let (schema, name) = match relation.split_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, relation),
    };
    let in_db =
        |d: &'a DatabaseInfo| d.relations().filter(move |r| r.as_ref().map_or(true, |r| r.name == name && schema.is_none_or(|s| r.schema == s))).map(move |r| r.map(|r| (d, r)));
    let mut found: Vec<(&DatabaseInfo, RelationInfo)> = match database {
        Some(db) => {
            let d = dbs
                .iter()
                .find(|d| d.name == db)
                .ok_or_else(|| Error::invalid(format!("the backup has no database {db}; it has {}", dbs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", "))))?;
            in_db(d).collect::<Result<_>>()?
        }
        None => dbs.iter().flat_map(in_db).collect::<Result<_>>()?,
    };
    if found.len() == 1 {
        return Ok(found.pop().expect("one"));
    }
    match found.as_slice() {
        [] => Err(Error::invalid(format!(
            "no relation {relation} in {} of the backup (names are as the catalogs spell them, e.g. public.orders)",
            database.map_or_else(|| "any database".to_string(), |d| format!("database {d}"))
        ))),
        many => Err(Error::invalid(format!(
            "{relation} is more than one relation: {}; say which with SCHEMA.NAME and --database",
            many.iter().map(|(d, r)| format!("{}.{} in {}", r.schema, r.name, d.name)).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// An entry's path from the data directory (tablespace roots are named `pg_tblspc/OID`).
fn data_path(set: &BackupSet, e: &sheaf_core::manifest::Entry) -> String {
    let root = &set.manifest.roots[e.root as usize].name;
    if root.is_empty() {
        e.path.clone()
    } else if e.path.is_empty() {
        root.clone()
    } else {
        format!("{root}/{}", e.path)
    }
}

/// The files of the relation whose main fork is at `path`: its segments and other forks, as
/// `(entry position, data-directory path)`, in path order.
fn files_of(set: &BackupSet, path: &str) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = set
        .manifest
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::File && !e.vanished)
        .map(|(i, e)| (i as u32, data_path(set, e)))
        .filter(|(_, p)| p == path || p.strip_prefix(path).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('_')))
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The entry holding the first segment of `rel`'s main fork.
///
/// # Errors
/// [`ErrorKind::Incomplete`] when the backup has no such file (the relation was made or rewritten
/// while it ran, or is unlogged).
pub fn main_fork(set: &BackupSet, rel: &RelationInfo) -> Result<u32> {
    files_of(set, &rel.path).into_iter().find(|(_, p)| *p == rel.path).map(|(id, _)| id).ok_or_else(|| missing(rel))
}

fn missing(rel: &RelationInfo) -> Error {
    Error::incomplete(format!(
        "{}.{} ({}) has no file in the backup: it was created or rewritten while the backup ran (WAL replay brings it back), or it is an unlogged relation's",
        rel.schema, rel.name, rel.path
    ))
}

/// Extract the relation (or one page of it) into `opts.dest`, from the newest of `sets` (a chain,
/// oldest first: a full backup alone, or one with the incrementals on it), each byte from the set
/// that gives it.
///
/// # Errors
/// A relation the backup does not record, a block past its end, damage in the frames read
/// ([`ErrorKind::Corrupt`]), writing the destination ([`ErrorKind::Target`]).
pub fn extract(sets: &[&BackupSet], opts: &ExtractOptions) -> Result<ExtractReport> {
    let t0 = Instant::now();
    let set = *sets.last().ok_or_else(|| Error::invalid("no backup set to extract from"))?;
    let facts = catalog(set)?;
    let (db, rel) = find(facts.databases()?, &opts.relation, opts.database.as_deref())?;
    let files = files_of(set, &rel.path);
    if files.is_empty() {
        return Err(missing(&rel));
    }
    std::fs::create_dir_all(&opts.dest).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", opts.dest.display()), e))?;
    let base = rel.path.rsplit('/').next().unwrap_or(&rel.path).to_string();
    let mut report = ExtractReport {
        database: db.name.clone(),
        relation: format!("{}.{}", rel.schema, rel.name),
        path: rel.path.clone(),
        files: Vec::new(),
        bytes_written: 0,
        bytes_read: 0,
        set_bytes: sets.iter().map(|s| s.stored_bytes()).sum(),
        page: None,
        seconds: 0.0,
    };
    match opts.block {
        Some(block) => {
            let seg = block / RELSEG_BLOCKS;
            let seg_path = if seg == 0 { rel.path.clone() } else { format!("{}.{seg}", rel.path) };
            let id = files.iter().find(|(_, p)| *p == seg_path).map(|(i, _)| *i);
            let mut page = Box::new([0u8; PAGE_SIZE]);
            let offset = (block % RELSEG_BLOCKS) * PAGE_SIZE as u64;
            let Some(id) = id.filter(|&i| set.manifest.entries[i as usize].size >= offset + PAGE_SIZE as u64) else {
                let blocks: u64 = files
                    .iter()
                    .filter(|(_, p)| *p == rel.path || p.strip_prefix(&rel.path).is_some_and(|r| r.starts_with('.')))
                    .map(|(i, _)| set.manifest.entries[*i as usize].size / PAGE_SIZE as u64)
                    .sum();
                return Err(Error::invalid(format!("block {block} is past the end of {}: it had {blocks} blocks when backed up", report.relation)));
            };
            let mut f = sheaf_core::chain_file(sets, id)?;
            f.read_at(offset, &mut page[..])?;
            report.bytes_read = f.bytes_read();
            let header = crate::cluster::checksum::page_facts(&page);
            let verdict = match verify_page(&page, block as u32, facts.start_lsn) {
                _ if !facts.data_checksums => "not checked".to_string(),
                Verdict::Ok => "ok".into(),
                Verdict::New => "new".into(),
                Verdict::Recent => "recent".into(),
                Verdict::Mismatch { stored, computed } => format!("mismatch (the page says {stored:#06x}, its bytes give {computed:#06x})"),
            };
            let name = format!("{base}.block{block}");
            sheaf_core::whole::write_whole(&opts.dest.join(&name), &page[..])?;
            report.files.push(name);
            report.bytes_written = PAGE_SIZE as u64;
            report.page = Some(PageReport { block, lsn: header.lsn, checksum: verdict });
        }
        None => {
            let mut buf = vec![0u8; set.stripes[0].header.transfer_size as usize];
            for (id, path) in &files {
                let name = path.rsplit('/').next().unwrap_or(path).to_string();
                let dest = opts.dest.join(&name);
                let mut f = sheaf_core::chain_file(sets, *id)?;
                let mut out = WholeFile::create(&dest)?;
                let (mut at, size, mut crc) = (0u64, f.size(), 0u32);
                while at < size {
                    opts.stop.check()?;
                    let n = (size - at).min(buf.len() as u64) as usize;
                    f.read_at(at, &mut buf[..n])?;
                    crc = crc32c::crc32c_append(crc, &buf[..n]);
                    out.write_all(&buf[..n]).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", dest.display()), e))?;
                    at += n as u64;
                }
                if let Some(want) = set.manifest.entries[*id as usize].crc32c {
                    if want != crc {
                        return Err(Error::corrupt(format!("{path}: its bytes do not match the file's checksum in the manifest")));
                    }
                }
                // Put in place only once checked: a damaged file never appears under its name.
                out.commit()?;
                report.bytes_read += f.bytes_read();
                report.bytes_written += size;
                report.files.push(name);
            }
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(schema: &str, name: &str, path: &str) -> RelationInfo {
        RelationInfo { schema: schema.into(), name: name.into(), kind: "r".into(), path: path.into() }
    }

    fn pack(rels: &[RelationInfo]) -> String {
        let mut s = String::new();
        for r in rels {
            crate::connect::catalog::pack_relation(&mut s, r);
        }
        s
    }

    #[test]
    fn a_packed_list_reads_back_whatever_the_names_hold() {
        let odd = [rel("we\tird", "a\nb\\c\r", "base/5/9"), rel("public", "plain", "base/5/10"), rel("", "\\t", "base/5/11")];
        let d = DatabaseInfo { name: "a".into(), oid: 5, tablespace: 1663, connectable: true, relations: Vec::new(), packed: pack(&odd) };
        assert_eq!(d.relations().collect::<Result<Vec<_>>>().unwrap(), odd);
        assert_eq!(find(std::slice::from_ref(&d), "we\tird.a\nb\\c\r", None).unwrap().1.path, "base/5/9");
        let bad = DatabaseInfo { packed: "only\tthree\tfields\n".into(), ..d.clone() };
        assert!(bad.relations().next().unwrap().unwrap_err().to_string().contains("does not parse"));
        let bad = DatabaseInfo { packed: "a\\x\tb\tr\tp\n".into(), ..d };
        assert!(bad.relations().next().unwrap().is_err(), "an unknown escape");
    }

    #[test]
    fn relations_are_found_by_name_and_ambiguity_is_named() {
        let dbs = vec![
            DatabaseInfo {
                name: "a".into(),
                oid: 5,
                tablespace: 1663,
                connectable: true,
                relations: vec![rel("public", "t", "base/5/1"), rel("x", "t", "base/5/2")],
                packed: String::new(),
            },
            DatabaseInfo { name: "b".into(), oid: 6, tablespace: 1663, connectable: true, relations: Vec::new(), packed: pack(&[rel("public", "u", "base/6/3")]) },
        ];
        assert_eq!(find(&dbs, "u", None).unwrap().1.path, "base/6/3");
        assert_eq!(find(&dbs, "x.t", None).unwrap().1.path, "base/5/2");
        let e = find(&dbs, "t", None).unwrap_err().to_string();
        assert!(e.contains("public.t in a") && e.contains("x.t in a"), "{e}");
        assert!(find(&dbs, "u", Some("a")).unwrap_err().to_string().contains("database a"));
        assert!(find(&dbs, "u", Some("zz")).unwrap_err().to_string().contains("has no database zz"));
    }
}
