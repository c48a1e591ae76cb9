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

/// The repository's root, where cited paths start.
fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The text of `path`, which must be readable.
fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every markdown page a reader is sent to: the READMEs and everything under `docs/`.
fn doc_pages() -> Vec<std::path::PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md"), root.join("cli/README.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())) {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// The `path/to/file.rs::test_name` citations in `text`, as (path, test name).
fn citations(text: &str) -> Vec<(&str, &str)> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(".rs::")
        .map(|(at, _)| {
            let start = text[..at].rfind(|c| !is_path(c)).map_or(0, |i| i + 1);
            let after = at + ".rs::".len();
            let end = text[after..].find(|c| !is_ident(c)).map_or(text.len(), |i| after + i);
            (&text[start..at + ".rs".len()], &text[after..end])
        })
        .collect()
}

#[test]
fn each_cited_test_exists_at_its_full_path() {
    let root = repo_root();
    let mut wrong = Vec::new();
    let mut cited = 0;
    for page in doc_pages() {
        let text = read(&page);
        let page = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for (path, name) in citations(&text) {
            cited += 1;
            let problem = if !path.contains('/') {
                "a bare file name: cite the path from the repository's root".to_owned()
            } else {
                match std::fs::read_to_string(root.join(path)) {
                    Err(e) => format!("no such file ({e})"),
                    Ok(source) => {
                        let defines = source.match_indices(&format!("fn {name}")).any(|(at, found)| {
                            let next = source[at + found.len()..].chars().next();
                            next.is_some_and(|c| !(c.is_ascii_alphanumeric() || c == '_'))
                        });
                        if defines {
                            continue;
                        }
                        format!("no `fn {name}` in it")
                    }
                }
            };
            wrong.push(format!("{page}: `{path}::{name}`: {problem}"));
        }
    }
    assert!(cited > 50, "only {cited} citations found: is the parser still reading them?");
    assert!(wrong.is_empty(), "citations that name no test:\n{}", wrong.join("\n"));
}

/// The files whose `include_str!`s make docs pages doctests: this crate's
/// (`ReadmeDoctests` and its siblings) and the crates' front pages.
const DOCTEST_HOSTS: [&str; 3] = ["tests/src/lib.rs", "core/src/lib.rs", "adapter-tokio/src/lib.rs"];

#[test]
fn each_page_with_rust_blocks_is_compiled_as_doctests() {
    let root = repo_root();
    let hosts: Vec<String> = DOCTEST_HOSTS.iter().map(|host| read(&root.join(host))).collect();
    for page in doc_pages() {
        let text = read(&page);
        if !text.lines().any(|l| l.starts_with("```rust")) {
            continue;
        }
        // A crate includes a guide through a link of the same name inside its own folder
        // (what `cargo publish` packages), so the file name is what the include names.
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        let name = page.file_name().and_then(|n| n.to_str()).expect("a file name");
        let include = |host: &String| {
            host.lines().any(|l| {
                l.contains("include_str!(") && (l.contains(&relative) || l.contains(&format!("/{name}\"")))
            })
        };
        assert!(
            hosts.iter().any(include),
            "{relative} has Rust blocks but no `include_str!` in {DOCTEST_HOSTS:?} compiles them"
        );
    }
}

/// A crate reaches a guide through `src/docs/<guide>.md`, a symbolic link to
/// `docs/guide/<guide>.md` (cargo packages the file it points to): were the link replaced by
/// a copy, the copy must still be the guide.
#[test]
fn the_guides_crates_include_are_the_guides() {
    let root = repo_root();
    for krate in ["core", "adapter-tokio"] {
        let folder = root.join(krate).join("src/docs");
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())) {
            let path = entry.expect("a readable folder entry").path();
            let guide = root.join("docs/guide").join(path.file_name().expect("a file name"));
            assert!(read(&path) == read(&guide), "{} is not {}", path.display(), guide.display());
        }
    }
}

/// The `--flags` given to `formica` in the pages' shell blocks, as (page, flag).
fn formica_flags_in_shell_blocks(page: &str, text: &str) -> Vec<(String, String)> {
    let mut flags = Vec::new();
    let mut in_shell = false;
    for line in text.lines() {
        let fence = line.trim_start();
        if fence.starts_with("```") {
            in_shell = ["```sh", "```bash", "```shell"].iter().any(|tag| fence.starts_with(tag));
            continue;
        }
        if !in_shell {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().take_while(|w| !w.starts_with('#')).collect();
        let Some(at) = words.iter().position(|w| *w == "formica" || w.ends_with("/formica")) else {
            continue;
        };
        for word in &words[at + 1..] {
            if let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) {
                let flag = flag.split('=').next().unwrap_or(flag);
                flags.push((page.to_owned(), flag.to_owned()));
            }
        }
    }
    flags
}

#[test]
fn the_pages_give_formica_only_flags_it_has() {
    let root = repo_root();
    // clap names each flag after its field: `--local-queue-size` is `local_queue_size`.
    let mut fields = String::new();
    for entry in std::fs::read_dir(root.join("cli/src")).expect("cli/src") {
        fields.push_str(&read(&entry.expect("a readable folder entry").path()));
    }
    let mut checked = 0;
    for page in doc_pages() {
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for (page, flag) in formica_flags_in_shell_blocks(&relative, &read(&page)) {
            checked += 1;
            let built_in = ["help", "version"].contains(&flag.as_str());
            let field = format!("{}:", flag.replace('-', "_"));
            assert!(
                built_in || fields.contains(&field),
                "{page}: `formica --{flag}`: formica has no such flag"
            );
        }
    }
    assert!(checked > 5, "only {checked} flags found: is the parser still reading the shell blocks?");
}

/// GitHub's anchor for a heading: lower case, spaces as `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks, where `#` starts a comment).
fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn the_pages_links_reach_files_and_headings_that_exist() {
    let root = repo_root();
    let mut wrong = Vec::new();
    for page in doc_pages() {
        let text = read(&page);
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for (at, _) in text.match_indices("](") {
            let target = &text[at + 2..];
            let Some(target) = target.find(')').map(|end| &target[..end]) else { continue };
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, heading) = target.split_once('#').unwrap_or((target, ""));
            let file =
                if file.is_empty() { page.clone() } else { page.parent().expect("a folder").join(file) };
            if !file.exists() {
                wrong.push(format!("{relative}: ({target}): no such file or folder"));
            } else if !heading.is_empty() && !anchors(&read(&file)).iter().any(|a| a == heading) {
                wrong.push(format!("{relative}: ({target}): no such heading"));
            }
        }
    }
    assert!(wrong.is_empty(), "links that lead nowhere:\n{}", wrong.join("\n"));
}
