//! The guide "Test your scheduling deterministically" (docs/guide/testing-your-scheduling.md,
//! also formica-core's front page) sends readers to this crate's files rather than copying
//! them, so that what they read is what CI builds and runs: it must name files that exist.

#[test]
fn the_guide_names_the_example_s_files() {
    let guide = include_str!("../../../docs/guide/testing-your-scheduling.md");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for path in ["examples/digest-policy/src/lib.rs", "examples/digest-policy/tests/readme.rs"] {
        assert!(guide.contains(&format!("`{path}`")), "the guide must name `{path}`");
        assert!(root.join(path).is_file(), "the guide names `{path}`, which does not exist");
    }
}
