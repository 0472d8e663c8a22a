//! An impression label and the values users take, `KEY=V1,V2,...`, as the
//! command line and the demo give it: traffic for segments (docs/SPEC.md §11).

use super::TrafficError;
use std::str::FromStr;

/// A label every impression carries, with one of its values per user.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelSpec {
    /// The label key, sent in `Impression.labels`.
    pub key: String,
    /// Its values; a user always takes the same one.
    pub values: Vec<String>,
}

impl LabelSpec {
    /// The value of user number `user`: spread over the values by a hash of
    /// the user and the key, so that segments cut across models.
    pub fn value_of(&self, user: u32) -> &str {
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(self.key.as_bytes(), user.into());
        &self.values[(hash % self.values.len() as u64) as usize]
    }
}

impl FromStr for LabelSpec {
    type Err = TrafficError;

    /// Parses `KEY=V1,V2,...`, e.g. `country=de,fr,us`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || TrafficError::LabelSpec(text.to_owned());
        let (key, values) = text.split_once('=').ok_or_else(invalid)?;
        let key = key.trim();
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
        if key.is_empty() || values.iter().any(String::is_empty) {
            return Err(invalid());
        }
        Ok(Self {
            key: key.to_owned(),
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_key_and_its_values_and_spreads_users_over_them() {
        let spec: LabelSpec = "country = de, fr,us".parse().unwrap();
        assert_eq!(spec.key, "country");
        assert_eq!(spec.values, ["de", "fr", "us"]);
        let mut seen: Vec<&str> = (0..300).map(|user| spec.value_of(user)).collect();
        assert_eq!(spec.value_of(7), spec.value_of(7));
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, ["de", "fr", "us"]);
        for bad in ["country", "=de", "country=", "country=de,,fr"] {
            assert_eq!(
                bad.parse::<LabelSpec>(),
                Err(TrafficError::LabelSpec(bad.to_owned()))
            );
        }
    }
}
