//! `sheaf`: the command line. `main` parses the flags ([`args`]), installs the one interrupt policy
//! ([`interrupt`]), builds the [`context::Context`] once, runs the command ([`commands`]) and turns
//! how it ended into the exit status ([`exit`]). All the work is in `sheaf-core` and `sheaf-pg`;
//! this crate parses and prints.

#[macro_use]
mod output;
mod args;
mod commands;
mod context;
mod exit;
mod interrupt;
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let interrupt = match Interrupt::install(&cli.command) {
        Ok(i) => i,
        Err(e) => {
            exit::report(&Error::io(sheaf_core::ErrorKind::Io, "cannot install the signal handlers", e));
            return ExitCode::from(1);
        }
    };
    let status = match run(cli, interrupt.clone()) {
        Ok(outcome) => outcome.code(),
        Err(e) => match interrupt.status() {
            Some(status) => status,
            None => {
                exit::report(&e);
                exit::code(e.kind())
            }
        },
    };
    ExitCode::from(status)
}

/// Build the context and run the command.
fn run(cli: Cli, interrupt: Interrupt) -> Result<Outcome, Error> {
    // What describes sheaf itself needs no settings, catalog or repository.
    match &cli.command {
        Command::Completions(a) => return commands::manual::completions(a).map(|()| Outcome::Success),
        Command::Man(a) => return commands::manual::man(a).map(|()| Outcome::Success),
        _ => {}
    }
    let ctx = Context::new(cli.catalog, cli.config.as_deref(), cli.command.shared(), interrupt)?;
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
        Command::Key(a) => commands::key::run(ctx, a)?,
        Command::Drill(a) => commands::drill::run(ctx, a)?,
        Command::Undelete(a) => commands::undelete::run(ctx, a)?,
        Command::Consolidate(a) => commands::consolidate::run(ctx, a)?,
        Command::WalSummarize(a) => commands::wal_summarize::run(ctx, a)?,
        Command::Agent(a) => commands::agent::run(ctx, a)?,
        Command::Config(a) => commands::config::run(&ctx.settings, a)?,
        Command::List(a) => commands::history::list(ctx.catalog(), a)?,
        Command::Show(a) => commands::history::show(ctx.catalog(), a)?,
        Command::Extract(a) => commands::extract::run(ctx, a)?,
        Command::Lab(a) => commands::lab::run(ctx, a)?,
        Command::Generate(a) => commands::generate::run(a)?,
        Command::Completions(_) | Command::Man(_) => unreachable!("answered before the context is made"),
        Command::Demo(a) => commands::demo::run(ctx, a)?,
        Command::Bench(a) => commands::bench::run(ctx, a)?,
        Command::LoadTpch(a) => commands::load_tpch::run(a)?,
    }
    Ok(Outcome::Success)
}
