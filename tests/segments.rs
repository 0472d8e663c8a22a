//! Segments (docs/SPEC.md §11): the values of the impression labels named in
//! `segment_labels` are dimensions of every group, folded into `__other__`
//! past `max_segment_values`. A real server and `rankwatch replay` agree on
//! every figure of a small log worked by hand; without segment labels the
//! output does not change; bad labels are rejected, and no client can grow
//! the number of groups past its bounds.

mod common;

use common::server::{event_from_json, parse_metrics, saving_to, split_labels, Server};
use common::{replay, replay_json};
use rankwatch::proto::{self, EventBatch};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// An impression of items a, b, c by `user` at second `second` of the log.
fn impression(request: &str, user: &str, model: &str, second: u32, labels: Value) -> String {
    let mut m = json!({"requestId": request, "userId": user, "itemIds": ["a", "b", "c"],
        "time": format!("2026-11-01T10:00:{second:02}Z"), "model": model});
    if !labels.is_null() {
        m["labels"] = labels;
    }
    json!({ "impression": m }).to_string()
}

/// A click by `user` on `item` of `request`, a second after second `second`.
fn click(request: &str, user: &str, item: &str, second: u32) -> String {
    json!({"interaction": {"userId": user, "itemId": item, "requestId": request, "type": "click",
        "time": format!("2026-11-01T10:00:{:02}Z", second + 1)}})
    .to_string()
}

/// An interaction an hour later: it finalizes every list, then waits.
const CLOSING: &str = r#"{"interaction":{"userId":"closing-user","itemId":"x","type":"click","time":"2026-11-01T11:00:00Z"}}"#;

/// The log worked by hand. With `segment_labels = ["country"]` and
/// `max_segment_values = 2`, de and fr are kept (first seen), it, es and
/// the absent country (`default`) fold into `__other__`:
///
/// | request | model | country | clicked rank | group |
/// |---|---|---|---|---|
/// | r1 | v1 | de | 1 | v1/de |
/// | r2 | v1 | fr | 2 | v1/fr |
/// | r3 | v1 | it | 3 | v1/__other__ |
/// | r4 | v1 | es | none | v1/__other__ |
/// | r5 | v1 | de | none | v1/de |
/// | r6 | v2 | de | 1 | v2/de |
/// | r7 | v2 | (none) | 2 | v2/__other__ |
///
/// Every impression also has an `app` label, which no setting names.
fn log() -> Vec<String> {
    let labelled = |country: Option<&str>| match country {
        Some(country) => json!({"country": country, "app": "ios"}),
        None => json!({"app": "android"}),
    };
    let mut lines = Vec::new();
    let lists = [
        ("r1", "v1", Some("de"), Some("a")),
        ("r2", "v1", Some("fr"), Some("b")),
        ("r3", "v1", Some("it"), Some("c")),
        ("r4", "v1", Some("es"), None),
        ("r5", "v1", Some("de"), None),
        ("r6", "v2", Some("de"), Some("a")),
        ("r7", "v2", None, Some("b")),
    ];
    for (i, (request, model, country, clicked)) in lists.into_iter().enumerate() {
        let (user, second) = (format!("u{i}"), 2 * i as u32);
        lines.push(impression(request, &user, model, second, labelled(country)));
        if let Some(item) = clicked {
            lines.push(click(request, &user, item, second));
        }
    }
    lines.push(CLOSING.to_owned());
    lines
}

const SEGMENTED: [&str; 6] = [
    "--segment-labels",
    "country",
    "--max-segment-values",
    "2",
    "--control-model",
    "v1",
];

/// [`SEGMENTED`], with no wall clock, saving to `dir`.
fn segmented_with_state(dir: &std::path::Path) -> Vec<&str> {
    [&SEGMENTED[..], &saving_to(dir)].concat()
}

async fn send(server: &Server, lines: &[String]) -> Vec<proto::IngestAck> {
    let events: Vec<proto::Event> = lines.iter().filter_map(|l| event_from_json(l)).collect();
    let mut client = server.collector().await;
    let mut acks = Vec::new();
    for (i, chunk) in events.chunks(3).enumerate() {
        let batch = EventBatch {
            sequence: i as u64 + 1,
            events: chunk.to_vec(),
        };
        acks.push(client.ingest_batch(batch).await.unwrap().into_inner());
    }
    acks
}

fn replay_of(lines: &[String], args: &[&str]) -> Value {
    let log: String = lines.iter().map(|l| format!("{l}\n")).collect();
    replay_json(
        &[&["-", "--format", "json"], args].concat(),
        Some(log.as_bytes()),
    )
}

/// `GetMetrics`' report in the replay's JSON shape: groups and comparisons.
fn as_replay_json(report: &proto::Report) -> Value {
    let groups: Vec<Value> = report
        .groups
        .iter()
        .map(|g| {
            let metrics: serde_json::Map<String, Value> = g
                .metrics
                .iter()
                .map(|(k, m)| {
                    let mean = json!({"all": m.all, "engaged": m.engaged, "se_all": m.se_all, "se_engaged": m.se_engaged});
                    (k.clone(), mean)
                })
                .collect();
            let positions: Vec<Value> = g
                .positions
                .iter()
                .map(|p| json!({"rank": p.rank, "lists": p.lists, "interactions": p.interactions}))
                .collect();
            let segments: BTreeMap<&String, &String> = g.segments.iter().collect();
            let mut group = json!({"model": g.model, "surface": g.surface, "segments": segments, "lists": g.lists,
                "engaged_lists": g.engaged_lists, "metrics": metrics, "positions": positions});
            if let Some(c) = &g.coverage {
                group["coverage"] = json!({"items_shown": c.items_shown, "items_engaged": c.items_engaged,
                    "exposure_gini": c.exposure_gini, "exposure_entropy": c.exposure_entropy, "exact": c.exact});
            }
            group
        })
        .collect();
    let comparisons: Vec<Value> = report
        .comparisons
        .iter()
        .map(|c| {
            let segments: BTreeMap<&String, &String> = c.segments.iter().collect();
            json!({"surface": c.surface, "segments": segments, "model": c.model, "control": c.control,
                "metric": c.metric, "diff": c.diff, "se": c.se, "ci95": [c.ci95_lower, c.ci95_upper],
                "cs95": [c.cs95_lower, c.cs95_upper]})
        })
        .collect();
    json!({"groups": groups, "comparisons": comparisons})
}

/// The group of `model` whose country is `country` in a report's JSON.
fn group<'a>(report: &'a Value, model: &str, country: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["model"] == model && g["segments"]["country"] == country)
        .unwrap_or_else(|| panic!("no group {model}/{country}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_replay_give_the_hand_worked_figures_per_segment() {
    let lines = log();
    let expected = replay_of(&lines, &SEGMENTED);

    // The replay: four groups with the values worked by hand.
    let figures = |model: &str, country: &str| {
        let g = group(&expected, model, country);
        (
            g["lists"].as_u64().unwrap(),
            g["metrics"]["hit_rate@1"]["all"].as_f64().unwrap(),
            g["metrics"]["mrr@10"]["all"].as_f64().unwrap(),
        )
    };
    assert_eq!(figures("v1", "de"), (2, 0.5, 0.5));
    assert_eq!(figures("v1", "fr"), (1, 0.0, 0.5));
    let (lists, hit, mrr) = figures("v1", "__other__");
    assert_eq!((lists, hit), (2, 0.0));
    assert!((mrr - 1.0 / 6.0).abs() < 1e-12, "{mrr}");
    assert_eq!(figures("v2", "de"), (1, 1.0, 1.0));
    assert_eq!(figures("v2", "__other__"), (1, 0.0, 0.5));
    assert_eq!(expected["groups"].as_array().unwrap().len(), 5);
    let keys: Vec<&str> = expected["groups"][0]["segments"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["country"], "the app label is no segment");
    // v2 is compared with v1 within each country, never across.
    let compared: Vec<(&str, &str)> = expected["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"] == "mrr@10")
        .map(|c| {
            (
                c["segments"]["country"].as_str().unwrap(),
                c["model"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(compared, [("__other__", "v2"), ("de", "v2")]);
    let de = expected["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "mrr@10" && c["segments"]["country"] == "de")
        .unwrap();
    assert_eq!(de["diff"].as_f64().unwrap(), 0.5);

    // The server, sent the same events, says the same.
    let args = [&SEGMENTED[..], &["--wall-clock-advance", "false"]].concat();
    let server = Server::start(&args);
    let acks = send(&server, &lines).await;
    assert!(acks.iter().all(|ack| ack.rejections.is_empty()), "{acks:?}");
    let served = as_replay_json(&server.report().await);
    common::assert_reports_match(&served["groups"], &expected["groups"]);
    common::assert_reports_match(&served["comparisons"], &expected["comparisons"]);

    let metrics = parse_metrics(&server.get("/metrics").1);
    let series = |name: &str, labels: &str| {
        *metrics
            .get(&format!("{name}{{{labels}}}"))
            .unwrap_or_else(|| panic!("no {name}{{{labels}}}"))
    };
    let v1_de = r#"country="de",k="10",model="v1",surface="default""#;
    assert_eq!(series("rankwatch_list_mrr_count", v1_de), 2.0);
    assert_eq!(series("rankwatch_list_mrr_sum", v1_de), 1.0);
    let v1_other = r#"country="__other__",k="10",model="v1",surface="default""#;
    assert_eq!(series("rankwatch_list_mrr_count", v1_other), 2.0);
    assert!((series("rankwatch_list_mrr_sum", v1_other) - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(
        series(
            "rankwatch_lists_finalized_total",
            r#"country="fr",model="v1",surface="default""#
        ),
        1.0
    );
    assert_eq!(
        series(
            "rankwatch_position_lists_total",
            r#"country="de",model="v2",rank="3",surface="default""#
        ),
        1.0
    );
    assert_eq!(
        series(
            "rankwatch_comparison_diff",
            r#"control="v1",country="de",k="10",metric="mrr",model="v2",surface="default",window="since_start""#
        ),
        0.5
    );
    // it, es, and r7's absent country (v1's de and fr took the two places).
    assert_eq!(
        series(
            "rankwatch_segment_values_folded_total",
            r#"label="country""#
        ),
        3.0
    );
    assert_eq!(
        series("rankwatch_limit", r#"limit="max_segment_values""#),
        2.0
    );
    assert!(
        metrics.keys().all(|key| !key.contains("app=")),
        "the unnamed label is on no series"
    );
    let per_group = metrics
        .keys()
        .filter(|key| key.contains("model="))
        .collect::<Vec<_>>();
    assert!(per_group.iter().all(|key| key.contains("country=")));
}

/// Without segment labels, labels change nothing: the replay's report and
/// the server's per-group series are those of the same log without labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_segment_labels_labels_change_nothing() {
    let labelled = log();
    let plain: Vec<String> = labelled
        .iter()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            if let Some(m) = event.get_mut("impression") {
                m.as_object_mut().unwrap().remove("labels");
            }
            event.to_string()
        })
        .collect();
    assert_ne!(labelled, plain);
    assert_eq!(replay_of(&labelled, &[]), replay_of(&plain, &[]));
    let table = |lines: &[String]| {
        let log: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let output = replay(&["-"], Some(log.as_bytes()));
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(table(&labelled), table(&plain));

    let engine_series = |text: &str| -> String {
        text.lines()
            .filter(|line| line.contains("model=") || line.contains("overflow"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let args = ["--wall-clock-advance", "false"];
    let (first, second) = (Server::start(&args), Server::start(&args));
    send(&first, &labelled).await;
    send(&second, &plain).await;
    let (a, b) = (first.get("/metrics").1, second.get("/metrics").1);
    assert!(!engine_series(&a).is_empty());
    assert_eq!(engine_series(&a), engine_series(&b));
    assert!(
        !a.contains("segment"),
        "no segment series without segment labels"
    );
}

/// Values too long or of the server's own names are rejected with the
/// model's and surface's reasons and a message quoting a short prefix;
/// labels no setting names are never read, whatever they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_segment_values_are_rejected_and_other_labels_ignored() {
    let long = "x".repeat(100_000);
    let lines = [
        impression("r1", "u1", "v1", 0, json!({"country": long})),
        impression("r2", "u2", "v1", 1, json!({"country": "__other__"})),
        impression("r3", "u3", "v1", 2, json!({"country": "__overflow__"})),
        impression(
            "r4",
            "u4",
            "v1",
            3,
            json!({"__country": "__x", "misc": long}),
        ),
        impression("r5", "u5", "v1", 4, json!({"country": ""})),
        impression("r6", "u6", "v1", 5, json!({"country": "de\"\\\n€"})),
    ];
    let args = [
        "--wall-clock-advance",
        "false",
        "--segment-labels",
        "country",
        "--max-label-bytes",
        "32",
    ];
    let server = Server::start(&args);
    let acks = send(&server, &lines).await;
    let rejections: Vec<(u32, String, String)> = acks
        .iter()
        .enumerate()
        .flat_map(|(batch, ack)| {
            ack.rejections.iter().map(move |r| {
                (
                    batch as u32 * 3 + r.index,
                    r.reason.clone(),
                    r.message.clone(),
                )
            })
        })
        .collect();
    let reasons: Vec<(u32, &str)> = rejections
        .iter()
        .map(|(i, reason, _)| (*i, reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (0, "label_too_long"),
            (1, "reserved_name"),
            (2, "reserved_name")
        ]
    );
    assert_eq!(
        rejections[0].2,
        format!(
            "labels[\"country\"] \"{}\"… (100000 bytes) is longer than max_label_bytes = 32",
            "x".repeat(64)
        )
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics[r#"rankwatch_events_rejected_total{reason="reserved_name"}"#],
        2.0
    );
    assert_eq!(metrics["rankwatch_impressions_total"], 3.0);

    // The replay reads the same lines alike, and an escaped value whole.
    let mut log: Vec<String> = lines.to_vec();
    log.push(CLOSING.to_owned());
    let report = replay_of(&log, &args[2..]);
    assert_eq!(report["counters"]["rejected"]["label_too_long"], 1);
    assert_eq!(report["counters"]["rejected"]["reserved_name"], 2);
    let countries: Vec<&str> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["segments"]["country"].as_str().unwrap())
        .collect();
    assert_eq!(countries, ["de\"\\\n€", "default"]);
    assert_eq!(group(&report, "v1", "default")["lists"], 2);
    // A label value that is not a string makes the line invalid JSON.
    let not_text = r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z","labels":{"country":7}}}"#;
    let report = replay_of(&[not_text.to_owned()], &args[2..]);
    assert_eq!(report["counters"]["rejected"]["invalid_json"], 1);
}

/// However many values and models clients send, the groups stay within
/// `max_groups` plus the overflow group, the values of each label within
/// `max_segment_values` plus `__other__`, and every fold is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_stay_bounded_whatever_clients_send() {
    let mut lines = Vec::new();
    for i in 0..600u32 {
        let labels = json!({"country": format!("c{i}"), "app": format!("a{}", i % 2)});
        let model = format!("m{}", i % 3);
        let user = format!("u{i}");
        lines.push(impression(&format!("r{i}"), &user, &model, i % 60, labels));
    }
    lines.push(CLOSING.to_owned());
    let args = [
        "--wall-clock-advance",
        "false",
        "--segment-labels",
        "country,app",
        "--max-segment-values",
        "5",
        "--max-groups",
        "8",
    ];
    let server = Server::start(&args);
    send(&server, &lines).await;
    let report = server.report().await;
    assert_eq!(report.groups.len(), 9, "8 groups and the overflow group");
    let lists: u64 = report.groups.iter().map(|g| g.lists).sum();
    assert_eq!(lists, 600);
    let overflow = report
        .groups
        .iter()
        .find(|g| g.model == "__overflow__")
        .unwrap();
    assert_eq!(overflow.segments["country"], "__overflow__");
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics[r#"rankwatch_segment_values_folded_total{label="country"}"#],
        595.0
    );
    assert_eq!(
        metrics[r#"rankwatch_segment_values_folded_total{label="app"}"#],
        0.0
    );
    assert_eq!(metrics["rankwatch_groups"], 9.0);
    // Five kept countries make five groups, and __other__ with each (model,
    // app) six more: the last three overflow.
    assert_eq!(
        metrics["rankwatch_impressions_overflowed_total"],
        600.0
            - report
                .groups
                .iter()
                .filter(|g| g.model != "__overflow__")
                .map(|g| g.lists)
                .sum::<u64>() as f64
    );
    let expected = replay_of(&lines, &args[2..]);
    assert_eq!(
        as_replay_json(&report)["groups"].as_array().unwrap().len(),
        expected["groups"].as_array().unwrap().len()
    );
    common::assert_reports_match(&as_replay_json(&report)["groups"], &expected["groups"]);
}

#[test]
fn segment_labels_must_be_label_names_of_their_own() {
    for bad in ["model", "1x", "__x", "a-b", "country,country"] {
        let output = replay(&["-", "--segment-labels", bad], Some(b""));
        assert!(!output.status.success(), "{bad} was taken");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("segment_labels"), "{bad}: {stderr}");
    }
    let output = replay(&["-", "--max-segment-values", "0"], Some(b""));
    assert!(!output.status.success());
}

/// No label of rankwatch's own series can be named a segment label, which
/// would give their series the label twice and make Prometheus drop the
/// whole scrape: every label name that `/metrics` shows, with interleaving,
/// a control model, segments, coverage and position curves at work (the
/// demo's traffic), is refused as a segment label but the segment's own.
#[test]
fn no_label_of_rankwatchs_own_series_can_be_a_segment_label() {
    let demo = Server::demo(&["--interleave", "0.5", "--segment-labels", "country"]);
    let has = |text: &str, series: &str| text.lines().any(|line| line.starts_with(series));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let text = loop {
        let (_, text) = demo.get("/metrics");
        let all_there = [
            "rankwatch_interleaving_wins_total{",
            "rankwatch_comparison_diff{",
        ]
        .iter()
        .all(|series| has(&text, series));
        if all_there {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo's figures never all came: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let names: std::collections::BTreeSet<String> = parse_metrics(&text)
        .keys()
        .filter_map(|key| key.split_once('{'))
        .flat_map(|(_, labels)| split_labels(labels.trim_end_matches('}')))
        .filter_map(|label| label.split_once('=').map(|(name, _)| name.to_owned()))
        .filter(|name| name != "country")
        .collect();
    assert!(
        names.contains("ranker") && names.contains("model"),
        "{names:?}"
    );
    let taken: Vec<&String> = names
        .iter()
        .filter(|name| {
            let output = replay(&["-", "--segment-labels", name], Some(b""));
            let stderr = String::from_utf8_lossy(&output.stderr);
            output.status.success() || !stderr.contains("segment_labels")
        })
        .collect();
    assert!(
        taken.is_empty(),
        "taken as segment labels: {taken:?} (of {names:?})"
    );
}

/// A restart keeps the groups' segment values, which values were kept and
/// the fold counts: the values first seen before it still hold their
/// places after it, and the figures are those of one uninterrupted replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_segments_and_their_folds() {
    let dir = tempfile::tempdir().unwrap();
    let args = segmented_with_state(dir.path());
    let lines = log();
    // Up to r3: de and fr are kept, it folded; es and r7 fold after the restart.
    let (before, after) = lines.split_at(5);
    let server = Server::start(&args);
    send(&server, before).await;
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics[r#"rankwatch_segment_values_folded_total{label="country"}"#],
        1.0
    );
    assert_eq!(server.stop().await, Some(0));
    let server = Server::start(&args);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 3.0);
    send(&server, after).await;
    let served = as_replay_json(&server.report().await);
    let expected = replay_of(&lines, &SEGMENTED);
    common::assert_reports_match(&served["groups"], &expected["groups"]);
    common::assert_reports_match(&served["comparisons"], &expected["comparisons"]);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics[r#"rankwatch_segment_values_folded_total{label="country"}"#],
        3.0
    );
}

/// A restart under a lower `max_segment_values` keeps the values it
/// restored, as it keeps open lists past a lower `max_open_impressions`,
/// and says so with them (it had said nothing): new values fold until the
/// kept ones fall below the limit, which they never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_fewer_segment_values_says_it_kept_more() {
    let dir = tempfile::tempdir().unwrap();
    let args = segmented_with_state(dir.path());
    let server = Server::start(&args);
    send(&server, &log()[..5]).await; // de and fr kept
    assert_eq!(server.stop().await, Some(0));
    let lower: Vec<&str> = args
        .iter()
        .map(|&arg| if arg == "2" { "1" } else { arg })
        .collect();
    let server = Server::start(&lower);
    let said = server.logged("beyond the limits");
    assert!(
        said.contains("segment_values.country=2 max_segment_values=1"),
        "{said}"
    );
}

/// The table's coverage rows carry the segment values, as its metric rows do.
#[test]
fn the_tables_coverage_rows_name_their_segment_values() {
    let text: String = log().iter().map(|l| format!("{l}\n")).collect();
    let output = replay(&[&["-"], &SEGMENTED[..]].concat(), Some(text.as_bytes()));
    let table = String::from_utf8(output.stdout).unwrap();
    let mut lines = table.lines().skip_while(|l| !l.contains("items shown"));
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["model", "surface", "country"], "{table}");
    let report = replay_of(&log(), &SEGMENTED);
    let rows: Vec<Vec<&str>> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), report["groups"].as_array().unwrap().len());
    for row in rows {
        let shown = &group(&report, row[0], row[2])["coverage"]["items_shown"];
        assert_eq!(row[3], shown.to_string(), "{table}");
    }
}
