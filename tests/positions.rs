//! Position curves (docs/SPEC.md §11) of `rankwatch replay`, worked by hand on a small log.

mod common;

use common::replay_json;
use serde_json::{json, Value};

/// Three lists of 3, 1 and 2 items; clicks and a purchase at known ranks, one
/// interaction on an item the list does not show.
const LOG: &str = r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b","c"],"time":"2026-11-01T10:00:00Z","model":"m"}}
{"impression":{"requestId":"r2","userId":"u2","itemIds":["a"],"time":"2026-11-01T10:00:01Z","model":"m"}}
{"impression":{"requestId":"r3","userId":"u3","itemIds":["c","a"],"time":"2026-11-01T10:00:02Z","model":"m"}}
{"interaction":{"userId":"u1","itemId":"a","requestId":"r1","type":"click","time":"2026-11-01T10:00:05Z"}}
{"interaction":{"userId":"u1","itemId":"c","requestId":"r1","type":"click","time":"2026-11-01T10:00:06Z"}}
{"interaction":{"userId":"u1","itemId":"c","requestId":"r1","type":"purchase","time":"2026-11-01T10:00:07Z"}}
{"interaction":{"userId":"u2","itemId":"a","requestId":"r2","type":"click","time":"2026-11-01T10:00:08Z"}}
{"interaction":{"userId":"u3","itemId":"a","type":"add_to_cart","time":"2026-11-01T10:00:09Z"}}
{"interaction":{"userId":"u3","itemId":"z","requestId":"r3","type":"click","time":"2026-11-01T10:00:10Z"}}
"#;

fn point(rank: u64, lists: u64, click: u64, add_to_cart: u64, purchase: u64) -> Value {
    json!({"rank": rank, "lists": lists,
           "interactions": {"add_to_cart": add_to_cart, "click": click, "purchase": purchase}})
}

#[test]
fn position_curve_counts_lists_reaching_each_rank_and_interactions_there() {
    let report = replay_json(
        &["-", "--format", "json", "--position-curve-depth", "4"],
        Some(LOG.as_bytes()),
    );
    let group = &report["groups"][0];
    assert_eq!(group["lists"], 3);
    assert_eq!(
        group["positions"],
        json!([
            point(1, 3, 2, 0, 0),
            point(2, 2, 0, 1, 0),
            point(3, 1, 1, 0, 1),
            point(4, 0, 0, 0, 0),
        ])
    );
}

#[test]
fn depth_zero_turns_position_curves_off() {
    let report = replay_json(
        &["-", "--format", "json", "--position-curve-depth", "0"],
        Some(LOG.as_bytes()),
    );
    assert!(report["groups"][0].get("positions").is_none());
}
