//! `cargo xtask layout`: the shape of the crates' sources, checked.
//!
//! - No source file is over [`MAX_LINES`] lines, unit-test files (`tests.rs`) aside: a file
//!   that grows past it is split by concern.
//! - The top-level modules of each crate do not import each other in a circle: each module
//!   names, through `crate::…` paths, only modules below it. (Unit-test modules,
//!   `#[cfg(test)] mod tests` at the end of a file, are not counted.)

use anyhow::{Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_LINES: usize = 1_000;

/// The crates' source folders, from the workspace root.
const SOURCES: [&str; 3] = ["mcp-tasks-runtime/src", "mcp-tasks-macros/src", "src"];

const HELP: &str = "\
cargo xtask layout

Checks that no source file is over 1,000 lines (unit-test files aside) and that the
top-level modules of each crate import each other in no circle.
";

pub(crate) fn run(args: Vec<String>) -> Result<()> {
    if let Some(arg) = args.first() {
        if matches!(arg.as_str(), "--help" | "-h") {
            print!("{HELP}");
            return Ok(());
        }
        bail!("unknown argument `{arg}`");
    }
    let root = crate::project_root();
    let mut problems = Vec::new();
    for source in SOURCES {
        let dir = root.join(source);
        for file in rust_files(&dir)? {
            let lines = fs::read_to_string(&file)?.lines().count();
            let is_tests = file.file_name().is_some_and(|n| n == "tests.rs");
            if lines > MAX_LINES && !is_tests {
                problems.push(format!(
                    "{}: {lines} lines (at most {MAX_LINES}): split it by concern",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
        for cycle in cycles(&imports(&dir)?) {
            problems.push(format!(
                "{source}: modules importing each other in a circle: {}",
                cycle.join(" <-> ")
            ));
        }
    }
    if problems.is_empty() {
        println!("layout: ok");
        return Ok(());
    }
    for problem in &problems {
        eprintln!("layout: {problem}");
    }
    bail!("{} layout problem(s)", problems.len())
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// For each top-level module of the crate at `src`, the other top-level modules it names.
fn imports(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut modules = BTreeMap::new();
    for entry in fs::read_dir(src)? {
        let path = entry?.path();
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            modules.insert(name.into_owned(), rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !matches!(name.as_ref(), "lib" | "main")
        {
            modules
                .entry(name.into_owned())
                .or_insert_with(Vec::new)
                .push(path);
        }
    }
    // A folder module may also have a `name.rs` beside it.
    for (name, files) in &mut modules {
        let beside = src.join(format!("{name}.rs"));
        if beside.is_file() && !files.contains(&beside) {
            files.push(beside);
        }
    }
    let mut graph = BTreeMap::new();
    for (name, files) in &modules {
        let mut named = BTreeSet::new();
        for file in files {
            let text = fs::read_to_string(file)?;
            let code = text
                .find("#[cfg(test)]\nmod tests")
                .map_or(text.as_str(), |end| &text[..end]);
            for module in crate_paths(code) {
                if module != *name && modules.contains_key(&module) {
                    named.insert(module);
                }
            }
        }
        graph.insert(name.clone(), named);
    }
    Ok(graph)
}

/// The first segment of every `crate::…` path in `code`, including each item of a
/// `crate::{…}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::`, `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        if !item.is_empty() {
                            found.insert(std::mem::take(&mut item));
                        }
                        at_start = true;
                        continue;
                    }
                    _ => {}
                }
                if at_start {
                    if c.is_alphanumeric() || c == '_' {
                        item.push(c);
                    } else if !item.is_empty() {
                        found.insert(std::mem::take(&mut item));
                        at_start = false;
                    }
                }
            }
            if !item.is_empty() {
                found.insert(item);
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                found.insert(ident);
            }
        }
    }
    found
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
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
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(from, to)| {
                (
                    (*from).to_owned(),
                    to.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn paths_and_groups_name_their_first_segment() {
        let code = "use crate::a::b;\nuse crate::{c, d::{e, f}, g::h as i};\nlet x = crate::j::k();\n\
                    $crate::no; other_crate::no2;";
        let found: Vec<_> = crate_paths(code).into_iter().collect();
        assert_eq!(found, ["a", "c", "d", "g", "j"]);
    }

    #[test]
    fn circles_are_found_and_layers_are_not() {
        let layered = graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])]);
        assert!(cycles(&layered).is_empty());
        let circle = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
        assert_eq!(cycles(&circle), [vec!["a", "b", "c"]]);
    }
}
