//! A model under test, `NAME=QUALITY`, as the command line and the demo give it.

use super::TrafficError;
use std::fmt;
use std::str::FromStr;

/// The models of the demo and of `rankwatch loadgen` by default: a good one against a worse one.
pub const DEFAULT_MODELS: &str = "control=0.9,candidate=0.4";

/// A named model and how well it ranks: 1 orders by latent relevance, 0 almost at random.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The model name, sent as `Impression.model`.
    pub name: String,
    /// Ranking quality in [0, 1].
    pub quality: f64,
}

impl ModelSpec {
    /// A model `name` of `quality`.
    pub fn new(name: impl Into<String>, quality: f64) -> Self {
        Self {
            name: name.into(),
            quality,
        }
    }
}

impl FromStr for ModelSpec {
    type Err = TrafficError;

    /// Parses `NAME=QUALITY`, e.g. `control=0.9`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, quality) = text
            .split_once('=')
            .ok_or_else(|| TrafficError::ModelSpec(text.to_owned()))?;
        let name = name.trim();
        let quality: f64 = quality
            .trim()
            .parse()
            .map_err(|_| TrafficError::ModelSpec(text.to_owned()))?;
        if name.is_empty() {
            return Err(TrafficError::ModelSpec(text.to_owned()));
        }
        check_quality(name, quality)?;
        Ok(Self::new(name, quality))
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.quality)
    }
}

pub(super) fn check_quality(model: &str, quality: f64) -> Result<(), TrafficError> {
    if (0.0..=1.0).contains(&quality) {
        Ok(())
    } else {
        Err(TrafficError::Quality {
            model: model.to_owned(),
            quality,
        })
    }
}
