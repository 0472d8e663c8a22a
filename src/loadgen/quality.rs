//! The models' qualities, changeable while traffic runs: a drop is a bad
//! deploy that the server's metrics and alerts should show.

use super::model_spec::{check_quality, ModelSpec};
use super::TrafficError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The models' names and current qualities, shared between a generator and
/// whoever degrades a model while it runs (an alerting test, the demo).
#[derive(Clone, Debug)]
pub struct QualityHandle {
    models: Arc<[(String, AtomicU64)]>,
}

impl QualityHandle {
    pub(super) fn new(models: &[ModelSpec]) -> Self {
        Self {
            models: models
                .iter()
                .map(|m| (m.name.clone(), AtomicU64::new(m.quality.to_bits())))
                .collect(),
        }
    }

    /// Sets `model`'s quality from the next impression on.
    pub fn set(&self, model: &str, quality: f64) -> Result<(), TrafficError> {
        check_quality(model, quality)?;
        let (_, bits) = self
            .models
            .iter()
            .find(|(name, _)| name == model)
            .ok_or_else(|| TrafficError::UnknownModel {
                model: model.to_owned(),
                known: self
                    .models
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        bits.store(quality.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.models.len()
    }

    pub(super) fn name(&self, index: usize) -> &str {
        &self.models[index].0
    }

    pub(super) fn quality(&self, index: usize) -> f64 {
        f64::from_bits(self.models[index].1.load(Ordering::Relaxed))
    }
}
