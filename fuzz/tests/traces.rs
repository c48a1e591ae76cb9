//! The machine's behaviour, pinned for a change that must not alter it (a move, a rename):
//! `FORMICA_TRACES=<file> cargo test -p formica-fuzz --test traces -- --ignored` writes the
//! trace of every committed machine corpus file and of 600 generated inputs to `<file>`.
//! Run it before and after the change; the two files must be byte-identical.

use formica_core::sim::faults::render_trace;

#[test]
#[ignore = "a tool: writes traces to $FORMICA_TRACES for a before/after comparison"]
fn write_machine_traces() {
    let out = std::env::var("FORMICA_TRACES").expect("FORMICA_TRACES names the file to write");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/machine");
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(root)
        .expect("corpus/machine")
        .map(|entry| entry.expect("corpus entry").path())
        .map(|path| (path.display().to_string(), std::fs::read(&path).expect("read corpus file")))
        .collect();
    inputs.sort();
    let generated = formica_fuzz::machine::generated_inputs(0x9e37_79b9_7f4a_7c15, 600);
    inputs.extend(generated.into_iter().enumerate().map(|(run, data)| (format!("generated {run}"), data)));
    let mut text = String::new();
    for (name, data) in &inputs {
        let name = name.rsplit('/').next().unwrap_or(name);
        text.push_str(&format!("== {name}\n{}", render_trace(formica_fuzz::machine::run(data).trace())));
    }
    std::fs::write(&out, text).expect("write the traces");
}
