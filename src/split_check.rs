//! Placeholder until the sample ratio check lands.

/// The level below which the p-value flags a mismatch.
pub const SPLIT_CHECK_LEVEL: f64 = 0.01;

/// Anytime-valid p-value of `counts` under `shares`.
pub fn split_p_value(_counts: &[u64], _shares: &[f64]) -> f64 {
    1.0
}
