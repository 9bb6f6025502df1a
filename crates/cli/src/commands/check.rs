//! `sheaf check`: the backup of record judged for monitoring ([`sheaf_pg::maintain::check`]): the
//! verdict on the first line as monitoring plugins print it, a line per check, and the exit code
//! Nagios and its kin read (0 ok, 1 warning, 2 critical).

use sheaf_pg::maintain::check::{check, CheckOptions, CheckReport, Finding, Status};

use crate::args::CheckArgs;
use crate::context::Context;
use crate::exit::{self, Outcome};

/// Run it; every failure, even to read the configuration, is a finding and an exit code.
pub fn run(ctx: &Context, a: CheckArgs) -> Outcome {
    // The verdict is the exit status, whoever reads the output: `sheaf check | true` (a reader
    // gone) must not turn CRITICAL into 0.
    crate::output::keep_status_when_unread();
    let critical = |check: &'static str, message: String| CheckReport { status: Status::Critical, findings: vec![Finding { check, status: Status::Critical, message }] };
    let mut report = match (ctx.repos(), ctx.pg_url(a.url.clone())) {
        (Ok(repos), Ok(url)) => {
            // The compared repository opens with its own secret, or the one given for --repo.
            let k = a.compare_keys.clone();
            let keys = || {
                crate::context::other_keys(ctx, k.compare_encryption_key_file.clone(), k.compare_passphrase_file.clone(), k.compare_key_command.clone(), "--compare-key-command")
            };
            let compare = match a.compare_repo.as_deref().map(|r| ctx.schemes().and_then(|s| Ok(sheaf_core::repo::Place::at(r, s)?.with_keys(keys()?)))).transpose() {
                Ok(c) => c,
                Err(e) => return Outcome::Status(exit::check_code(report_now(&critical("copy", e.to_string()), a.json))),
            };
            let opts =
                CheckOptions { url, max_age: a.max_age, archive_timeout: a.archive_timeout, max_drill_age: a.max_drill_age, now: sheaf_core::time::now_ms() / 1000, compare };
            check(&repos, &opts)
        }
        (Err(e), _) => critical("repository", e.to_string()),
        // The repository is fine as far as is known: what is missing is the server to check against.
        (Ok(_), Err(e)) => critical("server", format!("{} (check switches a WAL segment on the server and waits for it in the repository)", e.message())),
    };
    // A backup host's certificates for the agent (tls-dir): warned of 30 days before they expire.
    if let Some(dir) = ctx.tls_dir(None) {
        let now = sheaf_core::time::now_ms() / 1000;
        match sheaf_agent::certs::expiring(&dir, now, 30) {
            Ok(w) if w.is_empty() => {
                report.findings.push(Finding { check: "certs", status: Status::Ok, message: format!("the certificates in {} are valid for 30 days or more", dir.display()) })
            }
            Ok(w) => {
                for cert in w {
                    let status = if cert.expired { Status::Critical } else { Status::Warning };
                    report.findings.push(Finding { check: "certs", status, message: cert.message });
                }
            }
            Err(e) => report.findings.push(Finding { check: "certs", status: Status::Warning, message: e.to_string() }),
        }
        report.status = report.findings.iter().map(|f| f.status).max().unwrap_or(Status::Ok);
    }
    Outcome::Status(exit::check_code(report_now(&report, a.json)))
}

/// Print the report (as JSON, with `json`); its status.
fn report_now(report: &CheckReport, json: bool) -> Status {
    if json {
        say!("{}", serde_json::to_value(report).expect("report serialises"));
    } else {
        let worst: Vec<&str> = report.findings.iter().filter(|f| f.status == report.status && f.status != Status::Ok).map(|f| f.message.as_str()).collect();
        let summary = if worst.is_empty() { format!("{} checks passed", report.findings.len()) } else { worst.join("; ") };
        say!("SHEAF {} - {summary}", report.status.word());
        for f in &report.findings {
            say!("{:<8} {:<10} {}", f.status.word(), f.check, f.message);
        }
    }
    report.status
}
