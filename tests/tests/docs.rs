//! The front page of each published crate (its `//!` docs, what docs.rs shows first) opens
//! with what the crate is for and an example that rustdoc compiles: a quick start within
//! the first lines, not after pages of reference.

const FRONT_PAGES: [(&str, &str); 6] = [
    ("formica-core", include_str!("../../core/src/lib.rs")),
    ("formica (driver)", include_str!("../../driver/src/lib.rs")),
    ("formica-tokio", include_str!("../../adapter-tokio/src/lib.rs")),
    ("formica-async-std", include_str!("../../adapter-async-std/src/lib.rs")),
    ("formica-sql", include_str!("../../sql/src/lib.rs")),
    ("formica-ui", include_str!("../../ui/src/lib.rs")),
];

/// How far down the crate docs the example may start.
const QUICK: usize = 10;

#[test]
fn each_crate_s_docs_open_with_a_compiled_example() {
    for (name, source) in FRONT_PAGES {
        let docs: Vec<&str> = source.lines().map_while(|l| l.strip_prefix("//!")).map(str::trim).collect();
        let fence = docs.iter().position(|l| l.starts_with("```"));
        let Some(at) = fence.filter(|&at| at < QUICK) else {
            panic!("{name}: the crate docs do not show an example within their first {QUICK} lines");
        };
        let tags = docs[at].trim_start_matches('`');
        assert!(
            !["ignore", "text", "compile_fail"].iter().any(|t| tags.contains(t)),
            "{name}: the quick start is not compiled (```{tags})"
        );
        assert!(
            docs[at + 1..].contains(&"```"),
            "{name}: the example's block does not end within the crate docs"
        );
    }
}
