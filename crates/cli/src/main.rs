//! `sheaf`: the command line. `main` parses the flags ([`args`]), installs the interrupt handler
//! the command needs, builds the [`context::Context`] once, runs the command ([`commands`]) and
//! turns how it ended into the exit status ([`exit`]). All the work is in `sheaf-core` and
//! `sheaf-pg`; this crate parses and prints.

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
    let interrupt = Interrupt::default();
    on_interrupt(&cli.command, &interrupt);
    let status = match run(cli, interrupt.clone()) {
        Ok(outcome) => outcome.code(),
        Err(_) if interrupt.came() => exit::INTERRUPTED,
        Err(e) => {
            exit::report(&e);
            exit::code(e.kind())
        }
    };
    ExitCode::from(status)
}

/// Build the context and run the command.
fn run(cli: Cli, interrupt: Interrupt) -> Result<Outcome, Error> {
    let ctx = Context::new(cli.catalog, cli.config.as_deref(), cli.command.shared(), interrupt)?;
    let ctx = &ctx;
    match cli.command {
        Command::Backup(a) => commands::backup::run(ctx, a)?,
        Command::Restore(a) => commands::restore::run(ctx, a)?,
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
        Command::Demo(a) => commands::demo::run(ctx, a)?,
        Command::Bench(a) => commands::bench::run(ctx, a)?,
        Command::LoadTpch(a) => commands::load_tpch::run(a)?,
    }
    Ok(Outcome::Success)
}

/// Install the handler for Ctrl-C (and SIGTERM, SIGHUP) that `command` needs. The two that end
/// the process from the handler's thread do so because the main thread cannot: it is blocked in
/// the work (a backup told to stop finishes its cleanup first, so a second signal must end it at
/// once; the demo and the bench run servers and child processes that know nothing of a flag).
/// This is the only place below `main` that exits.
fn on_interrupt(command: &Command, interrupt: &Interrupt) {
    match command {
        // Ask the running command to stop. A backup removes its `.partial` files and aborts its
        // uploads on the way out, and `main` exits 130; the WAL receiver stores what it received
        // and exits 0 (its normal end). A second signal exits at once (what is in the receiver's
        // spool is stored by the next receiver).
        Command::Backup(_) | Command::WalReceive(_) => {
            let said = if matches!(command, Command::Backup(_)) { "interrupted; removing what the backup wrote" } else { "stopping: storing what was received" };
            let i = interrupt.clone();
            let _ = ctrlc::set_handler(move || {
                if i.arrive() {
                    std::process::exit(i32::from(exit::INTERRUPTED));
                }
                i.stop();
                eprintln!("sheaf: {said} (again to quit at once)");
            });
        }
        // Stop the scratch servers we started (pg_ctl detaches them from the terminal, so they
        // would outlive us) and remove the bench's work folders, then exit 130; the main thread
        // waits meanwhile ([`Interrupt::unless_interrupted`]).
        Command::Demo(_) | Command::Bench(_) => {
            let what = if matches!(command, Command::Demo(_)) { "demo" } else { "bench" };
            let i = interrupt.clone();
            let _ = ctrlc::set_handler(move || {
                i.arrive();
                eprintln!("sheaf: interrupted; stopping the servers the {what} started");
                sheaf_bench::runner::cleanup();
                sheaf_pg::drill::scratch::stop_all();
                std::process::exit(i32::from(exit::INTERRUPTED));
            });
        }
        _ => {}
    }
}
