//! `sheaf agent`: make the certificates, or serve the cluster's files to backup hosts.

use std::sync::Arc;

use sheaf_agent::{certs, Agent, AgentConfig};
use sheaf_core::stop::Beat;
use sheaf_core::Error;

use crate::args::AgentArgs;
use crate::context::Context;
use crate::settings::{self, Key};

/// Run it.
///
/// # Errors
/// Certificates that exist already, a missing setting, the agent's own.
pub fn run(ctx: &Context, a: AgentArgs) -> Result<(), Error> {
    if let (Some(dir), Some(name)) = (&a.init_certs, &a.add_client) {
        let added = certs::add_client(dir, name, &a.grant)?;
        say!("issued {name}'s certificate with the CA in {}: {}", dir.display(), added.dir.display());
        say!("  copy that folder ({}, {}, {}) to {name} and give it as --tls-dir (or tls-dir in its config file)", certs::CA, certs::CLIENT, certs::CLIENT_KEY);
        if !a.grant.is_empty() {
            say!("  granted:     repositories {} (its --repo is sheaf://THIS_HOST:PORT/{})", a.grant.join(", "), a.grant[0]);
        }
        say!("  allowed:     {} now lists it (SHA-256 {}); a running agent admits it after `kill -HUP` of its process", dir.join(certs::ALLOWED).display(), added.fingerprint);
        return Ok(());
    }
    if let Some(dir) = &a.init_certs {
        let made = certs::init(dir, &a.name)?;
        say!("made a CA and certificates in {}", dir.display());
        say!("  agent:       {} and {} (names: {})", certs::SERVER, certs::SERVER_KEY, made.server_names.join(", "));
        say!("  backup host: {} and {}, with {} (copy these three to it)", certs::CLIENT, certs::CLIENT_KEY, certs::CA);
        say!("  allowed:     {} (SHA-256 {})", certs::ALLOWED, made.client_fingerprint);
        say!("then: sheaf agent --listen 0.0.0.0:7400 --pgdata DATA_DIR --tls-dir {}", dir.display());
        return Ok(());
    }
    fn need<T: Clone>(ctx: &Context, key: &Key<T>, flag: Option<T>, what: &str) -> Result<T, Error> {
        ctx.settings.value(key, flag).ok_or_else(|| Error::invalid(format!("sheaf agent needs {what} (or {} in the config file)", key.name)))
    }
    let serve: Vec<String> = if a.serve_repo.is_empty() {
        ctx.settings.value(&settings::AGENT_SERVE_REPO, None).map(|v| v.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()).unwrap_or_default()
    } else {
        a.serve_repo.clone()
    };
    let mut repos = Vec::new();
    for item in &serve {
        let Some((name, path)) = item.split_once('=') else {
            return Err(Error::invalid(format!("--serve-repo {item}: write NAME=PATH (the name clients give in sheaf://HOST:PORT/NAME, and the repository's folder here)")));
        };
        repos.push((name.trim().to_string(), std::path::PathBuf::from(path.trim())));
    }
    let pgdata = ctx.settings.value(&settings::AGENT_PGDATA, a.pgdata);
    if pgdata.is_none() && repos.is_empty() {
        return Err(Error::invalid(
            "sheaf agent needs --pgdata DIR (a cluster's files, for a backup host to read; or agent-pgdata in the config file) or --serve-repo NAME=PATH (a repository, for database hosts to use; or agent-serve-repo), or both",
        ));
    }
    let config = AgentConfig {
        listen: need(ctx, &settings::AGENT_LISTEN, a.listen, "--listen ADDR:PORT")?,
        pgdata,
        repos: sheaf_agent::repos::ServedRepos::new(&repos, Arc::new(LayoutGuard))?,
        tls_dir: need(ctx, &settings::TLS_DIR, a.tls_dir, "--tls-dir DIR (made by sheaf agent --init-certs DIR)")?,
        max_connections: a.max_connections,
        threads: a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let agent = Agent::bind(&config)?;
    // SIGHUP reads allowed-clients again (a flag the agent polls; nothing else runs in the handler).
    signal_hook::flag::register(signal_hook::consts::SIGHUP, agent.reload_flag()).map_err(|e| Error::io(sheaf_core::ErrorKind::Io, "cannot install the SIGHUP handler", e))?;
    let mut what = Vec::new();
    if let Some(p) = &config.pgdata {
        what.push(format!("{} (read-only)", p.display()));
    }
    what.extend(config.repos.iter().map(|(name, path)| format!("repository {name} ({})", path.display())));
    let serving = format!("serving {} on {}, to clients in {}", what.join(", "), agent.local_addr()?, config.tls_dir.join(certs::ALLOWED).display());
    crate::log::note("sheaf agent", format_args!("{serving} (kill -HUP {} reads it again)", std::process::id()));
    let log = Arc::new(|m: &str| {
        crate::log::note("sheaf agent", m);
        crate::notify::status(m);
    });
    let beat = Beat::default();
    crate::notify::watchdog(beat.clone(), ctx.interrupt.stop().clone());
    crate::notify::ready(&serving);
    let r = agent.serve(ctx.interrupt.stop().clone(), log, beat);
    crate::notify::stopping();
    r
}

/// What a database host granted `repos=` may change in a repository the agent serves: the
/// repository layout's rule ([`sheaf_pg::repo::paths::kept_from_clients`]).
struct LayoutGuard;

impl sheaf_agent::repos::Guard for LayoutGuard {
    fn refuses(&self, change: sheaf_agent::repos::Change, name: &str, exists: &dyn Fn(&str) -> bool) -> Option<String> {
        use sheaf_agent::repos::Change;
        sheaf_pg::repo::paths::kept_from_clients(name, change == Change::Replace, change == Change::Delete, exists).map(str::to_string)
    }
}
