//! Per-list metrics: `ListEvaluator::evaluate` on 20-item lists with a few
//! positive grades, at K = 1, 5, 10, 20, in lists per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rankwatch::metrics::{Discount, Gain, ListEvaluator, MetricSettings};
use std::hint::black_box;
use std::time::Duration;

/// Items per list.
const LIST_LEN: usize = 20;

/// Lists evaluated per iteration, so that one iteration is not dominated by
/// the timer and the lists differ from one call to the next.
const LISTS: usize = 1024;

/// The cutoffs the service is configured with by default.
const KS: [usize; 4] = [1, 5, 10, 20];

/// `LISTS` lists of `LIST_LEN` grades, each with 0 to 3 positive grades at
/// random ranks (a typical online list: most items get no feedback).
fn lists() -> Vec<[f64; LIST_LEN]> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..LISTS)
        .map(|_| {
            let mut grades = [0.0; LIST_LEN];
            for _ in 0..rng.usize(0..=3) {
                grades[rng.usize(0..LIST_LEN)] = [1.0, 2.0, 3.0][rng.usize(0..3)];
            }
            grades
        })
        .collect()
}

/// Evaluates every list once with `settings`.
fn bench_settings(c: &mut Criterion, name: &str, settings: MetricSettings) {
    let lists = lists();
    let mut evaluator = ListEvaluator::new(settings, &KS);
    let mut row = vec![0.0; evaluator.width()];
    let mut group = c.benchmark_group("evaluate");
    group
        .throughput(Throughput::Elements(LISTS as u64))
        .measurement_time(Duration::from_secs(5));
    group.bench_function(name, |b| {
        b.iter(|| {
            for grades in &lists {
                evaluator.evaluate(black_box(grades), &mut row);
                black_box(&row);
            }
        })
    });
    group.finish();
}

/// The default settings, and the costlier exponential gain with the Järvelin discount.
fn evaluate(c: &mut Criterion) {
    bench_settings(c, "linear_log2", MetricSettings::default());
    let exponential = MetricSettings {
        gain: Gain::Exponential,
        discount: Discount::Jarvelin { base: 2.0 },
        half_life: 5.0,
        ..MetricSettings::default()
    };
    bench_settings(c, "exponential_jarvelin", exponential);
}

criterion_group!(benches, evaluate);
criterion_main!(benches);
