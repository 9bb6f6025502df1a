//! Statistics across repeats: the median, and the range, as the seeds' tables give them.

use serde::{Deserialize, Serialize};

/// Median, minimum and maximum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// How many samples.
    pub n: usize,
}

/// Summarise `samples`; `None` when there are none or any is not a number.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Summary { median, min: v[0], max: v[n - 1], n })
}

/// CPU percent of all cores: (user + system) / (wall × cores) × 100.
pub fn cpu_percent(user: f64, system: f64, wall: f64, cores: usize) -> f64 {
    if wall <= 0.0 || cores == 0 {
        return 0.0;
    }
    100.0 * (user + system) / (wall * cores as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]), Some(Summary { median: 2.0, min: 1.0, max: 3.0, n: 3 }));
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(summarize(&[7.0]).unwrap().median, 7.0);
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn cpu_is_a_share_of_all_cores() {
        assert_eq!(cpu_percent(1.5, 0.5, 1.0, 2), 100.0);
        assert_eq!(cpu_percent(0.5, 0.0, 1.0, 2), 25.0);
        assert_eq!(cpu_percent(1.0, 0.0, 0.0, 2), 0.0);
    }
}
