//! The source tree's shape, checked: no file of a crate imports, directly or through
//! others, a file that imports it back (an import circle means a type lives in the wrong
//! file); every source file opens with a `//!` naming its concern; `docs/architecture.md`
//! names every module file of the library crates. Files over 500 lines outside their
//! tests are listed, as a warning.
//!
//! Imports are read from the text: `use` statements (groups expanded) and inline
//! `crate::`/`super::`/`self::` paths. Each is an edge to the file of the longest module
//! prefix it names (`use crate::middleware::Next` depends on `middleware/mod.rs`, whose
//! re-exports it goes through) and to the file that defines the item, found through
//! `pub use` re-exports. A module declaring its children (`mod fetch;`, `fetch::Fetcher`)
//! is the ordinary direction, and the crate root is the facade every file may name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Past this many lines (tests aside) a file is listed, for a look at whether it is one concern.
const LONG_FILE: usize = 500;

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

/// Every source file of the workspace's crates, with its text.
fn source_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for src in crate_sources() {
        rust_files(&src, &mut files);
    }
    files.into_iter().map(|f| (f.clone(), std::fs::read_to_string(&f).expect("read a source file"))).collect()
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

/// The longest module prefix of `path` that is a file: the module the path names.
fn named_module(path: &[String], modules: &BTreeMap<Vec<String>, PathBuf>) -> Vec<String> {
    let mut module = path.to_vec();
    while !module.is_empty() && !modules.contains_key(&module) {
        module.pop();
    }
    module
}

/// The module of the file that defines what `path` names, through re-exports.
fn defining_module(
    mut path: Vec<String>,
    modules: &BTreeMap<Vec<String>, PathBuf>,
    reexports: &Reexports,
) -> Vec<String> {
    for _ in 0..8 {
        let module = named_module(&path, modules);
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
            // Both the module the path names (its re-exports are its imports, so a file that
            // goes through them depends on it) and the file that defines the item.
            let named = named_module(&target, &modules);
            let defining = defining_module(target, &modules, &reexports);
            for target in [named, defining] {
                // A path into the file's own submodules is a parent naming its children;
                // the crate root is the facade every file may name.
                if target.starts_with(&module) || target.is_empty() {
                    continue;
                }
                if let Some(other) = modules.get(&target) {
                    to.insert(other.clone());
                }
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

/// Long files are a smell, not a fault: the test prints them and passes. A file holds one
/// concern, however long that takes; the rule that fails is the next one.
#[test]
fn source_files_over_500_lines_outside_their_tests_are_listed() {
    let mut long = Vec::new();
    for (file, text) in source_files() {
        let lines: Vec<&str> = text.lines().collect();
        let end = (lines.windows(2))
            .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].starts_with("mod "))
            .unwrap_or(lines.len());
        if end > LONG_FILE {
            long.push(format!("{}: {end} lines", shown(&file)));
        }
    }
    if !long.is_empty() {
        println!(
            "warning: over {LONG_FILE} lines outside tests (is each one concern?):\n{}",
            long.join("\n")
        );
    }
}

#[test]
fn every_source_file_opens_with_a_doc_naming_its_concern() {
    let mut bare = Vec::new();
    for (file, text) in source_files() {
        let first = text.lines().next().unwrap_or_default();
        if first.strip_prefix("//!").is_none_or(|doc| doc.trim().is_empty()) {
            bare.push(shown(&file));
        }
    }
    assert!(
        bare.is_empty(),
        "source files without a `//!` first line naming their concern:\n{}",
        bare.join("\n")
    );
}

/// The spellings under which `docs/architecture.md` may name `rel` (a file's path under
/// `src/` of the crate in folder `krate`): the path itself, from the crate's folder or from
/// `src/`, or a folder holding it (`testing/`, `history/*.rs`).
fn names_of(krate: &str, rel: &str) -> Vec<String> {
    let mut names = vec![rel.to_owned(), format!("{krate}/src/{rel}")];
    let parts: Vec<&str> = rel.split('/').collect();
    for depth in 1..parts.len() {
        let folder = parts[..depth].join("/");
        for name in [format!("{folder}/"), format!("{folder}/*.rs")] {
            names.push(format!("{krate}/src/{name}"));
            names.push(name);
        }
    }
    names
}

#[test]
fn the_architecture_names_every_module_of_the_library_crates() {
    let doc =
        std::fs::read_to_string(workspace().join("docs/architecture.md")).expect("read architecture.md");
    // What the document names: its code spans, each split at commas.
    let named: BTreeSet<&str> =
        doc.split('`').skip(1).step_by(2).flat_map(|span| span.split(", ")).map(str::trim).collect();
    let mut missing = Vec::new();
    for src in crate_sources() {
        let krate_dir = src.parent().expect("a crate folder");
        let manifest =
            std::fs::read_to_string(krate_dir.join("Cargo.toml")).expect("read a crate's manifest");
        if manifest.contains("publish = false") || !src.join("lib.rs").is_file() {
            continue; // tests, benchmarks, examples: not library crates
        }
        let krate = shown(krate_dir);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src").display().to_string();
            if ["lib.rs", "main.rs"].contains(&rel.as_str()) {
                continue; // the crate itself, named in the table of crates
            }
            if !names_of(&krate, &rel).iter().any(|name| named.contains(name.as_str())) {
                missing.push(format!("{krate}/src/{rel}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md does not name:\n{}", missing.join("\n"));
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
    // `crate::middleware::Next` names middleware/mod.rs, whatever file defines `Next`.
    let modules = BTreeMap::from([
        (vec!["middleware".into()], PathBuf::from("middleware/mod.rs")),
        (vec!["middleware".into(), "add".into()], PathBuf::from("middleware/add.rs")),
    ]);
    assert_eq!(named_module(&["middleware".into(), "Next".into()], &modules), vec!["middleware".to_owned()]);
    assert_eq!(
        absolute("super::config::Config", &["worker".into(), "fetch".into()]),
        Some(vec!["worker".into(), "config".into(), "Config".into()])
    );
}

/// Each crate's tests are one binary, `tests/it.rs` (`autotests = false`): a file beside it
/// that it does not declare would be compiled by nothing, and its tests never run.
#[test]
fn each_test_file_is_a_module_of_its_crate_s_test_binary() {
    for dir in ["core/tests", "cli/tests", "tests/tests"] {
        let dir = workspace().join(dir);
        let root = std::fs::read_to_string(dir.join("it.rs")).unwrap();
        let declared: BTreeSet<&str> =
            root.lines().filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';')).collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "it") {
                assert!(
                    declared.contains(module),
                    "{} is not declared in {}",
                    module,
                    dir.join("it.rs").display()
                );
            }
        }
    }
}
