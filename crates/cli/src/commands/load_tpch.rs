//! `sheaf load-tpch`: TPC-H tables into an existing database ([`sheaf_bench::tpch`]).

use sheaf_core::Error;

use crate::args::LoadTpchArgs;

/// Run it.
///
/// # Errors
/// The load's.
pub fn run(a: LoadTpchArgs) -> Result<(), Error> {
    let counts = sheaf_bench::tpch::load(&a.url, a.scale, &|t| eprintln!("sheaf: {t}"))?;
    say!("loaded {} rows at TPC-H scale {}", counts.iter().map(|c| c.1).sum::<i64>(), a.scale);
    Ok(())
}
