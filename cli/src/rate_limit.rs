//! `formica limit`, `unlimit` and `limits`: rate limits from the command line
//! (docs/guide/flow-control.md).

use crate::output::{print_table, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::flow::Partition;
use formica_tokio::rate_limit::Limit;
use formica_tokio::WorkerUtils;
use serde_json::json;

/// `formica limit`.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The task identifier.
    #[arg(long)]
    task: String,
    /// Most jobs of the task started per period across every Formica worker (per partition).
    #[arg(long)]
    max: u32,
    /// The period: a number and a unit, `ms`, `s`, `m` or `h` (`1s`, `500ms`, `1m`).
    #[arg(long, default_value = "1s", value_parser = period_ms)]
    per: u32,
    /// Limit each value of this payload field on its own (`customer_id`).
    #[arg(long, conflicts_with = "per_key_prefix")]
    per_field: Option<String>,
    /// Limit each job key prefix on its own: the key's text before the first occurrence of
    /// this separator (`:`).
    #[arg(long)]
    per_key_prefix: Option<String>,
    /// Who sets it (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `1s`, `500ms`, `1m`, `1h` in milliseconds.
fn period_ms(text: &str) -> Result<u32, String> {
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

/// Set a rate limit, and say so.
pub async fn limit(args: LimitArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let partition = match (args.per_field, args.per_key_prefix) {
        (Some(field), _) => Some(Partition::Field(field)),
        (None, Some(separator)) => Some(Partition::KeyPrefix(separator)),
        (None, None) => None,
    };
    let limit = Limit { task: args.task, max_starts: args.max, period_ms: args.per, partition };
    let since = utils.set_rate_limit(&limit, args.by.as_deref()).await?;
    let json = json!({ "limited": limit.label(), "task": limit.task, "max": limit.max_starts,
        "period_ms": limit.period_ms, "since": since });
    print_table(out, &["limited", "since"], vec![vec![limit.label(), since.to_rfc3339()]], json);
    Ok(())
}

/// Lift a rate limit; refused if there was none.
pub async fn unlimit(task: String, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    if !utils.remove_rate_limit(&task).await? {
        return Err(Failure::Command(format!("{task} was not rate limited")));
    }
    print_table(out, &["unlimited"], vec![vec![task.clone()]], json!({ "unlimited": task }));
    Ok(())
}

/// The rate limits in force.
pub async fn limits(utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let limits = utils.rate_limits().await?;
    let rows =
        limits.iter().map(|l| vec![l.limit.label(), l.set_by.clone(), l.set_at.to_rfc3339()]).collect();
    let json: Vec<_> = limits
        .iter()
        .map(|l| {
            json!({
                "task": l.limit.task, "max": l.limit.max_starts, "period_ms": l.limit.period_ms,
                "partition": l.limit.partition.as_ref().map(|p| json!({ "kind": p.kind(), "argument": p.argument() })),
                "set_by": l.set_by, "set_at": l.set_at,
            })
        })
        .collect();
    print_table(out, &["limit", "by", "since"], rows, json!(json));
    Ok(())
}

#[cfg(test)]
mod tests {
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
    }
}
