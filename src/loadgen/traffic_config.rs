//! What a [`Traffic`](super::Traffic) generator produces: users, catalogue,
//! models, surfaces and the shape of the feedback, and why a setting is unusable.

use super::label_spec::LabelSpec;
use super::model_spec::{check_quality, ModelSpec};
use std::time::Duration;

/// Why a traffic or load setting is unusable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TrafficError {
    /// No model to rank lists.
    #[error("no models: give at least one, e.g. control=0.9,candidate=0.4")]
    NoModels,
    /// No surface to show lists on.
    #[error("no surfaces: give at least one, e.g. home,search")]
    NoSurfaces,
    /// A model specification is not `NAME=QUALITY`.
    #[error("model {0:?} is not NAME=QUALITY, e.g. control=0.9")]
    ModelSpec(String),
    /// Two models share a name.
    #[error("model {0:?} is given twice")]
    DuplicateModel(String),
    /// A quality outside [0, 1].
    #[error("quality of model {model:?} is {quality}; give a number from 0 (random order) to 1 (ideal order)")]
    Quality {
        /// The model.
        model: String,
        /// The rejected quality.
        quality: f64,
    },
    /// A quality change named a model the generator does not have.
    #[error("unknown model {model:?}; models: {known}")]
    UnknownModel {
        /// The unknown name.
        model: String,
        /// The generator's models, comma-separated.
        known: String,
    },
    /// No users.
    #[error("users must be at least 1")]
    NoUsers,
    /// A list longer than the catalogue, or empty.
    #[error("items per list is {items}; give 1 to the catalogue size ({catalogue})")]
    ItemsPerList {
        /// Items per list asked for.
        items: usize,
        /// Items in the catalogue.
        catalogue: u32,
    },
    /// An interaction share outside [0, 1).
    #[error("interaction share is {0}; give a fraction of events from 0 up to (not including) 1, e.g. 0.8")]
    InteractionShare(f64),
    /// A label specification is not `KEY=V1,V2,...`.
    #[error("label {0:?} is not KEY=VALUE,VALUE,..., e.g. country=de,fr,us")]
    LabelSpec(String),
    /// An interleaving share outside [0, 1].
    #[error("interleave share is {0}; give a fraction of lists from 0 to 1, e.g. 0.2")]
    InterleaveShare(f64),
    /// A request-id share outside [0, 1].
    #[error("request id share is {0}; give a fraction from 0 to 1, e.g. 0.9")]
    RequestIdShare(f64),
}

/// What a [`Traffic`](super::Traffic) generator produces.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficConfig {
    /// Seed of every random choice: equal configs and clocks give equal events.
    pub seed: u64,
    /// Distinct users, `u0` to `u{users-1}`; a user always sees the same model (A/B split by user).
    pub users: u32,
    /// Items in the catalogue, `i0` to `i{catalogue-1}`.
    pub catalogue: u32,
    /// Items in every impression.
    pub items_per_list: usize,
    /// Target share of interactions among all events, in [0, 1); 0 sends
    /// impressions only. The click
    /// model's own feedback is topped up with repeat clicks on engaged items or
    /// thinned by sending only the deepest step of a click → cart → purchase
    /// chain; neither changes a list's grades. A share below what one event per
    /// engaged item gives (about 0.68 with the defaults) is not reached.
    pub interaction_share: f64,
    /// Share of interactions that carry their impression's `request_id`.
    pub request_id_share: f64,
    /// Mean delay from an impression to each of its interactions (exponential,
    /// cut at 5 times the mean). Keep it well below the server's attribution window.
    pub feedback_delay: Duration,
    /// Models, assigned to users round-robin by user number.
    pub models: Vec<ModelSpec>,
    /// Surfaces, chosen uniformly per impression.
    pub surfaces: Vec<String>,
    /// Labels every impression carries, a user always with the same values.
    pub labels: Vec<LabelSpec>,
    /// Prefix of user, request and event ids. Give each generator feeding the
    /// same server its own prefix, so their users and requests never collide.
    pub id_prefix: String,
    /// Share of lists, in [0, 1], that merge every model's ranking of the
    /// same candidates by team draft (model `interleaved`, with the
    /// `interleaving` field) instead of showing the user's own model's.
    pub interleave_share: f64,
}

impl Default for TrafficConfig {
    /// The demo: `control` (0.9) against `candidate` (0.4) on `home` and `search`.
    fn default() -> Self {
        Self {
            seed: 1,
            users: 1_000,
            catalogue: 5_000,
            items_per_list: 20,
            interaction_share: 0.8,
            request_id_share: 0.9,
            feedback_delay: Duration::from_secs(2),
            models: vec![
                ModelSpec::new("control", 0.9),
                ModelSpec::new("candidate", 0.4),
            ],
            surfaces: vec!["home".to_owned(), "search".to_owned()],
            labels: Vec::new(),
            id_prefix: String::new(),
            interleave_share: 0.0,
        }
    }
}

impl TrafficConfig {
    pub(super) fn validate(&self) -> Result<(), TrafficError> {
        if self.models.is_empty() {
            return Err(TrafficError::NoModels);
        }
        for (index, model) in self.models.iter().enumerate() {
            check_quality(&model.name, model.quality)?;
            if self.models[..index]
                .iter()
                .any(|earlier| earlier.name == model.name)
            {
                return Err(TrafficError::DuplicateModel(model.name.clone()));
            }
        }
        if self.surfaces.is_empty() {
            return Err(TrafficError::NoSurfaces);
        }
        if self.users == 0 {
            return Err(TrafficError::NoUsers);
        }
        if self.items_per_list == 0 || self.items_per_list > self.catalogue as usize {
            return Err(TrafficError::ItemsPerList {
                items: self.items_per_list,
                catalogue: self.catalogue,
            });
        }
        if !(0.0..1.0).contains(&self.interaction_share) {
            return Err(TrafficError::InteractionShare(self.interaction_share));
        }
        if !(0.0..=1.0).contains(&self.request_id_share) {
            return Err(TrafficError::RequestIdShare(self.request_id_share));
        }
        if !(0.0..=1.0).contains(&self.interleave_share) {
            return Err(TrafficError::InterleaveShare(self.interleave_share));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::traffic::tests::config;
    use crate::loadgen::Traffic;

    #[test]
    fn bad_settings_are_explained() {
        assert_eq!(
            "control=0.9".parse::<ModelSpec>().expect("valid"),
            ModelSpec::new("control", 0.9)
        );
        assert!(matches!(
            "control".parse::<ModelSpec>(),
            Err(TrafficError::ModelSpec(_))
        ));
        assert!(matches!(
            "control=1.5".parse::<ModelSpec>(),
            Err(TrafficError::Quality { .. })
        ));
        let traffic = Traffic::new(config(1)).expect("valid config");
        assert!(matches!(
            traffic.quality_handle().set("nope", 0.5),
            Err(TrafficError::UnknownModel { .. })
        ));
        let too_long = TrafficConfig {
            items_per_list: 6_000,
            ..config(1)
        };
        let all = TrafficConfig {
            interaction_share: 1.0,
            ..config(1)
        };
        assert!(matches!(
            Traffic::new(too_long),
            Err(TrafficError::ItemsPerList { .. })
        ));
        assert!(matches!(
            Traffic::new(all),
            Err(TrafficError::InteractionShare(_))
        ));
    }
}
