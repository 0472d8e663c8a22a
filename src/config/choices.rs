//! The choices of metric settings as flags and files write them.

use clap::ValueEnum;
use serde::Deserialize;

/// Gain setting as written in configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GainName {
    /// Gain `g`.
    Linear,
    /// Gain `2^g - 1`.
    Exponential,
}

/// Discount setting as written in configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscountName {
    /// `log2(j + 1)`.
    Log2,
    /// `max(1, log_base j)`.
    Jarvelin,
}
