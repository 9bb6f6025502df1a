//! `sheaf completions SHELL` and `sheaf man --to DIR`: the shell's completion script and the man
//! pages, generated from the clap definitions that --help prints, so that they never disagree.

use clap::CommandFactory;
use sheaf_core::{Error, ErrorKind};

use crate::args::{Cli, CompletionsArgs, ManArgs};

/// Print the completion script for the shell asked for.
///
/// # Errors
/// None today; the signature matches the other commands'.
pub fn completions(a: &CompletionsArgs) -> Result<(), Error> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "sheaf", &mut std::io::stdout());
    Ok(())
}

/// Write sheaf.1 and a page per command (and per command of a command: sheaf-key-add.1) into
/// the folder asked for, each replaced whole.
///
/// # Errors
/// The folder cannot be made, or a page cannot be written.
pub fn man(a: &ManArgs) -> Result<(), Error> {
    std::fs::create_dir_all(&a.to).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", a.to.display()), e))?;
    let root = Cli::command();
    let mut written = 0;
    let mut todo = vec![("sheaf".to_string(), root)];
    while let Some((name, cmd)) = todo.pop() {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            todo.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        let page = cmd.name(name.clone()).bin_name(name.replace('-', " "));
        let mut out = Vec::new();
        clap_mangen::Man::new(page).render(&mut out).map_err(|e| Error::io(ErrorKind::Io, format!("cannot render the page of {name}"), e))?;
        sheaf_core::whole::write_whole_with(&a.to.join(format!("{name}.1")), &out, 0o644, ErrorKind::Target)?;
        written += 1;
    }
    say!("wrote {written} man pages to {}", a.to.display());
    Ok(())
}
