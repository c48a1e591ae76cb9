//! `formica pause`, `resume` and `paused`, `cap`, `uncap` and `caps`, `limit`, `unlimit`
//! and `limits`, `fair`, `unfair` and `fairness`, `bound`, `unbound` and `bounds`, `age`,
//! `unage` and `agings`: flow control from the command line (docs/guide/flow-control.md,
//! docs/guide/fairness.md, docs/guide/bounded-queues.md, docs/guide/priority-aging.md).
//! Caps, rate limits, fairness and bounds are kinds of one control
//! (`formica::controls::Control`): each verb triple sets, lifts and lists one kind; a task
//! may have one cap and one rate limit per partition, one fairness and one bound. An aging
//! (`formica::Aging`) is applied by the workers' chore, not their fetch.

use crate::output::{print_table, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::controls::{Control, ControlKind, ControlLimit, Partition, Pause, Paused};
use formica_tokio::{Aging, WorkerUtils};
use serde_json::{json, Value};

/// What `pause` and `resume` apply to: exactly one of a task, a named queue, or everything.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A task identifier.
    #[arg(long)]
    task: Option<String>,
    /// A named queue.
    #[arg(long)]
    queue: Option<String>,
    /// Every job.
    #[arg(long)]
    all: bool,
}

impl Target {
    fn pause(self) -> Pause {
        match (self.task, self.queue) {
            (Some(task), _) => Pause::task(task),
            (None, Some(queue)) => Pause::queue(queue),
            (None, None) => Pause::all(),
        }
    }
}

/// `formica pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    target: Target,
    /// Why (shown by `formica paused` and the dashboard).
    #[arg(long)]
    reason: Option<String>,
    /// Who pauses (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `formica resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    target: Target,
}

/// Which control: its task and partition (none: the whole task's).
#[derive(Debug, Args)]
pub struct ControlTarget {
    /// The task identifier.
    #[arg(long)]
    task: String,
    /// Per value of this payload field (`customer_id`).
    #[arg(long, conflicts_with = "per_key_prefix")]
    per_field: Option<String>,
    /// Per job key prefix: the key's text before the first occurrence of this separator
    /// (`:`).
    #[arg(long)]
    per_key_prefix: Option<String>,
}

impl ControlTarget {
    fn partition(&self) -> Option<Partition> {
        match (&self.per_field, &self.per_key_prefix) {
            (Some(field), _) => Some(Partition::Field(field.clone())),
            (None, Some(separator)) => Some(Partition::KeyPrefix(separator.clone())),
            (None, None) => None,
        }
    }
}

/// What `cap` and `limit` share: the task and partition, the most jobs, and the author.
#[derive(Debug, Args)]
pub struct ControlArgs {
    #[command(flatten)]
    target: ControlTarget,
    /// Most jobs of the task running at once (`cap`) or started per period (`limit`)
    /// across every Formica worker, or waiting (`bound`) (per partition).
    #[arg(long)]
    max: u32,
    /// Who sets it (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `formica fair`.
#[derive(Debug, Args)]
pub struct FairArgs {
    /// The task and the partition whose values are its tenants (one is needed).
    #[command(flatten)]
    target: ControlTarget,
    /// A tenant's weight, `tenant=3` (repeatable; a tenant not named weighs 1): it starts
    /// three jobs while one of weight 1 starts one.
    #[arg(long, value_parser = weight)]
    weight: Vec<(String, u32)>,
    /// Who sets it (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `acme=3` as the tenant `acme` of weight 3 (the tenant is the text before the last `=`).
pub(crate) fn weight(text: &str) -> Result<(String, u32), String> {
    let (tenant, weight) = text.rsplit_once('=').ok_or_else(|| format!("{text}: tenant=weight"))?;
    let weight = weight.parse().map_err(|_| format!("{text}: the weight is a whole number"))?;
    Ok((tenant.to_owned(), weight))
}

/// `formica cap`.
#[derive(Debug, Args)]
pub struct CapArgs {
    #[command(flatten)]
    control: ControlArgs,
}

/// `formica limit`.
#[derive(Debug, Args)]
pub struct LimitArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The period: a number and a unit, `ms`, `s`, `m` or `h` (`1s`, `500ms`, `1m`).
    #[arg(long, default_value = "1s", value_parser = period_ms)]
    per: u32,
}

/// `formica age`.
#[derive(Debug, Args)]
pub struct AgeArgs {
    /// The task identifier.
    #[arg(long)]
    task: String,
    /// How long a job waits ready for each step: a number and a unit, `ms`, `s`, `m` or `h`.
    #[arg(long, value_parser = period_ms)]
    every: u32,
    /// How far its priority number falls at each step (graphile-worker runs smaller first).
    #[arg(long, default_value_t = 1)]
    step: u16,
    /// The smallest number (the highest priority) aging brings a job to.
    #[arg(long, allow_negative_numbers = true)]
    best: i16,
    /// Who sets it (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `formica bound`.
#[derive(Debug, Args)]
pub struct BoundArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// How long an add over the bound waits for room before it is refused: `0` (not at
    /// all), or a number and a unit, `ms`, `s`, `m` or `h` (`5s`).
    #[arg(long, default_value = "0", value_parser = wait_ms)]
    wait: u32,
}

/// `0`, or a period (`5s`) in milliseconds.
fn wait_ms(text: &str) -> Result<u32, String> {
    match text {
        "0" => Ok(0),
        text => period_ms(text),
    }
}

/// `1s`, `500ms`, `1m`, `1h` in milliseconds.
pub(crate) fn period_ms(text: &str) -> Result<u32, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u32 = number.parse().map_err(|_| format!("{text}: a number then ms, s, m or h"))?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text}: the unit is ms, s, m or h")),
    };
    number
        .checked_mul(scale)
        .filter(|ms| *ms > 0 && *ms <= i32::MAX as u32)
        .ok_or_else(|| format!("{text}: out of range"))
}

impl ControlArgs {
    /// The control of `limit` on the task, per the partition given; and who sets it.
    fn control(self, limit: ControlLimit) -> (Control, Option<String>) {
        (Control { task: self.target.task.clone(), partition: self.target.partition(), limit }, self.by)
    }
}

/// How answers name a kind: (set, lifted, not-set phrase, list header).
fn words(kind: ControlKind) -> (&'static str, &'static str, &'static str, &'static str) {
    match kind {
        ControlKind::Cap => ("capped", "uncapped", "capped", "cap"),
        ControlKind::RateLimit => ("limited", "unlimited", "rate limited", "limit"),
        ControlKind::Fair => ("fair", "unfair", "fair", "fairness"),
        ControlKind::Bound => ("bounded", "unbounded", "bounded", "bound"),
    }
}

/// `control` as JSON: task, max (fairness: weights), the period of a rate limit, the wait of
/// a bound, and the
/// partition.
fn control_json(control: &Control) -> Value {
    let mut json = json!({
        "task": control.task,
        "partition": control.partition.as_ref().map(|p| json!({ "kind": p.kind(), "argument": p.argument() })),
    });
    match &control.limit {
        ControlLimit::Running { max } => json["max"] = (*max).into(),
        ControlLimit::Starts { max, period_ms } => {
            (json["max"], json["period_ms"]) = ((*max).into(), (*period_ms).into())
        }
        ControlLimit::Fair { weights } => json["weights"] = json!(weights),
        ControlLimit::Waiting { max, wait_ms } => {
            (json["max"], json["wait_ms"]) = ((*max).into(), (*wait_ms).into())
        }
    }
    json
}

/// `formica cap`: set a cap, and say so (with its partition).
pub async fn cap(args: CapArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let max = args.control.max;
    set(args.control.control(ControlLimit::Running { max }), utils, out).await
}

/// `formica limit`: set a rate limit, and say so.
pub async fn limit(args: LimitArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let max = args.control.max;
    set(args.control.control(ControlLimit::Starts { max, period_ms: args.per }), utils, out).await
}

/// `formica bound`: set a bound, and say so.
pub async fn bound(args: BoundArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let max = args.control.max;
    set(args.control.control(ControlLimit::Waiting { max, wait_ms: args.wait }), utils, out).await
}

/// `formica fair`: make a task fair across its tenants, and say so.
pub async fn fair(args: FairArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let limit = ControlLimit::Fair { weights: args.weight.into_iter().collect() };
    let control = Control { task: args.target.task.clone(), partition: args.target.partition(), limit };
    set((control, args.by), utils, out).await
}

async fn set(
    (control, by): (Control, Option<String>),
    utils: &WorkerUtils,
    out: Output,
) -> Result<(), Failure> {
    let since = utils.set_control(&control, by.as_deref()).await?;
    let set = words(control.kind()).0;
    let mut json = control_json(&control);
    json[set] = control.label().into();
    json["since"] = json!(since);
    print_table(out, &[set, "since"], vec![vec![control.label(), since.to_rfc3339()]], json);
    Ok(())
}

/// `formica uncap`, `unlimit`, `unfair` and `unbound`: lift a control (of the task, over the
/// partition given); refused if there was none.
pub async fn remove(
    target: ControlTarget,
    kind: ControlKind,
    utils: &WorkerUtils,
    out: Output,
) -> Result<(), Failure> {
    let (_, lifted, set, _) = words(kind);
    let partition = target.partition();
    let named = match (&partition, kind) {
        (Some(p), ControlKind::Cap | ControlKind::RateLimit) => {
            format!("{} per {} {}", target.task, p.kind(), p.argument())
        }
        _ => target.task.clone(),
    };
    if !utils.remove_control(&target.task, kind, partition.as_ref()).await? {
        return Err(Failure::Command(format!("{named} was not {set}")));
    }
    print_table(out, &[lifted], vec![vec![named.clone()]], json!({ lifted: named }));
    Ok(())
}

/// `formica caps`, `limits`, `fairness` and `bounds`: the controls of `kind` in force.
pub async fn list(kind: ControlKind, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let controls: Vec<_> = utils.controls().await?.into_iter().filter(|c| c.control.kind() == kind).collect();
    let rows =
        controls.iter().map(|c| vec![c.control.label(), c.set_by.clone(), c.set_at.to_rfc3339()]).collect();
    let json: Vec<_> = controls
        .iter()
        .map(|c| {
            let mut json = control_json(&c.control);
            (json["set_by"], json["set_at"]) = (c.set_by.clone().into(), json!(c.set_at));
            json
        })
        .collect();
    print_table(out, &[words(kind).3, "by", "since"], rows, json!(json));
    Ok(())
}

/// `aging` as JSON: task, every_ms, step and best.
fn aging_json(aging: &Aging) -> Value {
    json!({ "task": aging.task, "every_ms": aging.every_ms, "step": aging.step, "best": aging.best })
}

/// `formica age`: set an aging, and say so.
pub async fn age(args: AgeArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let aging = Aging { task: args.task, every_ms: args.every, step: args.step, best: args.best };
    let since = utils.set_aging(&aging, args.by.as_deref()).await?;
    let mut json = aging_json(&aging);
    (json["aging"], json["since"]) = (aging.label().into(), json!(since));
    print_table(out, &["aging", "since"], vec![vec![aging.label(), since.to_rfc3339()]], json);
    Ok(())
}

/// `formica unage`: lift an aging; refused if there was none.
pub async fn unage(task: String, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    if !utils.remove_aging(&task).await? {
        return Err(Failure::Command(format!("{task} was not aged")));
    }
    print_table(out, &["unaged"], vec![vec![task.clone()]], json!({ "unaged": task }));
    Ok(())
}

/// `formica agings`: the agings in force.
pub async fn agings(utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let agings = utils.agings().await?;
    let rows =
        agings.iter().map(|a| vec![a.aging.label(), a.set_by.clone(), a.set_at.to_rfc3339()]).collect();
    let json: Vec<_> = agings
        .iter()
        .map(|a| {
            let mut json = aging_json(&a.aging);
            (json["set_by"], json["set_at"]) = (a.set_by.clone().into(), json!(a.set_at));
            json
        })
        .collect();
    print_table(out, &["aging", "by", "since"], rows, json!(json));
    Ok(())
}

/// `formica pause`: pause, and say so.
pub async fn pause(args: PauseArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let pause = args.target.pause();
    let since = utils.pause(&pause, args.reason.as_deref(), args.by.as_deref()).await?;
    let json = json!({ "paused": pause.label(), "since": since });
    print_table(out, &["paused", "since"], vec![vec![pause.label(), since.to_rfc3339()]], json);
    Ok(())
}

/// `formica resume`: resume; refused if it was not paused (a typo would otherwise pass
/// unnoticed).
pub async fn resume(args: ResumeArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let pause = args.target.pause();
    if !utils.resume(&pause).await? {
        return Err(Failure::Command(format!("{} was not paused", pause.label())));
    }
    print_table(out, &["resumed"], vec![vec![pause.label()]], json!({ "resumed": pause.label() }));
    Ok(())
}

/// `formica paused`: the pauses in force.
pub async fn paused(utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let paused = utils.paused().await?;
    let label = |p: &Paused| p.pause().map_or_else(|| format!("{}:{}", p.scope, p.name), |p| p.label());
    let rows = paused
        .iter()
        .map(|p| {
            vec![
                label(p),
                p.reason.clone().unwrap_or_default(),
                p.paused_by.clone(),
                p.paused_at.to_rfc3339(),
            ]
        })
        .collect();
    print_table(out, &["paused", "reason", "by", "since"], rows, json!(paused));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_weight_is_a_tenant_and_a_whole_number() {
        assert_eq!(super::weight("acme=3"), Ok(("acme".to_owned(), 3)));
        assert_eq!(super::weight("a=b=2"), Ok(("a=b".to_owned(), 2)));
        assert!(super::weight("acme").is_err() && super::weight("acme=x").is_err());
    }

    #[test]
    fn a_period_is_a_number_and_a_unit() {
        assert_eq!(super::period_ms("1s"), Ok(1_000));
        assert_eq!(super::period_ms("250ms"), Ok(250));
        assert_eq!(super::period_ms("2m"), Ok(120_000));
        assert_eq!(super::period_ms("1h"), Ok(3_600_000));
        assert!(
            super::period_ms("0s").is_err()
                && super::period_ms("5").is_err()
                && super::period_ms("s").is_err()
        );
        assert_eq!((super::wait_ms("0"), super::wait_ms("5s")), (Ok(0), Ok(5_000)));
        assert!(super::wait_ms("0s").is_err(), "no wait is written 0");
    }
}
