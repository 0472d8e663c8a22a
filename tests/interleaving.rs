//! Interleaving (docs/SPEC.md §12) against an independent computation: a
//! seeded log of team-draft interleaved and multileaved lists, A/B lists
//! and malformed interleavings is replayed, with linear and exponential
//! gain, and streamed to a real server; every count of every experiment is
//! checked list by list against team-draft evaluation written here from the
//! spec, and every statistic against values computed from those counts.

mod common;

use common::server::Server;
use common::{replay_json, Seeded};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const RANKERS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
const SURFACES: [&str; 2] = ["home", "search"];
const LISTS: usize = 1500;
/// `(type, grade)` of the default grade table.
const TYPES: [(&str, f64); 3] = [("click", 1.0), ("add_to_cart", 2.0), ("purchase", 3.0)];

fn time(seconds: u64) -> String {
    let (minutes, seconds) = (seconds / 60, seconds % 60);
    let (hours, minutes) = (minutes / 60, minutes % 60);
    format!("2026-11-01T{:02}:{minutes:02}:{seconds:02}Z", 8 + hours)
}

/// Team draft: in each round the rankers pick in a random order, each
/// taking its highest item not yet shown.
fn team_draft(rankings: &[Vec<u32>], length: usize, rng: &mut Seeded) -> (Vec<u32>, Vec<usize>) {
    let (mut shown, mut teams) = (Vec::new(), Vec::new());
    while shown.len() < length {
        let mut order: Vec<usize> = (0..rankings.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        let mut picked = false;
        for ranker in order {
            if shown.len() == length {
                break;
            }
            if let Some(&item) = rankings[ranker].iter().find(|i| !shown.contains(*i)) {
                shown.push(item);
                teams.push(ranker);
                picked = true;
            }
        }
        if !picked {
            break;
        }
    }
    (shown, teams)
}

/// One interleaved list as the test knows it.
struct Shown {
    surface: &'static str,
    rankers: Vec<&'static str>,
    teams: Vec<usize>,
    /// Per item, the largest grade of its interactions.
    grades: Vec<f64>,
}

/// The log's lines, and the interleaved lists that are valid.
fn log(seed: u64) -> (Vec<String>, Vec<Shown>, usize) {
    let mut rng = Seeded(seed);
    let (mut lines, mut shown, mut malformed) = (Vec::new(), Vec::new(), 0);
    for list in 0..LISTS {
        let at = 10 * list as u64;
        let surface = SURFACES[list % 2];
        let request = format!("r{list}");
        let user = format!("u{}", rng.next() % 300);
        let count = 2 + (rng.next() % 3) as usize;
        let mut rankers: Vec<&'static str> = RANKERS.to_vec();
        for i in (1..rankers.len()).rev() {
            rankers.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        rankers.truncate(count);
        // Each ranker ranks 12 items of a pool of 30, the better ones
        // (lower indexes) higher for alpha than for the others.
        let rankings: Vec<Vec<u32>> = rankers
            .iter()
            .map(|r| {
                let noise = if *r == "alpha" { 8 } else { 30 };
                let mut keyed: Vec<(u32, u32)> = (0..30)
                    .map(|i| (i + (rng.next() % noise) as u32, i))
                    .collect();
                keyed.sort_unstable();
                let mut items: Vec<u32> = keyed.into_iter().map(|(_, i)| i).collect();
                items.truncate(12);
                items
            })
            .collect();
        let kind = rng.next() % 10;
        let (items, teams) = team_draft(&rankings, 10, &mut rng);
        let ids: Vec<String> = items.iter().map(|i| format!("i{i}")).collect();
        let mut impression = json!({"impression": {
            "requestId": request, "userId": user, "itemIds": ids,
            "time": time(at), "model": "mixed", "surface": surface,
        }});
        let mut interleaving = json!({"rankers": rankers, "teams": teams});
        match kind {
            0 => {
                // An A/B list of one ranker: no interleaving.
                impression["impression"]["model"] = json!(rankers[0]);
                lines.push(impression.to_string());
                continue;
            }
            1 => {
                malformed += 1;
                match rng.next() % 4 {
                    0 => interleaving["teams"] = json!(teams[1..]),
                    1 => interleaving["rankers"] = json!([rankers[0]]),
                    2 => interleaving["rankers"] = json!([rankers[0], rankers[0]]),
                    _ => interleaving["teams"][0] = json!(count),
                }
                impression["impression"]["interleaving"] = interleaving;
                lines.push(impression.to_string());
                continue;
            }
            _ => impression["impression"]["interleaving"] = interleaving,
        }
        lines.push(impression.to_string());
        let mut grades = vec![0.0; items.len()];
        // Clicks fall more often on better items (lower indexes) and near the top.
        for (rank, item) in items.iter().enumerate() {
            let chance = (40 - *item as u64).saturating_sub(3 * rank as u64);
            if rng.next() % 100 >= chance {
                continue;
            }
            let (kind, type_grade) = TYPES[(rng.next() % 3) as usize];
            let explicit = rng
                .next()
                .is_multiple_of(5)
                .then(|| (rng.next() % 5) as f64 * 0.5);
            let grade = explicit.unwrap_or(type_grade);
            grades[rank] = f64::max(grades[rank], grade);
            let mut x = json!({"interaction": {
                "userId": user, "itemId": format!("i{item}"), "requestId": format!("r{list}"),
                "type": kind, "time": time(at + 1 + rank as u64),
            }});
            if let Some(grade) = explicit {
                x["interaction"]["grade"] = json!(grade);
            }
            lines.push(x.to_string());
        }
        shown.push(Shown {
            surface,
            rankers,
            teams,
            grades,
        });
    }
    (lines, shown, malformed)
}

/// Per experiment `(surface, a, b)`: lists, wins of a, wins of b, first picks of a and of b.
type Expected = BTreeMap<(String, String, String), [u64; 5]>;

/// Team-draft evaluation from the spec: credit per ranker, a win for the
/// one of each pair with more, pairs ordered by name.
fn evaluate(shown: &[Shown], exponential: bool) -> Expected {
    let gain = |g: f64| if exponential { g.exp2() - 1.0 } else { g };
    let mut experiments = Expected::new();
    for list in shown {
        let mut credit = vec![0.0; list.rankers.len()];
        for (team, grade) in list.teams.iter().zip(&list.grades) {
            credit[*team] += gain(*grade);
        }
        for i in 0..list.rankers.len() {
            for j in i + 1..list.rankers.len() {
                let (a, b) = if list.rankers[i] < list.rankers[j] {
                    (i, j)
                } else {
                    (j, i)
                };
                let key = (
                    list.surface.to_owned(),
                    list.rankers[a].to_owned(),
                    list.rankers[b].to_owned(),
                );
                let row = experiments.entry(key).or_default();
                row[0] += 1;
                row[1] += u64::from(credit[a] > credit[b]);
                row[2] += u64::from(credit[b] > credit[a]);
                row[3] += u64::from(list.teams[0] == a);
                row[4] += u64::from(list.teams[0] == b);
            }
        }
    }
    experiments
}

/// The half-width multiplier of docs/SPEC.md §9's confidence sequence at
/// `t` lists, α = 0.05, tightest at 10,000 lists, written out again.
fn sequence_multiplier(t: f64) -> f64 {
    let alpha: f64 = 0.05;
    let l = -2.0 * alpha.ln();
    let rho2 = (l + (l + 1.0).ln()) / 10_000.0;
    let tr = t.max(1.0) * rho2;
    ((tr + 1.0) / tr * ((tr + 1.0) / (alpha * alpha)).ln()).sqrt()
}

fn close(got: &Value, want: f64, what: &str) {
    let got = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    assert!((got - want).abs() <= 1e-9, "{what}: got {got}, want {want}");
}

/// Checks the report's `interleaving` list against `expected`.
fn check(report: &Value, expected: &Expected) {
    let rows = report["interleaving"]
        .as_array()
        .expect("an interleaving list");
    let got: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["surface"].as_str().unwrap().into(),
                r["a"].as_str().unwrap().into(),
                r["b"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = expected.keys().cloned().collect();
    assert_eq!(got, want, "one row per experiment, sorted by surface, a, b");
    for (row, counts) in rows.iter().zip(expected.values()) {
        let [lists, wins_a, wins_b, first_a, first_b] = *counts;
        let name = format!("{} {} {}", row["surface"], row["a"], row["b"]);
        assert_eq!(row["lists"], lists, "{name}");
        assert_eq!(row["wins_a"], wins_a, "{name}");
        assert_eq!(row["wins_b"], wins_b, "{name}");
        assert_eq!(row["ties"], lists - wins_a - wins_b, "{name}");
        assert_eq!(row["first_a"], first_a, "{name}");
        assert_eq!(row["first_b"], first_b, "{name}");
        let n = lists as f64;
        let preference = (wins_a as f64 - wins_b as f64) / n;
        let variance = ((wins_a + wins_b) as f64 - n * preference * preference) / (n - 1.0);
        let se = (variance.max(0.0) / n).sqrt();
        close(&row["preference"], preference, &name);
        close(&row["se"], se, &name);
        let z = 1.959963984540054;
        close(&row["ci95"][0], preference - z * se, &name);
        close(&row["ci95"][1], preference + z * se, &name);
        let cs = sequence_multiplier(n) * se;
        close(&row["cs95"][0], preference - cs, &name);
        close(&row["cs95"][1], preference + cs, &name);
        let (lo, hi) = (
            row["cs95"][0].as_f64().unwrap(),
            row["cs95"][1].as_f64().unwrap(),
        );
        assert!(lo <= row["ci95"][0].as_f64().unwrap() && hi >= row["ci95"][1].as_f64().unwrap());
        let p = row["first_pick_p_value"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "{name}: p-value {p}");
    }
}

fn write_log(lines: &[String]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("interleaved.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

#[test]
fn replay_credits_each_ranker_as_team_draft_evaluation_does() {
    let (lines, shown, malformed) = log(7);
    let (_dir, path) = write_log(&lines);
    for (gain, exponential) in [("linear", false), ("exponential", true)] {
        let report = replay_json(&["--format", "json", "--gain", gain, &path], None);
        let expected = evaluate(&shown, exponential);
        assert_eq!(
            expected.len(),
            12,
            "every pair of 4 rankers on both surfaces"
        );
        assert!(
            expected.values().any(|c| c[1] != c[2]),
            "wins differ somewhere"
        );
        check(&report, &expected);
        assert_eq!(
            report["counters"]["rejected"]["invalid_interleaving"],
            malformed
        );
        // An interleaved list counts in its group like any list.
        let mixed: u64 = report["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["model"] == "mixed")
            .map(|g| g["lists"].as_u64().unwrap())
            .sum();
        assert_eq!(mixed, shown.len() as u64);
    }
}

#[test]
fn one_set_of_rankers_sent_in_any_order_is_one_lineup() {
    // Three rankers in each of their six orders, each list's first item x's
    // and clicked, with room for three lineups: one set of rankers on one
    // surface needs one, however a client orders them (a Go map's order
    // changes from run to run).
    let orders = [
        ["x", "y", "z"],
        ["x", "z", "y"],
        ["y", "x", "z"],
        ["y", "z", "x"],
        ["z", "x", "y"],
        ["z", "y", "x"],
    ];
    let mut lines = Vec::new();
    for (list, rankers) in orders.iter().enumerate() {
        let x = rankers.iter().position(|&r| r == "x").unwrap();
        let mut teams = vec![0, 1, 2];
        teams.swap(0, x);
        let (request, user) = (format!("r{list}"), format!("u{list}"));
        let items = ["i0", "i1", "i2"];
        lines.push(
            json!({"impression": {
                "requestId": request, "userId": user, "itemIds": items,
                "time": time(list as u64), "model": "mixed", "surface": "home",
                "interleaving": {"rankers": rankers, "teams": teams},
            }})
            .to_string(),
        );
        lines.push(
            json!({"interaction": {
                "userId": user, "requestId": request, "itemId": "i0",
                "type": "click", "time": time(list as u64),
            }})
            .to_string(),
        );
    }
    let (_dir, path) = write_log(&lines);
    let report = replay_json(&["--format", "json", "--max-groups", "3", &path], None);
    let rows = report["interleaving"].as_array().unwrap();
    let got: Vec<(&str, &str, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            let count = |field: &str| r[field].as_u64().unwrap();
            let name = |field: &str| r[field].as_str().unwrap();
            (
                name("a"),
                name("b"),
                count("lists"),
                count("wins_a"),
                count("first_a"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("x", "y", 6, 6, 6),
            ("x", "z", 6, 6, 6),
            ("y", "z", 6, 0, 0)
        ],
        "{report}"
    );
}

/// The report of `server`, as `rankwatch query --format json` prints it.
fn queried(server: &Server) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["query", "--format", "json", "--grpc-addr"])
        .arg(server.grpc.to_string())
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_left_out_of_their_experiments_are_counted_in_the_report() {
    // Room for two experiments: the third pair's list counts in its group only.
    let mut lines: Vec<String> = [["a", "b"], ["c", "d"], ["e", "f"]]
        .iter()
        .enumerate()
        .map(|(list, rankers)| {
            json!({"impression": {
                "requestId": format!("r{list}"), "userId": format!("u{list}"),
                "itemIds": ["i0", "i1"], "time": time(list as u64),
                "model": "mixed", "surface": "home",
                "interleaving": {"rankers": rankers, "teams": [0, 1]},
            }})
            .to_string()
        })
        .collect();
    lines.push(
        json!({"interaction": {"userId": "closing", "itemId": "i0", "type": "click", "time": time(9999)}})
            .to_string(),
    );
    let (_dir, path) = write_log(&lines);
    let replayed = replay_json(&["--format", "json", "--max-groups", "2", &path], None);
    assert_eq!(replayed["groups"][0]["lists"], 3, "{replayed}");
    assert_eq!(replayed["interleaving"].as_array().unwrap().len(), 2);
    assert_eq!(
        replayed["counters"]["unregistered_interleaved_lists"], 1,
        "{replayed}"
    );
    let table = common::replay(&["--max-groups", "2", &path], None);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains("interleaved lists left out of their experiments: 1 (max_groups reached"),
        "{table}"
    );
    let server = Server::exact(&["--max-groups", "2"]);
    server.stream_lines(&lines).await;
    let queried = queried(&server);
    assert_eq!(
        queried["counters"]["unregistered_interleaved_lists"], 1,
        "{queried}"
    );
    assert_eq!(queried["interleaving"], replayed["interleaving"]);
}

/// The first picks' check is anytime-valid since start only, so a window's
/// report leaves its p-value out, as it leaves out the split checks: it had
/// shown 1, a fair coin, beside first picks of 40 to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_report_leaves_out_the_first_picks_p_value() {
    let mut lines: Vec<String> = (0..40)
        .map(|list| {
            json!({"impression": {
                "requestId": format!("r{list}"), "userId": format!("u{list}"),
                "itemIds": ["i0", "i1"], "time": time(list),
                "model": "mixed", "surface": "home",
                "interleaving": {"rankers": ["x", "y"], "teams": [0, 1]},
            }})
            .to_string()
        })
        .collect();
    lines.push(
        json!({"interaction": {"userId": "closing", "itemId": "i0", "type": "click", "time": time(3600)}})
            .to_string(),
    );
    let server = Server::exact(&["--windows", "24h"]);
    server.stream_lines(&lines).await;
    let query = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
            .args(["query", "--grpc-addr", &server.grpc.to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let since_start: Value = serde_json::from_str(&query(&["--format", "json"])).unwrap();
    let row = &since_start["interleaving"][0];
    assert_eq!((&row["first_a"], &row["first_b"]), (&json!(40), &json!(0)));
    assert!(row["first_pick_p_value"].as_f64().unwrap() <= 0.01, "{row}");
    let window: Value =
        serde_json::from_str(&query(&["--format", "json", "--window", "24h"])).unwrap();
    let row = &window["interleaving"][0];
    assert_eq!((&row["first_a"], &row["first_b"]), (&json!(40), &json!(0)));
    assert!(row.get("first_pick_p_value").is_none(), "{row}");
    // On the wire a window's report carries 1, as it always has, so that
    // clients built before the field could be left out never read 0 there.
    let request = rankwatch::proto::GetMetricsRequest {
        window: "24h".to_owned(),
    };
    let mut evaluation = server.evaluation().await;
    let wire = evaluation.get_metrics(request).await.unwrap().into_inner();
    assert_eq!(wire.interleaving[0].first_pick_p_value, 1.0);
    let table = query(&["--window", "24h"]);
    let coin = table
        .lines()
        .find(|line| line.starts_with("home "))
        .and_then(|line| line.split_whitespace().last());
    assert_eq!(coin, Some("-"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_past_max_groups_counts_in_its_own_surfaces_experiment() {
    // Three groups fill max_groups; the interleaved lists that follow go to
    // the overflow group, but their experiment is still that of their
    // surface and segment value (the third country folds into __other__).
    let mut lines: Vec<String> = ["p1", "p2", "p3"]
        .iter()
        .map(|model| {
            json!({"impression": {
                "requestId": model, "userId": model, "itemIds": ["i0"],
                "time": time(0), "model": model, "surface": "home",
                "labels": {"country": "de"},
            }})
            .to_string()
        })
        .collect();
    for (list, country) in ["de", "de", "fr", "it"].iter().enumerate() {
        let (request, user) = (format!("r{list}"), format!("u{list}"));
        lines.push(
            json!({"impression": {
                "requestId": request, "userId": user, "itemIds": ["i0", "i1"],
                "time": time(1 + list as u64), "model": "mixed", "surface": "home",
                "labels": {"country": country},
                "interleaving": {"rankers": ["a", "b"], "teams": [0, 1]},
            }})
            .to_string(),
        );
        lines.push(
            json!({"interaction": {
                "userId": user, "requestId": request, "itemId": "i0",
                "type": "click", "time": time(1 + list as u64),
            }})
            .to_string(),
        );
    }
    lines.push(
        json!({"interaction": {"userId": "closing", "itemId": "i0", "type": "click", "time": time(9999)}})
            .to_string(),
    );
    let settings = [
        "--max-groups",
        "3",
        "--segment-labels",
        "country",
        "--max-segment-values",
        "2",
    ];
    let (_dir, path) = write_log(&lines);
    let replayed = replay_json(
        &[&["--format", "json", &path], &settings[..]].concat(),
        None,
    );
    let rows: Vec<(&str, &str, u64, u64)> = replayed["interleaving"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["surface"].as_str().unwrap(),
                r["segments"]["country"].as_str().unwrap(),
                r["lists"].as_u64().unwrap(),
                r["wins_a"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("home", "__other__", 1, 1),
            ("home", "de", 2, 2),
            ("home", "fr", 1, 1)
        ],
        "{replayed}"
    );
    let overflow = &replayed["groups"][0];
    assert_eq!(
        (&overflow["model"], &overflow["lists"]),
        (&json!("__overflow__"), &json!(4)),
        "{replayed}"
    );
    let server = Server::exact(&settings);
    server.stream_lines(&lines).await;
    let queried = queried(&server);
    assert_eq!(queried["interleaving"], replayed["interleaving"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_experiment_is_retired_and_its_slot_taken_by_a_new_one() {
    // Room for one experiment. The first pair's list is finalized, its group
    // and experiment go idle and are retired; the next pair then registers.
    let server = Server::exact(&["--max-groups", "1", "--group-idle-timeout", "1s"]);
    let list = |request: &str, rankers: [&str; 2], second: u64| {
        vec![
            json!({"impression": {
                "requestId": request, "userId": request, "itemIds": ["i0", "i1"],
                "time": time(second), "model": "mixed", "surface": "home",
                "interleaving": {"rankers": rankers, "teams": [0, 1]},
            }})
            .to_string(),
            json!({"interaction": {
                "userId": request, "requestId": request, "itemId": "i0",
                "type": "click", "time": time(second),
            }})
            .to_string(),
            json!({"interaction": {"userId": "closing", "itemId": "i0", "type": "click", "time": time(second + 1000)}})
                .to_string(),
        ]
    };
    let experiments = |report: &Value| -> Vec<(String, String, u64)> {
        report["interleaving"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let name = |field: &str| r[field].as_str().unwrap().to_owned();
                (name("a"), name("b"), r["lists"].as_u64().unwrap())
            })
            .collect()
    };
    server.stream_lines(&list("r1", ["a", "b"], 0)).await;
    assert_eq!(
        experiments(&queried(&server)),
        [("a".into(), "b".into(), 1)]
    );
    server.wait_for_a_retired_group().await;
    server.stream_lines(&list("r2", ["c", "d"], 2000)).await;
    let report = queried(&server);
    assert_eq!(
        experiments(&report),
        [("c".into(), "d".into(), 1)],
        "{report}"
    );
    assert_eq!(
        report["counters"].get("unregistered_interleaved_lists"),
        None,
        "none left out"
    );
    let metrics = common::server::parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_interleaving_experiments_retired_total"],
        1.0
    );
}

#[test]
fn the_table_shows_each_experiment() {
    let (lines, shown, _) = log(11);
    let (_dir, path) = write_log(&lines);
    let output = common::replay(&[path.as_str()], None);
    let table = String::from_utf8(output.stdout).unwrap();
    let expected = evaluate(&shown, false);
    let ((surface, a, b), counts) = expected.iter().next().unwrap();
    let row = table
        .lines()
        .find(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.len() > 4 && words[0] == surface && words[1] == a && words[2] == b
        })
        .unwrap_or_else(|| panic!("no row for {surface} {a} {b} in\n{table}"));
    assert!(row.contains(&format!(" {} ", counts[0])), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reports_what_replay_reports_and_exports_counters() {
    let (mut lines, shown, _) = log(3);
    // Far past every list, so that all of them are finalized.
    lines.push(r#"{"interaction":{"userId":"closing","itemId":"x","type":"click","time":"2026-11-01T23:00:00Z"}}"#.into());
    let split = [
        "--control-model",
        "alpha",
        "--expected-split",
        "alpha=0.5,beta=0.5",
    ];
    let server = Server::exact(&split);
    server.stream_lines(&lines).await;
    let (_dir, path) = write_log(&lines);
    let replayed = replay_json(&[&["--format", "json", &path][..], &split].concat(), None);
    let report = rankwatch::export::Report::try_from(server.report().await).unwrap();
    // Printed and read back as replay's report is, so that both go through
    // the same decimal form.
    let served: Value = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(served["interleaving"], replayed["interleaving"]);
    check(&served, &evaluate(&shown, false));
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200);
    common::server::assert_promtool_clean(&text);
    let metrics = common::server::parse_metrics(&text);
    assert!(metrics
        .keys()
        .any(|k| k.starts_with("rankwatch_split_check_p_value{")));
    assert!(metrics
        .keys()
        .any(|k| k.starts_with("rankwatch_interleaving_candidate_preference_cs95_upper{")));
    assert_eq!(served["splits"], replayed["splits"]);
    for row in replayed["interleaving"].as_array().unwrap() {
        // parse_metrics sorts each series' labels.
        let labels = format!(
            "{{ranker_a=\"{}\",ranker_b=\"{}\",surface=\"{}\"}}",
            row["a"].as_str().unwrap(),
            row["b"].as_str().unwrap(),
            row["surface"].as_str().unwrap()
        );
        let with_ranker = |side: &str| labels.replace('{', &format!("{{ranker=\"{side}\","));
        for (name, field) in [
            (
                format!("rankwatch_interleaving_lists_total{labels}"),
                "lists",
            ),
            (format!("rankwatch_interleaving_ties_total{labels}"), "ties"),
            (
                format!("rankwatch_interleaving_wins_total{}", with_ranker("a")),
                "wins_a",
            ),
            (
                format!("rankwatch_interleaving_wins_total{}", with_ranker("b")),
                "wins_b",
            ),
            (
                format!(
                    "rankwatch_interleaving_first_picks_total{}",
                    with_ranker("a")
                ),
                "first_a",
            ),
        ] {
            assert_eq!(metrics.get(&name).copied(), row[field].as_f64(), "{name}");
        }
        let since_start = labels.replace('}', ",window=\"since_start\"}");
        let name = format!("rankwatch_interleaving_preference_cs95_lower{since_start}");
        let got = metrics.get(&name).copied().unwrap_or(f64::NAN);
        assert!(
            (got - row["cs95"][0].as_f64().unwrap()).abs() < 1e-9,
            "{name}"
        );
    }
}

#[test]
fn a_malformed_interleaving_is_rejected_with_what_to_change() {
    let line = |interleaving: Value| {
        json!({"impression": {"requestId": "r", "userId": "u", "itemIds": ["a", "b"],
            "time": "2026-11-01T10:00:00Z", "interleaving": interleaving}})
        .to_string()
    };
    let cases = [
        (
            json!({"rankers": ["x"], "teams": [0, 0]}),
            "names 1 rankers",
        ),
        (
            json!({"rankers": ["x", "y", "z", "w"], "teams": [0, 0]}),
            "max_interleaved_rankers = 3",
        ),
        (
            json!({"rankers": ["x", "x"], "teams": [0, 1]}),
            "repeats rankers[0]",
        ),
        (
            json!({"rankers": ["x", "__y"], "teams": [0, 1]}),
            "starts with",
        ),
        (
            json!({"rankers": ["x", "y"], "teams": [0]}),
            "1 entries for 2 item_ids",
        ),
        (
            json!({"rankers": ["x", "y"], "teams": [0, 2]}),
            "teams[1] is 2",
        ),
        (
            json!({"rankers": ["x", "y"], "teams": [0, 1.5]}),
            "teams[1] is not a whole number",
        ),
    ];
    let lines: Vec<String> = cases.iter().map(|(i, _)| line(i.clone())).collect();
    let output = common::replay(
        &["--format", "json", "--max-interleaved-rankers", "3", "-"],
        Some((lines.join("\n") + "\n").as_bytes()),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    for (line, (_, message)) in cases.iter().enumerate() {
        let found = stderr.lines().any(|l| {
            l.starts_with(&format!("-:{}: invalid_interleaving: ", line + 1)) && l.contains(message)
        });
        assert!(found, "line {}: {message} in\n{stderr}", line + 1);
    }
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["counters"]["rejected"]["invalid_interleaving"],
        cases.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_interleaved_lists_and_experiments_survive_a_restart() {
    let (mut lines, shown, _) = log(5);
    lines.push(r#"{"interaction":{"userId":"closing","itemId":"x","type":"click","time":"2026-11-01T23:00:00Z"}}"#.into());
    let dir = tempfile::tempdir().unwrap();
    let args = ["--state-dir", dir.path().to_str().unwrap()];
    // Half the log: some experiments have finalized lists, others are open.
    let (first, rest) = lines.split_at(lines.len() / 2);
    let server = Server::exact(&args);
    server.stream_lines(first).await;
    let code = server.stop().await;
    assert_eq!(code, Some(0));
    let server = Server::exact(&args);
    let restored = common::server::parse_metrics(&server.get("/metrics").1);
    assert!(
        restored["rankwatch_open_impressions"] > 0.0,
        "open lists survived the restart"
    );
    server.stream_lines(rest).await;
    let report = rankwatch::export::Report::try_from(server.report().await).unwrap();
    let served: Value = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    check(&served, &evaluate(&shown, false));
}

#[test]
fn a_broken_traffic_split_is_flagged_and_a_right_one_is_not() {
    // 600 lists of a and 400 of b on home; 500 of each on search.
    let mut lines = Vec::new();
    for list in 0..1000 {
        for (surface, a_lists) in [("home", 600), ("search", 500)] {
            let model = if list < a_lists { "a" } else { "b" };
            lines.push(
                json!({"impression": {"requestId": format!("{surface}{list}"), "userId": format!("u{list}"),
                    "itemIds": ["x"], "time": time(list as u64), "model": model, "surface": surface}})
                .to_string(),
            );
        }
    }
    let (_dir, path) = write_log(&lines);
    let split = ["--expected-split", "a=1,b=1"];
    let report = replay_json(&[&["--format", "json", &path][..], &split].concat(), None);
    let splits = report["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2);
    assert_eq!(
        (&splits[0]["surface"], &splits[0]["mismatch"]),
        (&json!("home"), &json!(true))
    );
    assert_eq!(splits[0]["lists"], json!({"a": 600, "b": 400}));
    assert_eq!(splits[0]["expected"], json!({"a": 0.5, "b": 0.5}));
    assert!(splits[0]["p_value"].as_f64().unwrap() < 1e-6);
    assert_eq!(
        (&splits[1]["surface"], &splits[1]["mismatch"]),
        (&json!("search"), &json!(false)),
        "{splits:?}"
    );
    assert_eq!(splits[1]["p_value"], 1.0);
    let table =
        String::from_utf8(common::replay(&[&[path.as_str()][..], &split].concat(), None).stdout)
            .unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("home") && l.contains("MISMATCH")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_interleaves_and_the_better_model_is_preferred() {
    let server = Server::exact(&["--attribution-window", "1s", "--allowed-lateness", "0s"]);
    let target = format!("http://{}", server.grpc);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
            .args([
                "loadgen",
                "--target",
                &target,
                "--rate",
                "20000",
                "--duration",
                "3s",
            ])
            .args([
                "--models",
                "control=0.9,candidate=0.4",
                "--interleave",
                "0.5",
                "--users",
                "2000",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = rankwatch::export::Report::try_from(server.report().await).unwrap();
    let experiment = report
        .interleaving
        .iter()
        .find(|e| e.surface == "home")
        .expect("an experiment on home");
    assert_eq!(
        (experiment.a.as_str(), experiment.b.as_str()),
        ("candidate", "control")
    );
    assert!(experiment.lists > 500, "{experiment:?}");
    assert!(
        experiment.wins_b > experiment.wins_a,
        "control's items earn more: {experiment:?}"
    );
    assert!(
        experiment.cs95[1] < 0.0,
        "and the anytime bound says so: {experiment:?}"
    );
    let (first_a, first_b) = (experiment.first_a as f64, experiment.first_b as f64);
    assert!(
        (first_a / (first_a + first_b) - 0.5).abs() < 0.1,
        "a fair coin: {experiment:?}"
    );
    let interleaved = report
        .groups
        .iter()
        .find(|g| g.model == "interleaved" && g.surface == "home");
    assert!(
        interleaved.is_some_and(|g| g.lists > 0),
        "interleaved lists count in their group"
    );
}
