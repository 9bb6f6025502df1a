//! `sheaf generate`: a seeded data set of known compressibility, to try sheaf on.

use sheaf_core::size::{format_size, parse_size};
use sheaf_core::{Error, ErrorKind};

use crate::args::GenerateArgs;

/// Run it.
///
/// # Errors
/// A bad size or fraction, a folder that is not empty, I/O.
pub fn run(a: GenerateArgs) -> Result<(), Error> {
    let total = parse_size(&a.size)?;
    if !(0.0..=1.0).contains(&a.repeat) {
        return Err(Error::invalid(format!("--repeat {}: give a fraction from 0.0 to 1.0", a.repeat)));
    }
    if std::fs::read_dir(&a.dir).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(Error::new(ErrorKind::TargetNotEmpty, format!("{} is not empty: generate into a new or empty directory", a.dir.display())));
    }
    let t0 = std::time::Instant::now();
    let cannot = |e| Error::io(ErrorKind::Target, format!("cannot write data set in {}", a.dir.display()), e);
    let (written, files) = match &a.small {
        Some(spec) => {
            let (count, size) = sheaf_core::datagen::parse_files_spec(spec)?;
            (sheaf_core::datagen::make_small_files(&a.dir, count, size, a.repeat, a.seed).map_err(cannot)?, count)
        }
        None => (sheaf_core::datagen::make_dataset(&a.dir, total, a.files, a.repeat, a.seed).map_err(cannot)?, a.files + 100),
    };
    say!("generated {} in {files} files under {} in {:.1} s", format_size(written), a.dir.display(), t0.elapsed().as_secs_f64());
    Ok(())
}
