//! Standard errors and comparisons against a control (docs/SPEC.md §9) on a log
//! generated here with a seed, checked against figures computed in this file
//! straight from the generated grades, through `replay` and a real server.

mod common;

use common::server::{event_from_json, parse_metrics, Server};
use common::{replay, replay_json, Seeded};
use rankwatch::metrics::Metric;
use rankwatch::proto::{self, EventBatch};
use serde_json::{json, Value};

const KS: [usize; 3] = [1, 5, 10];
const MODELS: [&str; 3] = ["cand", "ctl", "other"];
const SURFACES: [&str; 2] = ["home", "search"];
const ITEMS: usize = 8;

/// One generated list: its group and the grade of each rank.
struct List {
    model: &'static str,
    surface: &'static str,
    grades: Vec<f64>,
}

fn generate(seed: u64, count: usize) -> Vec<List> {
    let mut rng = Seeded(seed);
    (0..count)
        .map(|i| {
            let model_index = (rng.next() % 3) as usize;
            let engagement = [0.12, 0.18, 0.08][model_index];
            let grades = (0..ITEMS)
                .map(|rank| {
                    if rng.unit() < engagement / (1.0 + rank as f64 * 0.3) {
                        1.0 + (rng.next() % 3) as f64
                    } else {
                        0.0
                    }
                })
                .collect();
            List {
                model: MODELS[model_index],
                surface: SURFACES[i % 2],
                grades,
            }
        })
        .collect()
}

fn time(second: usize) -> String {
    format!(
        "2026-11-01T{:02}:{:02}:{:02}Z",
        10 + second / 3600,
        second / 60 % 60,
        second % 60
    )
}

fn log_of(lists: &[List]) -> Vec<Value> {
    let mut lines = Vec::new();
    for (i, list) in lists.iter().enumerate() {
        let items: Vec<String> = (0..ITEMS).map(|j| format!("r{i}-item{j}")).collect();
        lines.push(
            json!({"impression": {"requestId": format!("r{i}"), "userId": format!("u{i}"),
            "itemIds": items, "time": time(i), "model": list.model, "surface": list.surface}}),
        );
        for (j, grade) in list.grades.iter().enumerate().filter(|(_, g)| **g > 0.0) {
            lines.push(
                json!({"interaction": {"userId": format!("u{i}"), "itemId": format!("r{i}-item{j}"),
                "requestId": format!("r{i}"), "type": "click", "time": time(i + 1),
                "eventId": format!("e{i}-{j}"), "grade": grade}}),
            );
        }
    }
    lines
}

/// The checked metrics at cutoff `k` of one list, straight from the definitions of docs/SPEC.md §4.
fn list_metrics(grades: &[f64], k: usize) -> [(&'static str, f64); 4] {
    let cut = &grades[..k.min(grades.len())];
    let first = cut.iter().position(|g| *g > 0.0);
    let relevant = cut.iter().filter(|g| **g > 0.0).count() as f64;
    let dcg = |gs: &[f64]| -> f64 {
        gs.iter()
            .take(k)
            .enumerate()
            .map(|(j, g)| g / ((j + 2) as f64).log2())
            .sum()
    };
    let mut ideal = grades.to_vec();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg = dcg(&ideal);
    [
        ("hit_rate", if first.is_some() { 1.0 } else { 0.0 }),
        ("mrr", first.map_or(0.0, |j| 1.0 / (j + 1) as f64)),
        ("precision", relevant / k as f64),
        ("ndcg", if idcg > 0.0 { dcg(grades) / idcg } else { 0.0 }),
    ]
}

/// Mean, sample variance (two-pass) and standard error of `values`.
fn described(values: &[f64]) -> (f64, f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n;
    let variance = if values.len() < 2 {
        0.0
    } else {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    };
    (mean, variance, (variance / n).sqrt())
}

/// The per-list values of one metric key in one group, and which lists were engaged.
fn values_of(
    lists: &[List],
    model: &str,
    surface: &str,
    metric: &str,
    k: usize,
) -> Vec<(f64, bool)> {
    lists
        .iter()
        .filter(|l| l.model == model && l.surface == surface)
        .map(|l| {
            let value = list_metrics(&l.grades, k)
                .iter()
                .find(|(name, _)| *name == metric)
                .map(|(_, v)| *v)
                .unwrap();
            (value, l.grades.iter().any(|g| *g > 0.0))
        })
        .collect()
}

/// What docs/SPEC.md §9 and docs/statistics.md say a comparison is, computed independently.
fn expected_comparison(candidate: &[f64], control: &[f64]) -> [f64; 6] {
    let (mean_m, var_m, se_m) = described(candidate);
    let (mean_c, var_c, se_c) = described(control);
    let (n_m, n_c) = (candidate.len() as f64, control.len() as f64);
    let diff = mean_m - mean_c;
    let se = (se_m * se_m + se_c * se_c).sqrt();
    // The sequence takes each variance at least at the pooled one.
    let pooled = ((n_m - 1.0) * var_m + (n_c - 1.0) * var_c) / (n_m + n_c - 2.0);
    let (var_m, var_c) = (var_m.max(pooled), var_c.max(pooled));
    let t = if var_m + var_c > 0.0 {
        (var_m + var_c) / (var_m / n_m + var_c / n_c)
    } else {
        2.0 / (1.0 / n_m + 1.0 / n_c)
    };
    let alpha: f64 = 0.05;
    let rho2 = (-2.0 * alpha.ln() + (-2.0 * alpha.ln() + 1.0).ln()) / 10_000.0;
    let x = t * rho2;
    let sequence_se = (var_m / n_m + var_c / n_c).sqrt();
    let half = sequence_se * ((x + 1.0) / x * ((x + 1.0) / (alpha * alpha)).ln()).sqrt();
    let z = 1.959963984540054 * se;
    [diff, se, diff - z, diff + z, diff - half, diff + half]
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9,
        "{what}: got {got}, expected {want}"
    );
}

#[test]
fn replay_gives_standard_errors_and_comparisons_computed_from_the_grades() {
    let lists = generate(0x5eed_2026, 900);
    let log: String = log_of(&lists).iter().map(|l| format!("{l}\n")).collect();
    let report = replay_json(
        &[
            "-",
            "--format",
            "json",
            "--k",
            "1,5,10",
            "--control-model",
            "ctl",
        ],
        Some(log.as_bytes()),
    );
    let mut checked = 0;
    for group in report["groups"].as_array().unwrap() {
        let (model, surface) = (
            group["model"].as_str().unwrap(),
            group["surface"].as_str().unwrap(),
        );
        for k in KS {
            for metric in ["hit_rate", "mrr", "precision", "ndcg"] {
                let values = values_of(&lists, model, surface, metric, k);
                let all: Vec<f64> = values.iter().map(|(v, _)| *v).collect();
                let engaged: Vec<f64> =
                    values.iter().filter(|(_, e)| *e).map(|(v, _)| *v).collect();
                let entry = &group["metrics"][format!("{metric}@{k}")];
                let what = format!("{model}/{surface} {metric}@{k}");
                close(entry["all"].as_f64().unwrap(), described(&all).0, &what);
                close(entry["se_all"].as_f64().unwrap(), described(&all).2, &what);
                close(
                    entry["se_engaged"].as_f64().unwrap(),
                    described(&engaged).2,
                    &what,
                );
                assert!(
                    described(&all).2 > 0.0,
                    "{what}: a standard error that can be wrong"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, MODELS.len() * SURFACES.len() * KS.len() * 4);

    let comparisons = report["comparisons"].as_array().unwrap();
    assert_eq!(
        comparisons.len(),
        2 * 2 * KS.len() * Metric::COUNT,
        "2 surfaces × 2 models × every metric"
    );
    let keys: Vec<(String, String, String)> = comparisons
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap().to_owned();
            (field("surface"), field("model"), field("metric"))
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "sorted by surface, model, metric"
    );
    let mut checked = 0;
    for c in comparisons {
        assert_eq!(c["control"], "ctl");
        let metric_key = c["metric"].as_str().unwrap();
        let (metric, k) = metric_key.split_once('@').unwrap();
        if !["hit_rate", "mrr", "precision", "ndcg"].contains(&metric) {
            continue;
        }
        let k: usize = k.parse().unwrap();
        let surface = c["surface"].as_str().unwrap();
        let values = |model| -> Vec<f64> {
            values_of(&lists, model, surface, metric, k)
                .iter()
                .map(|(v, _)| *v)
                .collect()
        };
        let want = expected_comparison(&values(c["model"].as_str().unwrap()), &values("ctl"));
        let got = [
            c["diff"].as_f64().unwrap(),
            c["se"].as_f64().unwrap(),
            c["ci95"][0].as_f64().unwrap(),
            c["ci95"][1].as_f64().unwrap(),
            c["cs95"][0].as_f64().unwrap(),
            c["cs95"][1].as_f64().unwrap(),
        ];
        for (name, (g, w)) in ["diff", "se", "ci lo", "ci hi", "cs lo", "cs hi"]
            .iter()
            .zip(got.iter().zip(want))
        {
            close(
                *g,
                w,
                &format!("{surface} {} {metric_key} {name}", c["model"]),
            );
        }
        assert!(
            got[4] < got[2] && got[5] > got[3],
            "the sequence contains the interval"
        );
        checked += 1;
    }
    assert_eq!(checked, 2 * 2 * KS.len() * 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_gives_the_same_figures_in_get_metrics_and_metrics() {
    let lists = generate(0xfeed_0020, 600);
    let mut events: Vec<proto::Event> = log_of(&lists)
        .iter()
        .filter_map(|l| event_from_json(&l.to_string()))
        .collect();
    events.push(
        event_from_json(r#"{"interaction":{"userId":"closing","itemId":"x","type":"click","time":"2026-11-03T10:00:00Z"}}"#)
            .unwrap(),
    );
    let server = Server::exact(&["--k", "1,5,10", "--control-model", "ctl"]);
    let batches: Vec<EventBatch> = events
        .chunks(50)
        .enumerate()
        .map(|(i, chunk)| EventBatch {
            sequence: i as u64 + 1,
            events: chunk.to_vec(),
        })
        .collect();
    let mut acks = server
        .collector()
        .await
        .ingest(tokio_stream::iter(batches))
        .await
        .unwrap()
        .into_inner();
    while acks.message().await.unwrap().is_some() {}

    let report = server.report().await;
    assert_eq!(report.config.as_ref().unwrap().control_model, "ctl");
    let values = |model, surface, metric| -> Vec<f64> {
        values_of(&lists, model, surface, metric, 10)
            .iter()
            .map(|(v, _)| *v)
            .collect()
    };
    for group in &report.groups {
        let (model, surface) = (group.model.as_str(), group.surface.as_str());
        let ndcg = &group.metrics["ndcg@10"];
        close(
            ndcg.se_all,
            described(&values(model, surface, "ndcg")).2,
            "GetMetrics se_all",
        );
    }
    let home = report
        .comparisons
        .iter()
        .find(|c| c.surface == "home" && c.model == "cand" && c.metric == "ndcg@10")
        .expect("a comparison of cand against ctl on home");
    let want = expected_comparison(
        &values("cand", "home", "ndcg"),
        &values("ctl", "home", "ndcg"),
    );
    close(home.diff, want[0], "diff");
    close(home.cs95_lower, want[4], "cs95 lower");
    close(home.ci95_upper, want[3], "ci95 upper");

    let metrics = parse_metrics(&server.get("/metrics").1);
    let squares: f64 = values("ctl", "search", "ndcg").iter().map(|v| v * v).sum();
    close(
        metrics[r#"rankwatch_list_ndcg_sum_of_squares_total{k="10",model="ctl",surface="search"}"#],
        squares,
        "sum of squares",
    );
    close(
        metrics[r#"rankwatch_comparison_cs95_lower{control="ctl",k="10",metric="ndcg",model="cand",surface="home",window="since_start"}"#],
        want[4],
        "cs95 lower gauge",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_per_list_sum_has_its_sum_of_squares_and_every_window_mean_its_standard_error() {
    // R-precision of 0 (b clicked, a first), 1 (a clicked) and 1/2 (a and c
    // clicked of 4): Σv² = 1.25, mean 0.5, s² = 0.25, se = sqrt(0.25 / 3).
    let lists: [(&[&str], &[&str]); 3] = [
        (&["a", "b", "c"], &["b"]),
        (&["a", "b"], &["a"]),
        (&["a", "b", "c", "d"], &["a", "c"]),
    ];
    let mut lines = Vec::new();
    for (list, (items, clicked)) in lists.iter().enumerate() {
        lines.push(format!(
            r#"{{"impression":{{"requestId":"r{list}","userId":"u{list}","itemIds":{items:?},"model":"m","surface":"home","time":"2026-11-01T10:00:00Z"}}}}"#
        ));
        for item in *clicked {
            lines.push(format!(
                r#"{{"interaction":{{"requestId":"r{list}","userId":"u{list}","itemId":"{item}","type":"click","time":"2026-11-01T10:00:01Z"}}}}"#
            ));
        }
    }
    lines.push(r#"{"interaction":{"userId":"closing","itemId":"x","type":"click","time":"2026-11-01T10:06:00Z"}}"#.to_owned());
    let server = Server::exact(&["--windows", "1h"]);
    server.stream_lines(&lines).await;
    let metrics = parse_metrics(&server.get("/metrics").1);
    let labels = r#"model="m",surface="home""#;
    close(
        metrics[&format!("rankwatch_list_r_precision_sum_of_squares_total{{{labels}}}")],
        1.25,
        "R-precision's sum of squares",
    );
    for scope in ["all", "engaged"] {
        let key = format!(
            r#"rankwatch_r_precision_standard_error{{model="m",scope="{scope}",surface="home",window="1h"}}"#
        );
        close(metrics[&key], (0.25f64 / 3.0).sqrt(), &key);
    }
    // Every other metric too, at every K.
    for key in metrics.keys() {
        if let Some((family, labels)) = key.split_once("_sum{") {
            if family.starts_with("rankwatch_list_") {
                let squares = format!("{family}_sum_of_squares_total{{{labels}");
                assert!(metrics.contains_key(&squares), "{key} has no {squares}");
            }
        }
    }
}

#[test]
fn replay_prints_comparisons_in_the_order_of_their_cutoffs_as_numbers() {
    let lists = generate(0x5eed_2027, 200);
    let log: String = log_of(&lists).iter().map(|l| format!("{l}\n")).collect();
    let output = replay(
        &["-", "--k", "5,10", "--control-model", "ctl"],
        Some(log.as_bytes()),
    );
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    let ndcg_rows: Vec<&str> = table
        .lines()
        .filter_map(|line| line.split_whitespace().find(|w| w.starts_with("ndcg@")))
        .collect();
    assert_eq!(
        ndcg_rows,
        ["ndcg@5", "ndcg@10"].repeat(SURFACES.len() * (MODELS.len() - 1)),
        "{table}"
    );
}
