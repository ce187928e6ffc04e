//! Whole runs: a run is a function of its seed, and short runs of the real machines keep
//! every invariant.

use horizon_chaos::{
    ChaosOptions, KNOWN_FAILURES, REGRESSION_SEEDS, Summary, expected, render_run, run_seed,
};

#[test]
fn the_same_seed_replays_byte_for_byte() {
    let opts = ChaosOptions { seconds: 120.0 };
    let a = run_seed(3, &opts);
    let b = run_seed(3, &opts);
    assert_eq!(render_run(&a, true), render_run(&b, true));
    let json = |r| serde_json::to_string(&Summary::of(std::slice::from_ref(r), &opts, 3)).unwrap();
    assert_eq!(json(&a), json(&b));
    assert!(a.stats.ticks_checked > 1000, "the mesh ran: {:?}", a.stats);
    assert!(a.stats.inputs_sent > 1000);
}

#[test]
fn different_seeds_draw_different_faults() {
    let opts = ChaosOptions { seconds: 300.0 };
    let faults: Vec<_> = (0..4).map(|s| format!("{:?}", run_seed(s, &opts).faults)).collect();
    assert!(faults.windows(2).all(|w| w[0] != w[1]));
}

#[test]
fn short_runs_keep_every_invariant() {
    let opts = ChaosOptions { seconds: 150.0 };
    for seed in 0..3 {
        let run = run_seed(seed, &opts);
        assert!(run.violations.is_empty(), "{}", render_run(&run, false));
    }
}

#[test]
fn known_failures_and_regressions_do_not_overlap() {
    assert!(REGRESSION_SEEDS.iter().all(|s| !KNOWN_FAILURES.contains(s)));
    let opts = ChaosOptions::default();
    // A regression seed passes at the default length (the CI runs them all).
    let run = run_seed(REGRESSION_SEEDS[0], &opts);
    assert!(expected(&run, &opts), "{}", render_run(&run, false));
}
