//! Coverage and exposure (docs/SPEC.md §11) on a seeded log of tens of thousands of
//! items: `rankwatch replay` gives the exact figures, equal to those computed
//! here from the log itself; a real server, from sketches past
//! `max_exposure_items`, stays within the error docs/metrics.md states.

mod common;

use common::server::{parse_metrics, Server};
use common::{replay_json, Seeded};
use rankwatch::proto;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

const MODELS: [&str; 2] = ["a", "b"];
const LISTS: usize = 8_000;
const LIST_LENGTH: usize = 20;
const CATALOGUE: f64 = 90_000.0;

/// One list as the test sees it: model, items in rank order, clicked ranks (0-based).
struct List {
    model: &'static str,
    items: Vec<String>,
    clicked: Vec<usize>,
}

/// Lists of 20 items drawn with a skew towards popular items (item
/// `⌊90000 · u²⌋`), about a third of them clicked once or twice.
fn lists() -> Vec<List> {
    let mut rng = Seeded(22);
    (0..LISTS)
        .map(|j| {
            let mut items = Vec::with_capacity(LIST_LENGTH);
            let mut seen = HashSet::new();
            while items.len() < LIST_LENGTH {
                let u = rng.unit();
                let item = (CATALOGUE * u * u) as u64;
                if seen.insert(item) {
                    items.push(format!("item-{item}"));
                }
            }
            let clicks = match rng.next() % 6 {
                0 | 1 => 1,
                2 => 2,
                _ => 0,
            };
            let clicked = (0..clicks)
                .map(|_| (rng.next() % LIST_LENGTH as u64) as usize)
                .collect();
            List {
                model: MODELS[j % 2],
                items,
                clicked,
            }
        })
        .collect()
}

/// The log of `lists`: list `j` shown at 10:00 + 10 ms·j, its clicks a second
/// later; then one click 20 minutes on, which finalizes everything.
fn log(lists: &[List]) -> Vec<String> {
    let stamp = |ms: usize| {
        format!(
            "2026-11-01T10:{:02}:{:02}.{:03}Z",
            ms / 60_000,
            ms / 1000 % 60,
            ms % 1000
        )
    };
    let mut lines = Vec::new();
    for (j, list) in lists.iter().enumerate() {
        let items: Vec<String> = list.items.iter().map(|i| format!("\"{i}\"")).collect();
        lines.push(format!(
            r#"{{"impression":{{"requestId":"r{j}","userId":"u{j}","itemIds":[{}],"time":"{}","model":"{}","surface":"home"}}}}"#,
            items.join(","),
            stamp(10 * j),
            list.model
        ));
        for (n, &rank) in list.clicked.iter().enumerate() {
            lines.push(format!(
                r#"{{"interaction":{{"eventId":"e{j}-{n}","userId":"u{j}","itemId":"{}","requestId":"r{j}","type":"click","time":"{}"}}}}"#,
                list.items[rank],
                stamp(10 * j + 1000)
            ));
        }
    }
    lines.push(r#"{"interaction":{"userId":"closing-user","itemId":"closing-item","type":"click","time":"2026-11-01T10:20:00Z"}}"#.to_owned());
    lines
}

/// The figures of one model computed from the lists themselves.
#[derive(Debug)]
struct Expected {
    shown: usize,
    engaged: usize,
    gini: f64,
    entropy: f64,
}

fn expected(lists: &[List], model: &str) -> Expected {
    let mut exposure: HashMap<&str, f64> = HashMap::new();
    let mut engaged = HashSet::new();
    for list in lists.iter().filter(|list| list.model == model) {
        for (j, item) in list.items.iter().enumerate() {
            *exposure.entry(item).or_default() += 1.0 / (j as f64 + 2.0).log2();
        }
        engaged.extend(list.clicked.iter().map(|&rank| &list.items[rank]));
    }
    let mut values: Vec<f64> = exposure.into_values().collect();
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    let total: f64 = values.iter().sum();
    let gini = values
        .iter()
        .enumerate()
        .map(|(i, x)| (2.0 * (i as f64 + 1.0) - n - 1.0) * x)
        .sum::<f64>()
        / (n * total);
    let entropy = -values
        .iter()
        .map(|x| x / total * (x / total).ln())
        .sum::<f64>()
        / n.ln();
    Expected {
        shown: values.len(),
        engaged: engaged.len(),
        gini,
        entropy,
    }
}

fn write_log(lines: &[String]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, (lines.join("\n") + "\n").as_bytes()).unwrap();
    file
}

fn coverage_of<'a>(report: &'a Value, model: &str) -> &'a Value {
    let group = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["model"] == model)
        .unwrap();
    &group["coverage"]
}

fn relative_error(estimate: u64, exact: u64) -> f64 {
    (estimate as f64 / exact as f64 - 1.0).abs()
}

#[test]
fn replay_is_exact_and_equal_to_the_figures_of_the_log() {
    let lists = lists();
    let file = write_log(&log(&lists));
    let report = replay_json(&["--format", "json", file.path().to_str().unwrap()], None);
    for model in MODELS {
        let got = coverage_of(&report, model);
        let want = expected(&lists, model);
        assert!(want.shown > 40_000, "a log of many items: {want:?}");
        assert_eq!(got["exact"], true);
        assert_eq!(got["items_shown"], want.shown as u64);
        assert_eq!(got["items_engaged"], want.engaged as u64);
        let gini = got["exposure_gini"].as_f64().unwrap();
        let entropy = got["exposure_entropy"].as_f64().unwrap();
        assert!((gini - want.gini).abs() < 1e-9, "{gini} against {want:?}");
        assert!(
            (entropy - want.entropy).abs() < 1e-9,
            "{entropy} against {want:?}"
        );
    }
}

#[test]
fn coverage_off_leaves_it_out() {
    let lists = lists();
    let file = write_log(&log(&lists[..100]));
    let path = file.path().to_str().unwrap();
    let report = replay_json(
        &["--format", "json", "--max-exposure-items", "0", path],
        None,
    );
    assert!(report["groups"][0].get("coverage").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_estimates_within_the_stated_error_of_the_exact_replay() {
    let lists = lists();
    let lines = log(&lists);
    let file = write_log(&lines);
    let path = file.path().to_str().unwrap();
    let exact = replay_json(&["--format", "json", path], None);
    let sketched = replay_json(&["--format", "json", "--sketch-coverage", path], None);

    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--wall-clock-advance",
        "false",
        "--state-dir",
        dir.path().to_str().unwrap(),
    ];
    let server = Server::start(&args);
    server.stream_lines(&lines).await;
    let since_start = server.report().await;
    let hour = hour_report(&server).await;
    let (_, text) = server.get("/metrics");
    let series = parse_metrics(&text);

    for model in MODELS {
        let exact = coverage_of(&exact, model);
        let exact_shown = exact["items_shown"].as_u64().unwrap();
        let exact_engaged = exact["items_engaged"].as_u64().unwrap();
        let find = |report: &proto::Report| {
            report
                .groups
                .iter()
                .find(|g| g.model == model)
                .and_then(|g| g.coverage)
                .unwrap()
        };
        for online in [find(&since_start), find(&hour)] {
            assert!(!online.exact, "past max_exposure_items: estimated");
            assert!(relative_error(online.items_shown, exact_shown) < 0.02);
            assert!(relative_error(online.items_engaged, exact_engaged) < 0.02);
            let gini = exact["exposure_gini"].as_f64().unwrap();
            let entropy = exact["exposure_entropy"].as_f64().unwrap();
            assert!((online.exposure_gini - gini).abs() < 0.02, "{online:?}");
            assert!(
                (online.exposure_entropy - entropy).abs() < 0.02,
                "{online:?}"
            );
        }
        // The server's figures since start are what replay computes from the same sketches.
        let online = find(&since_start);
        let replayed = coverage_of(&sketched, model);
        assert_eq!(replayed["items_shown"], online.items_shown);
        assert_eq!(replayed["items_engaged"], online.items_engaged);
        let gini = replayed["exposure_gini"].as_f64().unwrap();
        assert!((gini - online.exposure_gini).abs() < 1e-9);
        let labels = format!("model=\"{model}\",surface=\"home\",window=\"since_start\"");
        assert_eq!(
            series[&format!("rankwatch_items_shown{{{labels}}}")],
            online.items_shown as f64
        );
        let gauge = series[&format!("rankwatch_exposure_entropy_normalized{{{labels}}}")];
        assert!((gauge - online.exposure_entropy).abs() < 1e-9);
    }

    // The sketches survive a restart.
    assert_eq!(server.stop().await, Some(0));
    let server = Server::start(&args);
    assert_eq!(server.report().await, since_start);
    assert_eq!(hour_report(&server).await, hour);
}

async fn hour_report(server: &Server) -> proto::Report {
    let request = proto::GetMetricsRequest {
        window: "1h".to_owned(),
    };
    let mut client = server.evaluation().await;
    client.get_metrics(request).await.unwrap().into_inner()
}
