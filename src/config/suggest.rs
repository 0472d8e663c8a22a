//! "Did you mean": the setting a misspelled key of the config file, or a
//! misspelled `RANKWATCH_*` environment variable, was probably meant to be.

/// The name of `known` closest to `given`, case aside, if one is close
/// enough to be meant: at most a third of its letters apart, as clap's
/// suggestions go. Names too long to be close are not compared, so that
/// a huge one costs nothing.
pub fn closest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if given.is_empty() || given.len() > MAX_COMPARED {
        return None;
    }
    let given_lower = given.to_lowercase();
    known
        .into_iter()
        .filter(|name| *name != given && close(name.len().abs_diff(given.len()), name))
        .map(|name| {
            (
                strsim::levenshtein(&given_lower, &name.to_lowercase()),
                name,
            )
        })
        .filter(|&(distance, name)| close(distance, name))
        .min()
        .map(|(_, name)| name)
}

/// Whether `distance` edits from `name` are few enough for it to be meant.
fn close(distance: usize, name: &str) -> bool {
    distance * 3 <= name.len().max(3)
}

/// The longest name compared with the settings' (theirs are under 40 bytes).
const MAX_COMPARED: usize = 100;

/// The key named by a serde "unknown field" error's `message`, and the
/// keys it says are expected (serde writes "unknown field `x`, expected
/// one of `a`, `b`", or "expected `a`").
pub fn unknown_key(message: &str) -> Option<(&str, Vec<&str>)> {
    let (_, rest) = message.split_once("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2).collect();
    Some((key, expected))
}

/// The 1-based line of `text`, a TOML file, where `key` is set at the top
/// level, bare or quoted.
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let sets = |line: &str| {
        let line = line.trim_start();
        [key.to_owned(), format!("\"{key}\""), format!("'{key}'")]
            .iter()
            .any(|name| {
                line.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
    };
    text.lines().position(sets).map(|index| index + 1)
}

/// The `RANKWATCH_*` environment variables set that are no setting (of
/// those `known` lists) but close to one, their names after the prefix
/// compared: each with the one it was probably meant to be. `known` is
/// called only when some `RANKWATCH_*` variable is set.
pub fn misspelled_variables(known: impl FnOnce() -> Vec<String>) -> Vec<(String, String)> {
    const PREFIX: &str = "RANKWATCH_";
    let set: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with(PREFIX))
        .collect();
    if set.is_empty() {
        return Vec::new();
    }
    let known = known();
    let settings = || known.iter().filter_map(|name| name.strip_prefix(PREFIX));
    let mut found: Vec<(String, String)> = set
        .into_iter()
        .filter(|name| !known.contains(name))
        .filter_map(|name| {
            let meant = closest(name.strip_prefix(PREFIX)?, settings())?;
            Some((name.clone(), format!("{PREFIX}{meant}")))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_a_few_letters_off_is_matched_and_a_far_one_is_not() {
        let known = ["attribution_window", "allowed_lateness", "k"];
        assert_eq!(
            closest("atribution_window", known),
            Some("attribution_window")
        );
        assert_eq!(closest("allowed_latenes", known), Some("allowed_lateness"));
        assert_eq!(closest("window", known), None);
        assert_eq!(closest("attribution_window", known), None);
        assert_eq!(
            closest("ATTRIBUTION_WINDOW", known),
            Some("attribution_window")
        );
        assert_eq!(closest("", known), None);
        assert_eq!(closest(&"k".repeat(10_000), known), None);
    }

    #[test]
    fn the_key_and_the_expected_ones_are_read_from_serdes_message() {
        let message =
            "unknown field `atribution_window`, expected one of `grpc_addr`, `attribution_window`";
        assert_eq!(
            unknown_key(message),
            Some(("atribution_window", vec!["grpc_addr", "attribution_window"]))
        );
        assert_eq!(
            unknown_key("unknown field `x`, expected `kafka_brokers`"),
            Some(("x", vec!["kafka_brokers"]))
        );
        assert_eq!(unknown_key("invalid type: integer `10`"), None);
    }

    #[test]
    fn the_line_setting_a_key_is_found() {
        let text = "k = [1]\n# atribution_window = 1\n  \"atribution_window\" = \"10s\"\n";
        assert_eq!(line_of(text, "atribution_window"), Some(3));
        assert_eq!(line_of(text, "windows"), None);
    }
}
