//! The arguments of `sheaf agent`.

use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct AgentArgs {
    /// Make a private CA, the agent's certificate and key (naming this host, localhost and each
    /// --name) and one backup host's (client.pem, client.key) in DIR, with the allow-list of
    /// client certificates the agent accepts, then exit. Copy ca.pem, client.pem and client.key
    /// to the backup host; keep ca.key offline once you have issued what you need.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["listen", "pgdata"])]
    pub init_certs: Option<PathBuf>,
    /// With --init-certs: another name (or address) backup hosts dial the agent by. Repeatable.
    #[arg(long, value_name = "NAME", requires = "init_certs")]
    pub name: Vec<String>,
    /// With --init-certs DIR that holds a CA already: issue one more backup host's certificate,
    /// signed by that CA, into DIR/clients/NAME (copy that folder to the host as its --tls-dir)
    /// and add it to DIR/allowed-clients. A running agent admits it after `kill -HUP`; removing
    /// its line and another `kill -HUP` revokes it (connections open go on).
    #[arg(long, value_name = "NAME", requires = "init_certs", conflicts_with = "name")]
    pub add_client: Option<String>,
    /// With --add-client: grant it the use of repository REPO (one this agent serves with
    /// --serve-repo REPO=PATH): push WAL into it, back up into it, read it. Repeatable. Written
    /// as repos=REPO,... on its allowed-clients line; manage=REPO there also lets it expire,
    /// delete and change keys.
    #[arg(long, value_name = "REPO", requires = "add_client")]
    pub grant: Vec<String>,
    /// Serve on ADDR:PORT (e.g. 0.0.0.0:7400). Default: agent-listen in the config file.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The cluster's data directory; its pg_wal and tablespaces (where their links lead) are
    /// served too, and nothing else. Default: agent-pgdata in the config file.
    #[arg(long, value_name = "DIR")]
    pub pgdata: Option<PathBuf>,
    /// Serve the repository in folder PATH as NAME to the database hosts granted it (repos=NAME
    /// on their allowed-clients line), on a backup host: they give --repo
    /// sheaf://THIS_HOST:PORT/NAME and their --tls-dir, with nothing mounted. Writes are made
    /// durable here before they are acknowledged. Repeatable. Default: agent-serve-repo in the
    /// config file (NAME=PATH,NAME=PATH).
    #[arg(long, value_name = "NAME=PATH", conflicts_with = "init_certs")]
    pub serve_repo: Vec<String>,
    /// The folder --init-certs made (ca.pem, server.pem, server.key, allowed-clients). Default:
    /// tls-dir in the config file.
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Backup hosts' connections served at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections: usize,
    /// Threads that compress one backup host's reads when it asks the agent to compress
    /// (sheaf backup --compress-on agent). Default: this host's cores.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}
