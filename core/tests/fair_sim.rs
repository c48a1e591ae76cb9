//! Fairness (`formica_core::flow::Control::fair`) on the simulated database: the bound
//! docs/guarantees.md states.
//!
//! Tenants with weights hold backlogs of a fair task; fetches of `limit` jobs run one after
//! another, and between them any tenant adds any number of jobs. A tenant that adds a job
//! while `n` other tenants have ready jobs has it locked within ⌈(n + 1) / limit⌉ fetches,
//! whatever the others add and whatever the weights: its first start begins at the clock
//! (where the latest start began), every busy tenant's next start begins there or later,
//! and ties go to the older job. Fairness never leaves a place empty: each fetch locks
//! `limit` jobs while that many are ready. Within a tenant, jobs start in priority order.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_core::flow::{Control, Partition};
use formica_core::job::{Job, JobSpec, RawJob};
use formica_core::protocol::{FetchRequest, Statement};
use formica_core::sim::Db;
use formica_core::time::Timestamp;
use proptest::prelude::*;

fn at(s: i64) -> Timestamp {
    Timestamp::from_timestamp(1_700_000_000 + s, 0).unwrap()
}

fn add(db: &mut Db, tenant: usize, n: usize, priority: i16) {
    for _ in 0..n {
        let payload = serde_json::json!({ "tenant": format!("t{tenant}") });
        db.add_job(&RawJob::new("f", payload, JobSpec::builder().priority(priority).build())).unwrap();
    }
}

fn fetch(db: &mut Db, fair: &Control, limit: usize) -> Vec<Job> {
    let answer = db.execute(&Statement::GetJobs(FetchRequest {
        worker_id: "w".into(),
        task_identifiers: vec!["f".into()],
        forbidden_flags: vec![],
        accepted_flags: vec![],
        limit,
        now: None,
        excluded_queues: vec![],
        caps: vec![],
        limits: vec![],
        fair: vec![fair.clone()],
        walk_priorities: false,
    }));
    answer.fetched().unwrap().0.to_vec()
}

/// The tenants with a job ready (not locked).
fn ready_tenants(db: &Db) -> std::collections::BTreeSet<String> {
    db.jobs()
        .filter(|j| j.locked_at.is_none())
        .map(|j| j.payload["tenant"].as_str().unwrap().to_owned())
        .collect()
}

/// A round: the jobs each tenant adds before the next fetch.
fn rounds() -> impl Strategy<Value = Vec<Vec<(usize, usize)>>> {
    proptest::collection::vec(proptest::collection::vec((0..6usize, 0..30usize), 0..4), 1..25)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_tenant_s_new_job_is_locked_within_the_bound_whatever_the_others_add(
        weights in proptest::collection::vec(1..5u32, 6),
        backlog in proptest::collection::vec(0..200usize, 6),
        limit in 1..8usize,
        rounds in rounds(),
        joins_at in 0..25usize,
        fetches_before in 0..5usize,
    ) {
        let mut db = Db::new(at(0), 1);
        let mut fair = Control::fair("f", Partition::Field("tenant".into()));
        for (tenant, weight) in weights.iter().enumerate() {
            fair = fair.weighted(format!("t{tenant}"), *weight);
        }
        // Tenant 6 is the newcomer; the others start with their backlogs.
        for (tenant, n) in backlog.iter().enumerate() {
            add(&mut db, tenant, *n, 0);
        }
        for _ in 0..fetches_before {
            fetch(&mut db, &fair, limit);
        }
        let mut waiting: Option<(i64, usize, usize)> = None;
        for (round, adds) in rounds.iter().enumerate() {
            db.set_now(at(round as i64 + 1));
            for (tenant, n) in adds {
                add(&mut db, *tenant, *n, 0);
            }
            if round == joins_at.min(rounds.len() - 1) {
                let others = ready_tenants(&db).len();
                add(&mut db, 6, 1, 0);
                let id = db.jobs().map(|j| j.id).max().unwrap();
                waiting = Some((id, (others + 1).div_ceil(limit), 0));
            }
            let ready = db.jobs().filter(|j| j.locked_at.is_none()).count();
            let locked = fetch(&mut db, &fair, limit);
            prop_assert_eq!(locked.len(), ready.min(limit), "a place left empty while jobs were ready");
            if let Some((id, bound, seen)) = waiting.as_mut() {
                *seen += 1;
                if locked.iter().any(|j| j.id == *id) {
                    waiting = None;
                } else {
                    prop_assert!(*seen < *bound, "the newcomer's job waited {} fetches, bound {}", seen, bound);
                }
            }
        }
        // Fetches without more adds, until the newcomer's job is locked.
        while let Some((id, bound, seen)) = waiting.as_mut() {
            *seen += 1;
            let locked = fetch(&mut db, &fair, limit);
            if locked.iter().any(|j| j.id == *id) {
                waiting = None;
            } else {
                prop_assert!(*seen < *bound, "the newcomer's job waited {} fetches, bound {}", seen, bound);
            }
        }
    }

    #[test]
    fn a_tenant_s_jobs_start_in_priority_order_and_weights_share_the_starts(
        priorities in proptest::collection::vec(-5..5i16, 1..60),
        limit in 1..6usize,
    ) {
        let mut db = Db::new(at(0), 1);
        let fair = Control::fair("f", Partition::Field("tenant".into())).weighted("t0", 3);
        for p in &priorities {
            add(&mut db, 1, 1, *p);
        }
        add(&mut db, 0, 400, 0);
        let mut order: Vec<Job> = Vec::new();
        for round in 0..priorities.len().div_ceil(limit) * 4 + 4 {
            db.set_now(at(round as i64 + 1));
            let mut batch = fetch(&mut db, &fair, limit);
            batch.sort_by_key(|j| (j.priority, j.run_at, j.id));
            order.extend(batch);
        }
        let t1: Vec<i16> = order.iter().filter(|j| j.payload["tenant"] == "t1").map(|j| j.priority).collect();
        prop_assert!(t1.windows(2).all(|w| w[0] <= w[1]), "t1's jobs by priority: {:?}", t1);
        prop_assert_eq!(t1.len(), priorities.len(), "every job of t1 ran");
        // While both had jobs, t0 (weight 3) took three places for each of t1's (give or
        // take a fetch).
        let last_t1 = order.iter().rposition(|j| j.payload["tenant"] == "t1").unwrap();
        let t0 = order[..last_t1].iter().filter(|j| j.payload["tenant"] == "t0").count();
        prop_assert!(t0.abs_diff(3 * t1.len()) <= 3 + limit, "t0 took {} places for t1's {}", t0, t1.len());
    }
}
