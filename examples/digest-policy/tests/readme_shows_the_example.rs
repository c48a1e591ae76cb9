//! The README's guide ("Test your scheduling deterministically") shows `src/lib.rs` and
//! `tests/readme.rs` whole, so that what a reader copies is what CI builds and runs (as
//! `rust ignore` blocks: this crate, not a doctest, is what compiles them).

#[test]
fn the_readme_shows_the_example_as_it_is() {
    let readme = include_str!("../../../README.md");
    for (path, text) in
        [("src/lib.rs", include_str!("../src/lib.rs")), ("tests/readme.rs", include_str!("readme.rs"))]
    {
        let block = format!("```rust ignore\n{text}```\n");
        assert!(
            readme.contains(&block),
            "README.md must show examples/digest-policy/{path} as it is, in a `rust ignore` block"
        );
    }
}
