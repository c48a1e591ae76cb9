//! Trace propagation (the driver's cargo feature `traces`): the W3C trace context a job was
//! added in, kept in the records schema beside the job, never in graphile-worker's schema.

use crate::fill::{fill, FillError};

/// The records' table of trace contexts (records migration 5).
pub const JOB_TRACES: &str = include_str!("../records/000005.sql");
/// An add statement that also records its trace context: see the file.
pub const ADD_TRACED: &str = include_str!("../queries/add_traced.sql");

/// The add statement `add` (one of `utils::ADD_JOB`, `ADD_JOBS`, `ADD_JOBS_PLAIN`, its
/// `BOUND` filled: [`crate::flow::BOUND_ONE`]), which takes `params` parameters, recording the trace context of the two after them:
/// [`ADD_TRACED`] around it.
pub fn add(add: &str, params: usize) -> Result<String, FillError> {
    let (traceparent, tracestate) = (format!("${}", params + 1), format!("${}", params + 2));
    fill(ADD_TRACED, &[("ADD", add), ("TRACEPARENT", &traceparent), ("TRACESTATE", &tracestate)])
}

/// The parts of a fetch (`worker::GET_JOBS`, `worker::GET_JOBS_CONTROLLED`) that answer each
/// job's trace context too (columns `traceparent`, `tracestate`), or, `traced` false, none.
pub(crate) fn fetch_parts(traced: bool) -> [(&'static str, &'static str); 2] {
    match traced {
        true => [
            ("TRACE_COLUMNS", ", traces.traceparent, traces.tracestate"),
            ("TRACE_JOIN", "left join :RECORDS.job_traces as traces on traces.job_id = locked.id"),
        ],
        false => [("TRACE_COLUMNS", ""), ("TRACE_JOIN", "")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traced_add_takes_the_two_parameters_after_the_adds() {
        let unbounded = crate::fill(crate::utils::ADD_JOB, &[("BOUND", "")]).unwrap();
        let add = add(&unbounded, 9).unwrap();
        assert!(add.contains(&unbounded) && add.contains("$10::text, $11::text"), "{add}");
    }
}
