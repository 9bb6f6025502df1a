//! Flags several commands share, flattened into each: how to reach S3, the encryption secret, the
//! repository, `--max-rate`, the spool. Raw here; resolved against the settings in
//! [`crate::context`].

use std::path::PathBuf;

use clap::Args;

/// Where the log goes and what it says: global flags, every command takes them.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "Log")]
pub struct LogArgs {
    /// How much the log says: error, warn, info, debug, trace. Alone (without --log-file, outside
    /// systemd) it sends the log to stderr. Default: SHEAF_LOG_LEVEL, else log-level in the config
    /// file, else info.
    #[arg(long, global = true, value_name = "LEVEL", value_enum)]
    pub log_level: Option<crate::settings::LogLevel>,
    /// Append the log to FILE (created 0640), opened again on SIGHUP for logrotate. Every line of a
    /// run carries the run id `sheaf list` shows. Under systemd the log goes to the journal without
    /// it. Default: SHEAF_LOG_FILE, else log-file in the config file, else no file.
    #[arg(long, global = true, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// The log's lines: text, or json (one object per line). Default: SHEAF_LOG_FORMAT, else
    /// log-format in the config file, else text.
    #[arg(long, global = true, value_name = "FORMAT", value_enum)]
    pub log_format: Option<crate::settings::LogFormat>,
}

/// The hooks of a job: `--pre-JOB`, `--post-JOB` and `--on-failure`, one struct per job (their
/// flags are named after it).
macro_rules! hook_args {
    ($name:ident, $job:literal) => {
        #[doc = concat!("The hooks around `sheaf ", $job, "`.")]
        #[derive(Args, Clone, Default)]
        #[command(next_help_heading = "Hooks (run with sh -c; SHEAF_RUN_ID, SHEAF_BACKUP_ID, SHEAF_REPO, SHEAF_STATUS, SHEAF_ERROR, ... in their environment)")]
        pub struct $name {
            #[doc = concat!("Run CMD before the ", $job, " touches anything; if it fails (or outlives --hook-timeout) the ", $job, " does not start, and the command fails. Default: hook-pre-", $job, " in the config file.")]
            #[arg(long = concat!("pre-", $job), value_name = "CMD")]
            pub pre: Option<String>,
            #[doc = concat!("Run CMD after the ", $job, " succeeded; if it fails, a warning: the ", $job, "'s result stands. Default: hook-post-", $job, " in the config file.")]
            #[arg(long = concat!("post-", $job), value_name = "CMD")]
            pub post: Option<String>,
            #[doc = concat!("Run CMD when the ", $job, " (or its pre-hook) failed, with SHEAF_ERROR saying why. Default: hook-on-failure in the config file.")]
            #[arg(long, value_name = "CMD")]
            pub on_failure: Option<String>,
            /// How long a hook may run before it is stopped (SIGTERM, then SIGKILL 5 s later) and
            /// counted as failed. Default: hook-timeout in the config file, else 5m.
            #[arg(long, value_name = "DURATION", value_parser = super::duration)]
            pub hook_timeout: Option<std::time::Duration>,
        }

        impl From<$name> for HookFlags {
            fn from(h: $name) -> HookFlags {
                HookFlags { job: $job, pre: h.pre, post: h.post, on_failure: h.on_failure, timeout: h.hook_timeout }
            }
        }
    };
}

/// Any job's hook flags, as [`crate::hooks`] takes them.
#[derive(Clone, Debug, Default)]
pub struct HookFlags {
    /// `backup`, `restore`, `drill` or `expire`.
    pub job: &'static str,
    pub pre: Option<String>,
    pub post: Option<String>,
    pub on_failure: Option<String>,
    pub timeout: Option<std::time::Duration>,
}

hook_args!(BackupHooks, "backup");
hook_args!(RestoreHooks, "restore");
hook_args!(DrillHooks, "drill");
hook_args!(ExpireHooks, "expire");

/// `--max-rate`, for the commands that move a backup's bytes.
#[derive(Args, Clone, Default)]
pub struct RateArgs {
    /// Hold the bytes written to all stripes together (backup), or read from them (restore,
    /// verify), to RATE per second, e.g. 100MiB: a backup that leaves the server's disks and the
    /// network room for its own work. Any 5 seconds carry at most about 5 % more. Default: no limit.
    #[arg(long, value_name = "RATE", value_parser = super::rate)]
    pub max_rate: Option<u64>,
}

/// How to reach s3:// (and sftp://) locations. S3 credentials come from the AWS chain (the
/// environment, the profile files, STS, container or instance metadata), never from flags.
#[derive(Args, Clone)]
#[command(next_help_heading = "Object storage (s3://)")]
pub struct S3Args {
    /// Endpoint of an S3-compatible store, e.g. http://127.0.0.1:9000 (MinIO). Default: AWS, or
    /// AWS_ENDPOINT_URL, or endpoint_url in the profile.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// Region. Default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1.
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Allow a plain-HTTP endpoint (requests and data unencrypted on the wire).
    #[arg(long)]
    pub s3_allow_http: bool,
    /// Path-style addressing (ENDPOINT/BUCKET/KEY). The default with --s3-endpoint; AWS itself is
    /// addressed by host (BUCKET.s3.REGION.amazonaws.com).
    #[arg(long)]
    pub s3_path_style: bool,
    /// Profile in ~/.aws/credentials and ~/.aws/config. Default: AWS_PROFILE, else default.
    #[arg(long, value_name = "NAME")]
    pub s3_profile: Option<String>,
    /// PEM certificates to trust besides the system's, for an HTTPS endpoint with a private CA or a
    /// self-signed certificate. Default: AWS_CA_BUNDLE, or ca_bundle in the profile.
    #[arg(long, value_name = "FILE")]
    pub s3_ca_bundle: Option<PathBuf>,
    /// Upload part size, 5MiB .. 5GiB; raised automatically so that no stripe object needs more than
    /// 10,000 parts. Each stripe holds (parts in flight + 1) parts in memory, counted in the budget.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = super::size)]
    pub s3_part_size: u64,
    /// Parts uploading at once, per stripe.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub s3_parts_in_flight: usize,
    /// Ranged GETs in flight per stripe when reading (4 MiB each).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub s3_read_ahead: usize,
    /// Ask S3 to encrypt what sheaf stores with this KMS key (SSE-KMS, pgBackRest's
    /// repo-s3-kms-key-id): the bucket's owner controls and audits the key; sheaf's own
    /// encryption (a repository's keys) is independent of it. Default: s3-kms-key-id in the
    /// config file.
    #[arg(long, value_name = "ID", conflicts_with = "s3_sse_customer_key_file")]
    pub s3_kms_key_id: Option<String>,
    /// SSE-C (pgBackRest's repo-s3-sse-customer-key): S3 encrypts with the key in FILE (32 bytes
    /// or 64 hex digits), which it never keeps: every request, reads too, must carry it; HTTPS
    /// only. Default: s3-sse-customer-key-file in the config file.
    #[arg(long, value_name = "FILE")]
    pub s3_sse_customer_key_file: Option<PathBuf>,
    /// Assume this IAM role (STS AssumeRole) with whatever credentials the chain gives: the
    /// environment's keys, a profile (its keys, its own role_arn, credential_process), a web
    /// identity (IRSA), container credentials (ECS, EKS Pod Identity) or the instance's profile
    /// (IMDSv2). STS is reached at AWS_ENDPOINT_URL_STS where it is set. Default: s3-role-arn in
    /// the config file.
    #[arg(long, value_name = "ARN")]
    pub s3_role_arn: Option<String>,
    /// The storage class a repository's stripes and WAL segments are written in: STANDARD,
    /// STANDARD_IA, ONEZONE_IA, INTELLIGENT_TIERING, GLACIER_IR, GLACIER, DEEP_ARCHIVE,
    /// REDUCED_REDUNDANCY. Records, WAL summaries and the lock stay STANDARD (small, read by every
    /// command). GLACIER and DEEP_ARCHIVE must be thawed before a restore reads them (sheaf says
    /// which object). Default: the bucket's, or s3-storage-class in the config file.
    #[arg(long, value_name = "CLASS", value_parser = storage_class)]
    pub s3_storage_class: Option<sheaf_s3::StorageClass>,
    #[command(flatten)]
    pub sftp: SftpArgs,
    #[command(flatten)]
    pub agent_tls: AgentTlsArgs,
}

/// This host's certificate for an agent: to read a cluster's files through one (`backup
/// --agent`), and to reach a repository a backup host's agent serves (`sheaf://HOST:PORT/NAME`).
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "A backup host's agent (sheaf://HOST:PORT/NAME, --agent)")]
pub struct AgentTlsArgs {
    /// The folder with the agent's CA and this host's certificate (ca.pem, client.pem,
    /// client.key: what `sheaf agent --init-certs DIR --add-client NAME` made for it). Default:
    /// tls-dir in the config file.
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
}

/// How to reach sftp://USER@HOST[:PORT]/PATH locations: the server's key checked against a
/// known_hosts file, a key file or an ssh-agent's keys, never a password.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "SFTP (sftp://USER@HOST[:PORT]/PATH)")]
pub struct SftpArgs {
    /// The known_hosts file the server's host key must be in (an unknown or changed key is
    /// refused, naming its fingerprint). Default: ~/.ssh/known_hosts, or sftp-known-hosts in the
    /// config file.
    #[arg(long, value_name = "FILE")]
    pub sftp_known_hosts: Option<PathBuf>,
    /// The private key to log in with. Default: the keys of the ssh-agent at SSH_AUTH_SOCK, or
    /// sftp-key-file in the config file.
    #[arg(long, value_name = "FILE")]
    pub sftp_key_file: Option<PathBuf>,
    /// Publish files without the server's fsync@openssh.com (a server that lacks it): a power cut
    /// on the server may then lose what was acknowledged. Default: refuse such a server.
    #[arg(long)]
    pub sftp_no_fsync: bool,
}

fn storage_class(s: &str) -> std::result::Result<sheaf_s3::StorageClass, String> {
    s.parse().map_err(|e: sheaf_core::Error| e.message().to_string())
}

/// Where the repository is: `--repo`, else `SHEAF_REPO`, else `repo` in the config file.
#[derive(Args, Clone, Default)]
pub struct RepoArg {
    /// The repository: a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX or
    /// sftp://USER@HOST[:PORT]/PATH.
    /// Repeat for more (up to 4): wal-push and wal-receive store into every one, wal-fetch,
    /// restore and extract read the first that has what they need. Default: SHEAF_REPO (and
    /// SHEAF_REPO2 ...), else repo (and repo2 ...) in the config file.
    #[arg(long, value_name = "REPO")]
    pub repo: Vec<String>,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// The secret an encrypted backup or repository is read and written with. Never a flag's value:
/// a key or passphrase on the command line would show in `ps` and shell history.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "Encryption (AES-256-GCM after compression)")]
pub struct KeyArgs {
    /// Encrypt with the key in FILE: 32 random bytes (or 64 hex digits). Make one with
    /// `head -c 32 /dev/urandom > FILE` and keep a copy away from the backups: without it nothing
    /// can be restored. Also needed to restore, verify or read an encrypted repository. Default:
    /// SHEAF_ENCRYPTION_KEY_FILE, else encryption-key-file in the config file.
    #[arg(long, value_name = "FILE")]
    pub encryption_key_file: Option<PathBuf>,
    /// Encrypt with the passphrase in FILE (its first line), stretched with Argon2id (64 MiB, 3
    /// passes) and a salt of the backup's or repository's own. SHEAF_PASSPHRASE in the environment
    /// gives the passphrase itself. Default: SHEAF_PASSPHRASE_FILE, else passphrase-file in the
    /// config file.
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
    /// Run CMD (with sh -c) and take the secret from what it prints: a key (32 bytes, or 64 hex
    /// digits) or else a passphrase (its first line). So Vault, a cloud KMS or an HSM can hold the
    /// secret: e.g. `vault kv get -field=key secret/sheaf`. CMD itself must hold no secret (it
    /// is passed on to restore_command, as the files above are); a failure or an empty output
    /// stops the command. Default: SHEAF_KEY_COMMAND, else key-command in the config file.
    #[arg(long, value_name = "CMD")]
    pub key_command: Option<String>,
}

/// Where look-ahead and prefetch keep their files.
#[derive(Args, Clone, Default)]
pub struct SpoolArg {
    /// Spool folder for look-ahead markers and prefetched WAL. Default: SHEAF_SPOOL, the config
    /// file, else .sheaf inside pg_wal (same filesystem, so prefetched segments are renamed into
    /// place).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
}

/// `KEY=VALUE`, `KEY=`.
pub(crate) fn annotation(s: &str) -> std::result::Result<sheaf_pg::repo::annotations::Change, String> {
    s.parse().map_err(|e: sheaf_core::Error| e.message().to_string())
}
