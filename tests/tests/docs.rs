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
/// (`src/doctests.rs`) and the crates' front pages.
const DOCTEST_HOSTS: [&str; 3] = ["tests/src/doctests.rs", "core/src/lib.rs", "adapter-tokio/src/lib.rs"];

/// Every guide, and every other page with Rust blocks, is included as doctests somewhere: a
/// guide that gains a Rust block is compiled from then on.
#[test]
fn each_guide_and_each_page_with_rust_blocks_is_compiled_as_doctests() {
    let root = repo_root();
    let hosts: Vec<String> = DOCTEST_HOSTS.iter().map(|host| read(&root.join(host))).collect();
    let mut guides = 0;
    for page in doc_pages() {
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        let guide = relative.starts_with("docs/guide/");
        guides += usize::from(guide);
        if !guide && !code_blocks(&read(&page)).iter().any(|block| block.is_rust()) {
            continue;
        }
        // A crate includes a guide through a link of the same name inside its own folder
        // (what `cargo publish` packages), so the file name is what the include names.
        let name = page.file_name().and_then(|n| n.to_str()).expect("a file name");
        let include = |host: &String| {
            host.lines().any(|l| {
                l.contains("include_str!(") && (l.contains(&relative) || l.contains(&format!("/{name}\"")))
            })
        };
        assert!(
            hosts.iter().any(include),
            "{relative} is not compiled as doctests: no `include_str!` of it in {DOCTEST_HOSTS:?}"
        );
    }
    assert!(guides > 10, "only {guides} guides found under docs/guide");
}

/// A fenced block of a page: its opening line's info string, where it opens, and its lines.
struct CodeBlock<'a> {
    info: &'a str,
    line: usize,
    code: Vec<&'a str>,
}

/// What rustdoc reads in an info string besides a language: a block with only these is Rust.
const RUSTDOC_ATTRIBUTES: [&str; 7] =
    ["ignore", "no_run", "should_panic", "compile_fail", "edition2018", "edition2021", "edition2024"];

impl CodeBlock<'_> {
    fn tags(&self) -> impl Iterator<Item = &str> {
        self.info.split([',', ' ', '\t']).filter(|t| !t.is_empty())
    }

    /// Whether rustdoc takes the block for Rust (and so for a doctest): no tag, `rust`, or
    /// only its own attributes.
    fn is_rust(&self) -> bool {
        self.tags().all(|t| t == "rust" || RUSTDOC_ATTRIBUTES.contains(&t))
    }
}

/// The fenced blocks of `text` (a fence may be indented, inside a list).
fn code_blocks(text: &str) -> Vec<CodeBlock<'_>> {
    let mut blocks = Vec::new();
    let mut open: Option<CodeBlock> = None;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match (fence.strip_prefix("```"), open.take()) {
            (Some(info), None) => open = Some(CodeBlock { info: info.trim(), line: n + 1, code: Vec::new() }),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some(mut block)) => {
                block.code.push(line);
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The lines of `code` at its top level (outside any bracket) that begin no item: the
/// statements of a fragment, which a reader would have to wrap in a function of their own.
fn loose_statements<'a>(code: &[&'a str]) -> Vec<&'a str> {
    const ITEMS: [&str; 18] = [
        "use ",
        "pub ",
        "fn ",
        "async fn ",
        "const ",
        "static ",
        "struct ",
        "enum ",
        "impl ",
        "impl<",
        "trait ",
        "mod ",
        "type ",
        "#[",
        "#![",
        "//",
        "extern ",
        "macro_rules!",
    ];
    let mut depth = 0i32;
    let mut loose = Vec::new();
    for line in code {
        // (A hidden line's code is what rustdoc compiles: another test rejects its `# `.)
        let text = line.trim().strip_prefix("# ").unwrap_or(line.trim());
        let opens_an_item = ITEMS.iter().any(|item| text.starts_with(item));
        if depth == 0 && !text.is_empty() && !opens_an_item && !text.starts_with(['}', ')', ']']) {
            loose.push(*line);
        }
        // Brackets outside string literals and comments (enough for the guides' code).
        let mut in_string = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_string => {
                    chars.next();
                }
                '"' => in_string = !in_string,
                '/' if !in_string && chars.peek() == Some(&'/') => break,
                '(' | '[' | '{' if !in_string => depth += 1,
                ')' | ']' | '}' if !in_string => depth -= 1,
                _ => {}
            }
        }
    }
    loose
}

/// Every Rust block of the guides and READMEs compiles as the reader sees it: none is
/// `ignore`d (but the README's program, which `examples/worker-app` builds and checks against
/// the copy), none hides lines (`# `) the reader would have to add, none is a fragment of
/// loose statements; and no block that is Rust is tagged as something else.
#[test]
fn each_rust_block_compiles_as_the_reader_sees_it() {
    let root = repo_root();
    let worker_app = include_str!("../../examples/worker-app/src/main.rs");
    let mut wrong = Vec::new();
    let mut rust_blocks = 0;
    for page in doc_pages() {
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        let text = read(&page);
        for block in code_blocks(&text) {
            let at = format!("{relative}:{} (```{})", block.line, block.info);
            if block.info.is_empty() {
                wrong.push(format!(
                    "{at}: a block with no tag is Rust to rustdoc: tag it `rust` or its language"
                ));
                continue;
            }
            if !block.is_rust() {
                let rust = block.code.iter().map(|l| l.trim()).find(|l| {
                    (l.starts_with("use ") && l.contains("::") && l.ends_with(';'))
                        || ["fn ", "async fn ", "impl ", "let "].iter().any(|k| l.starts_with(k))
                });
                if let Some(line) = rust {
                    wrong.push(format!(
                        "{at}: Rust (`{line}`) in a block rustdoc does not compile: tag it `rust`"
                    ));
                }
                continue;
            }
            rust_blocks += 1;
            let the_worker_app = relative == "README.md"
                && block.code.iter().map(|l| format!("{l}\n")).collect::<String>() == worker_app;
            if block.tags().any(|t| t == "ignore") && !the_worker_app {
                wrong.push(format!("{at}: `ignore`d: compile it (`no_run` if it needs a database)"));
            }
            if block.tags().any(|t| t == "compile_fail" || t == "should_panic") {
                wrong.push(format!("{at}: a guide shows code that works"));
            }
            if let Some(hidden) =
                block.code.iter().find(|l| l.trim() == "#" || l.trim_start().starts_with("# "))
            {
                wrong.push(format!("{at}: a hidden line (`{hidden}`): show what the reader must write"));
            }
            if let Some(loose) = loose_statements(&block.code).first() {
                wrong.push(format!(
                    "{at}: `{}` outside any function: put the statements in one",
                    loose.trim()
                ));
            }
        }
    }
    assert!(rust_blocks > 20, "only {rust_blocks} Rust blocks found: is the parser still reading the pages?");
    assert!(wrong.is_empty(), "blocks that do not compile as shown:\n{}", wrong.join("\n"));
}

/// Until the crates are published, a manifest that names a Formica crate by version alone
/// does not build: every `toml` block takes it from a clone, by `path`.
#[test]
fn the_pages_manifests_take_formica_from_a_clone() {
    let root = repo_root();
    let mut wrong = Vec::new();
    let mut named = 0;
    for page in doc_pages() {
        let relative = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        let text = read(&page);
        for block in code_blocks(&text).into_iter().filter(|block| block.info == "toml") {
            for line in block.code.iter().filter(|l| l.trim_start().starts_with("formica")) {
                named += 1;
                let dependency = line.split('#').next().unwrap_or(line);
                if !dependency.contains("path = ") {
                    wrong.push(format!("{relative}:{}: `{}`", block.line, line.trim()));
                }
            }
        }
    }
    assert!(named > 3, "only {named} Formica dependencies found: is the parser still reading them?");
    assert!(wrong.is_empty(), "dependencies on unpublished crates by version alone:\n{}", wrong.join("\n"));
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
