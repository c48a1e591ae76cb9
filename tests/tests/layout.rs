//! The source tree's shape, checked: no file of a crate imports, directly or through
//! others, a file that imports it back (an import circle means a type lives in the wrong
//! file), and no source file is over 500 lines outside its tests.
//!
//! `cargo test -p formica-tests --test it layout::` shows both. Imports are read from the text:
//! `use` statements (groups expanded) and inline `crate::`/`super::`/`self::` paths, each
//! resolved to the file of the longest module prefix it names, through `pub use`
//! re-exports to the file that defines the item. A module declaring its
//! children (`mod fetch;`, `fetch::Fetcher`) is the ordinary direction; only paths that
//! name a file are edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 500;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The source folders of the workspace's crates (each member's `src/`).
fn crate_sources() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("read Cargo.toml");
    let members =
        manifest.split("members = [").nth(1).and_then(|rest| rest.split(']').next()).expect("members");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| workspace().join(m).join("src"))
        .filter(|src| src.is_dir())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("read a source folder").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src` (`src/worker/mod.rs` and `src/worker.rs` are
/// `worker`; `src/lib.rs`, `src/main.rs` and `src/bin/*.rs` are crate roots).
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    match last.as_str() {
        "lib.rs" | "main.rs" if parts.is_empty() => Some(vec![]),
        "mod.rs" => Some(parts),
        name => {
            parts.push(name.trim_end_matches(".rs").to_owned());
            Some(parts)
        }
    }
}

/// The text without comments and string literals, so neither is read as a path.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// The full paths a `use` tree names: `a::{b, c::{d as e}}` gives `a::b` and `a::c::d@e`
/// (a renamed item keeps its new name after `@`).
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ").replace(" as ", "@");
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items.into_iter().filter(|i| !i.is_empty()).flat_map(expand).map(|i| format!("{prefix}{i}")).collect()
}

/// Every path of the code that starts at `crate`, `super` or `self`.
fn paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim_start();
        let statement =
            statement.strip_prefix("pub(crate) ").or(statement.strip_prefix("pub ")).unwrap_or(statement);
        if let Some(tree) = statement.strip_prefix("use ") {
            found
                .extend(expand(tree).into_iter().map(|p| p.split('@').next().unwrap_or_default().to_owned()));
        }
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':')
            {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            found.push(code[at..end].to_owned());
        }
    }
    found
}

/// The module a path names, resolved from `module`, made absolute.
fn absolute(path: &str, module: &[String]) -> Option<Vec<String>> {
    let mut segments = path.split("::").filter(|s| !s.is_empty());
    let mut here: Vec<String> = module.to_vec();
    match segments.next()? {
        "crate" => here.clear(),
        "self" => {}
        "super" => {
            here.pop()?;
        }
        _ => return None,
    }
    for segment in segments {
        match segment {
            "super" => {
                here.pop()?;
            }
            "self" => {}
            s => here.push(s.to_owned()),
        }
    }
    Some(here)
}

/// What each module re-exports (`pub use`): item name -> the absolute path it names.
type Reexports = BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>;

fn reexports(module: &[String], code: &str) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    for statement in code.split(';').map(str::trim_start) {
        let tree =
            ["pub use ", "pub(crate) use ", "pub(super) use "].iter().find_map(|p| statement.strip_prefix(p));
        for item in tree.map(expand).unwrap_or_default() {
            let (path, alias) = item.split_once('@').unwrap_or((&item, ""));
            let name = if alias.is_empty() { path.rsplit("::").next().unwrap_or_default() } else { alias };
            if let Some(target) = absolute(path, module) {
                found.insert(name.to_owned(), target);
            }
        }
    }
    found
}

/// The module of the file that defines what `path` names, through re-exports.
fn defining_module(
    mut path: Vec<String>,
    modules: &BTreeMap<Vec<String>, PathBuf>,
    reexports: &Reexports,
) -> Vec<String> {
    for _ in 0..8 {
        let mut module = path.clone();
        while !module.is_empty() && !modules.contains_key(&module) {
            module.pop();
        }
        let renamed = path.get(module.len()).and_then(|name| reexports.get(&module)?.get(name));
        match renamed {
            Some(target) if *target != path[..=module.len()] => {
                path = target.iter().chain(&path[module.len() + 1..]).cloned().collect();
            }
            _ => return module,
        }
    }
    path
}

/// The files of one crate and the files each imports.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> =
        files.iter().filter_map(|f| Some((module_of(src, f)?, f.clone()))).collect();
    let code: BTreeMap<&PathBuf, String> = files
        .iter()
        .map(|f| (f, code_only(&std::fs::read_to_string(f).expect("read a source file"))))
        .collect();
    let reexports: Reexports =
        modules.iter().map(|(module, file)| (module.clone(), reexports(module, &code[file]))).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(src, file) else { continue };
        let mut to = BTreeSet::new();
        for path in paths(&code[file]) {
            let Some(target) = absolute(&path, &module) else { continue };
            let target = defining_module(target, &modules, &reexports);
            // A path into the file's own submodules is a parent naming its children.
            if target.starts_with(&module) {
                continue;
            }
            if let Some(other) = modules.get(&target) {
                to.insert(other.clone());
            }
        }
        edges.insert(file.clone(), to);
    }
    edges
}

/// The strongly connected components with more than one file (Tarjan).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Search<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, node: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.clone());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !search.index.contains_key(node) {
            search.visit(node);
        }
    }
    search.found
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace()).unwrap_or(path).display().to_string()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let mut found = Vec::new();
    for src in crate_sources() {
        for circle in circles(&graph(&src)) {
            found.push(circle.iter().map(|p| shown(p)).collect::<Vec<_>>().join(" -> "));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn no_source_file_is_over_500_lines_outside_its_tests() {
    let mut long = Vec::new();
    for src in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let lines: Vec<&str> = text.lines().collect();
            let end = (lines.windows(2))
                .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].starts_with("mod "))
                .unwrap_or(lines.len());
            if end > MAX_LINES {
                long.push(format!("{}: {end} lines", shown(&file)));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_LINES} lines outside tests:\n{}", long.join("\n"));
}

#[test]
fn the_circle_finder_sees_a_circle_and_a_group() {
    let (a, b, c) = (PathBuf::from("a.rs"), PathBuf::from("b.rs"), PathBuf::from("c.rs"));
    let edges = BTreeMap::from([
        (a.clone(), BTreeSet::from([b.clone()])),
        (b.clone(), BTreeSet::from([a.clone(), c.clone()])),
        (c.clone(), BTreeSet::new()),
    ]);
    assert_eq!(circles(&edges), vec![vec![a, b]]);
    assert_eq!(expand("x::{a, b::{c, d as e}}"), vec!["x::a", "x::b::c", "x::b::d@e"]);
    // `crate::Error`, re-exported by lib.rs from error.rs, is error.rs's.
    let modules = BTreeMap::from([
        (vec![], PathBuf::from("lib.rs")),
        (vec!["error".into()], PathBuf::from("error.rs")),
    ]);
    let crate_root = BTreeMap::from([("Error".to_owned(), vec!["error".to_owned(), "Error".to_owned()])]);
    let reexports = BTreeMap::from([(vec![], crate_root)]);
    assert_eq!(defining_module(vec!["Error".into()], &modules, &reexports), vec!["error".to_owned()]);
    assert_eq!(
        absolute("super::config::Config", &["worker".into(), "fetch".into()]),
        Some(vec!["worker".into(), "config".into(), "Config".into()])
    );
}
