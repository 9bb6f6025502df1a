//! `sheaf`: the command line. `main` parses the flags ([`args`]), reads the settings, starts the
//! [`log`], installs the one interrupt policy ([`interrupt`]), builds the [`context::Context`] once, runs the command ([`commands`]) and turns
//! how it ended into the exit status ([`exit`]). All the work is in `sheaf-core` and `sheaf-pg`;
//! this crate parses and prints.

#[macro_use]
mod output;
mod args;
mod commands;
mod context;
mod exit;
mod hooks;
mod interrupt;
mod log;
mod notify;
mod progress;
mod recorder;
mod settings;

use std::process::ExitCode;

use clap::Parser;
use sheaf_core::Error;

use args::{Cli, Command};
use context::Context;
use exit::Outcome;
use interrupt::Interrupt;
use settings::Settings;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // What describes sheaf itself needs no settings, log, catalog or repository.
    let about = match &cli.command {
        Command::Completions(a) => Some(commands::manual::completions(a)),
        Command::Man(a) => Some(commands::manual::man(a)),
        Command::Version(a) => Some(commands::version::run(a)),
        _ => None,
    };
    if let Some(r) = about {
        return ExitCode::from(r.map_or_else(|e| report(&e), |()| 0));
    }
    let started = Settings::load(cli.config.as_deref()).and_then(|settings| {
        let reopen = log::Plan::resolve(&cli.log, &settings, log::stderr_is_journal()).start()?;
        let interrupt = Interrupt::install(&cli.command, reopen).map_err(|e| Error::io(sheaf_core::ErrorKind::Io, "cannot install the signal handlers", e))?;
        Ok((settings, interrupt))
    });
    let (settings, interrupt) = match started {
        Ok(s) => s,
        Err(e) => return ExitCode::from(report(&e)),
    };
    let status = match run(cli, settings, interrupt.clone()) {
        Ok(outcome) => outcome.code(),
        Err(e) => match interrupt.status() {
            Some(status) => {
                // Interrupted: the notice said so; what became of the work, where it matters.
                if e.is_noted() {
                    log::report(&e);
                }
                status
            }
            None => report(&e),
        },
    };
    ExitCode::from(status)
}

/// Say what went wrong; the exit status for it.
fn report(e: &Error) -> u8 {
    log::report(e);
    exit::code(e.kind())
}

/// Build the context and run the command.
fn run(cli: Cli, settings: Settings, interrupt: Interrupt) -> Result<Outcome, Error> {
    let ctx = Context::new(cli.catalog, settings, cli.command.shared(), interrupt)?;
    let ctx = &ctx;
    match cli.command {
        Command::Backup(a) => commands::backup::run(ctx, a)?,
        Command::Restore(a) => commands::restore::run(ctx, *a)?,
        Command::Verify(a) => commands::verify::run(ctx, a)?,
        Command::Init(a) => commands::init::run(ctx, a)?,
        Command::WalPush(a) => commands::wal_push::run(ctx, a)?,
        Command::WalFetch(a) => return Ok(commands::wal_fetch::run(ctx, a)),
        Command::WalReceive(a) => commands::wal_receive::run(ctx, a)?,
        Command::Info(a) => commands::info::run(ctx, a)?,
        Command::Check(a) => return Ok(commands::check::run(ctx, a)),
        Command::Expire(a) => commands::expire::run(ctx, a)?,
        Command::Keep(a) => commands::keep::run(ctx, a)?,
        Command::Annotate(a) => commands::annotate::run(ctx, a)?,
        Command::Key(a) => commands::key::run(ctx, a)?,
        Command::Drill(a) => commands::drill::run(ctx, a)?,
        Command::Undelete(a) => commands::undelete::run(ctx, a)?,
        Command::Repo(a) => commands::repo::run(ctx, a)?,
        Command::Copy(a) => commands::copy::run(ctx, a)?,
        Command::Consolidate(a) => commands::consolidate::run(ctx, a)?,
        Command::WalSummarize(a) => commands::wal_summarize::run(ctx, a)?,
        Command::Agent(a) => commands::agent::run(ctx, a)?,
        Command::Config(a) => commands::config::run(&ctx.settings, a)?,
        Command::List(a) => commands::history::list(ctx.catalog(), a)?,
        Command::Show(a) => commands::history::show(ctx.catalog(), a)?,
        Command::Extract(a) => commands::extract::run(ctx, a)?,
        Command::Lab(a) => commands::lab::run(ctx, a)?,
        Command::Generate(a) => commands::generate::run(a)?,
        Command::Completions(_) | Command::Man(_) | Command::Version(_) => unreachable!("answered before the settings are read"),
        Command::Demo(a) => commands::demo::run(ctx, a)?,
        Command::Bench(a) => commands::bench::run(ctx, a)?,
        Command::LoadTpch(a) => commands::load_tpch::run(a)?,
    }
    Ok(Outcome::Success)
}
