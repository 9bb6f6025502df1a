//! The `sheaf` binary without a database, by concept: what it says (help, reports, values and
//! their errors, the catalog) here; a set's stripes refused ([`stripes`]), the machine's faults
//! ([`faults`]), bench and lab ([`bench`]), secrets and certificates ([`secrets`]). Each case
//! checks the exit code, that the message names what is at fault, and that nothing is left
//! looking complete.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{assert_fails, catalog, s, sheaf, stderr, stdout, SHEAF};

mod bench;
mod faults;
mod operate;
mod package;
mod secrets;
mod stripes;

/// The catalog's runs whose stripes include `stripe`.
fn runs_with(stripe: &Path) -> Vec<serde_json::Value> {
    let o = run(&["list", "--json", "--limit", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let all: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    all.into_iter().filter(|r| r["stripes"].as_array().unwrap().iter().any(|x| x.as_str() == Some(s(stripe)))).collect()
}

/// `sheaf ARGS`, run to the end.
fn run(args: &[&str]) -> Output {
    super::common::run(sheaf().args(args))
}

/// A small source tree and a pristine 3-stripe backup of it.
struct Fixture {
    dir: tempfile::TempDir,
    src: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 11).unwrap();
        Fixture { dir, src }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Back up into folder `rel` as `b_0.sheaf .. b_{n-1}.sheaf`.
    fn backup(&self, rel: &str, n: usize) -> Vec<PathBuf> {
        let d = self.path(rel);
        fs::create_dir_all(&d).unwrap();
        let stripes: Vec<PathBuf> = (0..n).map(|k| d.join(format!("b_{k}.sheaf"))).collect();
        let mut args = vec!["backup".to_string(), s(&self.src).to_string(), "--transfer-size".into(), "64KiB".into()];
        for p in &stripes {
            args.push("--to".into());
            args.push(s(p).into());
        }
        let o = sheaf().args(&args).output().unwrap();
        assert!(o.status.success(), "backup failed: {}", stderr(&o));
        stripes
    }
}

/// A failed restore leaves nothing that looks complete: no target, an empty one, or one marked.
fn assert_not_complete(target: &Path) {
    if !target.exists() {
        return;
    }
    let items: Vec<_> = fs::read_dir(target).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(items.is_empty() || target.join(sheaf_core::restore::INCOMPLETE_MARKER).exists(), "failed restore left {} looking complete: {items:?}", target.display());
}

#[test]
fn help_teaches_flags_examples_and_exit_codes() {
    let o = run(&["backup", "--help"]);
    let out = stdout(&o);
    for n in ["--transfer-size", "--buffer-count", "--compression", "nul", "Examples", "MAXTRANSFERSIZE"] {
        assert!(out.contains(n), "backup --help lacks {n}");
    }
    assert!(stdout(&run(&["--help"])).contains("Exit codes"));
}

#[test]
fn completions_and_man_pages_come_from_the_same_flags_as_help() {
    let dir = tempfile::tempdir().unwrap();
    // bash: the script, sourced, completes a command's name and its flags (bash calls the
    // function with the command, the word being completed and the one before).
    let o = run(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let script = dir.path().join("sheaf.bash");
    fs::write(&script, &o.stdout).unwrap();
    let complete = |words: &str| {
        let probe = format!("source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _sheaf sheaf \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"", script.display());
        let o = Command::new("bash").args(["--norc", "-c", &probe]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).lines().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(complete("sheaf res"), ["restore"]);
    assert!(complete("sheaf restore --stand").contains(&"--standby".to_string()), "{:?}", complete("sheaf restore --stand"));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success() && stdout(&o).contains("wal-push") && stdout(&o).contains("--primary-conninfo"), "{shell}: {}", stderr(&o));
    }
    assert_fails(&run(&["completions", "tcsh"]), 2, &["tcsh", "bash"]);

    // man: a page per command and per command of a command, as `man` renders them.
    let pages = dir.path().join("man1");
    let o = run(&["man", "--to", s(&pages)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&run(&["--help"]));
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A description's wrapped lines are indented further than the names.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 20, "{help}");
    for c in &commands {
        assert!(pages.join(format!("sheaf-{c}.1")).exists(), "no page for {c}");
    }
    assert!(pages.join("sheaf.1").exists() && pages.join("sheaf-key-add.1").exists());
    let shown = Command::new("man").args(["-P", "cat", "-l"]).arg(pages.join("sheaf-restore.1")).env("MANWIDTH", "120").env("LC_ALL", "C").output().unwrap();
    let text = stdout(&shown);
    assert!(shown.status.success() && text.contains("sheaf-restore") && text.contains("--standby") && text.contains("--primary-conninfo"), "{text}{}", stderr(&shown));
}

#[test]
fn config_lines_up_its_columns() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("sheaf.toml");
    fs::write(&conf, "compression = \"lz4\"\nretention-full = 3\n").unwrap();
    let o = run(&["--config", s(&conf), "config"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().skip(1).filter(|l| !l.starts_with("AWS_")).collect();
    let width = rows.iter().map(|r| r.split_whitespace().next().unwrap().len()).max().unwrap();
    // The value column starts at one place on every row, and what follows it at another.
    let mut third = std::collections::BTreeSet::new();
    for r in &rows {
        let (mark, rest) = (&r[width..width + 3], &r[width + 3..]);
        match mark {
            " = " => third.insert(rest.find(" from ").unwrap_or_else(|| panic!("{r}"))),
            "   " if rest.starts_with("(not set)") => third.insert(rest.find(" (").unwrap_or_else(|| panic!("{r}"))),
            _ => panic!("misaligned: {r:?} (names {width} wide)\n{out}"),
        };
    }
    assert_eq!(third.len(), 1, "the third column starts at one place: {out}");
    assert!(out.contains("lz4") && out.contains("retention-full"), "{out}");
}

#[test]
fn summary_and_json_report_what_a_dba_needs() {
    let f = Fixture::new();
    let a = f.path("a.sheaf");
    let b = f.path("b.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&a), "--to", s(&b), "-c", "lz4", "--transfer-size", "64KiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().next().unwrap();
    assert!(
        line.starts_with("processed ") && line.contains(" pages (") && line.contains(" MiB/s), wrote ") && line.contains("(ratio ") && line.ends_with("to 2 stripes"),
        "{line}"
    );
    assert!(out.contains("memory: "), "{out}");

    let o = run(&["backup", s(&f.src), "--to", "nul", "--json", "-c", "deflate:1", "--buffer-count", "9", "--label", "nightly"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for k in ["bytes_read", "bytes_written", "seconds", "stripes", "codec", "level", "transfer_size", "buffer_count", "memory_budget_bytes", "files", "backup_id"] {
        assert!(v.get(k).is_some(), "--json lacks {k}: {v}");
    }
    assert_eq!(v["codec"], "deflate");
    assert_eq!(v["level"], 1);
    assert_eq!(v["buffer_count"], 9);
    assert_eq!(v["memory_budget_bytes"], 9 * 1024 * 1024);
    assert_eq!(v["label"], "nightly");

    let o = run(&["verify", s(&a), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["stripes"], 2);
    let out = f.path("out");
    let o = run(&["restore", s(&b), "--to", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &out).unwrap();
}

#[test]
fn unknown_codec_and_out_of_range_values_exit_2() {
    let f = Fixture::new();
    let t = f.path("x.sheaf");
    for (args, needle) in [
        (vec!["-c", "brotli"], "unknown compression 'brotli'"),
        (vec!["-c", "zstd:30"], "-7..22"),
        (vec!["-c", "deflate:13"], "0..12"),
        (vec!["--transfer-size", "32MiB"], "64KiB .. 16MiB"),
        (vec!["--transfer-size", "lots"], "is not a size"),
        (vec!["--buffer-count", "2", "--threads", "4"], "--buffer-count 5"),
        (vec!["--to", "nul"], "nul cannot be mixed with file targets"),
    ] {
        let mut a = vec!["backup", s(&f.src), "--to", s(&t)];
        a.extend(args);
        assert_fails(&run(&a), 2, &[needle]);
        assert!(!t.exists() && !f.path("x.sheaf.partial").exists());
    }
}

#[test]
fn the_catalog_records_every_run_and_failures_as_failed() {
    let f = Fixture::new();
    let a = f.path("cat_a.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&a), "-c", "lz4", "--label", "nightly", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(run(&["verify", s(&a)]).status.success());
    assert!(run(&["restore", s(&a), "--to", s(&f.path("cat_out"))]).status.success());
    let runs = runs_with(&a);
    let ops: Vec<(&str, &str)> = runs.iter().map(|r| (r["operation"].as_str().unwrap(), r["status"].as_str().unwrap())).collect();
    assert_eq!(ops, vec![("restore", "complete"), ("verify", "complete"), ("backup", "complete")], "newest first");
    let b = &runs[2];
    assert_eq!(b["backup_id"], report["backup_id"]);
    assert_eq!(b["label"], "nightly");
    assert_eq!(b["compression"], "lz4");
    assert_eq!(b["bytes_read"], report["bytes_read"]);
    assert!(b["user_cpu_seconds"].as_f64().is_some() && b["peak_rss_bytes"].as_i64().unwrap() > 0);
    assert_eq!(runs[1]["backup_id"], report["backup_id"], "verify knows which backup it read");

    let o = run(&["show", &b["id"].to_string(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["details"]["files"], report["files"]);
    // The backup's set id, as the backup printed it, shows the same run.
    let by_set: serde_json::Value = serde_json::from_slice(&run(&["show", report["backup_id"].as_str().unwrap(), "--json"]).stdout).unwrap();
    assert_eq!(by_set["id"], b["id"], "{by_set}");
    let o = run(&["show", "999999999"]);
    assert_eq!(o.status.code(), Some(7), "not there: {}", stderr(&o));
    assert!(stderr(&o).contains("no run and no backup 999999999"), "{}", stderr(&o));

    // A failed run is recorded as failed, with its error.
    let missing = std::path::PathBuf::from("/nonexistent/sheaf/cat.sheaf");
    assert_eq!(run(&["backup", s(&f.src), "--to", s(&missing)]).status.code(), Some(8));
    let failed = runs_with(&missing);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["status"], "failed");
    assert!(failed[0]["error"].as_str().unwrap().contains("does not exist"));

    // An explicit --catalog wins over SHEAF_CATALOG.
    let other = f.path("other.db");
    assert!(run(&["--catalog", s(&other), "verify", s(&a)]).status.success());
    assert!(other.exists());
}

/// `--max-rate` on backup, verify and restore: the result is the same tree, a throttled backup
/// takes at least its bytes' worth of time at the rate (a lower bound set by sleeping, not a speed
/// claim), and a rate that cannot work is named.
#[test]
fn max_rate_holds_backup_and_restore_to_a_rate() {
    let f = Fixture::new();
    let stripe = f.path("b.sheaf");
    let t0 = Instant::now();
    let o = run(&["backup", s(&f.src), "--to", s(&stripe), "-c", "none", "--max-rate", "1MiB", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written = fs::metadata(&stripe).unwrap().len();
    // From a standing start, a burst of 0.1 s at most goes unpaid.
    let floor = Duration::from_secs_f64((written as f64 / (1 << 20) as f64 - 0.15).max(0.0));
    assert!(written > 512 << 10, "the fixture is big enough to be held back ({written} bytes)");
    assert!(t0.elapsed() >= floor, "{written} bytes in {:?} at 1 MiB/s", t0.elapsed());
    let o = run(&["verify", s(&stripe), "--max-rate", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = f.path("out");
    let o = run(&["restore", s(&stripe), "--to", s(&out), "--max-rate", "1GiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &out).unwrap();
    assert_fails(&run(&["backup", s(&f.src), "--to", s(&f.path("z.sheaf")), "--max-rate", "0"]), 2, &["--max-rate 0 would never write a byte"]);
    assert_fails(&run(&["restore", s(&stripe), "--to", s(&f.path("o2")), "--max-rate", "fast"]), 2, &["--max-rate", "'fast'", "e.g. 100MiB"]);
    assert!(!f.path("z.sheaf").exists() && !f.path("o2").exists(), "nothing started");
}

/// `-c auto` reports the levels it chose in the summary, --json and the catalog.
#[test]
fn auto_reports_its_levels_everywhere() {
    let f = Fixture::new();
    let stripe = f.path("auto.sheaf");
    let o = run(&["backup", s(&f.src), "--to", s(&stripe), "-c", "auto"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("auto chose zstd level 1 ("), "{}", stdout(&o));
    let o = run(&["backup", s(&f.src), "--to", s(&f.path("auto2.sheaf")), "-c", "auto", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["compression"], "auto");
    let chunks: u64 = v["auto_levels"].as_object().expect("auto_levels").values().map(|n| n.as_u64().unwrap()).sum();
    assert!(chunks > 0 && chunks <= v["frames"].as_u64().unwrap(), "{v}");
    let runs = runs_with(&stripe);
    let id = runs[0]["id"].to_string();
    let shown = stdout(&run(&["show", &id]));
    assert!(shown.contains("compression: auto") && shown.contains("auto_levels: {\"1\":"), "{shown}");
    assert_fails(&run(&["backup", s(&f.src), "--to", "nul", "-c", "auto:5"]), 2, &["auto takes no level"]);
    let o = run(&["restore", s(&stripe), "--to", s(&f.path("out"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    sheaf_core::datagen::compare_trees(&f.src, &f.path("out")).unwrap();
}

/// A reader that went away (`sheaf list | head`) ends the command quietly with success, as every
/// Unix tool does, instead of a panic about a broken pipe.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = sheaf().arg("list").stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "nothing said: {}", stderr(&o));
}

/// Every duration flag reads the same forms (`8s`, `26h`, or seconds), and what sheaf suggests
/// pastes into a shell as it reads (a URL's `&` quoted).
#[test]
fn durations_read_alike_and_suggestions_are_shell_quoted() {
    for bad in [["check", "postgres://x/y", "--archive-timeout", "8y"], ["check", "postgres://x/y", "--max-age", "0h"]] {
        let o = sheaf().args(bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(bad[2]), "names the flag: {}", stderr(&o));
    }
    let o = sheaf().args(["backup", "/nonexistent", "--to", "nul", "--wal-timeout", "8s", "--agent-timeout", "2m"]).output().unwrap();
    assert_ne!(o.status.code(), Some(2), "8s and 2m are durations: {}", stderr(&o));
}

/// Every file under `a` is under `b` with the same bytes, and no more (a checkout's times differ
/// from those the fixture recorded, so only contents are compared).
fn same_files(a: &Path, b: &Path) {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    let (mut x, mut y) = (Vec::new(), Vec::new());
    walk(a, a, &mut x);
    walk(b, b, &mut y);
    x.sort();
    y.sort();
    assert!(!x.is_empty() && x == y, "{} and {} differ", a.display(), b.display());
}

/// Run `sheaf ARGS` with a 1 MiB tmpfs mounted at `mnt`; its exit status is the result's, and
/// what is left on the tmpfs afterwards is listed at the end of stdout.
fn on_small_tmpfs(mnt: &Path, args: &str) -> Output {
    let script = format!("mount -t tmpfs -o size=1m sheaf-test {m} && {bin} {args}; rc=$?; ls -A {m}; umount {m}; exit $rc", m = s(mnt), bin = SHEAF,);
    with_mounts(&script)
}

/// Run `script` (which may mount) as root, or in a user and mount namespace of its own otherwise.
fn with_mounts(script: &str) -> Output {
    let mut c = if sheaf_core::host::is_root() {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    } else {
        let mut c = Command::new("unshare");
        c.args(["--user", "--map-root-user", "--mount", "sh", "-c", script]);
        c
    };
    c.env("SHEAF_CATALOG", catalog()).output().unwrap()
}
