//! `sheaf init`: a repository for a cluster.

use sheaf_core::size::format_size;
use sheaf_core::storage::LockMode;
use sheaf_core::text::shell_quote;
use sheaf_core::Error;
use sheaf_pg::repo::meta::RepoLock;

use crate::args::InitArgs;
use crate::context::Context;

/// Run it.
///
/// # Errors
/// No repository given, a cluster that cannot be reached, a place that is not empty.
pub fn run(ctx: &Context, a: InitArgs) -> Result<(), Error> {
    if let Some(url) = a.url.clone().filter(|u| sheaf_mariadb::url::is_url(u)) {
        return init_mariadb(ctx, &a, &url);
    }
    let url = ctx.pg_url(a.url.clone())?;
    let repos = ctx.repos_to_write()?;
    let lock = a.lock.map(|days| RepoLock { days, mode: a.lock_mode });
    for repo in &repos {
        let created = sheaf_pg::repo::meta::init(repo, &url, lock)?;
        let meta = created.meta();
        say!(
            "created {}{}repository {} for cluster {} (PostgreSQL {}, {} WAL segments)",
            if repo.keys().is_some() { "encrypted (AES-256-GCM) " } else { "" },
            if meta.lock.is_some() { "locked " } else { "" },
            repo.display(),
            meta.system_identifier,
            meta.server_version,
            format_size(meta.wal_segment_size)
        );
        if let Some(l) = &meta.lock {
            say!(
                "every object written to it is locked for {} days ({} mode): until then nobody{} can delete or overwrite it; expire leaves locked backups and WAL in place",
                l.days,
                l.mode,
                if l.mode == LockMode::Governance { " without s3:BypassGovernanceRetention" } else { "" }
            );
        }
    }
    if repos.iter().any(|r| r.keys().is_some()) {
        say!("keep the key or passphrase safe and apart from the repository: without it nothing in it can be read; archive_command and restores need it too. A second key (`sheaf key add`) kept elsewhere is a spare");
    }
    // Shell-quoted, so that a URL's `&` or a path's space pastes as it reads; the archive_command
    // is a PostgreSQL string literal, its quotes doubled.
    let flags: String = repos.iter().map(|r| format!(" --repo {}", shell_quote(r.display()))).collect();
    // An encrypted repository: archive_command needs the same secret, by the same flag (a file
    // by its absolute path, which the server's user must be able to read), never the secret.
    let encrypted = repos.iter().any(|r| r.keys().is_some());
    let secret: String = match ctx.key_flags() {
        Some(f) if encrypted => f.iter().map(|x| format!(" {}", shell_quote(x))).collect(),
        _ => String::new(),
    };
    if encrypted && ctx.key_flags().is_none() {
        say!("the passphrase came from SHEAF_PASSPHRASE: the server's archive_command needs it in its environment too, or give it --passphrase-file FILE (readable by the server's user)");
    } else if encrypted {
        say!("archive_command carries the secret's file or command (not the secret): the server's user must be able to read or run it");
    }
    let archive = format!("sheaf wal-push %p{flags}{secret}").replace('\'', "''");
    say!(
        "next: archive_command = '{archive}' and archive_mode = on, then sheaf backup{}{flags}{secret}",
        a.url.as_deref().map(|u| format!(" {}", shell_quote(&sheaf_pg::connect::session::redact(u)))).unwrap_or_default()
    );
    Ok(())
}

/// A repository for a MariaDB server: its full backups, no WAL.
fn init_mariadb(ctx: &Context, a: &InitArgs, url: &str) -> Result<(), Error> {
    let repos = ctx.repos_to_write()?;
    let lock = a.lock.map(|days| RepoLock { days, mode: a.lock_mode });
    for repo in &repos {
        let created = sheaf_mariadb::repo::init(repo, url, lock)?;
        let meta = created.meta();
        say!(
            "created {}{}repository {} for MariaDB server {} ({})",
            if repo.keys().is_some() { "encrypted (AES-256-GCM) " } else { "" },
            if meta.lock.is_some() { "locked " } else { "" },
            repo.display(),
            meta.mariadb.as_ref().map_or("", |m| m.server.as_str()),
            meta.server_version
        );
    }
    if repos.iter().any(|r| r.keys().is_some()) {
        say!("keep the key or passphrase safe and apart from the repository: without it nothing in it can be read; restores need it too. A second key (`sheaf key add`) kept elsewhere is a spare");
    }
    let flags: String = repos.iter().map(|r| format!(" --repo {}", shell_quote(r.display()))).collect();
    say!("next: sheaf backup {}{flags}", shell_quote(&sheaf_mariadb::url::redact(url)));
    Ok(())
}
