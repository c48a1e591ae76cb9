//! Random operation sequences run against `core::sim` and, in lockstep, against a naive
//! reference model of the job tables. The model, the checker of the machine's promises and
//! the operations live in `formica-check` (its crate docs list every property checked);
//! this file runs them.

use formica_check::run_case;
use formica_check::strategies::case;
use formica_core::sim::World;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

proptest! {
    // Failures are kept in core/proptest-regressions/ (the working directory of a test is
    // the package's), and replayed first on the next run.
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/sim_model.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn sim_and_model_agree_and_the_machine_keeps_its_promises(case in case()) {
        if let Err(e) = run_case(&case) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_trace(case in case()) {
        let a = run_case(&case).map_err(TestCaseError::fail)?;
        let b = run_case(&case).map_err(TestCaseError::fail)?;
        prop_assert_eq!(a.trace(), b.trace());
        let rows = |w: &World| w.db().jobs().cloned().collect::<Vec<_>>();
        prop_assert_eq!(rows(&a), rows(&b));
    }
}
