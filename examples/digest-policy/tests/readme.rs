use chrono::Duration;
use digest_policy::{crontab, decide, Event, TASKS};
use formica_core::job::RawJob;
use formica_core::sim::faults::{heal, run_ops, settle};
use formica_core::sim::strategies::{ops, Faults};
use formica_core::sim::{App, World, WorldConfig};
use formica_core::worker::Config;
use proptest::prelude::*;

struct Digests;

impl App<Event> for Digests {
    // What production does on an event: add the jobs the policy decides.
    fn on_event(&mut self, world: &mut World, event: &Event) {
        for d in decide(event, world.now()) {
            world.db_mut().add_job(&RawJob::new(d.task, d.payload, d.spec)).expect("a valid job");
        }
    }

    // The policy's invariant, checked after every step of the world.
    fn check(&mut self, world: &World) -> Result<(), String> {
        for account in 0..3u32 {
            let pending = world.db().jobs().filter(|j| {
                j.task_identifier == "send_digest"
                    && j.payload["account"] == account
                    && j.locked_at.is_none()
                    && !j.is_permanently_failed()
            });
            if pending.count() > 1 {
                return Err(format!("account {account} has two pending digests"));
            }
        }
        Ok(())
    }
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0..3u32).prop_map(|account| Event::Activity { account }),
        (0..3u32, 1..10_000u32).prop_map(|(account, cents)| Event::Payment { account, cents }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn one_pending_digest_per_account_and_every_payment_runs(
        seed in any::<u64>(),
        ops in ops(event(), &Faults::on(3), 1..30),
    ) {
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        for n in 0..3 {
            let tasks = TASKS.map(String::from).to_vec();
            let config = Config { worker_id: format!("w{n}"), task_identifiers: tasks, crontab: crontab(), ..Config::default() };
            world.add_worker(config);
        }
        run_ops(&mut world, &ops, &mut Digests).map_err(TestCaseError::fail)?;
        // The faults stop. Locks a crashed worker held are freed once its lease lapses.
        heal(&mut world);
        let payments_done = |w: &World| w.db().jobs().all(|j| j.task_identifier != "record_payment");
        settle(&mut world, Duration::hours(5), payments_done, |w| Digests.check(w)).map_err(TestCaseError::fail)?;
    }
}
